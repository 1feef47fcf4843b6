// The vendor usage file that `inkgate reconcile` reads: JSON lines, one vendor request per line.
//
//   {"vendor_request_id": "msg_01X...", "input_tokens": 1200, "output_tokens": 310,
//    "cache_read_tokens": 0, "cache_write_tokens": 0}
//   {"vendor_request_id": "cgt-2026...", "charge_ink": 115}
//
// - vendor_request_id (required): the id the vendor gave the request (what the gateway stored).
// - charge_ink (optional): the whole-Ink charge, already worked out (video, images, or any line
//   an operator prices by hand). When present it wins over the token fields.
// - input_tokens, output_tokens, cache_read_tokens, cache_write_tokens (optional): token buckets,
//   disjoint (Messages style): input_tokens counts uncached input only; for a Responses-protocol
//   export subtract input_tokens_details.cached_tokens first. A text line without charge_ink needs
//   input_tokens and output_tokens; an absent cache bucket on an invoice line means none was used.
// Blank lines are skipped; any other malformed line, or an unknown field, fails the whole file
// before anything is touched. Limits: 64 MiB and 100,000 records per file, 16 KiB per line.
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import type { VendorUsageRecord } from './ledger.js';

export const MAX_RECORDS_PER_FILE = 100_000;
export const MAX_LINE_BYTES = 16 * 1024;
export const MAX_FILE_BYTES = 64 * 1024 * 1024;
const MAX_TOKENS = 1_000_000_000;
const MAX_CHARGE_INK = 1_000_000_000_000;

const TOKEN_FIELDS = {
  input_tokens: 'inputTokens',
  output_tokens: 'outputTokens',
  cache_read_tokens: 'cacheReadTokens',
  cache_write_tokens: 'cacheWriteTokens',
} as const;

function whole(value: unknown, max: number): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0 && value <= max;
}

/** Parses one line; throws Error naming the problem. */
export function parseUsageLine(line: string): VendorUsageRecord {
  let v: unknown;
  try {
    v = JSON.parse(line);
  } catch {
    throw new Error('not valid JSON');
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error('must be a JSON object');
  const o = v as Record<string, unknown>;
  const vid = o.vendor_request_id;
  if (typeof vid !== 'string' || vid.length === 0 || vid.length > 256) throw new Error('vendor_request_id must be a string of 1 to 256 characters');
  const rec: VendorUsageRecord = { vendorRequestId: vid };
  const usage: Record<string, number> = {};
  for (const [k, x] of Object.entries(o)) {
    if (k === 'vendor_request_id') continue;
    if (k === 'charge_ink') {
      if (!whole(x, MAX_CHARGE_INK)) throw new Error('charge_ink must be a whole number of Ink >= 0');
      rec.chargeInk = x;
    } else if (k in TOKEN_FIELDS) {
      if (!whole(x, MAX_TOKENS)) throw new Error(`${k} must be a whole number from 0 to ${MAX_TOKENS}`);
      usage[TOKEN_FIELDS[k as keyof typeof TOKEN_FIELDS]] = x;
    } else {
      throw new Error(`unknown field ${JSON.stringify(k)}`);
    }
  }
  if (Object.keys(usage).length > 0) rec.usage = usage;
  return rec;
}

/** Reads and validates a whole file (all or nothing). */
export async function readUsageFile(path: string): Promise<VendorUsageRecord[]> {
  let size: number;
  try {
    size = (await stat(path)).size;
  } catch (e) {
    throw new Error(`${path}: ${(e as { code?: string }).code === 'ENOENT' ? 'no such file' : (e as Error).message}`);
  }
  if (size > MAX_FILE_BYTES) throw new Error(`${path}: larger than ${MAX_FILE_BYTES} bytes; split the file`);
  const out: VendorUsageRecord[] = [];
  const lines = createInterface({ input: createReadStream(path, { encoding: 'utf8' }), crlfDelay: Infinity });
  let n = 0;
  try {
    for await (const line of lines) {
      n++;
      if (line.trim() === '') continue;
      if (Buffer.byteLength(line) > MAX_LINE_BYTES) throw new Error(`${path}:${n}: line longer than ${MAX_LINE_BYTES} bytes`);
      if (out.length >= MAX_RECORDS_PER_FILE) throw new Error(`${path}: more than ${MAX_RECORDS_PER_FILE} records; split the file`);
      try {
        out.push(parseUsageLine(line));
      } catch (e) {
        throw new Error(`${path}:${n}: ${(e as Error).message}`);
      }
    }
  } finally {
    lines.close();
  }
  return out;
}
