// Crash safety of the job runner. A gateway killed at any point leaves a row in some intermediate
// state under a lease that nobody renews; these tests plant exactly such rows (with the hold a real
// submit would have taken) and show that tick() recovers each one once its lease lapses: resumed,
// restarted, or failed and refunded, never left holding Ink, and the concurrency slot freed.
import { randomBytes } from 'node:crypto';
import t, { type Test } from 'tap';
import { silentLogger } from '../../src/util/log.js';
import { withTx } from '../../src/store/pool.js';
import { insertGeneration, type GenerationState } from '../../src/generations/store.js';
import { resultKey, VideoRunner } from '../../src/generations/video/run.js';
import { arkInput } from '../../src/generations/video/submit.js';
import { validateVideoRequest } from '../../src/generations/video/validate.js';
import { videoClipInk } from '../../src/catalog/pricing.js';
import { ArkClient } from '../../src/vendors/ark/client.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';
import { RENDER_MS, rowOf, runToEnd, startVideoHarness, walletOf } from './video-harness.js';

const h = await startVideoHarness(t);
const pool = h.services.pool;
const LEASE_MS = h.config.jobs.leaseMs;
const ark = new ArkClient({ baseUrl: h.sim.url, apiKey: h.sim.apiKey });
t.teardown(() => ark.close());
const check = (name: string, fn: (t: Test) => Promise<void>) =>
  t.test(name, async (t) => {
    await fn(t);
    await assertLedgerInvariant(t, pool);
  });

/**
 * A generation as a dead instance ("dead-instance") left it in `state`: hold taken and row committed
 * exactly as submit does, then moved to the state; its lease runs until now + leaseMs.
 */
async function plant(
  account: { accountId: string; keyId: string },
  state: GenerationState,
  opts: { prompt?: string; createTask?: boolean; idempotencyKey?: string } = {},
): Promise<{ id: string; hold: number; taskId?: string }> {
  const v = validateVideoRequest({ model: 'clip-2.0-fast', prompt: opts.prompt ?? 'planted' }, h.services.catalog);
  const hold = videoClipInk(v.model, v.request.resolution, v.request.duration, h.config.pricing.videoPriceSet);
  const id = 'vgen_' + randomBytes(12).toString('hex');
  const requestId = 'req_' + randomBytes(16).toString('hex');
  const now = h.sim.now();
  await withTx(pool, async (c) => {
    await h.services.ledger
      .using(c)
      .reserve({ requestId, accountId: account.accountId, keyId: account.keyId, product: 'video', model: v.model.id, holdInk: hold });
    await insertGeneration(c, {
      id,
      kind: 'video',
      accountId: account.accountId,
      keyId: account.keyId,
      requestId,
      model: v.model.id,
      request: v.request as unknown as Record<string, unknown>,
      priceSet: h.config.pricing.videoPriceSet,
      holdInk: hold,
      nowMs: now,
      owner: 'dead-instance',
      leaseMs: LEASE_MS,
    });
  });
  if (opts.idempotencyKey !== undefined) {
    await pool.query(
      `INSERT INTO idempotency_keys (key_id, product, idem_key, generation_id, claimed_until, created_at) VALUES ($1, 'video', $2, $3, $4, $4)`,
      [account.keyId, opts.idempotencyKey, id, new Date(now)],
    );
  }
  let taskId: string | undefined;
  if (opts.createTask || state === 'queued' || state === 'running') taskId = await ark.createTask(arkInput(v.request, v.model.vendorModel));
  if (state !== 'submitting') {
    await pool.query(`UPDATE generations SET state = $2, vendor_task_id = $3 WHERE id = $1`, [id, state, state === 'creating' ? null : taskId]);
  }
  return { id, hold, taskId };
}

const openHolds = async (accountId: string) =>
  Number((await pool.query(`SELECT count(*) AS n FROM requests WHERE account_id = $1 AND hold_state = 'open'`, [accountId])).rows[0].n);

