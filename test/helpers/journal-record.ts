// A journal record as the escrow makes it when a hold comes out of a lease (a start, no end yet),
// for the tests that drive the write-behind journal directly. `fields` sets what a test needs.
import { type JournalRecord, startedRecord } from '../../src/ledger/journal-record.js';
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
