// Idempotency-Key under concurrency on image submits: twenty submits with one key at once get one
// generation, one hold and the same 202; when the one that claimed the key is refused (429
// concurrency_limit, 402 insufficient_ink), every duplicate that waited for it gets the same status
// and error, marked as a replay, and nothing is held for any of them; the refusal binds nothing.
import t, { type Test } from 'tap';
import { holdClaims } from '../helpers/generations.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';
import { watchQueries } from '../helpers/query-watch.js';
import type { Reply } from '../helpers/gateway.js';
import { runToEnd, startImageHarness, walletOf } from './image-harness.js';

// The claim gate (holdClaims) keeps up to twenty INSERTs waiting on a lock: the pool needs room for
// them and a lock_timeout longer than the time it takes twenty submits to reach the claim.
const h = await startImageHarness(t, { config: { db: { poolMax: 40, lockTimeoutMs: 60_000 } } });
const pool = h.services.pool;
const ok = { model: 'image-1', prompt: 'a red kite over dunes' };
const COPIES = 20;
const check = (name: string, fn: (t: Test) => Promise<void>) =>
  t.test(name, async (t) => {
    await fn(t);
    await assertLedgerInvariant(t, pool);
  });
const holdsOf = async (accountId: string) => Number((await pool.query('SELECT count(*) AS n FROM requests WHERE account_id = $1', [accountId])).rows[0].n);
const generationsOf = async (accountId: string) =>
  Number((await pool.query('SELECT count(*) AS n FROM generations WHERE account_id = $1', [accountId])).rows[0].n);

/** COPIES submits with one key, lined up at the claim so that they race for it together. */
async function burst(t: Test, key: string, idemKey: string): Promise<Reply[]> {
  const gate = await holdClaims(pool);
  const claims = watchQueries(t, pool, (q) => q.text.includes('INSERT INTO idempotency_keys') && q.values?.[2] === idemKey);
  const replies = Array.from({ length: COPIES }, () => h.submit(key, ok, { 'idempotency-key': idemKey }));
  await claims.until(COPIES);
  claims.stop();
  await gate.release();
  return Promise.all(replies);
}

check(`${COPIES} submits with one key at once: one generation, one hold, the same 202 for all`, async (t) => {
  const { key, accountId } = await h.funded(100);
  const replies = await Promise.all(Array.from({ length: COPIES }, () => h.submit(key, ok, { 'idempotency-key': 'burst-202' })));
  t.same(
    replies.map((r) => r.status),
    Array(COPIES).fill(202),
    'every one 202: none 409, none refused',
  );
  t.equal(new Set(replies.map((r) => r.text)).size, 1, 'byte for byte the same body');
  t.equal(replies.filter((r) => r.headers['idempotent-replayed'] === undefined).length, 1, 'one original, the rest replays');
  t.equal(await generationsOf(accountId), 1, 'one generation');
  t.equal(await holdsOf(accountId), 1, 'one hold');
  const reserved = replies[0]!.json.ink_reserved;
  t.same(await walletOf(h, accountId), { balance: 100 - reserved, held: reserved, charged: 0 }, 'one hold of the price');
  await runToEnd(h, key, replies[0]!.json.id);
});

check(`${COPIES} submits lined up at the claim: still one generation and the same 202`, async (t) => {
  const { key, accountId } = await h.funded(100);
  const replies = await burst(t, key, 'burst-gated');
  t.same(
    replies.map((r) => r.status),
    Array(COPIES).fill(202),
  );
  t.equal(new Set(replies.map((r) => r.text)).size, 1);
  t.equal(await generationsOf(accountId), 1);
  t.equal(await holdsOf(accountId), 1);
  await runToEnd(h, key, replies[0]!.json.id);
});

/** Every reply is `status`/`code`; all but one are replays of it (same error, same Retry-After). */
function sameRefusal(t: Test, replies: Reply[], status: number, code: string): void {
  t.same(
    replies.map((r) => [r.status, r.json.error.code]),
    Array(COPIES).fill([status, code]),
    `every one ${status} ${code}: none 409`,
  );
  const original = replies.filter((r) => r.headers['idempotent-replayed'] === undefined);
  t.equal(original.length, 1, 'one refused itself, the others replay its answer');
  const { request_id: _first, ...error } = original[0]!.json.error;
  for (const r of replies) {
    const { request_id, ...rest } = r.json.error;
    t.same(rest, error, 'the same error (type, code, message, param)');
    t.equal(request_id, r.headers['x-request-id'], 'each answer names its own request');
    t.equal(r.headers['retry-after'], original[0]!.headers['retry-after'], 'the same Retry-After');
  }
}

check('the submit that claimed the key is refused 429 concurrency_limit: every duplicate gets that 429, nothing is held', async (t) => {
  const { key, accountId } = await h.funded(1_000);
  const max = h.config.jobs.maxRunningPerAccount;
  for (let i = 0; i < max; i++) t.equal((await h.submit(key, ok)).status, 202, 'filling the slots');
  const held = (await walletOf(h, accountId)).held;
  const replies = await burst(t, key, 'burst-429');
  sameRefusal(t, replies, 429, 'concurrency_limit');
  t.ok(Number(replies[0]!.headers['retry-after']) > 0);
  t.equal(await generationsOf(accountId), max, 'no generation for any of them');
  t.equal(await holdsOf(accountId), max, 'no hold for any of them');
  t.equal((await walletOf(h, accountId)).held, held);
  // The refusal binds nothing: once a slot is free the same key is admitted anew.
  await h.engine.tick();
  const later = await h.submit(key, ok, { 'idempotency-key': 'burst-429' });
  t.equal(later.status, 202, 'a later submit with the key is admitted');
  t.equal(later.headers['idempotent-replayed'], undefined);
  await h.engine.tick();
});

check('the submit that claimed the key is refused 402 insufficient_ink: every duplicate gets that 402; after a top-up the key admits', async (t) => {
  const { key, accountId } = await h.funded(2);
  const replies = await burst(t, key, 'burst-402');
  sameRefusal(t, replies, 402, 'insufficient_ink');
  t.equal(await holdsOf(accountId), 0, 'no hold');
  t.same(await walletOf(h, accountId), { balance: 2, held: 0, charged: 0 });
  await h.services.ledger.topUp(accountId, 10);
  const again = await h.submit(key, ok, { 'idempotency-key': 'burst-402' });
  t.equal(again.status, 202);
  t.equal(again.headers['idempotent-replayed'], undefined, 'admitted anew, not a replay of the 402');
  t.equal(await holdsOf(accountId), 1);
  await runToEnd(h, key, again.json.id);
});
