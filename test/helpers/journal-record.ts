// A journal record as the escrow makes it when a hold comes out of a lease (a start, no end yet),
// for the tests that drive the write-behind journal directly. `fields` sets what a test needs.
import type { JournalRecord } from '../../src/ledger/write-behind.js';
import { newRequestId } from './ledger-invariant.js';

export function startedRecord(fields: Pick<JournalRecord, 'accountId' | 'keyId' | 'leaseId' | 'grantPeriod'> & Partial<JournalRecord>): JournalRecord {
  return {
    requestId: newRequestId(),
    product: 'messages',
    model: 'sonnet',
    holdInk: 100,
    holdGrantInk: 0,
    createdAt: new Date().toISOString(),
    vendorRequestId: null,
    end: null,
    chargeInk: 0,
    restGrantInk: 0,
    restPaygInk: 0,
    usage: null,
    reason: null,
    resolvedAt: null,
    queued: false,
    startWindow: 0,
    endWritten: false,
    waiters: undefined,
    ...fields,
  };
}
