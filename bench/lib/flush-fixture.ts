// A private schema where the write-behind flush can be measured from one Postgres backend: migrated
// (then changed by `changes`, for a bench that compares variants), an account with Ink, a key, a
// live lease of a started instance, and a write-behind that flushes only when asked. Its records
// are settled leased requests (start and end in one record, as most are under load), and its
// figure is the backend's own CPU from /proc, so other work on a shared machine does not count.
// Used by bench/flush-cost.ts and bench/flush-parts.ts.
import { readFileSync } from 'node:fs';
import { createAccount, createKey } from '../../src/accounts/accounts.js';
import { startedRecord, type JournalRecord } from '../../src/ledger/journal-record.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { WriteBehind } from '../../src/ledger/write-behind.js';
import { newRequestId } from '../../src/server/http-context.js';
import { migrate } from '../../src/store/migrate.js';
import { createPool, type Pool } from '../../src/store/pool.js';
import { takeLease } from '../../test/helpers/journal-record.js';

export interface FlushFixture {
  readonly pool: Pool;
  readonly accountId: string;
  readonly keyId: string;
  readonly leaseId: number;
  readonly grantPeriod: number;
  /** The backend's user + system CPU, µs (/proc ticks of 10 ms). */
  cpuUs(): number;
  /** `flushes` flushes of `batch` settled records each; the backend's CPU µs per record. */
  perRecordUs(batch: number, flushes: number): Promise<number>;
  /** Stops the write-behind, drops the schema, ends the pool. */
  close(): Promise<void>;
}

export async function flushFixture(url: string, schema: string, changes: readonly string[] = []): Promise<FlushFixture> {
  const pool = createPool({ url, schema, poolMax: 1, connectionTimeoutMs: 5000, queryTimeoutMs: 60_000, lockTimeoutMs: 5000, statementTimeoutMs: 60_000 });
  await migrate(pool, schema);
  for (const sql of changes) await pool.query(sql);
  const account = await createAccount(pool, { name: 'b', planId: 'pro' });
  const ledger = new Ledger(pool);
  await ledger.topUp(account.id, 1_000_000_000, 'b');
  await ledger.close();
  const key = await createKey(pool, { accountId: account.id, name: 'b' });
  const epoch = Number((await pool.query('SELECT ledger_instance_start($1, now(), 0) AS e', ['bench'])).rows[0].e);
  const lease = await takeLease(pool, 'bench', epoch, account.id, key.id, 500_000_000);
  const leaseId = lease.id;
  const pid = (await pool.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
  const cpuUs = (): number => {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return (Number(fields[11]) + Number(fields[12])) * 10_000;
  };
  const journal = new WriteBehind(pool, {
    instanceId: 'bench',
    epoch: () => epoch,
    flushMs: 60_000,
    flushMaxRecords: 100_000,
    journalMaxRecords: 10_000_000,
    asyncCommit: true,
    now: () => new Date(),
    log: (fields, event) => console.error(event, fields),
    onEndWritten: () => undefined,
  });
  const record = (): JournalRecord => {
    const now = new Date().toISOString();
    const started = startedRecord({
      requestId: newRequestId(),
      accountId: account.id,
      keyId: key.id,
      product: 'messages',
      model: 'sonnet',
      leaseId,
      holdInk: 100,
      holdGrantInk: 0,
      grantPeriod: lease.period,
      createdAt: now,
    });
    const vendorRequestId = `msg_01${started.requestId.slice(4)}`;
    return { ...started, vendorRequestId, end: 'settle', chargeInk: 10, restPaygInk: 90, usage: '{"input_tokens":10,"output_tokens":20}', resolvedAt: now };
  };
  const perRecordUs = async (batch: number, flushes: number): Promise<number> => {
    const startUs = cpuUs();
    for (let i = 0; i < flushes; i++) {
      for (let j = 0; j < batch; j++) journal.start(record());
      if (!(await journal.flushAll(30_000))) throw new Error('flush failed');
    }
    return (cpuUs() - startUs) / (flushes * batch);
  };
  const close = async (): Promise<void> => {
    journal.close();
    await pool.query(`DROP SCHEMA ${schema} CASCADE`);
    await pool.end();
  };
  return { pool, accountId: account.id, keyId: key.id, leaseId, grantPeriod: lease.period, cpuUs, perRecordUs, close };
}
