// The o200k rank table's cache on disk: what is read back is the table built from the rank list,
// array for array; a file from another rank list, cut short or altered is refused (token counts size
// holds, so a wrong table must never be used); a missing file is built and written once.
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { buildRankTableOffThread, type RankTable } from '../../src/lanes/responses/rank-table.js';
import { loadRankTable, readRankCache, writeRankCache } from '../../src/lanes/responses/rank-table-cache.js';

const dir = mkdtempSync(join(tmpdir(), 'inkgate-ranks-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const built = await buildRankTableOffThread();
const listHash = randomBytes(32);

const same = (t: Test, a: RankTable, b: RankTable) => {
  t.ok(Buffer.from(a.pool).equals(Buffer.from(b.pool)), 'pool');
  for (const k of ['tokenOffset', 'tokenLength', 'slots'] as const) t.ok(Buffer.from(a[k].buffer).equals(Buffer.from(b[k].buffer)), k);
};

t.test('written and read back, the table is the one built from the rank list', async (t) => {
  const file = join(dir, 'ranks.bin');
  writeRankCache(file, listHash, built);
  const back = readRankCache(file, listHash);
  t.ok(back, 'read back');
  same(t, back!, built);
  t.ok(back!.pool.buffer instanceof SharedArrayBuffer, 'in shared memory, as the thread hands it over');
  t.ok(statSync(file).size < 4 * 1024 * 1024, `${statSync(file).size} bytes on disk`);
});

t.test('another rank list, a cut file, an altered byte, a missing file: refused', async (t) => {
  const file = join(dir, 'ranks.bin');
  writeRankCache(file, listHash, built);
  const good = readFileSync(file);
  t.equal(readRankCache(file, randomBytes(32)), undefined, 'another rank list');
  writeFileSync(file, good.subarray(0, good.length - 1));
  t.equal(readRankCache(file, listHash), undefined, 'one byte short');
  const altered = Buffer.from(good);
  altered[altered.length - 100]! ^= 1;
  writeFileSync(file, altered);
  t.equal(readRankCache(file, listHash), undefined, 'one bit flipped in the pool');
  writeFileSync(file, Buffer.from('not a rank table at all'));
  t.equal(readRankCache(file, listHash), undefined, 'not ours');
  t.equal(readRankCache(join(dir, 'none.bin'), listHash), undefined, 'missing');
});

t.test('a missing cache is built and written once; the next load reads it', async (t) => {
  const file = join(dir, 'nested', 'o200k-ranks.bin');
  const first = await loadRankTable(file);
  same(t, first, built);
  const written = statSync(file).mtimeMs;
  const second = await loadRankTable(file);
  same(t, second, built);
  t.equal(statSync(file).mtimeMs, written, 'read, not written again');
});
