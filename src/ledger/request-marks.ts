// Request bookkeeping that moves no Ink: a hold whose usage is unknown is marked usage_unknown
// (it stays open, and in the key's ink_reserved, until reconciliation), and a vendor's request id
// is put on the request record as soon as it is known, so reconciliation can match the hold.
//
// Money rules kept here: none is changed by these statements (they touch status, vendor id and
// reason only, never an amount); the mark applies only to an open hold outside a lease
// (MARK_USAGE_UNKNOWN's WHERE, statements.ts), and a mark that found no such hold is logged.
import { GroupCommit } from '../store/group-commit.js';
import { storeError, type Pool } from '../store/pool.js';
import type { BackgroundRetries } from './background.js';
import { checkRequestId, MAX_REASON_CHARS, text } from './move-input.js';
import * as SQL from './statements.js';
import type { EventLog } from '../util/log.js';

export interface RequestMarksOptions {
  readonly log: EventLog;
  /** Group vendor ids named in the same turn into one statement (undefined: one statement each). */
  readonly batch: { maxItems: number; maxQueued: number } | undefined;
}

export class RequestMarks {
  /** Vendor ids named mid-stream: bookkeeping, one batch at a time so it never crowds out the moves. */
  private readonly vendorIdBatch: GroupCommit<readonly [string, string], void> | undefined;

  constructor(
    private readonly pool: Pool,
    private readonly background: BackgroundRetries,
    private readonly options: RequestMarksOptions,
  ) {
    if (options.batch) {
      this.vendorIdBatch = new GroupCommit('ledger vendor ids', (items) => this.runSetVendorIds(items), { ...options.batch, maxInFlight: 1 });
    }
  }

  /** The vendor never reported usage: the hold stays open (and in key.ink_reserved) until reconciled. */
  async markUsageUnknown(requestId: string, details: { vendorRequestId?: string; reason?: string } = {}): Promise<void> {
    checkRequestId(requestId);
    const vid = text('vendorRequestId', details.vendorRequestId, 256);
    const reason = text('reason', details.reason, MAX_REASON_CHARS);
    let n: number | null;
    try {
      n = (await this.pool.query(SQL.MARK_USAGE_UNKNOWN, [requestId, vid, reason])).rowCount;
    } catch (e) {
      storeError(e);
    }
    if (n !== 1) this.options.log({ requestId }, 'ledger.usage_unknown_not_open');
  }

  /**
   * markUsageUnknown that does not give up when the store is briefly away: the first try is
   * awaited; if it fails, it is retried in the background (abandonRetryMs apart) until it lands
   * or the ledger closes. The text lanes mark every hold they leave open this way (no receipt,
   * vendor 5xx, a settle that could not be written): the hold stays open either way, and this is
   * what puts the vendor's id on it, without which reconciliation could never match the vendor's
   * record.
   */
  async markUsageUnknownEventually(requestId: string, details: { vendorRequestId?: string; reason?: string } = {}): Promise<void> {
    try {
      await this.markUsageUnknown(requestId, details);
    } catch (e) {
      this.background.retryLater('ledger.usage_unknown_gave_up', requestId, () => this.markUsageUnknown(requestId, details));
      throw e;
    }
  }

  async setVendorRequestId(requestId: string, vendorRequestId: string): Promise<void> {
    checkRequestId(requestId);
    const vid = text('vendorRequestId', vendorRequestId, 256)!;
    try {
      if (this.vendorIdBatch) await this.vendorIdBatch.submit([requestId, vid]);
      else await this.pool.query({ name: 'ledger_set_vendor_request_id', text: SQL.SET_VENDOR_REQUEST_ID, values: [requestId, vid] });
    } catch (e) {
      storeError(e);
    }
  }

  private async runSetVendorIds(items: Array<readonly [string, string]>): Promise<void[]> {
    const ids = new Array<string>(items.length),
      vids = new Array<string>(items.length);
    for (let i = 0; i < items.length; i++) [ids[i], vids[i]] = items[i]!;
    await this.pool.query({ name: 'ledger_set_vendor_request_ids', text: SQL.SET_VENDOR_REQUEST_IDS, values: [ids, vids] });
    return new Array<void>(items.length);
  }

  /** Finishes every vendor id already submitted. */
  async close(): Promise<void> {
    await this.vendorIdBatch?.close();
  }
}
