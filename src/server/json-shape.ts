// A structural pre-check of a JSON body's raw bytes, before JSON.parse: one linear pass that refuses
// shapes no client sends but that cost the parse (and every walk after it) far more per byte than
// text does. JSON.parse of 4 MiB of prose takes a few ms; of 4 MiB holding one object of 380,000
// keys, about half a second on the serving thread, during which no other request is served.
//
// The pass counts and measures; it does not validate: text that is not JSON is left to JSON.parse
// (its invalid_json answer), so the pass only refuses what it can be sure of. Strings are skipped
// with a native byte search for their closing quote, so a body of long strings costs little more
// than that search; every other byte is looked at once. A refusal names the place (`param`, the
// dotted path the lanes use: `system`, `messages.3.content`) and the limit crossed.
//
// The limits are far above what the SDKs and coding agents send (docs/api/conventions.md): a long
// agent session is a few thousand turns and blocks, a few hundred tools, tens of thousands of values.
import { ApiError } from '../errors.js';
import { clipped } from '../errors.js';

export interface JsonShapeLimits {
  /** Nesting of objects and arrays. */
  readonly depth: number;
  /** Members of one object. */
  readonly objectKeys: number;
  /** Items of one array. */
  readonly arrayItems: number;
  /** Values of the whole body: every object, array, string, number, boolean and null, keys not counted. */
  readonly values: number;
  /** Object members of the whole body. */
  readonly keys: number;
  /**
   * Different key names in the whole body. Objects of names never seen together are what the parse
   * and the structured clone back from the parse thread pay most for (a new hidden class each);
   * a request's names are its protocol's and its tools' parameters: a few hundred.
   */
  readonly distinctKeys: number;
  /** Bytes of one key as written (a field name, not a text). */
  readonly keyBytes: number;
}

/** What the pass counted (up to where it stopped, when the text is not JSON). */
export interface JsonShape {
  readonly keys: number;
  readonly values: number;
}

export const JSON_SHAPE_LIMITS: JsonShapeLimits = Object.freeze({
  depth: 64,
  objectKeys: 1_024,
  arrayItems: 100_000,
  values: 250_000,
  keys: 100_000,
  distinctKeys: 10_000,
  keyBytes: 4_096,
});

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const COMMA = 0x2c;
const COLON = 0x3a;

/**
 * The names seen, as 32-bit FNV-1a hashes in an open-addressed table (two names of one hash count
 * once: the count is a guard, not an inventory). Four slots per name the limit allows; one table per
 * thread, cleared per body, as the pass is synchronous.
 */
class NameSet {
  private table = new Int32Array(0);
  /** The slots filled since the last reset: a reset clears those, not the whole table (256 KiB at the default limit, per body). */
  private used = new Int32Array(0);
  private size = 0;
  reset(limit: number): void {
    const slots = 1 << Math.ceil(Math.log2(limit * 4));
    if (this.table.length !== slots) this.table = new Int32Array(slots);
    else if (this.size > this.used.length)
      this.table.fill(0); // more names than were recorded (a larger limit than the last)
    else for (let k = 0; k < this.size; k++) this.table[this.used[k]!] = 0;
    if (this.used.length < limit + 1) this.used = new Int32Array(limit + 1);
    this.size = 0;
  }
  /** Adds the name between `start` and `end`; returns how many different names there are now. */
  add(buf: Buffer, start: number, end: number): number {
    let h = 0x811c9dc5;
    for (let k = start; k < end; k++) h = Math.imul(h ^ buf[k]!, 0x01000193);
    h |= 1; // 0 marks an empty slot
    const mask = this.table.length - 1;
    for (let slot = h & mask; ; slot = (slot + 1) & mask) {
      const v = this.table[slot]!;
      if (v === h) return this.size;
      if (v === 0) {
        this.table[slot] = h;
        // The caller refuses the body once the count passes the limit: `used` never fills past it.
        if (this.size < this.used.length) this.used[this.size] = slot;
        return ++this.size;
      }
    }
  }
}
const names = new NameSet();

