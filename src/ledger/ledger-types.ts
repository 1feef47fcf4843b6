// The ledger's vocabulary: what a move takes and answers, what a request record and a wallet look
// like as stored, and what reconciliation reads and reports. Types only, no logic and no money
// moves, so every concern module (reserve.ts, resolve.ts, credits.ts, account-views.ts,
// reconcile.ts) and every caller can share them without importing one another.
import type { TextUsage } from '../catalog/pricing.js';
import type { LedgerAssertionError } from './assertion.js';
import type { EventLog } from '../util/log.js';

export const PRODUCTS = ['messages', 'responses', 'video', 'images'] as const;
export type Product = (typeof PRODUCTS)[number];

export interface ReserveInput {
  requestId: string;
  accountId: string;
  keyId: string;
  product: Product;
  model: string;
  holdInk: number;
}

export interface Hold {
  requestId: string;
  holdInk: number;
  grantInk: number;
  paygInk: number;
}

/** Usage as recorded with a settlement: a bucket the vendor did not report is absent, never zero. */
export type RecordedUsage = Partial<TextUsage>;

export type ResolveResult =
  | {
      resolved: true;
      chargedInk: number;
      /** Returned to the pools it came from. */
      releasedInk: number;
      /** Old-period grant that lapsed instead of returning (only after a roll-over); charged + released + expired = hold. */
      expiredInk: number;
    }
  | { resolved: false; reason: 'already_resolved' | 'unknown_request' | 'in_lease' };

export interface WalletView {
  account_id: string;
  grant_ink: number;
  payg_ink: number;
  held_grant_ink: number;
  held_payg_ink: number;
  charged_ink: number;
  expired_ink: number;
  credited_ink: number;
  topups_completed: number;
  grant_period: number;
  period_started_at: Date;
}

export type RequestStatus = 'running' | 'usage_unknown' | 'settled' | 'released' | 'refunded' | 'void';

/** One request record (one hold), as stored. */
export interface RequestRecord {
  id: string;
  account_id: string;
  key_id: string;
  product: Product;
  model: string;
  status: RequestStatus;
  hold_state: 'open' | 'settled' | 'released' | 'refunded' | 'void';
  hold_ink: number;
  hold_grant_ink: number;
  hold_payg_ink: number;
  charged_ink: number;
  charged_grant_ink: number;
  charged_payg_ink: number;
  expired_ink: number;
  /** Reported usage buckets; null = nothing reported; an absent bucket was not reported. */
  usage: Record<string, unknown> | null;
  vendor_request_id: string | null;
  reason: string | null;
  created_at: Date;
  resolved_at: Date | null;
}

/** One line of a vendor's usage report (invoice / usage export), keyed by the vendor's request id. */
export interface VendorUsageRecord {
  vendorRequestId: string;
  /** Token buckets as the vendor reported them (Messages-style disjoint buckets). */
  usage?: RecordedUsage;
  /** A charge already worked out (video seconds, images, or a vendor-side total), whole Ink. */
  chargeInk?: number;
}

export interface ReconcileOptions {
  /** Open holds older than this with no record are listed (never charged). */
  olderThanMs: number;
  /** The whole-Ink charge for a record; throw (e.g. RangeError) to skip the record. Capped at the hold. */
  chargeFor: (req: RequestRecord, record: VendorUsageRecord) => number;
  /** Most entries kept per list in the report (counts are always complete). Default 1,000. */
  listLimit?: number;
}

export interface ReportList<T> {
  count: number;
  items: T[];
}

export interface ReconciledHold {
  requestId: string;
  vendorRequestId: string;
  holdInk: number;
  chargedInk: number;
  releasedInk: number;
  expiredInk: number;
}

export interface ReconcileReport {
  recordsRead: number;
  settled: ReportList<ReconciledHold>;
  released: ReportList<ReconciledHold>;
  unmatched: ReportList<{ vendorRequestId: string; reason: 'no_request' | 'already_resolved' }>;
  skipped: ReportList<{ vendorRequestId: string; requestId?: string; reason: string }>;
  /** Open holds older than the cut-off that no record named: for an operator to look at. */
  stale: ReportList<RequestRecord> & { olderThan: string; truncated: boolean };
}

/** The ledger's moves bound to one connection (inside the caller's transaction). */
export interface LedgerTx {
  reserve(input: ReserveInput): Promise<Hold>;
  settle(requestId: string, chargeInk: number, details?: { usage?: RecordedUsage | object; vendorRequestId?: string }): Promise<ResolveResult>;
  release(requestId: string, reason: string): Promise<ResolveResult>;
  refund(requestId: string, reason: string): Promise<ResolveResult>;
}

export interface LedgerOptions {
  now?: () => Date;
  /**
   * True once this instance stopped on a broken money rule (fail-stop.ts): every reserve, direct or
   * in a caller's transaction, then answers 503 before it touches the store.
   */
  stopped?: () => boolean;
  log?: EventLog;
  /** Group concurrent moves into one statement and one commit (default true). */
  batching?: boolean;
  /** Most moves per statement (default 128). */
  batchMaxItems?: number;
  /**
   * Statements in flight per kind of move (reserve, resolve); default 1. Why one: every batch of a
   * busy account queues for its wallet row anyway, so a second batch in flight mostly waits for
   * the first while splitting the backlog into smaller batches, and each batch has a fixed cost.
   * Measured with bench/text-breakdown.ts at 50 connections (four alternated runs each): Postgres
   * CPU per request 336-375 µs with one in flight, 384-513 µs with two; throughput unchanged.
   */
  batchMaxInFlight?: number;
  /** Most moves waiting per kind before new ones are refused with 503 (default 10,000). */
  batchMaxQueued?: number;
  /**
   * lock_timeout for a batch of more than one move and for its item-by-item retry (default 250 ms),
   * so a wedged row costs its neighbours at most about the session's lock_timeout in total.
   */
  batchLockTimeoutMs?: number;
  /**
   * Send a lone move through the batch functions too, instead of ledger_reserve_one /
   * ledger_resolve_one. For tests: both paths must agree on every rule.
   */
  functionForSingles?: boolean;
  /** Delays between attempts to clean up a reservation whose outcome is unknown (default 0.5 s, 2 s, 5 s, 15 s). */
  abandonRetryMs?: readonly number[];
  /**
   * The fail-stop (fail-stop.ts): told of every broken money rule a durable move meets, after its
   * transaction rolled back and before the error goes on to the caller.
   */
  failStop?: (err: LedgerAssertionError) => void;
  /** Code-only fault injection for tests (never from configuration). */
  faults?: LedgerFaults;
}

/**
 * Test-only faults: Ink added to one figure a durable move's statement answered, inside its
 * transaction and before that move's check, so the check's rollback and the fail-stop can be
 * exercised on a real database. `move` names the module; `id` is the request id (reserve, resolve)
 * or the account id (credit); undefined leaves the figure true.
 */
export interface LedgerFaults {
  readonly skewFigure?: (move: 'reserve' | 'resolve' | 'credit', id: string) => number | undefined;
}
