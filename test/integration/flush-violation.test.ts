// A flush the schema refuses (SQLSTATE class 23: a CHECK, foreign key, unique or not-null rule)
// is a broken money rule, not an outage: it reaches the fail-stop as a LedgerAssertionError at
// once and its batch is never sent again. An outage (connection refused, a lock wait cut by its
// timeout) keeps the retry path and the records are written once the store answers.
// docs/ledger.md, The SQL functions.
import t, { type Test } from 'tap';
import { loadConfig } from '../../src/config/config.js';
import { isLedgerAssertion, type LedgerAssertionError } from '../../src/ledger/assertion.js';
import { Escrow } from '../../src/ledger/escrow.js';
import { Ledger, type ReserveInput } from '../../src/ledger/ledger.js';
import type { JournalRecord } from '../../src/ledger/journal-record.js';
import { flushViolation, WriteBehind } from '../../src/ledger/write-behind.js';
import { createPool } from '../../src/store/pool.js';
import { testDb, type TestDb } from '../helpers/db.js';
import { testRecord } from '../helpers/journal-record.js';
import { assertLedgerInvariant, newRequestId, seedAccount } from '../helpers/ledger-invariant.js';

async function escrow(t: Test, db: TestDb, violations: LedgerAssertionError[]): Promise<Escrow> {
  // Only the test's own flushAll writes (no timed flush may write a batch before a lock is taken).
  const cfg = loadConfig({}, { ledger: { flushMs: 10_000, lease: { heartbeatMs: 60_000 } } });
  const ledger = new Ledger(db.pool);
  const e = await Escrow.start({
    pool: db.pool,
    ledger,
    config: cfg.ledger,
    instanceId: `flush-${db.schema}`,
    bus: { dbUrl: db.url, dbSchema: db.schema, connectTimeoutMs: 2000, redis: { ...cfg.redis, url: null } },
    log: () => undefined,
    failStop: (err) => void violations.push(err),
  });
  t.teardown(async () => {
    await e.close();
    await ledger.close();
  });
  return e;
}

const input = (accountId: string, keyId: string, model: string): ReserveInput => ({
  requestId: newRequestId(),
  accountId,
  keyId,
  product: 'messages',
  model,
  holdInk: 50,
});

t.test('a CHECK violation inside ledger_flush stops the instance, once, and is not retried', async (t) => {
  const db = await testDb(t);
  // A rule the flush's request insert breaks for one model: a real 23514 raised inside ledger_flush.
  await db.pool.query(`ALTER TABLE requests ADD CONSTRAINT probe_model CHECK (model <> 'probe-broken')`);
  const violations: LedgerAssertionError[] = [];
  const e = await escrow(t, db, violations);
  const { accountId, keyIds } = await seedAccount(db.pool, { paygInk: 10_000 });
  const good = input(accountId, keyIds[0]!, 'sonnet');
  await e.reserve(good);
  await e.settle(good.requestId, 7);
  t.ok(await e.journal.flushAll(5000), 'a good batch is written');

  const bad = input(accountId, keyIds[0]!, 'probe-broken');
  await e.reserve(bad);
  await e.settle(bad.requestId, 9);
  t.notOk(await e.journal.flushAll(5000), 'the refused batch is reported unwritten');
  t.equal(violations.length, 1, 'the fail-stop was told once');
  const v = violations[0]!;
  t.ok(isLedgerAssertion(v), 'as a LedgerAssertionError');
  t.match(v.figures, { sqlstate: '23514', constraint: 'probe_model', table: 'requests', records: 1, first_request_id: bad.requestId });
  t.ok(e.isHalted, 'the escrow halted: no more holds');
  t.same({ failures: e.journal.stats.failures, violations: e.journal.stats.violations }, { failures: 0, violations: 1 }, 'not counted as an outage');
  t.equal(e.journal.pending, 0, 'nothing of the refused batch waits for a retry');
  t.ok(!(await e.journal.flushAll(1000)), 'a later flush sends nothing again');
  t.equal(violations.length, 1, 'and the fail-stop heard nothing more');
  const rows = await db.pool.query('SELECT id FROM requests WHERE account_id = $1 ORDER BY id', [accountId]);
  t.same(
    rows.rows.map((r) => r.id),
    [good.requestId],
    'the good request was written, the refused one not',
  );
});