/** Keys JSON.parse would turn into an object's prototype or its constructor's name (json-body.ts says why they are refused). */
const PROTO_KEYS: readonly Buffer[] = ['__proto__', 'constructor', 'prototype'].map((k) => Buffer.from(k));

/** Whether byte `c` ends a number or literal token. */
const isDelimiter = (c: number): boolean => c === COMMA || c === CLOSE_OBJECT || c === CLOSE_ARRAY || c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;

/**
 * The open containers, innermost last: whether each is an object, its count so far, and (for the
 * param of a refusal) where its current key starts and ends. Sized by the depth limit, so the pass
 * allocates nothing per value.
 */
class Frames {
  readonly isObject: Uint8Array;
  readonly count: Int32Array;
  readonly keyStart: Int32Array;
  readonly keyEnd: Int32Array;
  top = -1;
  constructor(depth: number) {
    this.isObject = new Uint8Array(depth + 1);
    this.count = new Int32Array(depth + 1);
    this.keyStart = new Int32Array(depth + 1);
    this.keyEnd = new Int32Array(depth + 1);
  }

  /** The dotted path of frame `upTo` (the body's own path is `body`), keys clipped, built only for a refusal. */
  path(buf: Buffer, upTo: number): string {
    const parts: string[] = [];
    for (let d = 0; d <= upTo; d++) {
      if (this.isObject[d] === 1) parts.push(clipped(buf.toString('utf8', this.keyStart[d]!, this.keyEnd[d]!), 64));
      else parts.push(String(Math.max(0, this.count[d]! - 1)));
    }
    return parts.length === 0 ? 'body' : parts.join('.');
  }
}

/** One set of frames per thread, reused by every body of the same depth limit (the pass is synchronous). */
let frames: Frames | undefined;
function framesFor(depth: number): Frames {
  if (frames === undefined || frames.isObject.length !== depth + 1) frames = new Frames(depth);
  frames.top = -1;
  return frames;
}

/** Bytes of a string scanned byte by byte before the native search takes over (a call costs about as much as a short string's scan). */
const SCAN_BYTES = 128;

/**
 * The byte after the closing quote of the string opening at `start`, or -1 when it is never closed
 * (not JSON: the parse says so). Short strings and escapes byte by byte; past SCAN_BYTES of plain
 * text, the native search for the next quote, its escaping checked by counting the backslashes
 * before it (an escaped quote sends the scan back to bytes, so escapes cannot make it call the
 * search once per quote).
 */
function stringEnd(buf: Buffer, start: number): number {
  const n = buf.length;
  let i = start + 1;
  for (;;) {
    const stop = Math.min(n, i + SCAN_BYTES);
    while (i < stop) {
      const c = buf[i]!;
      if (c === QUOTE) return i + 1;
      i += c === BACKSLASH ? 2 : 1;
    }
    if (i >= n) return -1;
    const q = buf.indexOf(QUOTE, i);
    if (q === -1) return -1;
    let slashes = 0;
    for (let k = q - 1; k >= i && buf[k] === BACKSLASH; k--) slashes++;
    // The byte before `i` is never a lone backslash (the loop stepped over every escape), so the count is exact.
    if ((slashes & 1) === 0) return q + 1;
    i = q + 1;
  }
}

/** Whether the key between `start` and `end` (without its quotes) reads `__proto__`, `constructor` or `prototype`, escapes decoded. */
function isProtoKey(buf: Buffer, start: number, end: number): boolean {
  const len = end - start;
  if (len < 9 || len > 66) return false; // 66: eleven characters written as \uXXXX escapes
  if (len <= 11) for (const k of PROTO_KEYS) if (k.length === len && buf.compare(k, 0, len, start, end) === 0) return true;
  let escaped = false;
  for (let k = start; k < end; k++) if (buf[k] === BACKSLASH) escaped = true;
  if (!escaped) return false;
  try {
    const key: unknown = JSON.parse(buf.toString('utf8', start - 1, end + 1));
    return key === '__proto__' || key === 'constructor' || key === 'prototype';
  } catch {
    return false; // not JSON: the parse answers
  }
}

