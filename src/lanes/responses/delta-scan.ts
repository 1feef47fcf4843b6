// Reading a Responses event's JSON without parsing it: its sequence_number, and a text delta's
// length and where its escaped text lies. The tally parses only the events it keeps something of.
import { scanCount } from './raw-json.js';

const SEQ_KEY = '"sequence_number":';

export const scanSequenceNumber = (data: string): number => scanCount(data, SEQ_KEY);

const DELTA_TYPE = '"type":"response.output_text.delta"';
const DELTA_KEY = '"delta":"';

/** Where the raw (still escaped) `delta` string of the last scanned text delta lies in its data. */
export interface DeltaSpan {
  start: number;
  end: number;
}

const unusedSpan: DeltaSpan = { start: 0, end: 0 };

/**
 * The UTF-16 length `JSON.parse` would give the `delta` string of a text-delta event, read from
 * the raw JSON: each escape (`\n`, `\"`, `\uXXXX`, ...) is one code unit, every other character
 * is itself. Returns -1 (the caller then parses the event) unless the data says it is a text delta
 * and has exactly one `"delta":"` key with a well-formed string after it. Neither pattern can occur
 * inside a JSON string value, where every quote is escaped. It does not check the rest of the
 * event is valid JSON: a malformed delta still counts, and the client's SDK reports it.
 */
export function scanTextDeltaChars(data: string): number {
  return scanTextDelta(data, unusedSpan);
}

/** scanTextDeltaChars that also says where the escaped string lies (`span`, reused: no allocation). */
export function scanTextDelta(data: string, span: DeltaSpan): number {
  if (data.indexOf(DELTA_TYPE) === -1) return -1;
  const at = data.indexOf(DELTA_KEY);
  if (at === -1) return -1;
  let n = 0;
  const len = data.length;
  const start = at + DELTA_KEY.length;
  for (let i = start; i < len; i++) {
    const c = data.charCodeAt(i);
    if (c === 34) {
      if (data.indexOf(DELTA_KEY, i) !== -1) return -1;
      span.start = start;
      span.end = i;
      return n;
    }
    if (c < 0x20) return -1;
    if (c === 92) {
      const e = data.charCodeAt(i + 1);
      if (e === 117) {
        for (let k = 2; k < 6; k++) {
          const h = data.charCodeAt(i + k) | 0x20;
          if (!((h >= 48 && h <= 57) || (h >= 97 && h <= 102))) return -1;
        }
        i += 5;
      } else if (e === 34 || e === 92 || e === 47 || e === 98 || e === 102 || e === 110 || e === 114 || e === 116) {
        i += 1;
      } else {
        return -1;
      }
    }
    n++;
  }
  return -1;
}
