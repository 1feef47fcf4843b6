// scanTextDelta and scanCount over an event's bytes instead of its decoded text, for the events
// the tally reads straight from the relayed chunk (sse-plain-event.ts). Each gives what its text
// twin gives on the same event decoded, or says it cannot (-1) and the event is decoded and read
// the usual way: a byte sequence that is not well-formed UTF-8 is one of those, since decoding
// would have replaced it.
import { indexWithin } from '../sse-plain-event.js';
import type { DeltaSpan } from './delta-scan.js';

const DELTA_TYPE = Buffer.from('"type":"response.output_text.delta"', 'latin1');
const DELTA_KEY = Buffer.from('"delta":"', 'latin1');
export const SEQUENCE_NUMBER_KEY = Buffer.from('"sequence_number":', 'latin1');

/** The UTF-16 length of the `delta` string in `bytes[start, end)` (scanTextDelta's rules), -1 when unread. */
export function scanTextDeltaBytes(bytes: Buffer, start: number, end: number, span: DeltaSpan): number {
  if (indexWithin(bytes, DELTA_TYPE, start, end) === -1) return -1;
  const at = indexWithin(bytes, DELTA_KEY, start, end);
  if (at === -1) return -1;
  const textStart = at + DELTA_KEY.length;
  let units = 0;
  for (let i = textStart; i < end; i++) {
    const c = bytes[i]!;
    if (c === 34) {
      if (indexWithin(bytes, DELTA_KEY, i, end) !== -1) return -1;
      span.start = textStart;
      span.end = i;
      return units;
    }
    if (c < 0x20) return -1;
    if (c === 92) {
      const skipped = escapeLength(bytes, i + 1);
      if (skipped === -1) return -1;
      i += skipped;
      units++;
    } else if (c < 0x80) {
      units++;
    } else {
      const width = utf8Width(bytes, i, end);
      if (width === -1) return -1;
      units += width === 4 ? 2 : 1;
      i += width - 1;
    }
  }
  return -1;
}

/** Bytes after the backslash of a JSON escape at `offset` (1, or 5 for \uXXXX); -1 when it is not one. */
function escapeLength(bytes: Buffer, offset: number): number {
  const e = bytes[offset];
  if (e === 117) {
    for (let k = 1; k < 5; k++) {
      const h = (bytes[offset + k] ?? 0) | 0x20;
      if (!((h >= 48 && h <= 57) || (h >= 97 && h <= 102))) return -1;
    }
    return 5;
  }
  return e === 34 || e === 92 || e === 47 || e === 98 || e === 102 || e === 110 || e === 114 || e === 116 ? 1 : -1;
}

/**
 * The length of the well-formed UTF-8 sequence whose lead byte is at `offset` (2 to 4), or -1 where a
 * decoder would put a replacement character (a stray continuation, an overlong form, a surrogate,
 * a code point past U+10FFFF, a sequence cut short).
 */
function utf8Width(bytes: Buffer, offset: number, end: number): number {
  const lead = bytes[offset]!;
  let width: number;
  let low = 0x80;
  let high = 0xbf;
  if (lead >= 0xc2 && lead <= 0xdf) width = 2;
  else if (lead >= 0xe0 && lead <= 0xef) {
    width = 3;
    if (lead === 0xe0) low = 0xa0;
    else if (lead === 0xed) high = 0x9f;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    width = 4;
    if (lead === 0xf0) low = 0x90;
    else if (lead === 0xf4) high = 0x8f;
  } else return -1;
  if (offset + width > end) return -1;
  const second = bytes[offset + 1]!;
  if (second < low || second > high) return -1;
  for (let k = 2; k < width; k++) {
    const next = bytes[offset + k]!;
    if (next < 0x80 || next > 0xbf) return -1;
  }
  return width;
}

/** scanCount over `bytes[start, end)`: the integer after `key` (its quotes and colon included), -1 when none. */
export function scanCountBytes(bytes: Buffer, start: number, end: number, key: Buffer): number {
  const at = indexWithin(bytes, key, start, end);
  if (at === -1) return -1;
  let i = at + key.length;
  while (i < end && bytes[i] === 32) i++;
  let value = 0;
  let digits = 0;
  while (i < end) {
    const c = bytes[i]!;
    if (c < 48 || c > 57) break;
    value = value * 10 + (c - 48);
    digits++;
    i++;
    if (digits > 15) return -1;
  }
  return digits === 0 ? -1 : value;
}
