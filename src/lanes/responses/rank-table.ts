// The o200k rank table as token-count.ts looks it up: every token's bytes in one pool, found by a
// polynomial hash (mixed) with linear probing. Built from gpt-tokenizer's rank list, which is a
// 2.4 MB module of 200,000 strings: loading it and building from it grew a process's RSS by about
// 100 MB (V8 keeps the heap pages it grew into), for a table of about 5 MB. So the build runs on a
// thread of its own that ends once it has answered (rank-table-thread.ts): the serving thread
// receives only the table, in shared memory, and never loads the rank list.
import { Worker } from 'node:worker_threads';
import { threadExecArgv } from '../../util/one-worker.js';

export interface RankTable {
  /** Every token's bytes, back to back. */
  readonly pool: Uint8Array;
  /** Per rank: where its bytes start in `pool`, and how many (-1: the rank has no token). */
  readonly tokenOffset: Int32Array;
  readonly tokenLength: Int32Array;
  /** Open addressing by hashBytes then slotOf: rank + 1, 0 = empty; its length is a power of two. */
  readonly slots: Int32Array;
}

/** Polynomial hash base for byte strings. */
export const BASE = 0x01000193;

export function hashBytes(buf: Uint8Array, start: number, end: number): number {
  let h = 0;
  for (let i = start; i < end; i++) h = (Math.imul(h, BASE) + buf[i]!) | 0;
  return h;
}

/** Spreads the polynomial hash over the table (murmur3's finalizer); the caller masks it to the table's size. */
export function mixHash(hash: number): number {
  hash ^= hash >>> 16;
  hash = Math.imul(hash, 0x85ebca6b);
  hash ^= hash >>> 13;
  hash = Math.imul(hash, 0xc2b2ae35);
  hash ^= hash >>> 16;
  return hash;
}

/** Typed arrays over shared memory, so the table crosses threads without a copy. */
function shared<T extends Int32Array | Uint8Array>(Kind: { new (buffer: SharedArrayBuffer): T; readonly BYTES_PER_ELEMENT: number }, length: number): T {
  return new Kind(new SharedArrayBuffer(length * Kind.BYTES_PER_ELEMENT));
}

/** Builds the table from a rank list (index = rank; a string, its bytes, or a hole). */
export function buildRankTable(ranks: ReadonlyArray<string | readonly number[] | undefined>): RankTable {
  const rankCount = ranks.length;
  const tokenLength = shared(Int32Array, rankCount);
  const encoder = new TextEncoder();
  const parts: Uint8Array[] = new Array(rankCount);
  let total = 0;
  for (let r = 0; r < rankCount; r++) {
    const v = ranks[r];
    const bytes = v === undefined ? new Uint8Array(0) : typeof v === 'string' ? encoder.encode(v) : Uint8Array.from(v);
    parts[r] = bytes;
    tokenLength[r] = v === undefined ? -1 : bytes.length;
    total += bytes.length;
  }
  const pool = shared(Uint8Array, total);
  let at = 0;
  for (let r = 0; r < rankCount; r++) {
    pool.set(parts[r]!, at);
    at += parts[r]!.length;
  }
  return indexRankTable(pool, tokenLength);
}

/**
 * The table over `pool` (every token's bytes in rank order) and `tokenLength` (per rank, -1 for a
 * hole): the offsets and the hash slots, which are cheap to make again (rank-table-cache.ts keeps
 * only these two arrays on disk).
 */
export function indexRankTable(pool: Uint8Array, tokenLength: Int32Array): RankTable {
  const rankCount = tokenLength.length;
  const tokenOffset = shared(Int32Array, rankCount);
  let total = 0;
  for (let r = 0; r < rankCount; r++) {
    tokenOffset[r] = total;
    if (tokenLength[r]! > 0) total += tokenLength[r]!;
  }
  if (total !== pool.length) throw new Error(`rank table: the lengths add up to ${total} bytes, the pool has ${pool.length}`);
  let slotBits = 1;
  while (1 << slotBits < rankCount * 2) slotBits++;
  const slots = shared(Int32Array, 1 << slotBits);
  const mask = slots.length - 1;
  for (let r = 0; r < rankCount; r++) {
    if (tokenLength[r]! < 0) continue;
    const off = tokenOffset[r]!;
    let i = mixHash(hashBytes(pool, off, off + tokenLength[r]!)) & mask;
    while (slots[i] !== 0) i = (i + 1) & mask;
    slots[i] = r + 1;
  }
  return { pool, tokenOffset, tokenLength, slots };
}

/** A build on its own thread takes about a second of one core at most; past this something is wrong. */
const BUILD_TIMEOUT_MS = 120_000;

/** The table, built on a thread of its own that exits once it has answered (the header says why). */
export function buildRankTableOffThread(): Promise<RankTable> {
  // Under the test runner this module is TypeScript and so is the thread's; built, both are .js.
  const ext = import.meta.url.endsWith('.ts') ? '.ts' : '.js';
  const w = new Worker(new URL(`./rank-table-thread${ext}`, import.meta.url), { execArgv: threadExecArgv() });
  return new Promise<RankTable>((resolve, reject) => {
    const timer = setTimeout(() => {
      reject(new Error(`the o200k rank table was not built within ${BUILD_TIMEOUT_MS} ms`));
      void w.terminate();
    }, BUILD_TIMEOUT_MS);
    w.once('message', (table: RankTable) => {
      clearTimeout(timer);
      resolve(table);
    });
    w.once('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    w.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`the o200k rank table's thread exited (${code}) before answering`));
    });
  });
}