/** Whether the number token between `start` and `end` overflows to Infinity (only one with an exponent or 309 digits can). */
function overflows(buf: Buffer, start: number, end: number): boolean {
  if (end - start < 309) {
    let exponent = false;
    for (let k = start; k < end; k++) if ((buf[k]! | 0x20) === 0x65) exponent = true;
    if (!exponent) return false;
  }
  return !Number.isFinite(Number(buf.toString('latin1', start, end)));
}

function refuse(code: 'too_many' | 'too_long' | 'invalid_body' | 'invalid_json', param: string, message: string): never {
  throw new ApiError(code, { param, message });
}

/**
 * Throws ApiError when the body crosses a limit: `too_many` (keys of an object, items of an array,
 * values, keys or different key names of the body), `too_long` (a key), `invalid_body` (nesting, a
 * prototype key), `invalid_json` (a number that overflows). Returns what it counted (json-parse-thread.ts
 * decides by it where the body is parsed).
 */
export function checkJsonShape(buf: Buffer, limits: JsonShapeLimits = JSON_SHAPE_LIMITS): JsonShape {
  const f = framesFor(limits.depth);
  names.reset(limits.distinctKeys);
  const n = buf.length;
  let values = 0;
  let keys = 0;
  let expectKey = false;
  let i = 0;
  while (i < n) {
    const c = buf[i]!;
    if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09 || c === COLON) {
      i++;
      while (i < n && buf[i] === 0x20) i++; // indentation
      continue;
    }
    if (c === COMMA) {
      expectKey = f.top >= 0 && f.isObject[f.top] === 1;
      i++;
      continue;
    }
    if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
      if (f.top < 0) return { keys, values }; // not JSON: the parse answers
      f.top--;
      expectKey = false;
      i++;
      continue;
    }
    if (c === QUOTE && expectKey) {
      const end = stringEnd(buf, i);
      if (end === -1) return { keys, values };
      const d = f.top;
      f.keyStart[d] = i + 1;
      f.keyEnd[d] = end - 1;
      if (++f.count[d]! > limits.objectKeys) refuse('too_many', f.path(buf, d - 1), `An object in the body has more than ${limits.objectKeys} keys.`);
      if (++keys > limits.keys) refuse('too_many', 'body', `The body holds more than ${limits.keys} object keys.`);
      if (end - i - 2 > limits.keyBytes) refuse('too_long', f.path(buf, d), `A key in the body is longer than ${limits.keyBytes} bytes.`);
      if (names.add(buf, i + 1, end - 1) > limits.distinctKeys)
        refuse('too_many', 'body', `The body holds more than ${limits.distinctKeys} different key names.`);
      if (isProtoKey(buf, i + 1, end - 1)) refuse('invalid_body', f.path(buf, d), `Keys named ${buf.toString('latin1', i + 1, end - 1)} are not accepted.`);
      expectKey = false;
      i = end;
      continue;
    }
    // A value: count it where it sits.
    if (++values > limits.values) refuse('too_many', 'body', `The body holds more than ${limits.values} JSON values.`);
    if (f.top >= 0 && f.isObject[f.top] === 0 && ++f.count[f.top]! > limits.arrayItems) {
      refuse('too_many', f.path(buf, f.top - 1), `An array in the body has more than ${limits.arrayItems} items.`);
    }
    if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
      if (f.top + 1 >= limits.depth) refuse('invalid_body', f.path(buf, f.top), `The body is nested deeper than ${limits.depth} levels.`);
      const d = ++f.top;
      f.isObject[d] = c === OPEN_OBJECT ? 1 : 0;
      f.count[d] = 0;
      expectKey = c === OPEN_OBJECT;
      i++;
      continue;
    }
    if (c === QUOTE) {
      i = stringEnd(buf, i);
      if (i === -1) return { keys, values };
      continue;
    }
    // A number or a literal: to the next delimiter.
    let j = i + 1;
    while (j < n && !isDelimiter(buf[j]!)) j++;
    if (c !== 0x74 && c !== 0x66 && c !== 0x6e && overflows(buf, i, j)) refuse('invalid_json', f.path(buf, f.top), 'A number in the body is out of range.');
    i = j;
  }
  return { keys, values };
}
