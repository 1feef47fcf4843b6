// The write-behind flush checks every record's account and key against the lease it names
// (`requests` has no foreign key to api_keys): a record naming another key of the account, another
// account, a key that does not exist or a lease that does not exist is refused with its whole batch
// as an integrity violation (SQLSTATE 23503), nothing of the batch is written, and the instance
// fails stop. docs/ledger.md, Checking it. On the late path, a capped key's limit bounds what a
// record charges or keeps (docs/ledger.md, A late flush).
import t, { type Test } from 'tap';
import { loadConfig } from '../../src/config/config.js';
import { isLedgerAssertion, type LedgerAssertionError } from '../../src/ledger/assertion.js';
import { Escrow } from '../../src/ledger/escrow.js';
import { checkLedger } from '../../src/ledger/invariant.js';
import { Ledger } from '../../src/ledger/ledger.js';
import type { JournalRecord } from '../../src/ledger/journal-record.js';
import { WriteBehind } from '../../src/ledger/write-behind.js';
import type { Pool } from '../../src/store/pool.js';
import { testDb } from '../helpers/db.js';
import { type TestLease as Lease, takeLease, testRecord } from '../helpers/journal-record.js';
import { assertLedgerInvariant, newRequestId, seedAccount } from '../helpers/ledger-invariant.js';

/** A request that started and settled inside one flush window, as the escrow queues it. */
function settled(lease: Lease, accountId: string, keyId: string): JournalRecord {
  const now = new Date().toISOString();
  return testRecord({
    accountId,
    keyId,
    leaseId: lease.id,
    grantPeriod: lease.period,
    createdAt: now,
    end: 'settle',
    chargeInk: 10,
    restPaygInk: 90,
    usage: '{"input_tokens":10,"output_tokens":20}',
    resolvedAt: now,
  });
}

function journal(t: Test, pool: Pool, instanceId: string, epoch: number, violations: LedgerAssertionError[]): WriteBehind {
  const wb = new WriteBehind(pool, {
    instanceId,
    epoch: () => epoch,
    flushMs: 60_000,
    flushMaxRecords: 1000,
    journalMaxRecords: 1000,
    asyncCommit: false,
    now: () => new Date(),
    log: () => undefined,
    onEndWritten: () => undefined,
    onViolation: (e) => void violations.push(e),
  });
  t.teardown(() => wb.close());
  return wb;
}

/** What a refused batch must leave as it was: the lease, the wallet, the key. */
async function money(pool: Pool, leaseId: number, accountId: string, keyId: string): Promise<unknown> {
  const r = await pool.query(
    `SELECT l.grant_ink, l.payg_ink, w.leased_payg_ink, w.charged_ink, k.ink_leased, k.ink_charged,
            (SELECT count(*) FROM requests WHERE account_id = $2) AS requests,
            (SELECT count(*) FROM ledger_journal WHERE lease_id = $1) AS journal
       FROM leases l, wallets w, api_keys k WHERE l.id = $1 AND w.account_id = $2 AND k.id = $3`,
    [leaseId, accountId, keyId],
  );
  return r.rows[0];
}

