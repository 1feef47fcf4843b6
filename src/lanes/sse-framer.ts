// Event-aligned SSE framing for the text lanes' pass-through.
//
// The gateway forwards the vendor's SSE bytes unchanged, but only ever whole events: that lets
// it rewrite the few events that carry a `model` field and append its own frame on an event
// boundary without ever splitting a vendor event in two. `SseFramer` finds the boundaries.
//
// Boundaries follow the SSE spec (WHATWG HTML, "server-sent events", parsing): a line ends
// with CRLF, LF or CR, and an event ends at an empty line. So `\n\n`, `\r\n\r\n`, `\r\r` and
// mixes such as `\n\r\n` all end an event. An event's bytes include the whole terminator of
// its blank line; in particular a blank line ended by CRLF includes the LF. A CR that is the
// last byte seen so far may be the first half of a CRLF, so an event whose blank line ends in
// such a CR is held until the next byte (or `end()`) shows whether an LF follows. That keeps
// the events found identical however the stream is chunked (tested by splitting at every CR/LF).
// A CR-only vendor stream would therefore see each event delayed until the next byte arrives;
// every vendor we speak to uses LF.
//
// Cost: each input byte is scanned once (memchr via Buffer.indexOf for LF and for CR; a chunk
// without CR costs one failed CR search). Output is zero-copy (a subarray of the pushed chunk)
// when nothing is pending and the chunk holds the boundary; otherwise one allocation for the
// contiguous output, which is unavoidable. Bytes after the last boundary are kept as a borrowed
// view of the chunk (no copy) unless a second piece arrives before the boundary, in which case
// they are copied into a growable buffer (doubling, so amortised O(1) per byte). Pushed chunks
// are borrowed: do not modify a chunk after pushing it.

const LF = 0x0a;
const CR = 0x0d;

/** Scanner state carried across chunks (also used fresh by `forEachEvent`). */
interface ScanState {
  /** The current line has no bytes yet (start of stream or just after a line terminator). */
  lineStart: boolean;
  /** The last byte scanned was a CR terminator, so an LF right after it belongs to it. */
  afterCr: boolean;
  /** That CR ended an empty line: an event ends there, or one byte later if an LF follows. */
  crBoundaryPending: boolean;
}

/**
 * Scans `buf` from `from` with `state` and returns the end offset (exclusive) of the last
 * event boundary found in `buf`, or -1. Offset 0 means the boundary was a held CR whose event
 * ended in data scanned before `buf`. Calls `onBoundary(end)` for each boundary when given.
 * Leaves `state` describing the scanner after the last byte of `buf`.
 */
function scan(buf: Buffer, state: ScanState, onBoundary?: (end: number) => void): number {
  const n = buf.length;
  let last = -1;
  let i = 0;
  if (n === 0) return -1;
  if (state.afterCr) {
    state.afterCr = false;
    if (buf[0] === LF) {
      i = 1;
      if (state.crBoundaryPending) {
        last = 1;
        onBoundary?.(1);
      }
    } else if (state.crBoundaryPending) {
      last = 0;
      onBoundary?.(0);
    }
    state.crBoundaryPending = false;
  }
  let lf = buf.indexOf(LF, i);
  let cr = buf.indexOf(CR, i);
  let lineStart = state.lineStart;
  while (i < n) {
    if (lf !== -1 && lf < i) lf = buf.indexOf(LF, i);
    if (cr !== -1 && cr < i) cr = buf.indexOf(CR, i);
    const t = lf === -1 ? cr : cr === -1 ? lf : Math.min(lf, cr);
    if (t === -1) {
      lineStart = false;
      break;
    }
    if (t > i) lineStart = false;
    if (buf[t] === LF) {
      if (lineStart) {
        last = t + 1;
        onBoundary?.(last);
      }
      lineStart = true;
      i = t + 1;
    } else {
      // CR: look at the next byte if we have it.
      const wasStart = lineStart;
      lineStart = true;
      if (t + 1 < n) {
        i = buf[t + 1] === LF ? t + 2 : t + 1;
        if (wasStart) {
          last = i;
          onBoundary?.(last);
        }
      } else {
        state.afterCr = true;
        state.crBoundaryPending = wasStart;
        i = n;
      }
    }
  }
  state.lineStart = lineStart;
  return last;
}

const INITIAL_ACC_BYTES = 1024;

export class SseFramer {
  private readonly st: ScanState = { lineStart: true, afterCr: false, crBoundaryPending: false };

