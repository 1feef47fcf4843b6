// Reading a text vendor's answer: its refusals mapped to the documented errors (and whether the
// hold goes back), its own error events held back from the relay, and its id of the request.
import type { Dispatcher } from 'undici';
import { ApiError } from '../errors.js';
import { forEachEvent } from './sse-framer.js';

/** undici's own timeouts (headers, body idle) and our total cap. */
export function isTimeout(error: unknown): boolean {
  const code = (error as { code?: unknown }).code;
  return code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT' || code === 'UND_ERR_CONNECT_TIMEOUT';
}

function vendorMessage(text: string): string {
  try {
    const j = JSON.parse(text) as { error?: { message?: unknown } | string; message?: unknown };
    const e = j.error;
    if (e && typeof e === 'object' && typeof e.message === 'string') return e.message.slice(0, 2000);
    if (typeof e === 'string') return e.slice(0, 2000);
    if (typeof j.message === 'string') return j.message.slice(0, 2000);
  } catch {
    /* not JSON */
  }
  return text.slice(0, 500) || 'The vendor refused the request.';
}

function retryAfterOf(headers: Dispatcher.ResponseData['headers'], fallbackS: number): number {
  const v = headers['retry-after'];
  const n = Number(Array.isArray(v) ? v[0] : v);
  return Number.isFinite(n) && n >= 1 ? Math.min(Math.ceil(n), 3600) : fallbackS;
}

const PROMPT_TOO_LONG = /prompt is too long|context[_ ]length|maximum context|too many (input )?tokens|input exceeds/i;

/**
 * Maps a vendor refusal to the documented answer (docs/api/errors.md) and says whether the hold goes back. `promptParam`
 * names the lane's prompt field for the 413 (`messages`, `input`).
 */
export function mapVendorStatus(
  status: number,
  text: string,
  headers: Dispatcher.ResponseData['headers'],
  promptParam: string,
): { error: ApiError; release: boolean } {
  const msg = vendorMessage(text);
  // The vendor's own "prompt is too long" is our 413 (docs/api/errors.md): we never refuse first on a guess.
  if ((status === 400 || status === 422) && PROMPT_TOO_LONG.test(msg)) {
    return {
      error: new ApiError('payload_too_large', { message: `The prompt is longer than the model's context: ${msg}`, param: promptParam }),
      release: true,
    };
  }
  // Its gateway refusing before running (docs/api/errors.md: its 400, 404, 413, 415, 422) is the client's to fix.
  if (status === 400 || status === 404 || status === 413 || status === 415 || status === 422) {
    return { error: new ApiError('upstream_rejected', { message: msg }), release: true };
  }
  if (status === 429 || status === 529 || status === 503) {
    return {
      error: new ApiError('provider_unavailable', { message: `The vendor is at capacity or rate-limiting: ${msg}`, retryAfterS: retryAfterOf(headers, 30) }),
      release: true,
    };
  }
  if (status === 401 || status === 402 || status === 403) {
    // Our vendor account was refused (credentials, billing): nothing ran, and it is not the
    // client's doing; an operator must act. The vendor's message is not passed on.
    return { error: new ApiError('provider_error', { message: 'The vendor refused the service account; nothing was charged.' }), release: true };
  }
  // Other 4xx are the vendor refusing before running; 5xx may have run: keep the hold.
  if (status < 500) return { error: new ApiError('upstream_rejected', { message: msg }), release: true };
  return {
    error: new ApiError('provider_error', { message: `The vendor failed (${status}); the hold is kept until the vendor's record reconciles it.` }),
    release: false,
  };
}

/** `event: error` at an event's start or on one of its lines. */
const ERROR_EVENT = Buffer.from('event: error');
const isErrorEvent = (event: Buffer): boolean => {
  const at = event.indexOf(ERROR_EVENT);
  return at === 0 || (at > 0 && (event[at - 1] === 0x0a || event[at - 1] === 0x0d));
};

/**
 * The vendor's own mid-stream error events are held back (the tally has read them): the stream's
 * single final `error` event is ours, carrying the vendor's error type and message with our code.
 * The bytes come back as they are (no copy) unless they contain `event: error`: the rare path.
 */
export function withoutErrorEvents(buf: Buffer): Buffer {
  if (buf.indexOf(ERROR_EVENT) === -1) return buf;
  const kept: Buffer[] = [];
  forEachEvent(buf, (event) => {
    if (!isErrorEvent(event)) kept.push(event);
  });
  return kept.length === 1 ? kept[0]! : Buffer.concat(kept);
}

/**
 * Where the vendors put their own id of a request (Anthropic `request-id`, OpenAI `x-request-id`):
 * kept on a hold whose outcome is unknown, so reconciliation can find the vendor's record of it.
 */
export const VENDOR_ID_HEADERS = ['request-id', 'x-request-id'] as const;

export function headerValue(headers: Dispatcher.ResponseData['headers'], names: readonly string[]): string | undefined {
  for (const n of names) {
    const v = headers[n];
    if (typeof v === 'string') return v;
    if (Array.isArray(v) && typeof v[0] === 'string') return v[0];
  }
  return undefined;
}

/** A vendor id the ledger can store (1 to 256 characters); another one is dropped, never fatal to a move. */
export const storableId = (v: string | undefined): string | undefined => (v !== undefined && v.length >= 1 && v.length <= 256 ? v : undefined);
