// Escrow leases and the write-behind journal (src/ledger/escrow.ts) on a real Postgres: holds from
// memory, exactness at the edge across several instances, key caps, recalls, recovery of a lost
// instance, late flushes, the journal's bound, durability modes and shutdown. The ledger invariant
// is checked after every test.
import t, { type Test } from 'tap';
import { readAccountObject } from '../../src/accounts/routes.js';
import { revokeKey } from '../../src/accounts/accounts.js';
import { loadConfig, type Config, type DeepPartial } from '../../src/config/config.js';
import { isApiError } from '../../src/errors.js';
import { Escrow } from '../../src/ledger/escrow.js';
import { Ledger, type ReserveInput } from '../../src/ledger/ledger.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { assertLedgerInvariant, newRequestId, seedAccount, walletOf } from '../helpers/ledger-invariant.js';

type LedgerOverrides = DeepPartial<Config['ledger']>;

async function instance(
  t: Test,
  db: TestDb,
  name: string,
  over: LedgerOverrides = {},
  opts: { now?: () => Date; onKeyChanged?: (k: string) => void; noClose?: boolean } = {},
): Promise<Escrow> {
  const cfg = loadConfig({}, { ledger: { ...over, lease: { heartbeatMs: 60_000, ...(over.lease ?? {}) } } as Config['ledger'] });
  const ledger = new Ledger(db.pool);
  const e = await Escrow.start({
    pool: db.pool,
    ledger,
    config: cfg.ledger,
    instanceId: `${name}-${db.schema}`,
    bus: { dbUrl: db.url, dbSchema: db.schema, connectTimeoutMs: 2000, redis: { ...cfg.redis, url: null } },
    log: () => undefined,
    now: opts.now,
    onKeyChanged: opts.onKeyChanged,
  });
  if (!opts.noClose) {
    t.teardown(async () => {
      await e.close();
      await ledger.close();
    });
  }
  return e;
}

const input = (accountId: string, keyId: string, holdInk: number): ReserveInput => ({
  requestId: newRequestId(),
  accountId,
  keyId,
  product: 'messages',
  model: 'sonnet',
  holdInk,
});

/** Counts the statements sent on the pool while `fn` runs. */
async function statementsDuring(db: TestDb, fn: () => Promise<void>): Promise<number> {
  const pool = db.pool as unknown as { query: (...a: unknown[]) => unknown };
  const orig = pool.query;
  let n = 0;
  pool.query = (...a: unknown[]) => {
    n++;
    return orig.apply(db.pool, a);
  };
  try {
    await fn();
  } finally {
    pool.query = orig;
  }
  return n;
}

const tally = (xs: string[]): Record<string, number> => {
  const out: Record<string, number> = {};
  for (const x of xs) out[x] = (out[x] ?? 0) + 1;
  return out;
};

const code = (e: unknown): string => (isApiError(e) ? e.code : `thrown: ${(e as Error).message}`);

t.test('holds and settlements come from the lease in memory; one flush writes them; views agree', async (t) => {
  const db = await testDb(t);
  const e = await instance(t, db, 'a');
  const { accountId, keyIds } = await seedAccount(db.pool, { grantInk: 1000, paygInk: 9000 });
  const key = keyIds[0]!;

  const first = input(accountId, key, 50);
  const h1 = await e.reserve(first);
  t.equal(h1.grantInk, 50, 'grant first');
  t.equal(e.stats.takes, 1, 'the first hold took a lease');

  const ids: string[] = [];
  const sent = await statementsDuring(db, async () => {
    for (let i = 0; i < 5; i++) {
      const inp = input(accountId, key, 50);
      await e.reserve(inp);
      ids.push(inp.requestId);
      const s = await e.settle(inp.requestId, 7 + i, { usage: { inputTokens: 10, outputTokens: i } });
      t.same(s, { resolved: true, chargedInk: 7 + i, releasedInk: 50 - 7 - i, expiredInk: 0 });
    }
  });
  t.equal(sent, 0, 'five holds and settlements sent nothing to Postgres');
  const over = await e.settle(first.requestId, 80);
  t.equal(over.resolved && over.chargedInk, 50, 'a charge above the hold is capped at the hold');

  t.ok(await e.journal.flushAll(5000), 'flushed');
  const rows = await db.pool.query(`SELECT id, hold_state, charged_ink, lease_id, leased, usage FROM requests WHERE account_id = $1 ORDER BY created_at`, [
    accountId,
  ]);
  t.equal(rows.rows.length, 6, 'one row per request');
  t.ok(rows.rows.every((r) => r.hold_state === 'settled' && r.lease_id !== null && r.leased === false));
  t.same(rows.rows.find((r) => r.id === ids[2])!.usage, { input_tokens: 10, output_tokens: 2 }, 'usage as reported');
  const charged = 50 + 7 + 8 + 9 + 10 + 11;
  const w = await walletOf(db.pool, accountId);
  t.equal(w.charged_ink, charged, 'the wallet is charged exactly the settlements');
  const kj = await db.pool.query(`SELECT count(*)::int AS n FROM ledger_journal WHERE account_id = $1 AND kind = 'lease_flush'`, [accountId]);
  t.ok(kj.rows[0].n >= 1 && kj.rows[0].n <= 2, 'charges are journalled per lease and flush, not per request');

  // An open hold in the lease counts as reserved, its spare Ink as balance.
  const open = input(accountId, key, 40);
  await e.reserve(open);
  await e.beforeView();
  const view = (await readAccountObject(db.pool, key))!;
  t.equal(view.key.ink_reserved, 40);
  t.equal(view.key.ink_charged, charged);
  t.equal(view.ink.balance, 10_000 - charged - 40, 'balance = credits - charged - holds in flight');
  await e.release(open.requestId, 'test');
  await assertLedgerInvariant(t, db.pool);
});