t.test('only SQLSTATE class 23 is a violation; an outage is not', async (t) => {
  const rec = { requestId: 'req_x', leaseId: 4 } as JournalRecord;
  t.match(flushViolation({ code: '23514', message: 'violates check', constraint: 'c', table: 'wallets' }, [rec])?.figures, {
    sqlstate: '23514',
    constraint: 'c',
    table: 'wallets',
    records: 1,
    first_request_id: 'req_x',
    first_lease_id: 4,
  });
  for (const code of ['23505', '23503', '23502', '23P01']) t.ok(flushViolation({ code, message: 'x' }, [rec]), code);
  for (const code of ['ECONNREFUSED', 'ETIMEDOUT', '57014', '55P03', '40001', '40P01', '57P01', '08006', undefined]) {
    t.equal(flushViolation({ code, message: 'x' }, [rec]), undefined, `${code}: retried`);
  }
  t.equal(flushViolation(new Error('Query read timeout'), [rec]), undefined, "pg's client-side timeout: retried");
});

t.test('an outage keeps the retry path: connection refused, then a lock wait cut by its timeout', async (t) => {
  const db = await testDb(t);
  const violations: LedgerAssertionError[] = [];
  // Nothing listens on port 1: every flush is refused before it reaches a server.
  const away = createPool({ ...db.dbConfig, url: 'postgres://postgres@127.0.0.1:1/test', connectionTimeoutMs: 500 });
  t.teardown(() => away.end());
  const record = testRecord({ accountId: 'usr_x', keyId: 'key_x', leaseId: 1, grantPeriod: 0, holdInk: 10 });

  const logged: Array<[string, number]> = [];
  const wb = new WriteBehind(away, {
    instanceId: 'x',
    epoch: () => 1,
    flushMs: 1,
    flushMaxRecords: 10,
    journalMaxRecords: 10,
    asyncCommit: false,
    now: () => new Date(),
    log: (fields, event) => void logged.push([event, (fields as { failures: number }).failures]),
    onEndWritten: () => undefined,
    onViolation: (err) => void violations.push(err),
  });
  t.teardown(() => wb.close());
  wb.start(record);
  t.notOk(await wb.flushAll(1500), 'not written while the store refuses connections');
  t.ok(wb.stats.failures >= 1, `${wb.stats.failures} failed flushes, retried`);
  t.equal(wb.size, 1, 'the record is still to be written (retried, not dropped)');
  t.same(violations, [], 'not a violation');
  while (wb.stats.failures < 6) t.notOk(await wb.flushAll(1500), 'still refused');
  // The first failure is a warning (a lock wait under load passes on retry); a run of five is an error.
  t.same(
    logged,
    [
      ['ledger.flush_retried', 1],
      ['ledger.flush_failed', 5],
    ],
    `after ${wb.stats.failures} failures in a row: one warning at the first, one error at the fifth`,
  );

  // A lock held elsewhere: the flush waits past its lock timeout, fails, and is retried until the lock goes.
  const e = await escrow(t, db, violations);
  const { accountId, keyIds } = await seedAccount(db.pool, { paygInk: 10_000 });
  const one = input(accountId, keyIds[0]!, 'sonnet');
  await e.reserve(one);
  await e.settle(one.requestId, 5);
  const locker = await db.pool.connect();
  await locker.query('BEGIN');
  await locker.query('SELECT 1 FROM wallets WHERE account_id = $1 FOR UPDATE', [accountId]);
  const failuresBefore = e.journal.stats.failures;
  t.notOk(await e.journal.flushAll(db.dbConfig.lockTimeoutMs * 3), 'not written while the wallet is locked');
  t.ok(e.journal.stats.failures > failuresBefore, 'the timed-out flush counted as a failure, to retry');
  await locker.query('COMMIT');
  locker.release();
  t.ok(await e.journal.flushAll(10_000), 'written once the lock is gone');
  t.same(violations, [], 'never a violation');
  t.notOk(e.isHalted);
  const rows = await db.pool.query('SELECT hold_state, charged_ink FROM requests WHERE id = $1', [one.requestId]);
  t.same(rows.rows, [{ hold_state: 'settled', charged_ink: '5' }]);
  await assertLedgerInvariant(t, db.pool);
});
