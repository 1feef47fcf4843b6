// The o200k rank table kept on disk between starts. Building it means loading gpt-tokenizer's rank
// list on a thread (rank-table.ts): a third of a second of CPU, and on Node 24 about 170 MB of RSS
// the process keeps after the thread ended (the thread's allocator arenas are not handed back). The
// table's two primary arrays (every token's bytes, each rank's length: about 2.9 MB) are written
// once to node_modules/.cache/inkgate; every later start reads them and rebuilds the offsets and
// hash slots in a few milliseconds. The file names the exact rank list it came from (a hash of the
// module's bytes) and carries a hash of its own content: a file from another version, cut short or
// altered is ignored and the table built again, since token counts size holds. Writing is best
// effort (a read-only install builds on every start, as before).
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PROJECT_ROOT } from '../../config/config.js';
import { buildRankTableOffThread, indexRankTable, type RankTable } from './rank-table.js';

const MAGIC = Buffer.from('IGRANKS1');
/** magic, rank count, pool bytes, the rank list's hash, the payload's hash. */
const HEADER_BYTES = MAGIC.length + 4 + 4 + 32 + 32;
/** o200k has 200,019 ranks and a 1.4 MB pool; a header claiming far more is not ours. */
const MAX_RANKS = 1_000_000;
const MAX_POOL_BYTES = 64 * 1024 * 1024;

export const RANK_CACHE_FILE = join(PROJECT_ROOT, 'node_modules', '.cache', 'inkgate', 'o200k-ranks.bin');

/** A hash of the rank list module the table is built from: the cache is good only for these exact bytes. */
function rankListHash(): Buffer {
  const file = fileURLToPath(import.meta.resolve('gpt-tokenizer/bpeRanks/o200k_base'));
  return createHash('sha256').update(readFileSync(file)).digest();
}

/** The table from `file`, or undefined when it is missing, from another rank list, or damaged. */
export function readRankCache(file: string, listHash: Buffer): RankTable | undefined {
  let bytes: Buffer;
  try {
    bytes = readFileSync(file);
  } catch {
    return undefined;
  }
  if (bytes.length < HEADER_BYTES || !bytes.subarray(0, MAGIC.length).equals(MAGIC)) return undefined;
  const rankCount = bytes.readUInt32LE(MAGIC.length);
  const poolBytes = bytes.readUInt32LE(MAGIC.length + 4);
  if (rankCount > MAX_RANKS || poolBytes > MAX_POOL_BYTES || bytes.length !== HEADER_BYTES + rankCount * 4 + poolBytes) return undefined;
  if (!bytes.subarray(MAGIC.length + 8, MAGIC.length + 40).equals(listHash)) return undefined;
  const payload = bytes.subarray(HEADER_BYTES);
  if (
    !createHash('sha256')
      .update(payload)
      .digest()
      .equals(bytes.subarray(MAGIC.length + 40, HEADER_BYTES))
  )
    return undefined;
  // Copied into shared memory, as a table built on the thread is (token counting may cross threads).
  const tokenLength = new Int32Array(new SharedArrayBuffer(rankCount * 4));
  new Uint8Array(tokenLength.buffer).set(payload.subarray(0, rankCount * 4));
  const pool = new Uint8Array(new SharedArrayBuffer(poolBytes));
  pool.set(payload.subarray(rankCount * 4));
  try {
    return indexRankTable(pool, tokenLength);
  } catch {
    return undefined; // lengths that do not add up to the pool
  }
}

/** Writes the table's primary arrays to `file` (aside, then renamed: a reader never sees half a file). */
export function writeRankCache(file: string, listHash: Buffer, table: RankTable): void {
  const lengths = Buffer.from(table.tokenLength.buffer, table.tokenLength.byteOffset, table.tokenLength.byteLength);
  const pool = Buffer.from(table.pool.buffer, table.pool.byteOffset, table.pool.byteLength);
  const header = Buffer.alloc(HEADER_BYTES);
  MAGIC.copy(header, 0);
  header.writeUInt32LE(table.tokenLength.length, MAGIC.length);
  header.writeUInt32LE(pool.length, MAGIC.length + 4);
  listHash.copy(header, MAGIC.length + 8);
  createHash('sha256')
    .update(lengths)
    .update(pool)
    .digest()
    .copy(header, MAGIC.length + 40);
  mkdirSync(dirname(file), { recursive: true });
  const aside = `${file}.${process.pid}.tmp`;
  writeFileSync(aside, Buffer.concat([header, lengths, pool]));
  renameSync(aside, file);
}

/** The o200k table: from the cache when it holds this rank list's, otherwise built on a thread and cached. */
export async function loadRankTable(file: string = RANK_CACHE_FILE): Promise<RankTable> {
  const listHash = rankListHash();
  const cached = readRankCache(file, listHash);
  if (cached) return cached;
  const table = await buildRankTableOffThread();
  try {
    writeRankCache(file, listHash, table);
  } catch {
    // a read-only install: the next start builds again
  }
  return table;
}