t.test('the edge is exact across instances: 5,000 Ink with 150-Ink holds admits exactly 33', async (t) => {
  const db = await testDb(t);
  const es = await Promise.all(['a', 'b', 'c'].map((n) => instance(t, db, n)));
  const { accountId, keyIds } = await seedAccount(db.pool, { paygInk: 5000, keyLimits: [null, null, null] });
  const outcomes = await Promise.all(Array.from({ length: 60 }, (_, i) => es[i % 3]!.reserve(input(accountId, keyIds[i % 3]!, 150)).then(() => 'ok', code)));
  t.same(tally(outcomes), { ok: 33, insufficient_ink: 27 }, 'exactly 33 admitted, the rest refused with 402 insufficient_ink');
  for (const e of es) await e.journal.flushAll(5000);
  const w = await walletOf(db.pool, accountId);
  const inLeases = (await db.pool.query(`SELECT coalesce(sum(hold_ink), 0)::int AS h FROM requests WHERE account_id = $1 AND leased`, [accountId])).rows[0].h;
  t.equal(w.held_grant_ink + w.held_payg_ink + inLeases, 33 * 150, 'held: exactly the 33 holds, durable or in leases');
  t.ok(w.grant_ink + w.payg_ink + w.leased_grant_ink + w.leased_payg_ink - inLeases < 150, 'less than one hold is left');
  t.ok(
    es.some((e) => e.stats.leaseHolds > 0),
    'leases served part of it',
  );
  await assertLedgerInvariant(t, db.pool);
});

t.test('a key cap admits exactly what fits, across instances', async (t) => {
  const db = await testDb(t);
  const es = await Promise.all(['a', 'b', 'c'].map((n) => instance(t, db, n)));
  const { accountId, keyIds } = await seedAccount(db.pool, { paygInk: 1_000_000, keyLimits: [2000, null] });
  const outcomes = await Promise.all(Array.from({ length: 30 }, (_, i) => es[i % 3]!.reserve(input(accountId, keyIds[0]!, 150)).then(() => 'ok', code)));
  t.same(tally(outcomes), { ok: 13, key_ink_limit_reached: 17 }, '13 x 150 fit under 2,000; the rest refused with 402 key_ink_limit_reached');
  t.equal(await es[0]!.reserve(input(accountId, keyIds[1]!, 150)).then(() => 'ok', code), 'ok', "the account's other key still works");
  await assertLedgerInvariant(t, db.pool);
});

t.test('a revoked key loses its leases within one heartbeat, and the bus tells at once', async (t) => {
  const db = await testDb(t);
  let heard!: () => void;
  const told = new Promise<void>((r) => (heard = r));
  const e = await instance(t, db, 'a', {}, { onKeyChanged: () => heard() });
  const { accountId, keyIds } = await seedAccount(db.pool, { paygInk: 100_000 });
  const live = input(accountId, keyIds[0]!, 100);
  await e.reserve(live);
  t.equal(e.openLeases, 1);
  await revokeKey(db.pool, keyIds[0]!);
  await told;
  t.pass('the instance heard the revocation');
  await e.beatNow();
  t.equal(code(await e.reserve(input(accountId, keyIds[0]!, 100)).catch((x) => x)), 'invalid_api_key', 'the next hold is refused with 401');
  t.same(await e.settle(live.requestId, 30), { resolved: true, chargedInk: 30, releasedInk: 70, expiredInk: 0 }, 'a request already running still settles');
  await e.journal.flushAll(5000);
  await e.beatNow();
  const l = await db.pool.query(`SELECT count(*)::int AS n FROM leases WHERE key_id = $1 AND state = 'live'`, [keyIds[0]]);
  t.equal(l.rows[0].n, 0, 'the lease is returned');
  await assertLedgerInvariant(t, db.pool);
});

