// The Ink ledger's durable moves behind one class: reserve before a request runs, then settle,
// release or refund exactly once; credits; account views; reconciliation. The class is thin: it
// owns the group commits and the background retries and hands each move to the module that keeps
// its money rules (docs/api/billing.md, docs/ledger.md):
//
//   reserve.ts        durable reserves (grant first, the wallet and the key's cap together)
//   resolve.ts        settle / release / refund / reconcile of a durable hold, at most once
//   reserve-void.ts   tombstones for reserves whose outcome was lost
//   move-statement.ts every move's figures asserted inside its transaction, before COMMIT
//   credits.ts        top-up, grant, roll-over
//   account-views.ts  wallet and request reads
//   reconcile.ts      reconciliation by vendor request id
//   request-marks.ts  usage_unknown marks and vendor ids (no Ink moves)
//
// Amounts are whole Ink (BIGINT); the ledger never prices anything (src/catalog/pricing.ts rounds).
// A broken money rule is raised as LedgerAssertionError after its move rolled back, handed to the
// fail-stop (LedgerOptions.failStop), and never caught here to carry on.
//
// Throughput: concurrent reserves (and, separately, resolutions) are grouped into one statement
// and one commit (group-commit.ts). Each item still gets its whole hold or nothing.
import { outcomeUnknown, type Queryable, type Pool } from '../store/pool.js';
import { GroupCommit } from '../store/group-commit.js';
import { getRequest, listRequests, walletView } from './account-views.js';
import { BackgroundRetries } from './background.js';
import { grant, rollPeriod, topUp } from './credits.js';
import { stoppedAnswer } from './fail-stop.js';
import type {
  Hold,
  LedgerOptions,
  LedgerTx,
  ReconcileOptions,
  ReconcileReport,
  RecordedUsage,
  RequestRecord,
  ReserveInput,
  ResolveResult,
  VendorUsageRecord,
  WalletView,
} from './ledger-types.js';
import { checkReserveInput } from './move-input.js';
import type { MoveContext } from './move-statement.js';
import { reconcile } from './reconcile.js';
import { RequestMarks } from './request-marks.js';
import { abandonReserve } from './reserve-void.js';
import { reserveOutcome, runReserve, type ReserveRow } from './reserve.js';
import { resolveOutcome, returnItem, runResolve, settleItem, type ResolveItem, type ResolveRow } from './resolve.js';
import type { EventLog } from '../util/log.js';

export type * from './ledger-types.js';

export class Ledger {
  private readonly now: () => Date;
  private readonly stopped: () => boolean;
  private readonly log: EventLog;
  private readonly m: MoveContext;
  private readonly reserveBatch: GroupCommit<ReserveInput, ReserveRow | Error> | undefined;
  private readonly resolveBatch: GroupCommit<ResolveItem, ResolveRow | Error> | undefined;
  private readonly bg: BackgroundRetries;
  private readonly marks: RequestMarks;
  private closed = false;

  constructor(
    private readonly pool: Pool,
    opts: LedgerOptions = {},
  ) {
    const now = (this.now = opts.now ?? (() => new Date()));
    this.stopped = opts.stopped ?? (() => false);
    this.log = opts.log ?? (() => undefined);
    const batchLockTimeoutMs = opts.batchLockTimeoutMs ?? 250;
    if (!Number.isSafeInteger(batchLockTimeoutMs) || batchLockTimeoutMs < 1) throw new RangeError('ledger: batchLockTimeoutMs must be >= 1');
    this.m = {
      pool,
      batchLockTimeoutMs,
      functionForSingles: opts.functionForSingles ?? false,
      nowText: () => now().toISOString(),
      failStop: opts.failStop,
      faults: opts.faults,
    };
    this.bg = new BackgroundRetries(opts.abandonRetryMs ?? [500, 2000, 5000, 15000], this.log);
    const batching = opts.batching ?? true;
    const gc = { maxItems: opts.batchMaxItems ?? 128, maxInFlight: opts.batchMaxInFlight ?? 1, maxQueued: opts.batchMaxQueued ?? 10_000 };
    if (batching) {
      this.reserveBatch = new GroupCommit('ledger reserve', (items) => runReserve(this.m, items), gc);
      this.resolveBatch = new GroupCommit('ledger resolve', (items) => runResolve(this.m, items), gc);
    }
    this.marks = new RequestMarks(pool, this.bg, { log: this.log, batch: batching ? { maxItems: gc.maxItems, maxQueued: gc.maxQueued } : undefined });
  }

  /** Group-commit counters: statements sent and moves they carried, per kind (undefined when batching is off). */
  batchStats(): { reserve: { batches: number; items: number }; resolve: { batches: number; items: number } } | undefined {
    if (!this.reserveBatch || !this.resolveBatch) return undefined;
    const r = this.reserveBatch.stats,
      s = this.resolveBatch.stats;
    return { reserve: { batches: r.batches, items: r.items }, resolve: { batches: s.batches, items: s.items } };
  }

  // ---------------------------------------------------------------------------------------------
  // Reserve and resolve (reserve.ts, resolve.ts, reserve-void.ts)

