// The journal holds back a start that joined during the window a flush closes, so that a request
// that ends within a period is one row insert (docs/ledger.md, The journal): checked against
// Postgres, with a real lease. A held-back start is written by the next flush, at once by flushAll
// (a shutdown, a lease's return, a view), and at once when the queue reaches its bound; an end is
// never held back; and a request whose start and end meet in one batch is carried by one batch.
import t, { type Test } from 'tap';
import type { JournalRecord } from '../../src/ledger/journal-record.js';
import { WriteBehind } from '../../src/ledger/write-behind.js';
import type { Pool } from '../../src/store/pool.js';
import { testDb } from '../helpers/db.js';
import { takeLease, testRecord } from '../helpers/journal-record.js';
import { assertLedgerInvariant, seedAccount } from '../helpers/ledger-invariant.js';

interface Setup {
  readonly pool: Pool;
  readonly instance: string;
  readonly epoch: number;
  readonly accountId: string;
  readonly keyId: string;
  readonly leaseId: number;
  readonly period: number;
}

async function setup(t: Test): Promise<Setup> {
  const db = await testDb(t);
  const seeded = await seedAccount(db.pool, { paygInk: 100_000 });
  const instance = `young-${db.schema}`;
  const epoch = Number((await db.pool.query('SELECT ledger_instance_start($1, now(), 0) AS e', [instance])).rows[0].e);
  const accountId = seeded.accountId;
  const keyId = seeded.keyIds[0]!;
  const lease = await takeLease(db.pool, instance, epoch, accountId, keyId, 50_000);
  return { pool: db.pool, instance, epoch, accountId, keyId, leaseId: lease.id, period: lease.period };
}

/** A request's record as the escrow makes it when its hold comes out of the lease: a start, no end yet. */
function started(s: Setup): JournalRecord {
  return testRecord({ accountId: s.accountId, keyId: s.keyId, leaseId: s.leaseId, grantPeriod: s.period });
}

/** Its settlement, as the escrow records it (charge 10 of the hold of 100). */
function settle(wb: WriteBehind, record: JournalRecord): void {
  record.end = 'settle';
  record.chargeInk = 10;
  record.restPaygInk = 90;
  record.usage = '{"input_tokens":10,"output_tokens":20}';
  record.resolvedAt = new Date().toISOString();
  wb.touch(record);
}

interface Journal {
  readonly wb: WriteBehind;
  /** The request ids of each batch a flush carried, in order. */
  readonly batches: string[][];
  /** Resolves when the next batch has committed. */
  nextCommit(): Promise<void>;
}

function journal(t: Test, s: Setup, flushMaxRecords = 1000): Journal {
  const wb = new WriteBehind(s.pool, {
    instanceId: s.instance,
    epoch: () => s.epoch,
    // No timer flush during a test: every flush here is asked for.
    flushMs: 600_000,
    flushMaxRecords,
    journalMaxRecords: 10_000,
    asyncCommit: false,
    now: () => new Date(),
    log: () => undefined,
    onEndWritten: () => undefined,
  });
  t.teardown(() => wb.close());
  const batches: string[][] = [];
  let committed: Array<() => void> = [];
  wb.onFlushStarted = (batch) => {
    batches.push(batch.map((r) => r.requestId));
    return undefined;
  };
  wb.onFlushed = () => {
    const waiting = committed;
    committed = [];
    for (const wake of waiting) wake();
  };
  return { wb, batches, nextCommit: () => new Promise<void>((resolve) => committed.push(resolve)) };
}

async function rowOf(pool: Pool, requestId: string): Promise<{ status: string; leased: boolean } | undefined> {
  return (await pool.query<{ status: string; leased: boolean }>('SELECT status, leased FROM requests WHERE id = $1', [requestId])).rows[0];
}

t.test('a young start waits for the next flush, and one that ends by then is one row from one batch', async (t) => {
  const s = await setup(t);
  const { wb, batches } = journal(t, s);
  const quick = started(s);
  const slow = started(s);
  const other = started(s);
  wb.start(quick);
  wb.start(slow);
  wb.start(other);
  settle(wb, other);
  t.ok(await wb.whenWritten(other, 10_000), 'an ended record is written by the first flush');
  t.same(batches, [[other.requestId]], 'the first flush carried the ended record only');
  t.equal(await rowOf(s.pool, quick.requestId), undefined, 'a young start is not in Postgres after the window it joined');
  t.equal(await rowOf(s.pool, slow.requestId), undefined);

  settle(wb, quick);
  t.ok(await wb.whenWritten(quick, 10_000));
  t.same(batches[1], [quick.requestId, slow.requestId], 'the next flush carries both: one ended, one now a window old');
  t.same(await rowOf(s.pool, quick.requestId), { status: 'settled', leased: false }, 'started and ended: written once, settled');
  t.same(await rowOf(s.pool, slow.requestId), { status: 'running', leased: true }, 'the start a window old is written, still running');
  t.equal(batches.flat().filter((id) => id === quick.requestId).length, 1, 'the quick request was carried by one batch');

  settle(wb, slow);
  t.ok(await wb.whenWritten(slow, 10_000), 'an end is never held back');
  t.same(await rowOf(s.pool, slow.requestId), { status: 'settled', leased: false });
  await assertLedgerInvariant(t, s.pool);
});

t.test('flushAll writes young starts at once', async (t) => {
  const s = await setup(t);
  const { wb, batches } = journal(t, s);
  const young = started(s);
  wb.start(young);
  t.ok(await wb.flushAll(10_000));
  t.same(batches, [[young.requestId]]);
  t.same(await rowOf(s.pool, young.requestId), { status: 'running', leased: true });
  settle(wb, young);
  t.ok(await wb.flushAll(10_000));
  await assertLedgerInvariant(t, s.pool);
});

t.test('a queue at its bound is written whole, young starts with it', async (t) => {
  const s = await setup(t);
  const { wb, batches, nextCommit } = journal(t, s, 3);
  const records = [started(s), started(s), started(s)];
  const committed = nextCommit();
  for (const record of records) wb.start(record);
  await committed;
  t.same(batches, [records.map((r) => r.requestId)], 'the bound flushed all three though each joined this window');
  for (const record of records) t.same(await rowOf(s.pool, record.requestId), { status: 'running', leased: true });
  for (const record of records) settle(wb, record);
  t.ok(await wb.flushAll(10_000));
  await assertLedgerInvariant(t, s.pool);
});