t.test('a lost instance: its lease expires and is recovered; flushed holds are kept, the rest returns; a late flush still lands', async (t) => {
  const db = await testDb(t);
  let skewMs = 0;
  const clock = () => new Date(Date.now() + skewMs);
  // Its journal is written only when the test says so: b's end must still be unwritten at the "crash".
  const lost = await instance(t, db, 'lost', { flushMs: 10_000, lease: { ttlMs: 2000, deadlineMarginMs: 500 } }, { noClose: true });
  const rescuer = await instance(t, db, 'rescuer', {}, { now: clock });
  const { accountId, keyIds } = await seedAccount(db.pool, { grantInk: 500, paygInk: 10_000 });
  const key = keyIds[0]!;
  const a = input(accountId, key, 100),
    b = input(accountId, key, 100),
    c = input(accountId, key, 100);
  for (const x of [a, b, c]) await lost.reserve(x);
  await lost.settle(a.requestId, 30);
  await lost.journal.flushAll(5000); // a settled; b and c started
  await lost.settle(b.requestId, 40); // ended, never flushed before the "crash"
  await lost.setVendorRequestId(c.requestId, 'vendor-c');

  skewMs = 60_000; // the rescuer's clock is past the lease's expiry
  t.equal(await rescuer.recoverExpired(), 1, 'the expired lease is recovered');
  const rows = (await db.pool.query(`SELECT id, hold_state, status, leased, charged_ink FROM requests WHERE account_id = $1`, [accountId])).rows;
  const byId = new Map(rows.map((r) => [r.id, r]));
  t.match(byId.get(a.requestId), { hold_state: 'settled', charged_ink: 30 }, 'a flushed settlement stays');
  t.match(byId.get(b.requestId), { hold_state: 'open', status: 'usage_unknown', leased: false }, 'a flushed start without a flushed end is kept open');
  t.match(byId.get(c.requestId), { hold_state: 'open', status: 'usage_unknown', leased: false });
  const w = await walletOf(db.pool, accountId);
  t.equal(w.leased_grant_ink + w.leased_payg_ink, 0, 'nothing is leased any more');
  t.equal(w.held_grant_ink + w.held_payg_ink, 200, 'the two kept holds are durable holds');
  t.equal(w.charged_ink, 30, 'no customer is charged for what was not written');
  await assertLedgerInvariant(t, db.pool);

  // The lost instance comes back to life: its late write settles b's durable hold, once.
  t.ok(await lost.journal.flushAll(5000), 'the late flush is written');
  t.equal(lost.journal.stats.late, 1, 'and counted as late');
  const bRow = (await db.pool.query(`SELECT hold_state, charged_ink FROM requests WHERE id = $1`, [b.requestId])).rows[0];
  t.match(bRow, { hold_state: 'settled', charged_ink: 40 }, 'the late settlement charges the kept hold');
  t.equal((await walletOf(db.pool, accountId)).charged_ink, 70);
  await lost.close();
  await assertLedgerInvariant(t, db.pool);
});

t.test('a start under the same instance id recovers what the previous start left', async (t) => {
  const db = await testDb(t);
  const first = await instance(t, db, 'same', {}, { noClose: true });
  const { accountId, keyIds } = await seedAccount(db.pool, { paygInk: 10_000 });
  const x = input(accountId, keyIds[0]!, 100);
  await first.reserve(x);
  await first.journal.flushAll(5000);
  const second = await instance(t, db, 'same');
  t.equal(second.currentEpoch, first.currentEpoch + 1, 'a new epoch');
  const r = (await db.pool.query(`SELECT hold_state, status FROM requests WHERE id = $1`, [x.requestId])).rows[0];
  t.match(r, { hold_state: 'open', status: 'usage_unknown' }, 'the old start is kept as a durable open hold');
  const live = await db.pool.query(`SELECT count(*)::int AS n FROM leases WHERE state = 'live'`);
  t.equal(live.rows[0].n, 0);
  await first.close();
  await assertLedgerInvariant(t, db.pool);
});