check('a live lease is respected: nothing is taken before it lapses', async (t) => {
  const acc = await h.funded(1_000);
  const p = await plant(acc, 'submitting');
  h.advance(LEASE_MS - 1_000);
  await h.engine.tick();
  const row = await rowOf(h, p.id);
  t.equal(row.state, 'submitting');
  t.equal(row.lease_owner, 'dead-instance');
  t.equal(row.claims, 0);
  h.advance(2_000);
  await h.engine.tick();
  t.not((await rowOf(h, p.id)).state, 'submitting', 'taken once the lease lapsed');
});

check('killed after commit, before the vendor call, with an Idempotency-Key: the task is created now, once, and the generation completes', async (t) => {
  const acc = await h.funded(1_000);
  const p = await plant(acc, 'submitting', { idempotencyKey: 'crash-1' });
  const creates = h.sim.creates.length;
  await h.step(LEASE_MS + 1_000);
  let row = await rowOf(h, p.id);
  t.equal(row.state, 'queued', 'resubmitted: the vendor was never called before, so no duplicate');
  t.equal(h.sim.creates.length, creates + 1);
  t.ok(row.vendor_task_id);
  t.equal(row.lease_owner, null);
  const done = await runToEnd(h, acc.key, p.id);
  t.equal(done.status, 'succeeded');
  t.equal(done.ink_charged, p.hold);
  row = await rowOf(h, p.id);
  t.equal(row.hold_state, 'settled');
  t.equal(h.sim.creates.length, creates + 1, 'still one vendor task');
});

check('killed after commit, before the vendor call, without a key: nobody can find it, so it is refunded, not started', async (t) => {
  const acc = await h.funded(1_000);
  const p = await plant(acc, 'submitting');
  const creates = h.sim.creates.length;
  await h.step(LEASE_MS + 1_000);
  const g = (await h.get(acc.key, p.id)).json;
  t.equal(g.status, 'failed');
  t.equal(g.error.code, 'provider_failed');
  t.equal(h.sim.creates.length, creates, 'no vendor task');
  t.same(await walletOf(h, acc.accountId), { balance: 1_000, held: 0, charged: 0 });
});

check('killed during the vendor call (creating, task maybe created): failed provider_failed and refunded, no second task', async (t) => {
  const acc = await h.funded(1_000);
  const p = await plant(acc, 'creating', { createTask: true }); // the vendor did create it; we never learned its id
  const creates = h.sim.creates.length;
  await h.step(LEASE_MS + 1_000);
  const g = (await h.get(acc.key, p.id)).json;
  t.equal(g.status, 'failed');
  t.equal(g.error.code, 'provider_failed');
  t.equal(g.ink_charged, 0);
  t.equal(h.sim.creates.length, creates, 'no second vendor task');
  t.same(await walletOf(h, acc.accountId), { balance: 1_000, held: 0, charged: 0 }, 'the whole hold refunded');
});

check('killed mid-poll (queued/running under a dead lease): resumed and finished by another instance', async (t) => {
  const acc = await h.funded(1_000);
  const q = await plant(acc, 'queued');
  const r = await plant(acc, 'running');
  await pool.query('UPDATE generations SET next_poll_at = created_at WHERE id = ANY($1)', [[q.id, r.id]]);
  const other = await h.engineAs('test-instance-b');
  h.advance(LEASE_MS + 1_000);
  t.equal(await other.engine.tick(), 2, 'instance b takes both');
  for (const p of [q, r]) {
    const done = await runToEnd(h, acc.key, p.id);
    t.equal(done.status, 'succeeded');
    t.equal((await rowOf(h, p.id)).hold_state, 'settled');
  }
  t.equal(await openHolds(acc.accountId), 0);
});