t.test("a record whose key or account is not its lease's is refused with its batch, and the fail-stop hears of it", async (t) => {
  const db = await testDb(t);
  const mine = await seedAccount(db.pool, { paygInk: 100_000, keyLimits: [null, null] });
  const other = await seedAccount(db.pool, { paygInk: 100_000 });
  const instance = `forge-${db.schema}`;
  const epoch = Number((await db.pool.query('SELECT ledger_instance_start($1, now(), 0) AS e', [instance])).rows[0].e);
  const lease = await takeLease(db.pool, instance, epoch, mine.accountId, mine.keyIds[0]!);
  const [leaseKey, sibling] = mine.keyIds as [string, string];

  const good = settled(lease, mine.accountId, leaseKey);
  const okViolations: LedgerAssertionError[] = [];
  const first = journal(t, db.pool, instance, epoch, okViolations);
  first.start(good);
  t.ok(await first.flushAll(10_000), "a record with its lease's account and key is written");
  t.same(okViolations, []);
  const before = await money(db.pool, lease.id, mine.accountId, leaseKey);

  const forged: Array<[string, JournalRecord]> = [
    ['another key of the same account', settled(lease, mine.accountId, sibling)],
    ["another account and that account's key", settled(lease, other.accountId, other.keyIds[0]!)],
    ["another account with the lease's key", settled(lease, other.accountId, leaseKey)],
    ['a key that does not exist', settled(lease, mine.accountId, 'key_missing0000')],
    ['a lease that does not exist', settled({ id: lease.id + 1_000_000, period: lease.period }, mine.accountId, leaseKey)],
  ];
  for (const [what, bad] of forged) {
    const violations: LedgerAssertionError[] = [];
    const wb = journal(t, db.pool, instance, epoch, violations);
    // An honest record in the same batch: the refusal is all or nothing.
    const honest = settled(lease, mine.accountId, leaseKey);
    wb.start(honest);
    wb.start(bad);
    t.notOk(await wb.flushAll(10_000), `${what}: the batch is reported unwritten`);
    t.equal(violations.length, 1, `${what}: the fail-stop was told once`);
    t.ok(isLedgerAssertion(violations[0]), `${what}: as a LedgerAssertionError`);
    t.match(violations[0]?.figures, { sqlstate: '23503', constraint: 'request_key_of_lease', table: 'requests', records: 2 }, what);
    t.match(violations[0]?.message, bad.requestId, `${what}: the message names the forged record`);
    t.equal(wb.pending, 0, `${what}: nothing waits for a retry`);
    const rows = await db.pool.query('SELECT id FROM requests WHERE id = ANY($1)', [[honest.requestId, bad.requestId]]);
    t.same(rows.rows, [], `${what}: neither record of the batch was written`);
    t.same(await money(db.pool, lease.id, mine.accountId, leaseKey), before, `${what}: the lease, wallet and key did not move`);
  }

  // A record whose lease is no longer this instance's takes the late path: it is checked too.
  const violations: LedgerAssertionError[] = [];
  const stranger = journal(t, db.pool, `other-${db.schema}`, 1, violations);
  stranger.start(settled(lease, mine.accountId, sibling));
  t.notOk(await stranger.flushAll(10_000), 'a forged record on the late path is refused as well');
  t.match(violations, [{ figures: { sqlstate: '23503', constraint: 'request_key_of_lease' } }]);
  t.same(await money(db.pool, lease.id, mine.accountId, leaseKey), before, 'and moved nothing');
  await assertLedgerInvariant(t, db.pool);
});

t.test("on the late path a capped key's limit bounds what is charged or kept, as the wallet's balance does", async (t) => {
  // A lease recovered (or taken by another instance) gave its Ink back, and the key may have spent
  // it since: what arrives late takes only what the key's limit still allows; the shortfall is the
  // operator's and is noted on the journal row.
  const db = await testDb(t);
  const mine = await seedAccount(db.pool, { paygInk: 100_000, keyLimits: [150] });
  const key = mine.keyIds[0]!;
  const instance = `owner-${db.schema}`;
  const epoch = Number((await db.pool.query('SELECT ledger_instance_start($1, now(), 0) AS e', [instance])).rows[0].e);
  const lease = await takeLease(db.pool, instance, epoch, mine.accountId, key, 30); // the key has 120 of room left
  const used = async () => Number((await db.pool.query('SELECT ink_charged + ink_reserved + ink_leased AS u FROM api_keys WHERE id = $1', [key])).rows[0].u);
  t.equal(await used(), 30);
  const stranger = journal(t, db.pool, `other-${db.schema}`, 1, []);
  const unknown = (): JournalRecord => ({ ...settled(lease, mine.accountId, key), end: 'unknown', chargeInk: 0, resolvedAt: null });

  const kept = unknown();
  stranger.start(kept);
  const charged = { ...settled(lease, mine.accountId, key), chargeInk: 90 };
  stranger.start(charged);
  const keptNothing = unknown();
  stranger.start(keptNothing);
  t.ok(await stranger.flushAll(10_000), 'the late records are written');
  t.equal(stranger.stats.late, 3, 'on the late path');
  const rows = new Map(
    (await db.pool.query('SELECT id, hold_state, status, hold_ink, charged_ink FROM requests WHERE account_id = $1', [mine.accountId])).rows.map((r) => [
      r.id,
      r,
    ]),
  );
  t.match(rows.get(kept.requestId), { status: 'usage_unknown', hold_ink: '100' }, 'an unknown-usage hold the key has room for is kept whole');
  t.match(rows.get(charged.requestId), { hold_state: 'settled', charged_ink: '20' }, 'a settlement takes only the 20 Ink of room left');
  t.match(rows.get(keptNothing.requestId), { status: 'usage_unknown', hold_ink: '0' }, 'an unknown-usage hold past the limit keeps nothing');
  t.equal(await used(), 150, 'the key ends at its limit, not past it');
  const note = await db.pool.query(`SELECT note FROM ledger_journal WHERE request_id = $1 AND kind = 'late_charge'`, [charged.requestId]);
  t.same(note.rows, [{ note: 'wallet or key limit short of the charge' }], 'the shortfall is noted');
  await assertLedgerInvariant(t, db.pool);
});