t.test('unknown usage is a durable open hold before the call returns', async (t) => {
  const db = await testDb(t);
  const e = await instance(t, db, 'a', { flushMs: 10_000 });
  const { accountId, keyIds } = await seedAccount(db.pool, { paygInk: 10_000 });
  const x = input(accountId, keyIds[0]!, 120);
  await e.reserve(x);
  await e.markUsageUnknownEventually(x.requestId, { vendorRequestId: 'msg_vendor_1', reason: 'no receipt' });
  const r = (await db.pool.query(`SELECT hold_state, status, leased, vendor_request_id FROM requests WHERE id = $1`, [x.requestId])).rows[0];
  t.match(r, { hold_state: 'open', status: 'usage_unknown', leased: false, vendor_request_id: 'msg_vendor_1' });
  const k = (await db.pool.query(`SELECT ink_reserved FROM api_keys WHERE id = $1`, [keyIds[0]])).rows[0];
  t.equal(k.ink_reserved, 120, 'visible as the key reserve');
  await assertLedgerInvariant(t, db.pool);
});

t.test('durability sync: the settlement is in Postgres when it returns', async (t) => {
  const db = await testDb(t);
  const e = await instance(t, db, 'a', { durability: 'sync', flushMs: 10_000 });
  const { accountId, keyIds } = await seedAccount(db.pool, { paygInk: 10_000 });
  const x = input(accountId, keyIds[0]!, 100);
  await e.reserve(x);
  await e.settle(x.requestId, 33);
  const r = (await db.pool.query(`SELECT hold_state, charged_ink FROM requests WHERE id = $1`, [x.requestId])).rows[0];
  t.match(r, { hold_state: 'settled', charged_ink: 33 });
  await assertLedgerInvariant(t, db.pool);
});

t.test('the journal is bounded: past journalMaxRecords new holds answer 503', async (t) => {
  const db = await testDb(t);
  const e = await instance(t, db, 'a', { journalMaxRecords: 3, flushMs: 10_000 });
  const { accountId, keyIds } = await seedAccount(db.pool, { paygInk: 100_000 });
  const held: string[] = [];
  for (let i = 0; i < 3; i++) {
    const x = input(accountId, keyIds[0]!, 10);
    await e.reserve(x);
    held.push(x.requestId);
  }
  t.equal(code(await e.reserve(input(accountId, keyIds[0]!, 10)).catch((x) => x)), 'provider_unavailable');
  for (const id of held) await e.settle(id, 1);
  await e.journal.flushAll(5000);
  t.equal(await e.reserve(input(accountId, keyIds[0]!, 10)).then(() => 'ok', code), 'ok', 'admitted again once written');
  await assertLedgerInvariant(t, db.pool);
});

t.test('shutdown writes everything and returns every lease', async (t) => {
  const db = await testDb(t);
  const e = await instance(t, db, 'a', { flushMs: 10_000 }, { noClose: true });
  const { accountId, keyIds } = await seedAccount(db.pool, { grantInk: 300, paygInk: 10_000, keyLimits: [null, 5000] });
  for (const key of keyIds) {
    const x = input(accountId, key, 100);
    await e.reserve(x);
    await e.settle(x.requestId, 25);
  }
  await e.close();
  const w = await walletOf(db.pool, accountId);
  t.equal(w.leased_grant_ink + w.leased_payg_ink, 0, 'nothing left leased');
  t.equal(w.charged_ink, 50, 'both settlements written');
  t.equal(w.grant_ink + w.payg_ink, 10_300 - 50, 'everything else is back in the wallet');
  const k = (await db.pool.query(`SELECT sum(ink_leased)::int AS l FROM api_keys WHERE account_id = $1`, [accountId])).rows[0];
  t.equal(k.l, 0, 'key headroom returned');
  t.equal(code(await e.reserve(input(accountId, keyIds[0]!, 10)).catch((x) => x)), 'provider_unavailable', 'no admission after close');
  await assertLedgerInvariant(t, db.pool);
});

t.test('a roll-over recalls leases; their old-period grant lapses when it comes back', async (t) => {
  const db = await testDb(t);
  const e = await instance(t, db, 'a');
  const { accountId, keyIds } = await seedAccount(db.pool, { grantInk: 1000, paygInk: 1000 });
  const x = input(accountId, keyIds[0]!, 50);
  await e.reserve(x);
  const before = await walletOf(db.pool, accountId);
  t.ok(before.leased_grant_ink > 0, 'the lease took grant');
  // biome-ignore lint/complexity/useLiteralKeys: the bracket reaches the escrow's private ledger (tsc allows it only so)
  await e['ledger'].rollPeriod(accountId);
  await e.beatNow();
  await e.settle(x.requestId, 10);
  await e.journal.flushAll(5000);
  await e.beatNow();
  const w = await walletOf(db.pool, accountId);
  t.equal(w.leased_grant_ink + w.leased_payg_ink, 0, 'the lease came back');
  t.equal(w.charged_ink, 10);
  t.equal(w.expired_ink, 1000 - 10, 'every old-period grant not charged lapsed');
  await assertLedgerInvariant(t, db.pool);
});
