// The token-count pool's worker: a replaced worker's late 'exit' must not fail its successor's jobs.
import t from 'tap';
import type { Worker } from 'node:worker_threads';
import { TokenCountPool } from '../../src/lanes/responses/token-count-pool.js';
import { countTexts } from '../../src/lanes/responses/token-count.js';

t.test("a worker that failed and is replaced does not fail the next worker's jobs when it exits", async (t) => {
  const pool = new TokenCountPool();
  t.same(await pool.count(['warm'], [], 4), countTexts(['warm'], []));
  const first = (pool as unknown as { worker: Worker }).worker;
  const exited = new Promise<void>((resolve) => first.once('exit', () => resolve()));
  const failed = pool.count(['pending'], [], 7);
  first.emit('error', new Error('boom'));
  await t.rejects(failed, /boom/);
  // The next job starts a fresh worker; the first one's exit arrives while it is still loading.
  const next = pool.count(['hello world'], ['hold'], 15);
  await exited;
  t.same(await next, countTexts(['hello world'], ['hold']));
  t.not((pool as unknown as { worker: Worker }).worker, first);
});
