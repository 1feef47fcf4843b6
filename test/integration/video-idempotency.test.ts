// Idempotency-Key on video submits: replay of the original 202 (one hold, one vendor task), whatever the body; was 422 on a
// different body, a duplicate during the first one's admission waiting for its answer (409 only
// when the wait is off, after it otherwise), 20 duplicates at once, 20 duplicates of a submit the
// vendor refuses (each gets its 502), the 24-hour window, and a key freed by a submit that ended in an error.
import t, { type Test } from 'tap';
import { holdClaims, holdNextCreate } from '../helpers/generations.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';
import { watchQueries } from '../helpers/query-watch.js';
import { startVideoHarness, walletOf } from './video-harness.js';

const h = await startVideoHarness(t);
const pool = h.services.pool;
const check = (name: string, fn: (t: Test) => Promise<void>) =>
  t.test(name, async (t) => {
    await fn(t);
    await assertLedgerInvariant(t, pool);
  });
const body = { model: 'clip-2.0-fast', prompt: 'a paper boat', metadata: { b: 2, a: 1 } };
const holdsOf = async (accountId: string) => Number((await pool.query('SELECT count(*) AS n FROM requests WHERE account_id = $1', [accountId])).rows[0].n);

check('same key, same body: the original 202 body with Idempotent-Replayed, no second hold or task', async (t) => {
  const { key, accountId } = await h.funded(1_000);
  const creates = h.sim.creates.length;
  const first = await h.submit(key, body, { 'idempotency-key': 'order-17:v1' });
  t.equal(first.status, 202);
  t.equal(first.headers['idempotent-replayed'], undefined, 'the first answer is not a replay');
  await h.step(30_000); // the generation moves on: the replay still shows the original body
  t.equal((await h.get(key, first.json.id)).json.status, 'running');
  const again = await h.submit(key, { metadata: { a: 1, b: 2 }, prompt: 'a paper boat', model: 'clip-2.0-fast' }, { 'idempotency-key': 'order-17:v1' });
  t.equal(again.status, 202);
  t.equal(again.headers['idempotent-replayed'], 'true');
  t.equal(again.text, first.text, 'byte for byte the original 202 body (key order of the JSON body does not matter)');
  t.equal(h.sim.creates.length, creates + 1, 'one vendor task');
  t.equal(await holdsOf(accountId), 1, 'one hold');
  t.equal((await walletOf(h, accountId)).held, first.json.ink_reserved);
});

check('same key, different body: the original 202 (docs/api/video.md: a new intent needs a new key)', async (t) => {
  const { key, accountId } = await h.funded(1_000);
  const first = await h.submit(key, body, { 'idempotency-key': 'k-1' });
  t.equal(first.status, 202);
  const creates = h.sim.creates.length;
  const other = await h.submit(key, { ...body, duration: 6 }, { 'idempotency-key': 'k-1' });
  t.equal(other.status, 202);
  t.equal(other.headers['idempotent-replayed'], 'true');
  t.equal(other.text, first.text, 'byte for byte the first answer');
  const invalid = await h.submit(key, { ...body, duration: 99 }, { 'idempotency-key': 'k-1' });
  t.equal(invalid.status, 202, 'a bound key answers before validation');
  t.equal(invalid.text, first.text);
  t.equal(h.sim.creates.length, creates, 'no second vendor task');
  t.equal(await holdsOf(accountId), 1, 'one hold');
});

check('keys are per API key: the same key on another API key is a new submit', async (t) => {
  const a = await h.funded(1_000);
  const b = await h.funded(1_000);
  const ra = await h.submit(a.key, body, { 'idempotency-key': 'shared' });
  const rb = await h.submit(b.key, body, { 'idempotency-key': 'shared' });
  t.equal(ra.status, 202);
  t.equal(rb.status, 202);
  t.not(ra.json.id, rb.json.id);
  t.equal(rb.headers['idempotent-replayed'], undefined);
});

