// Exact o200k_base token counts with a bounded cost, for the Responses lane's input envelope and hold.
//
// Why not gpt-tokenizer's own `countTokens` on the hot path (measured on this machine, Node 20):
// - Its byte-pair merge is quadratic in the length of one pre-tokenizer chunk: 'a' x 64 Ki took
//   2.3 s and 'a' x 256 Ki 39 s. A long run of letters, punctuation or whitespace (or Thai / CJK text
//   without punctuation, which the pattern keeps as one chunk) in a 4 MiB body would stall the event
//   loop for minutes.
// - Its merge cache (100,000 entries by default, process-wide) keys on chunk strings that V8 keeps as
//   slices of the whole request text: 100 unique ~0.9 MB bodies left 44 MB retained after GC. In a
//   server that is an unbounded leak.
// So this module does the same computation itself: the same split pattern (imported from the
// package), the same ranks (the package's rank list, looked up by byte string in an
// open-addressing table built once at start-up, rank-table.ts), whole-chunk lookup first (as tiktoken does), then
// byte-pair merges with a binary heap (lowest rank first, leftmost on ties: exactly the package's
// order) in O(n log n) per chunk, and no cache. Special-token text such as "<|endoftext|>" counts as
// ordinary text, as the vendor treats user text. test/unit/responses-request.test.ts checks the
// count against `countTokens(text, { disallowedSpecial: new Set() })` on fixed and random texts.
//
// Cost (this machine, one core; measured figures are in request.ts's rules block): about 70 ms per
// MiB of ordinary text, at most ~0.5 us per byte for a single run of one character. Memory: the rank
// table (~5 MB, built at import on a thread of its own: rank-table.ts); a chunk longer than 4 KiB gets transient arrays of
// 32 bytes per byte of that chunk (a 4 MiB single-character body: ~128 MB for ~2 s), nothing retained.
import { workerData } from 'node:worker_threads';
import { O200K_TOKEN_SPLIT_REGEX } from 'gpt-tokenizer/encodingParams/constants';
import { BASE, hashBytes, mixHash, type RankTable } from './rank-table.js';
import { loadRankTable } from './rank-table-cache.js';

// ---------------------------------------------------------------------------------------------
// Rank table (rank-table.ts): read from its cache on disk, or built once on a thread of its own so
// this one never loads the rank list (rank-table-cache.ts); the token-count pool's worker is handed
// the same table (shared memory) when it starts.

const table: RankTable = (workerData as { rankTable?: RankTable } | null)?.rankTable ?? (await loadRankTable());
/** The table, for the token-count pool to hand its worker (token-count-pool.ts). */
export const rankTable: RankTable = table;
const { pool, tokenOffset, tokenLength, slots } = table;
const slotMask = slots.length - 1;

/** Longest token of the vocabulary in bytes (128 for o200k_base): no longer byte string has a rank. */
export const O200K_MAX_TOKEN_BYTES: number = tokenLength.reduce((m, l) => Math.max(m, l), 0);

const slotOf = (h: number): number => mixHash(h) & slotMask;

/** The rank of the byte string buf[start, end) whose hash is `stringHash`, or -1 when it is not a token. */
function rankOfHashed(buf: Uint8Array, start: number, end: number, stringHash: number): number {
  const len = end - start;
  let i = slotOf(stringHash);
  for (;;) {
    const s = slots[i]!;
    if (s === 0) return -1;
    const r = s - 1;
    if (tokenLength[r] === len) {
      const off = tokenOffset[r]!;
      let k = 0;
      while (k < len && pool[off + k] === buf[start + k]) k++;
      if (k === len) return r;
    }
    i = (i + 1) & slotMask;
  }
}

/** The rank of the byte string buf[start, end), or -1 when it is not a token. */
function rankOf(buf: Uint8Array, start: number, end: number): number {
  if (end - start > O200K_MAX_TOKEN_BYTES) return -1;
  return rankOfHashed(buf, start, end, hashBytes(buf, start, end));
}

