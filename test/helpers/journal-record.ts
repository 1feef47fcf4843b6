// For the tests that drive the write-behind journal directly: a live lease taken the way the
// escrow takes one, and a journal record as the escrow makes it when a hold comes out of a lease (a
// start, no end yet; `fields` sets what a test needs).
import { type JournalRecord, startedRecord } from '../../src/ledger/journal-record.js';
import type { Pool } from '../../src/store/pool.js';
import { newRequestId } from './ledger-invariant.js';

type Needed = Pick<JournalRecord, 'accountId' | 'keyId' | 'leaseId' | 'grantPeriod'>;

export function testRecord(fields: Needed & Partial<JournalRecord>): JournalRecord {
  const start = startedRecord({
    requestId: newRequestId(),
    product: 'messages',
    model: 'sonnet',
    holdInk: 100,
    holdGrantInk: 0,
    createdAt: new Date().toISOString(),
    ...fields,
  });
  return { ...start, ...fields };
}

export interface TestLease {
  readonly id: number;
  readonly period: number;
}

/** A live lease of `wantInk` for the key, to the started instance `instance` at `epoch`. */
export async function takeLease(pool: Pool, instance: string, epoch: number, accountId: string, keyId: string, wantInk = 5000): Promise<TestLease> {
  const r = await pool.query<{ result: string; lease_id: string; grant_period: number }>(
    `SELECT * FROM ledger_lease_take(NULL, $1, $2, $3, $4, 1, $5, 0, 1000, 1000, 3600000, now())`,
    [accountId, keyId, instance, epoch, wantInk],
  );
  if (r.rows[0]!.result !== 'ok') throw new Error(`lease take: ${r.rows[0]!.result}`);
  return { id: Number(r.rows[0]!.lease_id), period: r.rows[0]!.grant_period };
}
