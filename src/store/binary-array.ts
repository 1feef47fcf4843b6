// One-dimensional arrays as Postgres binary parameters (the format array_recv reads), for the
// journal flush's column arrays. Why binary: as text, each array is escaped element by element
// into a literal on our side (pg's arrayString: a string per element, then the whole) and parsed
// back by array_in on the server's, a tenth of the flush's server CPU in its profile. In binary,
// each column is one Buffer sized up front and each element its length and bytes.
//
// Layout (src/backend/utils/adt/arrayfuncs.c, array_recv): int32 dimensions (1), int32 has-nulls
// flag, uint32 element type oid, then per dimension int32 length and int32 lower bound (1), then
// per element int32 byte length (-1 for NULL) and the element's own binary form: text and the
// JSON of jsonb as UTF-8 (jsonb prefixed by its format version, 1), int8 and int4 big-endian.
// array_recv checks the element type against the parameter's declared type, so a column sent
// under the wrong type is refused by the server rather than read as something else.

const TEXT_OID = 25;
const INT4_OID = 23;
const INT8_OID = 20;
const JSONB_OID = 3802;
const JSONB_VERSION = 1;
/** ndim, has-nulls, element type, one dimension's length and lower bound. */
const HEADER_BYTES = 20;
const TWO_32 = 4_294_967_296;

function header(buf: Buffer, hasNull: boolean, oid: number, length: number): number {
  buf.writeInt32BE(1, 0);
  buf.writeInt32BE(hasNull ? 1 : 0, 4);
  buf.writeUInt32BE(oid, 8);
  buf.writeInt32BE(length, 12);
  buf.writeInt32BE(1, 16);
  return HEADER_BYTES;
}

function stringArray(values: ReadonlyArray<string | null>, oid: number, prefixBytes: number): Buffer {
  const n = values.length;
  let size = HEADER_BYTES + 4 * n;
  let hasNull = false;
  for (let i = 0; i < n; i++) {
    const v = values[i];
    if (v === null || v === undefined) hasNull = true;
    else size += prefixBytes + Buffer.byteLength(v, 'utf8');
  }
  const buf = Buffer.allocUnsafe(size);
  let at = header(buf, hasNull, oid, n);
  for (let i = 0; i < n; i++) {
    const v = values[i];
    if (v === null || v === undefined) {
      buf.writeInt32BE(-1, at);
      at += 4;
      continue;
    }
    const lengthAt = at;
    at += 4;
    if (prefixBytes === 1) buf[at++] = JSONB_VERSION;
    const written = buf.write(v, at, 'utf8');
    at += written;
    buf.writeInt32BE(prefixBytes + written, lengthAt);
  }
  return buf;
}

/** A `text[]` parameter; null and undefined elements are SQL NULL. */
export function textArray(values: ReadonlyArray<string | null>): Buffer {
  return stringArray(values, TEXT_OID, 0);
}

/** A `jsonb[]` parameter from each element's JSON text (the server parses it as jsonb_in would). */
export function jsonbArray(values: ReadonlyArray<string | null>): Buffer {
  return stringArray(values, JSONB_OID, 1);
}

const isInt8 = (v: number): boolean => Number.isSafeInteger(v);
const isInt4 = (v: number): boolean => Number.isInteger(v) && v >= -2_147_483_648 && v <= 2_147_483_647;

/** Integers of one width, each checked by `fits` first: a value the column cannot hold is refused here, not sent as another number. */
function integerArray(values: readonly number[], oid: number, width: 4 | 8, fits: (value: number) => boolean): Buffer {
  const n = values.length;
  const buf = Buffer.allocUnsafe(HEADER_BYTES + (4 + width) * n);
  let at = header(buf, false, oid, n);
  for (let i = 0; i < n; i++) {
    const v = values[i]!;
    if (!fits(v)) throw new RangeError(`element ${i} of an array of ${width * 8}-bit integers cannot hold ${v}`);
    buf.writeInt32BE(width, at);
    if (width === 4) buf.writeInt32BE(v, at + 4);
    else {
      // Two's complement in two halves: Buffer's 64-bit writers take only BigInt.
      const high = Math.floor(v / TWO_32);
      buf.writeInt32BE(high, at + 4);
      buf.writeUInt32BE(v - high * TWO_32, at + 8);
    }
    at += 4 + width;
  }
  return buf;
}

/** A `bigint[]` parameter of safe integers. */
export function int8Array(values: readonly number[]): Buffer {
  return integerArray(values, INT8_OID, 8, isInt8);
}

/** An `integer[]` parameter of 32-bit integers. */
export function int4Array(values: readonly number[]): Buffer {
  return integerArray(values, INT4_OID, 4, isInt4);
}