/** BASE^k mod 2^32 for every length a token can have: H(x ++ y) = H(x) * BASE^|y| + H(y). */
const POW = new Int32Array(O200K_MAX_TOKEN_BYTES + 1);
POW[0] = 1;
for (let k = 1; k <= O200K_MAX_TOKEN_BYTES; k++) POW[k] = Math.imul(POW[k - 1]!, BASE);

// ---------------------------------------------------------------------------------------------
// Byte-pair merge of one chunk with a heap: O(n log n) instead of the reference's O(n^2).

/** Scratch for chunks up to this many bytes is kept and reused; longer chunks get arrays of their own. */
const SCRATCH_BYTES = 4096;
const TWO_32 = 4294967296;
const scratchNext = new Int32Array(SCRATCH_BYTES + 1);
const scratchPrev = new Int32Array(SCRATCH_BYTES + 1);
const scratchHash = new Int32Array(SCRATCH_BYTES + 1);
const scratchPairRank = new Int32Array(SCRATCH_BYTES + 1);
const scratchHeap = new Float64Array(2 * SCRATCH_BYTES);

// The state of the merge in progress (module-level so that no closure is allocated per chunk; the
// count is synchronous, so one merge runs at a time). Parts are byte ranges [i, next[i]) of the
// chunk; a dead part has next[i] = -1. hash[i] is the part's hash (so a pair's hash is O(1));
// pairRank[i] is the rank of part i joined to its successor, or -1. The heap holds candidate
// pairs keyed rank * 2^32 + i: lowest rank first and, among equal ranks, the leftmost pair.
let next = scratchNext;
let prev = scratchPrev;
let hash = scratchHash;
let pairRank = scratchPairRank;
let heap = scratchHeap;
let heapSize = 0;
let mergeBuf: Uint8Array = scratchNext as unknown as Uint8Array;
let mergeStart = 0;

function push(key: number): void {
  let i = heapSize++;
  while (i > 0) {
    const p = (i - 1) >> 1;
    const pk = heap[p]!;
    if (pk <= key) break;
    heap[i] = pk;
    i = p;
  }
  heap[i] = key;
}

function pop(): number {
  const top = heap[0]!;
  const last = heap[--heapSize]!;
  let i = 0;
  for (;;) {
    const l = 2 * i + 1;
    if (l >= heapSize) break;
    const r = l + 1;
    const c = r < heapSize && heap[r]! < heap[l]! ? r : l;
    if (heap[c]! >= last) break;
    heap[i] = heap[c]!;
    i = c;
  }
  if (heapSize > 0) heap[i] = last;
  return top;
}

/** Rank of part `left` joined to part `right` (its successor, ending at `rightEnd`), or -1. */
function pairRankOf(left: number, right: number, rightEnd: number): number {
  if (rightEnd - left > O200K_MAX_TOKEN_BYTES) return -1;
  return rankOfHashed(mergeBuf, mergeStart + left, mergeStart + rightEnd, (Math.imul(hash[left]!, POW[rightEnd - right]!) + hash[right]!) | 0);
}

/**
 * Number of tokens the byte-pair merge leaves for buf[start, end) (end - start >= 2): the
 * reference loop (merge the lowest-ranked adjacent pair, leftmost on ties, until no pair is a
 * token) with a heap of candidate pairs and lazy deletion, O(n log n).
 */