check('killed mid-download: the result is fetched again, stored under the same key, settled once', async (t) => {
  const acc = await h.funded(1_000);
  const p = await plant(acc, 'running');
  // The dead instance had written part of the result already (a later put replaces it whole).
  await h.deps.media.put(resultKey(p.id), Buffer.from('partial'), 'video/mp4');
  h.advance(RENDER_MS + 1_000); // the vendor has finished
  await pool.query('UPDATE generations SET next_poll_at = $2 WHERE id = $1', [p.id, new Date(h.sim.now())]);
  h.advance(LEASE_MS);
  t.equal(await h.engine.tick(), 1);
  const row = await rowOf(h, p.id);
  t.equal(row.state, 'succeeded');
  t.equal(row.hold_state, 'settled');
  const obj = await h.deps.media.open(resultKey(p.id));
  t.ok(obj);
  t.equal(obj!.sizeBytes, row.media_size_bytes, 'the stored file is the full download');
  t.ok(obj!.sizeBytes > 'partial'.length);
  obj!.stream.destroy();
  t.equal(Number((await pool.query(`SELECT count(*) AS n FROM ledger_journal WHERE request_id = $1 AND kind = 'settle'`, [row.request_id])).rows[0].n), 1);
});

check('a stuck generation frees its concurrency slot once recovered', async (t) => {
  const acc = await h.funded(1_000);
  await plant(acc, 'creating');
  await plant(acc, 'creating');
  const ok = { model: 'clip-2.0-fast', prompt: 'x' };
  const refused = await h.submit(acc.key, ok);
  t.equal(refused.status, 429, 'two stuck rows hold both slots');
  t.equal(refused.json.error.code, 'concurrency_limit');
  await h.step(LEASE_MS + 1_000);
  t.equal(await openHolds(acc.accountId), 0, 'no hold stays open');
  t.equal((await h.submit(acc.key, ok)).status, 202);
});

check('two instances ticking at once never work the same row twice', async (t) => {
  const acc = await h.funded(10_000);
  const planted = await Promise.all(Array.from({ length: 6 }, () => plant(acc, 'queued')));
  await pool.query('UPDATE generations SET next_poll_at = created_at WHERE id = ANY($1)', [planted.map((p) => p.id)]);
  const b = await h.engineAs('test-instance-c');
  h.advance(LEASE_MS + 1_000);
  const [na, nb] = await Promise.all([h.engine.tick(), b.engine.tick()]);
  // (Rows left due by earlier tests may be taken too; the planted ones must each be taken exactly once.)
  t.ok(na + nb >= 6, `all planted rows taken (${na} + ${nb})`);
  for (const p of planted) {
    const row = await rowOf(h, p.id);
    t.equal(row.claims, 1);
    t.equal(row.polls, 1);
    t.equal(h.sim.tasks.get(p.taskId!)!.gets, 1, 'the vendor was asked once per task');
  }
  for (const p of planted) await runToEnd(h, acc.key, p.id);
  t.equal(await openHolds(acc.accountId), 0);
});

check('a move by an instance that lost its lease changes nothing (no refund, no state change)', async (t) => {
  const acc = await h.funded(1_000);
  const p = await plant(acc, 'queued');
  const stale = await rowOf(h, p.id); // what the dead instance holds in memory
  const b = await h.engineAs('test-instance-d');
  await pool.query('UPDATE generations SET next_poll_at = created_at WHERE id = $1', [p.id]);
  h.advance(LEASE_MS + 1_000);
  // b has just claimed it (the poll runs inside tick; the vendor is still queued, so it reschedules)
  t.equal(await b.engine.tick(), 1);
  await pool.query(`UPDATE generations SET lease_owner = 'test-instance-d', lease_expires_at = $2 WHERE id = $1`, [p.id, new Date(h.sim.now() + LEASE_MS)]);
  const late = new VideoRunner(h.services, { ...h.deps, owner: 'dead-instance' });
  await late.fail(silentLogger, stale as never, 'provider_failed', 'late move');
  const row = await rowOf(h, p.id);
  t.equal(row.state, 'running', 'still the state instance d recorded, not failed');
  t.equal(row.error_code, null);
  t.equal(row.hold_state, 'open', 'the hold was not refunded by the instance without the lease');
  await pool.query('UPDATE generations SET lease_owner = NULL, lease_expires_at = NULL WHERE id = $1', [p.id]);
  await runToEnd(h, acc.key, p.id);
  t.equal((await rowOf(h, p.id)).hold_state, 'settled');
});