t.test('the late step alone refuses a record whose wallet or key is missing, rather than charge it unbounded', async (t) => {
  // ledger_flush refuses such a record before its steps run; its late step checks again, as a
  // missing row would otherwise read as no bound on the charge.
  const db = await testDb(t);
  const mine = await seedAccount(db.pool, { paygInk: 1_000 });
  const late = (accountId: string, keyId: string) =>
    db.pool.query(
      `SELECT ledger_flush_late(now(), '{}'::bigint[], ARRAY[$1::text], ARRAY[$2::text], ARRAY[$3::text], ARRAY['messages'], ARRAY['sonnet'],
              ARRAY[1::bigint], ARRAY[100::bigint], ARRAY[0::bigint], ARRAY[0], ARRAY[now()], ARRAY[NULL::text], ARRAY['settle'],
              ARRAY[50::bigint], ARRAY[NULL::jsonb], ARRAY[NULL::text], ARRAY[now()])`,
      [newRequestId(), accountId, keyId],
    );
  for (const [what, accountId, keyId] of [
    ['a key that does not exist', mine.accountId, 'key_missing0000'],
    ['an account that does not exist', 'usr_missing0000', mine.keyIds[0]!],
  ] as const) {
    const err = await late(accountId, keyId).then(
      () => undefined,
      (e: { code?: string; constraint?: string }) => e,
    );
    t.match(err, { code: '23503', constraint: 'request_key_of_lease' }, `${what}: refused as an integrity violation`);
  }
  t.equal(Number((await db.pool.query('SELECT charged_ink FROM wallets WHERE account_id = $1', [mine.accountId])).rows[0].charged_ink), 0, 'nothing charged');
  await assertLedgerInvariant(t, db.pool);
});