check('a duplicate while the first is still being admitted waits for it and gets its 202 (another body too)', async (t) => {
  const { key, accountId } = await h.funded(1_000);
  const create = holdNextCreate(h.sim);
  const first = h.submit(key, body, { 'idempotency-key': 'slow' });
  await create.entered; // the first submit is inside the vendor create call
  // Every look at the key: a waiting duplicate looks again and again.
  const looks = watchQueries(t, pool, (q) => q.text.includes('FROM idempotency_keys k LEFT JOIN generations') && q.values?.[2] === 'slow');
  const dupP = h.submit(key, body, { 'idempotency-key': 'slow' });
  const diffP = h.submit(key, { ...body, prompt: 'other' }, { 'idempotency-key': 'slow' });
  // Four looks for two duplicates: at least one has looked more than once, so it is waiting.
  await looks.until(4);
  looks.stop();
  create.release();
  const [r1, dup, diff] = await Promise.all([first, dupP, diffP]);
  t.equal(r1.status, 202);
  t.equal(dup.status, 202, "the duplicate got the first submit's answer");
  t.equal(dup.headers['idempotent-replayed'], 'true');
  t.equal(dup.text, r1.text, 'byte for byte');
  t.equal(diff.status, 202, 'so did the one with another body');
  t.equal(diff.text, r1.text);
  t.equal(await holdsOf(accountId), 1);
});

t.test('with jobs.idempotencyWaitMs 0 a duplicate during admission answers 409 idempotency_key_in_use at once', async (t) => {
  const h0 = await startVideoHarness(t, { config: { jobs: { idempotencyWaitMs: 0 } } });
  const { key, accountId } = await h0.funded(1_000);
  const create = holdNextCreate(h0.sim);
  const first = h0.submit(key, body, { 'idempotency-key': 'slow0' });
  await create.entered;
  const dup = await h0.submit(key, body, { 'idempotency-key': 'slow0' });
  t.equal(dup.status, 409);
  t.equal(dup.json.error.code, 'idempotency_key_in_use');
  create.release();
  t.equal((await first).status, 202);
  const replay = await h0.submit(key, body, { 'idempotency-key': 'slow0' });
  t.equal(replay.headers['idempotent-replayed'], 'true');
  t.equal(Number((await h0.services.pool.query('SELECT count(*) AS n FROM requests WHERE account_id = $1', [accountId])).rows[0].n), 1);
  await assertLedgerInvariant(t, h0.services.pool);
});

check('20 duplicates at once: one hold, one vendor task, every answer the same generation', async (t) => {
  const { key, accountId } = await h.funded(1_000);
  const creates = h.sim.creates.length;
  const replies = await Promise.all(Array.from({ length: 20 }, () => h.submit(key, body, { 'idempotency-key': 'burst-1' })));
  t.same(
    replies.map((r) => r.status),
    Array(20).fill(202),
    'every duplicate waited for the first and got 202',
  );
  t.equal(replies.filter((r) => r.headers['idempotent-replayed'] === undefined).length, 1, 'exactly one original');
  t.equal(new Set(replies.map((r) => r.json.id)).size, 1, 'every 202 names the same generation');
  t.equal(new Set(replies.map((r) => r.text)).size, 1, 'byte for byte the same body');
  t.equal(h.sim.creates.length, creates + 1, 'one vendor task');
  t.equal(await holdsOf(accountId), 1, 'one hold');
});

check('a submit that ended in an error binds no key: the same key works after the fix', async (t) => {
  const { key, accountId } = await h.funded(1_000);
  const refused = await h.submit(key, { ...body, prompt: 'x [[sim:refuse]]' }, { 'idempotency-key': 'retry-me' });
  t.equal(refused.status, 502);
  const invalid = await h.submit(key, { ...body, reference_image_urls: [h.ref('/missing.png')] }, { 'idempotency-key': 'retry-me' });
  t.equal(invalid.json.error.code, 'invalid_url');
  const poor = await h.funded(1);
  t.equal((await h.submit(poor.key, body, { 'idempotency-key': 'retry-me' })).status, 402);
  t.equal((await h.submit(poor.key, body, { 'idempotency-key': 'retry-me' })).status, 402, 'a 402 did not bind the key');
  const ok = await h.submit(key, body, { 'idempotency-key': 'retry-me' });
  t.equal(ok.status, 202);
  t.equal(ok.headers['idempotent-replayed'], undefined);
  t.equal((await walletOf(h, accountId)).held, ok.json.ink_reserved);
});