function mergeCount(buf: Uint8Array, start: number, end: number): number {
  const n = end - start;
  if (n > SCRATCH_BYTES) {
    next = new Int32Array(n + 1);
    prev = new Int32Array(n + 1);
    hash = new Int32Array(n + 1);
    pairRank = new Int32Array(n + 1);
    // n - 1 initial entries; each merge pops at least one entry (its own) and pushes at most
    // two, so the heap never holds more than (n - 1) + merges <= 2n entries.
    heap = new Float64Array(2 * n);
  }
  mergeBuf = buf;
  mergeStart = start;
  heapSize = 0;
  try {
    for (let i = 0; i < n; i++) {
      next[i] = i + 1;
      prev[i] = i - 1;
      hash[i] = buf[start + i]!;
    }
    next[n] = n;
    for (let i = 0; i + 1 < n; i++) {
      const r = pairRankOf(i, i + 1, i + 2);
      pairRank[i] = r;
      if (r >= 0) push(r * TWO_32 + i);
    }
    pairRank[n - 1] = -1;

    let parts = n;
    while (heapSize > 0) {
      const key = pop();
      const r = Math.floor(key / TWO_32);
      const i = key - r * TWO_32;
      // Stale entry: the part is gone or its pair changed. (A pair at i with the same rank is the
      // same byte string, hence the same pair, so an equal rank means the entry is current.)
      if (next[i] === -1 || pairRank[i] !== r) continue;
      const j = next[i]!;
      const after = next[j]!;
      hash[i] = (Math.imul(hash[i]!, POW[after - j]!) + hash[j]!) | 0;
      next[i] = after;
      next[j] = -1;
      if (after < n) prev[after] = i;
      parts--;

      if (after < n) {
        const r2 = pairRankOf(i, after, next[after]!);
        pairRank[i] = r2;
        if (r2 >= 0) push(r2 * TWO_32 + i);
      } else {
        pairRank[i] = -1;
      }
      const p = prev[i]!;
      if (p >= 0) {
        const r3 = pairRankOf(p, i, after);
        pairRank[p] = r3;
        if (r3 >= 0) push(r3 * TWO_32 + p);
      }
    }
    return parts;
  } finally {
    // Retain neither the request's bytes nor a long chunk's arrays.
    mergeBuf = scratchNext as unknown as Uint8Array;
    next = scratchNext;
    prev = scratchPrev;
    hash = scratchHash;
    pairRank = scratchPairRank;
    heap = scratchHeap;
  }
}

// ---------------------------------------------------------------------------------------------
// Counting a text

const splitRegex = new RegExp(
  O200K_TOKEN_SPLIT_REGEX.source,
  O200K_TOKEN_SPLIT_REGEX.flags.includes('g') ? O200K_TOKEN_SPLIT_REGEX.flags : `${O200K_TOKEN_SPLIT_REGEX.flags}g`,
);

/** UTF-8 length of text[from, end) as Buffer.from encodes it (a lone surrogate becomes U+FFFD, 3 bytes). */
function utf8Length(text: string, from: number, end: number): number {
  let bytes = 0;
  for (let i = from; i < end; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) bytes += 1;
    else if (c < 0x800) bytes += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < end) {
      const d = text.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        bytes += 4;
        i++;
      } else bytes += 3;
    } else bytes += 3;
  }
  return bytes;
}

/**
 * The exact o200k_base token count of `text` (no special tokens: their text counts as ordinary
 * text). Equal to gpt-tokenizer's `countTokens(text, { disallowedSpecial: new Set() })`, in
 * O(n log n) time for any input and without retaining anything.
 */
export function countO200kTokens(text: string): number {
  if (text.length === 0) return 0;
  const buf = Buffer.from(text, 'utf8');
  const re = splitRegex;
  re.lastIndex = 0;
  let count = 0;
  let charPos = 0;
  let bytePos = 0;
  for (let m = re.exec(text); m !== null; m = re.exec(text)) {
    const chunk = m[0];
    if (chunk.length === 0) {
      re.lastIndex++;
      continue;
    }
    // Characters the pattern skipped (none for this pattern, which covers every character) are
    // skipped here too, as the reference does.
    if (m.index > charPos) bytePos += utf8Length(text, charPos, m.index);
    const end = m.index + chunk.length;
    const chunkBytes = utf8Length(text, m.index, end);
    const b0 = bytePos;
    const b1 = bytePos + chunkBytes;
    if (chunkBytes === 1 || rankOf(buf, b0, b1) >= 0) count++;
    else count += mergeCount(buf, b0, b1);
    charPos = end;
    bytePos = b1;
  }
  return count;
}

/** The token counts of a request's texts: the verbatim total, and each hold text's count in order. */
export interface TextCounts {
  readonly verbatim: number;
  readonly hold: readonly number[];
}

/** Counts on this thread (the token-count pool's worker runs the same for long prompts). */
export function countTexts(verbatimTexts: readonly string[], holdTexts: readonly string[]): TextCounts {
  let verbatim = 0;
  for (const t of verbatimTexts) verbatim += countO200kTokens(t);
  return { verbatim, hold: holdTexts.map((t) => countO200kTokens(t)) };
}