  /** True once an incomplete event grew beyond `maxPendingBytes`; the framer then yields nothing. */
  overflowed = false;

  private readonly maxPendingBytes: number;
  /** Pending bytes as a borrowed view of the last chunk (no copy), when they are one piece. */
  private tail: Buffer | null = null;
  /** Pending bytes copied into an owned growable buffer, when they span several pieces. */
  private acc: Buffer | null = null;
  private accLen = 0;

  constructor(maxPendingBytes: number) {
    if (!Number.isInteger(maxPendingBytes) || maxPendingBytes <= 0) {
      throw new RangeError('maxPendingBytes must be a positive integer');
    }
    this.maxPendingBytes = maxPendingBytes;
  }

  /** Bytes held after the last boundary handed out (an incomplete event, or a CR-held one). */
  get pendingBytes(): number {
    return this.tail !== null ? this.tail.length : this.accLen;
  }

  /**
   * Appends `chunk` and returns the bytes from the start of the pending data up to and
   * including the last complete event boundary, or null when there is none yet (or after
   * overflow). The returned buffer always starts at an event start and ends at an event end.
   */
  push(chunk: Buffer): Buffer | null {
    if (this.overflowed) return null;
    if (chunk.length === 0) return null;
    const end = scan(chunk, this.st);
    if (end === -1) {
      if (this.pendingBytes + chunk.length > this.maxPendingBytes) return this.overflow();
      this.append(chunk);
      return null;
    }
    const out = this.takePendingWith(chunk, end);
    const restBytes = chunk.length - end;
    if (restBytes > this.maxPendingBytes) {
      this.overflow();
      return out;
    }
    if (restBytes > 0) this.tail = chunk.subarray(end);
    return out;
  }

  /**
   * Returns whatever is still held at the end of the stream: an incomplete last event, or a
   * complete event whose blank line ended in a CR at the very end. Null when nothing is held
   * (or after overflow). The framer is empty afterwards.
   */
  end(): Buffer | null {
    if (this.overflowed) return null;
    const out = this.pendingBytes > 0 ? this.takePendingWith(null, 0) : null;
    this.st.lineStart = true;
    this.st.afterCr = false;
    this.st.crBoundaryPending = false;
    return out;
  }

  private overflow(): null {
    this.overflowed = true;
    this.tail = null;
    this.acc = null;
    this.accLen = 0;
    return null;
  }

  private append(piece: Buffer): void {
    if (this.tail === null && this.accLen === 0) {
      this.tail = piece;
      return;
    }
    let held = this.tail;
    const need = (held !== null ? held.length : this.accLen) + piece.length;
    if (this.acc === null || this.acc.length < need) {
      const cap = Math.min(Math.max(INITIAL_ACC_BYTES, need * 2, this.acc !== null ? this.acc.length * 2 : 0), this.maxPendingBytes);
      const grown = Buffer.allocUnsafe(Math.max(cap, need));
      if (this.acc !== null && this.accLen > 0) this.acc.copy(grown, 0, 0, this.accLen);
      this.acc = grown;
    }
    if (held !== null) {
      held.copy(this.acc, 0);
      this.accLen = held.length;
      this.tail = null;
      held = null;
    }
    piece.copy(this.acc, this.accLen);
    this.accLen += piece.length;
  }

  /** Pending bytes followed by `chunk[0, end)`, as one buffer; pending is empty afterwards. */
  private takePendingWith(chunk: Buffer | null, end: number): Buffer {
    const tail = this.tail;
    if (tail !== null) {
      this.tail = null;
      if (chunk === null || end === 0) return tail;
      return Buffer.concat([tail, chunk.subarray(0, end)], tail.length + end);
    }
    const acc = this.acc;
    if (acc === null || this.accLen === 0) {
      return chunk === null ? Buffer.alloc(0) : chunk.subarray(0, end);
    }
    const len = this.accLen;
    // The output is a view of `acc`, so `acc` is never written again: drop it.
    this.acc = null;
    this.accLen = 0;
    if (chunk === null || end === 0) return acc.subarray(0, len);
    if (acc.length >= len + end) {
      chunk.copy(acc, len, 0, end);
      return acc.subarray(0, len + end);
    }
    return Buffer.concat([acc.subarray(0, len), chunk.subarray(0, end)], len + end);
  }
}