check('the replay window is 24 hours', async (t) => {
  const { key } = await h.funded(1_000);
  const first = await h.submit(key, body, { 'idempotency-key': 'day' });
  h.advance(23 * 3600_000);
  const within = await h.submit(key, body, { 'idempotency-key': 'day' });
  t.equal(within.headers['idempotent-replayed'], 'true');
  t.equal(within.json.id, first.json.id);
  h.advance(3600_000 + 1000);
  await h.engine.tick(); // the first one finishes meanwhile
  const later = await h.submit(key, body, { 'idempotency-key': 'day' });
  t.equal(later.status, 202);
  t.equal(later.headers['idempotent-replayed'], undefined, 'after 24 hours the key starts a new generation');
  t.not(later.json.id, first.json.id);
  h.advance(25 * 3600_000);
  const swept = await h.engine.sweep();
  t.ok(swept.idempotencyKeysDropped >= 1, 'old claims are swept');
});

t.test('20 duplicates of a submit the vendor refuses: each gets the same 502 provider_error, one task tried, the one hold released', async (t) => {
  // The claim gate keeps twenty INSERTs waiting on a lock: room in the pool, and a lock_timeout longer than the line-up.
  const hg = await startVideoHarness(t, { config: { db: { poolMax: 40, lockTimeoutMs: 60_000 } } });
  const gp = hg.services.pool;
  const { key, accountId } = await hg.funded(1_000);
  const creates = hg.sim.creates.length;
  const refusedBody = { ...body, prompt: 'x [[sim:refuse]]' };
  const gate = await holdClaims(gp);
  const claims = watchQueries(t, gp, (q) => q.text.includes('INSERT INTO idempotency_keys') && q.values?.[2] === 'refused-burst');
  const pending = Array.from({ length: 20 }, () => hg.submit(key, refusedBody, { 'idempotency-key': 'refused-burst' }));
  await claims.until(20);
  claims.stop();
  await gate.release();
  const replies = await Promise.all(pending);
  t.same(
    replies.map((r) => [r.status, r.json.error.code]),
    Array(20).fill([502, 'provider_error']),
    'every one the refusal: none 409',
  );
  t.equal(replies.filter((r) => r.headers['idempotent-replayed'] === 'true').length, 19, 'nineteen replays of the one refused');
  t.equal(new Set(replies.map((r) => r.json.error.message)).size, 1, 'the same message');
  t.equal(hg.sim.creates.length, creates + 1, 'one vendor create');
  const holds = (await gp.query('SELECT hold_state FROM requests WHERE account_id = $1', [accountId])).rows;
  t.same(holds, [{ hold_state: 'released' }], 'one hold, released');
  t.equal((await walletOf(hg, accountId)).held, 0);
  await assertLedgerInvariant(t, gp);
});

t.test('a duplicate waits for a first that stays unfinished, then 409 idempotency_key_in_use', async (t) => {
  // The wait is the behaviour under test: 300 ms, so the duplicate gives up while the first is held in the vendor call.
  const hw = await startVideoHarness(t, { config: { jobs: { idempotencyWaitMs: 300 } } });
  const { key } = await hw.funded(1_000);
  const create = holdNextCreate(hw.sim);
  const first = hw.submit(key, body, { 'idempotency-key': 'stuck' });
  await create.entered;
  const startedMs = performance.now();
  const dup = await hw.submit(key, body, { 'idempotency-key': 'stuck' });
  t.same([dup.status, dup.json.error.code, dup.json.error.param], [409, 'idempotency_key_in_use', 'Idempotency-Key']);
  t.ok(performance.now() - startedMs >= 300, 'answered only after the wait');
  create.release();
  t.equal((await first).status, 202);
  await assertLedgerInvariant(t, hw.services.pool);
});
