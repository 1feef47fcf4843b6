// The checks every ledger move runs on what its caller passes, before anything is sent to the
// store: whole Ink within MAX_MOVE_INK, a well-formed request id, short texts, usage of bounded
// size. A bad argument is the caller's mistake (RangeError / TypeError), not a broken money rule:
// nothing has moved when one is thrown. Shared by the durable moves (reserve.ts, resolve.ts,
// credits.ts, request-marks.ts, reconcile.ts) and the escrow (escrow.ts).
import { PRODUCTS, type ReserveInput } from './ledger-types.js';

/** Largest hold / charge / credit the ledger accepts in one move (a limit on everything). */
export const MAX_MOVE_INK = 1_000_000_000_000;
export const MAX_REASON_CHARS = 500;
const MAX_USAGE_JSON_BYTES = 4096;
const REQUEST_ID = /^req_[A-Za-z0-9_-]{1,120}$/;

const USAGE_KEYS: Readonly<Record<string, string>> = {
  inputTokens: 'input_tokens',
  outputTokens: 'output_tokens',
  cacheReadTokens: 'cache_read_tokens',
  cacheWriteTokens: 'cache_write_tokens',
};

/** Usage as stored: reported buckets only (undefined dropped, zero kept), text buckets in snake_case. */
export function usageJson(usage: object | undefined): string | null {
  if (usage === undefined || usage === null) return null;
  if (typeof usage !== 'object' || Array.isArray(usage)) throw new TypeError('ledger: usage must be an object');
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(usage)) if (v !== undefined) out[USAGE_KEYS[k] ?? k] = v;
  const s = JSON.stringify(out);
  if (Buffer.byteLength(s) > MAX_USAGE_JSON_BYTES) throw new RangeError(`ledger: usage is larger than ${MAX_USAGE_JSON_BYTES} bytes`);
  return s;
}

export function wholeInk(name: string, amountInk: number, min = 0): number {
  if (!Number.isSafeInteger(amountInk) || amountInk < min || amountInk > MAX_MOVE_INK) {
    throw new RangeError(`ledger: ${name} must be a whole number of Ink from ${min} to ${MAX_MOVE_INK}, got ${amountInk}`);
  }
  return amountInk;
}

/** A vendor's request id as the request record stores it (1 to 256 characters), or a RangeError. */
export function checkVendorRequestId(vendorRequestId: string): string {
  return text('vendorRequestId', vendorRequestId, 256)!;
}

export function checkRequestId(id: string): void {
  if (typeof id !== 'string' || !REQUEST_ID.test(id)) throw new RangeError(`ledger: bad request id ${JSON.stringify(id)}`);
}

/** An optional text of 1 to `max` characters (null when absent), or a RangeError. */
export function text(name: string, value: string | undefined, max: number): string | null {
  if (value === undefined) return null;
  if (typeof value !== 'string' || value.length === 0 || value.length > max) throw new RangeError(`ledger: ${name} must be 1 to ${max} characters`);
  return value;
}

export function checkReserveInput(input: ReserveInput): void {
  checkRequestId(input.requestId);
  if (!(PRODUCTS as readonly string[]).includes(input.product)) throw new RangeError(`ledger: unknown product ${JSON.stringify(input.product)}`);
  text('model', input.model, 200);
  text('accountId', input.accountId, 200);
  text('keyId', input.keyId, 200);
  wholeInk('holdInk', input.holdInk);
}