/**
 * Calls `onEvent(event, complete)` for each event in `buf`, which must start at an event start (as
 * `SseFramer.push`/`end` output does). Complete events include their blank-line terminator. A
 * trailing remainder without a boundary is passed last with `complete = false`; a trailing
 * blank line ended by CR counts as complete (push only returns one once the next byte is known).
 * The slices are views of `buf` (no copy).
 */
export function forEachEvent(buf: Buffer, onEvent: (event: Buffer, complete: boolean) => void): void {
  const s: ScanState = { lineStart: true, afterCr: false, crBoundaryPending: false };
  let start = 0;
  scan(buf, s, (end) => {
    onEvent(buf.subarray(start, end), true);
    start = end;
  });
  if (s.crBoundaryPending) {
    onEvent(buf.subarray(start), true);
  } else if (start < buf.length) {
    onEvent(buf.subarray(start), false);
  }
}

/**
 * The model rewrite of the text lanes' pass-through, precomputed per model at start-up. Vendors
 * answer with their own name for the model asked for, often a dated one (asked for `gpt-5-mini`,
 * OpenAI answers `gpt-5-mini-2025-08-07`; asked for `claude-sonnet-4-5`, Anthropic answers
 * `claude-sonnet-4-5-20250929`), so the match is on a string value starting `"<vendor id>` that
 * is the value of a `"model"` key, and the whole string value is replaced by the product id. The
 * vendors write compact JSON; servers that write `"model": "…"` (Python's json.dumps default)
 * are matched too: spaces or tabs may stand around the colon.
 */
export interface ModelRewrite {
  /** `"<vendor id>` (the value's opening quote and the id, no closing quote). */
  readonly value: Buffer;
  /** `"<product id>"`. */
  readonly replacement: Buffer;
}

export function modelRewrite(vendorId: string, productId: string): ModelRewrite {
  return { value: Buffer.from(JSON.stringify(vendorId).slice(0, -1), 'utf8'), replacement: Buffer.from(JSON.stringify(productId), 'utf8') };
}

const MODEL_KEY = Buffer.from('"model"', 'utf8');
const COLON = 0x3a;

/** True when the string value whose opening quote is at `quoteOffset` follows `"model"` and a colon (spaces and tabs allowed). */
function afterModelKey(buf: Buffer, quoteOffset: number): boolean {
  let i = quoteOffset - 1;
  while (i >= 0 && (buf[i] === 0x20 || buf[i] === 0x09)) i--;
  if (i < 0 || buf[i] !== COLON) return false;
  i--;
  while (i >= 0 && (buf[i] === 0x20 || buf[i] === 0x09)) i--;
  const start = i + 1 - MODEL_KEY.length;
  return start >= 0 && buf.compare(MODEL_KEY, 0, MODEL_KEY.length, start, i + 1) === 0;
}

/** Longest model name we replace; a longer value is left alone (it is not a model id). */
const MAX_MODEL_VALUE_BYTES = 256;
const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/**
 * Replaces every `"model":"<vendor id>…"` string value in `buf` with the product id; returns `buf`
 * itself (no copy) when there is none, the common case for all but a stream's first and last
 * events. The pattern cannot occur inside a JSON string (quotes are escaped there, so the value's
 * quote would follow a backslash, not a colon), and a value with an escape or without its closing
 * quote within MAX_MODEL_VALUE_BYTES is left as it is.
 */
export function rewriteModels(buf: Buffer, rewrite: ModelRewrite): Buffer {
  let at = buf.indexOf(rewrite.value);
  if (at === -1) return buf;
  const parts: Buffer[] = [];
  let from = 0;
  let total = 0;
  while (at !== -1) {
    const valueStart = at + rewrite.value.length;
    if (!afterModelKey(buf, at)) {
      at = buf.indexOf(rewrite.value, valueStart);
      continue;
    }
    const limit = Math.min(buf.length, valueStart + MAX_MODEL_VALUE_BYTES);
    let end = -1;
    for (let i = valueStart; i < limit; i++) {
      const c = buf[i]!;
      if (c === QUOTE) {
        end = i + 1;
        break;
      }
      if (c === BACKSLASH || c < 0x20) break;
    }
    if (end === -1) {
      at = buf.indexOf(rewrite.value, valueStart);
      continue;
    }
    parts.push(buf.subarray(from, at), rewrite.replacement);
    total += at - from + rewrite.replacement.length;
    from = end;
    at = buf.indexOf(rewrite.value, end);
  }
  if (parts.length === 0) return buf;
  parts.push(buf.subarray(from));
  total += buf.length - from;
  return Buffer.concat(parts, total);
}
