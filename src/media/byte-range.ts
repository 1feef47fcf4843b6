// Byte ranges (RFC 9110 section 14) for the media host and the media stores. One range per request:
// a player asks for one range at a time, and a multi-range answer (multipart/byteranges) would need
// a second framing for a case no client of ours uses, so a Range header listing several ranges is
// ignored and the whole object is sent (200), which the RFC allows. A header we cannot read is
// ignored the same way (RFC 9110 14.2: a server MAY ignore Range).

/** What the client asked for, before the object's size is known. */
export type RangeSpec =
  /** `bytes=first-last` (end inclusive) or `bytes=first-` (no end). */
  | { readonly start: number; readonly end?: number }
  /** `bytes=-n`: the last n bytes. */
  | { readonly suffix: number };

/** A range resolved against a size: first and last byte, both inclusive. */
export interface ByteRange {
  readonly start: number;
  readonly end: number;
}

/** Longer Range headers are ignored (a real one is ~30 characters). */
const MAX_RANGE_HEADER_CHARS = 200;
// Digits of any length (the header's cap bounds them): a position past Number.MAX_SAFE_INTEGER is
// read exactly as "past the end of any object" (clampPosition), never rounded into a nearby number.
const SINGLE_RE = /^bytes[ \t]*=[ \t]*(\d*)[ \t]*-[ \t]*(\d*)[ \t]*$/i;
const MAX_SAFE_DIGITS = String(Number.MAX_SAFE_INTEGER).length;

/**
 * A position's digits as a number, exact up to Number.MAX_SAFE_INTEGER; anything larger is that
 * bound, which lies past the end of every object a store holds (a first byte there is
 * unsatisfiable, a last byte there is the object's end, a suffix that long is the whole object).
 */
export function clampPosition(digits: string): number {
  const trimmed = digits.replace(/^0+(?=\d)/, '');
  if (trimmed.length > MAX_SAFE_DIGITS) return Number.MAX_SAFE_INTEGER;
  return Math.min(Number(trimmed), Number.MAX_SAFE_INTEGER);
}

/** left < right for two digit strings of any length, compared exactly (no conversion to a number). */
function digitsLess(left: string, right: string): boolean {
  const x = left.replace(/^0+(?=\d)/, '');
  const y = right.replace(/^0+(?=\d)/, '');
  return x.length !== y.length ? x.length < y.length : x < y;
}

/**
 * The one range a Range header asks for, or undefined: absent, unreadable, backwards (`bytes=9-0`),
 * or several (all mean "send the whole", RFC 9110 14.2). Positions of any size are read exactly:
 * see clampPosition.
 */
export function parseRange(header: string | undefined): RangeSpec | undefined {
  if (header === undefined || header.length > MAX_RANGE_HEADER_CHARS) return undefined;
  const m = SINGLE_RE.exec(header);
  if (m === null) return undefined;
  const [first, last] = [m[1]!, m[2]!];
  if (first === '') return last === '' ? undefined : { suffix: clampPosition(last) };
  const start = clampPosition(first);
  if (last === '') return { start };
  return digitsLess(last, first) ? undefined : { start, end: clampPosition(last) };
}

/** The bytes `spec` selects in an object of `sizeBytes`, or 'unsatisfiable' (answered 416). */
export function resolveRange(spec: RangeSpec, sizeBytes: number): ByteRange | 'unsatisfiable' {
  if ('suffix' in spec) {
    if (spec.suffix === 0 || sizeBytes === 0) return 'unsatisfiable';
    return { start: Math.max(0, sizeBytes - spec.suffix), end: sizeBytes - 1 };
  }
  if (spec.start >= sizeBytes) return 'unsatisfiable';
  return { start: spec.start, end: Math.min(spec.end ?? sizeBytes - 1, sizeBytes - 1) };
}

/** The Range header value for `spec` (what an S3 ranged GET sends). */
export function rangeHeader(spec: RangeSpec): string {
  if ('suffix' in spec) return `bytes=-${spec.suffix}`;
  return spec.end === undefined ? `bytes=${spec.start}-` : `bytes=${spec.start}-${spec.end}`;
}

const CONTENT_RANGE_RE = /^bytes (\d{1,15})-(\d{1,15})\/(\d{1,15})$/;

/** Reads `Content-Range: bytes a-b/size`; undefined for any other form. */
export function parseContentRange(header: string | undefined): (ByteRange & { sizeBytes: number }) | undefined {
  const m = header === undefined ? null : CONTENT_RANGE_RE.exec(header);
  if (m === null) return undefined;
  const r = { start: Number(m[1]), end: Number(m[2]), sizeBytes: Number(m[3]) };
  return r.start <= r.end && r.end < r.sizeBytes ? r : undefined;
}