  /**
   * Takes the hold, grant first. Throws ApiError insufficient_ink / key_ink_limit_reached (402) or
   * provider_unavailable (503, store outage, or this instance stopped); on any throw no hold exists.
   */
  async reserve(input: ReserveInput): Promise<Hold> {
    checkReserveInput(input);
    if (this.closed) throw new Error('ledger: closed');
    if (this.stopped()) throw stoppedAnswer();
    let row: ReserveRow | Error;
    try {
      row = this.reserveBatch ? await this.reserveBatch.submit(input) : (await runReserve(this.m, [input]))[0]!;
    } catch (e) {
      row = e as Error;
    }
    // A statement that may still commit on the server would leave a hold nobody knows about:
    // claim the id (or release the hold) in the background, then answer 503 now.
    if (row instanceof Error && outcomeUnknown(row)) abandonReserve(this.m, this.bg, input, this.now, this.log);
    return reserveOutcome(input, row);
  }

  /** Charges min(chargeInk, hold) grant-first out of the hold and returns the rest; logs a charge above the hold. */
  async settle(requestId: string, chargeInk: number, details: { usage?: RecordedUsage | object; vendorRequestId?: string } = {}): Promise<ResolveResult> {
    return this.resolve(settleItem(requestId, chargeInk, details));
  }

  /** The vendor refused before running: the whole hold goes back. */
  async release(requestId: string, reason: string): Promise<ResolveResult> {
    return this.resolve(returnItem('release', requestId, reason));
  }

  /** A failed video/image generation: the whole hold goes back, nothing is charged. */
  async refund(requestId: string, reason: string): Promise<ResolveResult> {
    return this.resolve(returnItem('refund', requestId, reason));
  }

  /**
   * The same moves inside the caller's transaction (e.g. a job submit that claims idempotency,
   * reserves and writes its row in one commit). No batching; the caller commits or rolls back, and
   * a broken figure throws before the caller can commit.
   */
  using(client: Queryable): LedgerTx {
    const resolveOn = async (item: ResolveItem): Promise<ResolveResult> =>
      resolveOutcome(item, (await runResolve(this.m, [item], 'first', client))[0]!, this.log);
    return {
      reserve: async (input) => {
        checkReserveInput(input);
        if (this.stopped()) throw stoppedAnswer();
        return reserveOutcome(input, (await runReserve(this.m, [input], 'first', client))[0]!);
      },
      settle: async (requestId, chargeInk, details = {}) => resolveOn(settleItem(requestId, chargeInk, details)),
      release: async (requestId, reason) => resolveOn(returnItem('release', requestId, reason)),
      refund: async (requestId, reason) => resolveOn(returnItem('refund', requestId, reason)),
    };
  }

  private async resolve(item: ResolveItem): Promise<ResolveResult> {
    if (this.closed) throw new Error('ledger: closed');
    let row: ResolveRow | Error;
    try {
      row = this.resolveBatch ? await this.resolveBatch.submit(item) : (await runResolve(this.m, [item]))[0]!;
    } catch (e) {
      row = e as Error;
    }
    return resolveOutcome(item, row, this.log);
  }

  // ---------------------------------------------------------------------------------------------
  // Request bookkeeping, no Ink moves (request-marks.ts)

  /** The vendor never reported usage: the hold stays open (and in key.ink_reserved) until reconciled. */
  markUsageUnknown(requestId: string, details: { vendorRequestId?: string; reason?: string } = {}): Promise<void> {
    return this.marks.markUsageUnknown(requestId, details);
  }

  /** markUsageUnknown, retried in the background when the store is briefly away (request-marks.ts). */
  markUsageUnknownEventually(requestId: string, details: { vendorRequestId?: string; reason?: string } = {}): Promise<void> {
    return this.marks.markUsageUnknownEventually(requestId, details);
  }

  setVendorRequestId(requestId: string, vendorRequestId: string): Promise<void> {
    return this.marks.setVendorRequestId(requestId, vendorRequestId);
  }

  // ---------------------------------------------------------------------------------------------
  // Credits (credits.ts), views (account-views.ts), reconciliation (reconcile.ts)

  /** Credits pay-as-you-go; counts one completed top-up. */
  topUp(accountId: string, ink: number, note?: string): Promise<void> {
    return topUp(this.m, this.now(), accountId, ink, note);
  }

  /** Admin: extends the current period's grant by `ink`; spent first, lapses at the next roll-over. */
  grant(accountId: string, ink: number, note?: string): Promise<void> {
    return grant(this.m, this.now(), accountId, ink, note);
  }

  /** Period roll-over: the unspent grant lapses and the plan's grant is credited (credits.ts). */
  rollPeriod(accountId: string): Promise<{ expiredInk: number; grantInk: number }> {
    return rollPeriod(this.m, this.now(), accountId);
  }

  walletView(accountId: string): Promise<WalletView | undefined> {
    return walletView(this.pool, accountId);
  }

  /** Newest first; limit 1 to 1,000 (default 50). */
  listRequests(accountId: string, opts: { limit?: number } = {}): Promise<RequestRecord[]> {
    return listRequests(this.pool, accountId, opts);
  }

  getRequest(requestId: string): Promise<RequestRecord | undefined> {
    return getRequest(this.pool, requestId);
  }

  /** Settles or releases each open hold a vendor record names; lists stale ones, never charged (reconcile.ts). */
  reconcile(records: Iterable<VendorUsageRecord> | AsyncIterable<VendorUsageRecord>, opts: ReconcileOptions): Promise<ReconcileReport> {
    return reconcile(this.m, this.now(), this.log, records, opts);
  }

  /** Finishes every move already submitted; the pool is the caller's to end. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([this.bg.close(), this.reserveBatch?.close(), this.resolveBatch?.close(), this.marks.close()]);
  }
}