t.test('through the escrow: a forged record on its own lease halts the instance', async (t) => {
  const db = await testDb(t);
  const mine = await seedAccount(db.pool, { paygInk: 100_000, keyLimits: [null, null] });
  const cfg = loadConfig({}, { ledger: { lease: { heartbeatMs: 60_000 } } });
  const ledger = new Ledger(db.pool);
  const violations: LedgerAssertionError[] = [];
  const e = await Escrow.start({
    pool: db.pool,
    ledger,
    config: cfg.ledger,
    instanceId: `forge-escrow-${db.schema}`,
    bus: { dbUrl: db.url, dbSchema: db.schema, connectTimeoutMs: 2000, redis: { ...cfg.redis, url: null } },
    log: () => undefined,
    failStop: (err) => void violations.push(err),
  });
  t.teardown(async () => {
    await e.close();
    await ledger.close();
  });
  const hold = { requestId: newRequestId(), accountId: mine.accountId, keyId: mine.keyIds[0]!, product: 'messages' as const, model: 'sonnet', holdInk: 50 };
  await e.reserve(hold);
  await e.settle(hold.requestId, 7);
  t.ok(await e.journal.flushAll(10_000), 'the honest request is written');
  const lease = (await db.pool.query('SELECT id, grant_period FROM leases WHERE key_id = $1', [mine.keyIds[0]])).rows[0];
  e.journal.start(settled({ id: Number(lease.id), period: lease.grant_period }, mine.accountId, mine.keyIds[1]!));
  t.notOk(await e.journal.flushAll(10_000), 'the forged record is not written');
  t.equal(violations.length, 1, 'the fail-stop was told once');
  t.match(violations[0]?.figures, { sqlstate: '23503', constraint: 'request_key_of_lease' });
  t.ok(e.isHalted, 'the escrow halted: no more holds');
  const rows = await db.pool.query('SELECT id, charged_ink FROM requests WHERE account_id = $1', [mine.accountId]);
  t.same(rows.rows, [{ id: hold.requestId, charged_ink: '7' }], 'only the honest request is in the ledger');
});

t.test("ledger check finds a request whose key is missing, of another account, or not its lease's", async (t) => {
  const db = await testDb(t);
  const mine = await seedAccount(db.pool, { paygInk: 100_000, keyLimits: [null, null] });
  const other = await seedAccount(db.pool, { paygInk: 100_000 });
  t.same(await checkLedger(db.pool), [], 'a consistent ledger to start from');
  // Rows the write paths refuse, written by hand: void requests move no Ink, so only the key rules can see them.
  const insertVoid = (id: string, accountId: string, keyId: string, leaseId: number | null) =>
    db.pool.query(
      `INSERT INTO requests (id, account_id, key_id, product, model, hold_state, status, hold_ink, hold_grant_ink, hold_payg_ink,
                             grant_period, created_at, resolved_at, lease_id)
       VALUES ($1, $2, $3, 'messages', 'sonnet', 'void', 'void', 0, 0, 0, 0, now(), now(), $4)`,
      [id, accountId, keyId, leaseId],
    );
  const missingKey = newRequestId();
  const foreignKey = newRequestId();
  const missingAccount = newRequestId();
  await insertVoid(missingKey, mine.accountId, 'key_missing0000', null);
  await insertVoid(foreignKey, mine.accountId, other.keyIds[0]!, null);
  await insertVoid(missingAccount, 'usr_missing0000', mine.keyIds[0]!, null);
  const found = await checkLedger(db.pool, 10);
  t.same(
    found.map((v) => v.rule),
    ['a request spends its own account through its own key, which exists'],
    'one rule broken',
  );
  t.same(
    (found[0]!.rows as Array<{ id: string }>).map((r) => r.id).sort(),
    [missingKey, foreignKey, missingAccount].sort(),
    'naming each of the three requests',
  );
  await db.pool.query('DELETE FROM requests WHERE id = ANY($1)', [[missingKey, foreignKey, missingAccount]]);

  const instance = `check-${db.schema}`;
  const epoch = Number((await db.pool.query('SELECT ledger_instance_start($1, now(), 0) AS e', [instance])).rows[0].e);
  const lease = await takeLease(db.pool, instance, epoch, mine.accountId, mine.keyIds[0]!);
  const wrongLeaseKey = newRequestId();
  const noLease = newRequestId();
  await insertVoid(wrongLeaseKey, mine.accountId, mine.keyIds[1]!, lease.id);
  await insertVoid(noLease, mine.accountId, mine.keyIds[0]!, lease.id + 1_000_000);
  const again = await checkLedger(db.pool, 10);
  t.same(
    again.map((v) => v.rule),
    ["a request written from a lease names a lease that exists, and has the lease's account and key"],
    "a key of the account, but not the lease's, or no lease at all",
  );
  t.same((again[0]!.rows as Array<{ id: string }>).map((r) => r.id).sort(), [wrongLeaseKey, noLease].sort(), 'naming both requests');
});
