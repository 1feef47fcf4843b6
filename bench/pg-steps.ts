// Server-side cost of the text lanes' statements, from one client in a tight loop (no gateway):
// the floor under what each step can cost inside the gateway. Wall time per call and the Postgres
// backend's CPU per item (read from /proc, so only when Postgres runs on this machine).
//   node --import ./test/loader/register.js bench/pg-steps.ts
import { readFileSync } from 'node:fs';
import { benchDatabaseUrl } from './lib/env.js';
import { percentile } from './lib/load.js';
import { createPool } from '../src/store/pool.js';
import { migrate } from '../src/store/migrate.js';
import { createAccount, createKey, findLiveKey } from '../src/accounts/accounts.js';
import { hashKey } from '../src/accounts/api-key.js';
import { Ledger } from '../src/ledger/ledger.js';
import { newRequestId } from '../src/server/http-context.js';

const db = await benchDatabaseUrl();
const schema = 'bench_pgs_' + process.pid;
const pool = createPool({ url: db.url, schema, poolMax: 1, connectionTimeoutMs: 1000, queryTimeoutMs: 2000, lockTimeoutMs: 500, statementTimeoutMs: 5000 });
await migrate(pool, schema);
const ledger = new Ledger(pool);
const acc = await createAccount(pool, { name: 'b', planId: 'pro' });
await ledger.topUp(acc.id, 1_000_000_000, 'b');
const key = await createKey(pool, { accountId: acc.id, name: 'b' });
const h = hashKey(key.key);
const pid = (await pool.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
const ticks = (): number => {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return Number(f[11]) + Number(f[12]);
  } catch {
    return NaN;
  }
};
async function time(label: string, fn: () => Promise<unknown>, count = 3000, itemsPerCall = 1): Promise<void> {
  for (let i = 0; i < 300; i++) await fn();
  const a = new Float64Array(count);
  const t0 = ticks();
  for (let i = 0; i < count; i++) {
    const t = performance.now();
    await fn();
    a[i] = performance.now() - t;
  }
  const cpuUs = ((ticks() - t0) * 10_000) / (count * itemsPerCall);
  a.sort();
  console.log(`${label.padEnd(34)} p50 ${percentile(a, 50).toFixed(3)}  p99 ${percentile(a, 99).toFixed(3)} ms   backend CPU ${cpuUs.toFixed(0)} µs/item`);
}
const input = (id: string) => ({ requestId: id, accountId: acc.id, keyId: key.id, product: 'messages' as const, model: 'sonnet', holdInk: 100 });
await time('select 1', () => pool.query('SELECT 1'));
await time('findLiveKey', () => findLiveKey(pool, h));
let id = '';
await time('reserve (one)', async () => {
  id = newRequestId();
  await ledger.reserve(input(id));
});
const open: string[] = [];
await time(
  'reserve (one), kept for settle',
  async () => {
    const i = newRequestId();
    open.push(i);
    await ledger.reserve(input(i));
  },
  3000,
);
let k = 0;
await time('settle (one)', () => ledger.settle(open[k++]!, 10, { usage: { inputTokens: 10, outputTokens: 20 } }), 3000);
for (const batch of [10, 30]) {
  const ids: string[] = [];
  await time(
    `reserve x${batch} (group commit)`,
    async () => {
      const b = Array.from({ length: batch }, () => newRequestId());
      ids.push(...b);
      await Promise.all(b.map((x) => ledger.reserve(input(x))));
    },
    300,
    batch,
  );
  let j = 0;
  await time(
    `settle x${batch} (group commit)`,
    async () => {
      await Promise.all(ids.slice(j, j + batch).map((x) => ledger.settle(x, 10, { usage: { inputTokens: 10, outputTokens: 20 } })));
      j += batch;
    },
    300,
    batch,
  );
}
console.log('batches', JSON.stringify(ledger.batchStats()));
await ledger.close();
await pool.query(`DROP SCHEMA ${schema} CASCADE`);
await pool.end();
await db.stop();
