// The text lanes' billing: holds and settlements from escrow leases in memory, written behind.
//
// Admission takes the hold from this instance's lease on the key in one synchronous block (no
// await between the check and the subtraction). With no lease, or one too small, only this
// request waits: for a take or a refill (one durable move, shared by the requests of that key that
// arrive meanwhile) or, at the edge of the wallet or of the key's cap, for the exact path: a durable
// conditional reserve of its own (Ledger.reserve). A refusal there is final only once no lease on
// the account (or key) anywhere still keeps spare Ink: they are recalled first and, once they gave
// it back, the reserve is tried again. So the last Ink is exact across any number of instances.
//
// Settlement is in memory too: charge = min(usage cost, hold), the rest back to the lease, and the
// request record (start and end) goes to the write-behind journal (write-behind.ts). Unknown usage
// is the one end that waits for its write: the hold must be a durable open hold before the client
// is told so. `ledger.durability: sync` makes every settlement wait for its write.
//
// Three files, one lifecycle each: admission and the facade the lanes call (this file), ending a
// leased hold (leased-end.ts), and the leases' own life: take, refill, return, heartbeat, recovery
// (lease-book.ts). This file keeps: a hold is drawn from a lease in one synchronous block; a
// refusal is final only on the exact path once no lease anywhere keeps spare Ink; the first broken
// money rule halts every move here and goes to the fail-stop.
import { ApiError, isApiError } from '../errors.js';
import type { Config } from '../config/config.js';
import { storeError, type Pool } from '../store/pool.js';
import { isLedgerAssertion, type LedgerAssertionError } from './assertion.js';
import { stoppedAnswer } from './fail-stop.js';
import { CheckedHold } from './hold.js';
import type { Hold, Ledger, RecordedUsage, ReserveInput, ResolveResult } from './ledger.js';
import { checkReserveInput, checkVendorRequestId, usageJson, wholeInk } from './move-input.js';
import type { LocalLease } from './lease.js';
import { type EscrowStats, type KeyState, LeaseBook } from './lease-book.js';
import { type ActiveHold, type EndDeps, endInLease, type EscrowFaults, keepInLease } from './leased-end.js';

export type { EscrowFaults } from './leased-end.js';
import { createRecallBus, type RecallBus, type RecallScope } from './recalls.js';
import * as SQL from './statements.js';
import type { TextMoves } from './text-billing.js';
import { startedRecord, type JournalRecord } from './journal-record.js';
import { WriteBehind } from './write-behind.js';
import type { EventLog } from '../util/log.js';

type LedgerConfig = Config['ledger'];

export interface EscrowOptions {
  readonly pool: Pool;
  /** The exact path (durable per-request moves). */
  readonly ledger: Ledger;
  readonly config: LedgerConfig;
  readonly instanceId: string;
  readonly bus: { dbUrl: string; dbSchema: string; connectTimeoutMs: number; redis: Config['redis'] } | undefined;
  readonly log: EventLog;
  /** A key was revoked, expired or its cap edited elsewhere: authentication caches drop it. */
  readonly onKeyChanged?: (keyId: string) => void;
  /** An operator switch changed (heard on the bus): the deployment state re-reads them. */
  readonly onSwitchChanged?: () => void;
  readonly now?: () => Date;
  /** The one fail-stop handler (fail-stop.ts): told of every broken money rule met here. */
  readonly failStop?: (err: LedgerAssertionError) => void;
  /** Test-only ways to break a money rule on purpose; code-only, never read from configuration. */
  readonly faults?: EscrowFaults;
}

const RECALL_POLL_MS = 10;
const CLOSE_FLUSH_MS = 10_000;

/** A hold of a lease ends once: a second end, until its record is written, is answered from memory. */
const ALREADY_RESOLVED: ResolveResult = Object.freeze({ resolved: false, reason: 'already_resolved' });

const unavailable = (message: string, cause?: unknown) => new ApiError('provider_unavailable', { message, retryAfterS: 1, cause });

export class Escrow implements TextMoves {
  private readonly pool: Pool;
  private readonly ledger: Ledger;
  private readonly cfg: LedgerConfig;
  private readonly lc: LedgerConfig['lease'];
  private readonly now: () => Date;
  private readonly log: EscrowOptions['log'];
  readonly instanceId: string;
  private epoch = 0;
  private closing = false;
  /** A money rule broke here: no more holds or moves; the leases are left for recovery. */
  private halted: LedgerAssertionError | undefined;
  private readonly active = new Map<string, ActiveHold>();
  readonly journal: WriteBehind;
  /** The leases themselves: which serves each key, their return, heartbeat and recovery. */
  private readonly book: LeaseBook;
  private readonly ends: EndDeps;
  private bus: RecallBus | undefined;
  /** Counters for the bench and tests. */
  readonly stats: EscrowStats = { leaseHolds: 0, exactHolds: 0, takes: 0, refills: 0, edges: 0, recalls: 0, recovered: 0 };

  private constructor(private readonly options: EscrowOptions) {
    this.pool = options.pool;
    this.ledger = options.ledger;
    this.cfg = options.config;
    this.lc = options.config.lease;
    this.now = options.now ?? (() => new Date());
    this.log = options.log;
    this.instanceId = options.instanceId;
    this.journal = new WriteBehind(options.pool, {
      instanceId: options.instanceId,
      epoch: () => this.epoch,
      flushMs: options.config.flushMs,
      flushMaxRecords: options.config.flushMaxRecords,
      journalMaxRecords: options.config.journalMaxRecords,
      asyncCommit: options.config.durability === 'write-behind',
      now: this.now,
      log: options.log,
      onEndWritten: (r) => this.endWritten(r),
      onViolation: (e) => this.violated(e),
    });
    this.book = new LeaseBook({
      pool: options.pool,
      lease: options.config.lease,
      instanceId: options.instanceId,
      epoch: () => this.epoch,
      now: this.now,
      log: options.log,
      journal: this.journal,
      stats: this.stats,
      halted: () => this.halted !== undefined,
      violated: (e) => this.violated(e),
      leasing: options.config.lease.enabled,
      closing: () => this.closing,
      onKeyChanged: options.onKeyChanged,
      onSwitchChanged: options.onSwitchChanged,
    });
    this.ends = { journal: this.journal, book: this.book, now: this.now, durability: options.config.durability, faults: options.faults };
  }

  /** Registers this instance (a new epoch), recovers what an earlier start under the same id left, starts the heartbeat. */
  static async start(options: EscrowOptions): Promise<Escrow> {
    const e = new Escrow(options);
    const r = await options.pool.query<{ epoch: number }>(SQL.INSTANCE_START, [options.instanceId, e.now()]);
    e.epoch = r.rows[0]!.epoch;
    const old = await options.pool.query<{ id: number }>(SQL.OWN_OLD_LEASES, [options.instanceId, e.epoch]);
    for (const row of old.rows) await e.book.recover(row.id, 'instance restarted');
    if (options.bus) {
      e.bus = createRecallBus({
        ...options.bus,
        onRecall: (s) => void e.book.heard(s),
        onError: (err) => options.log({ err }, 'ledger.recall_bus_error'),
        publishVia: options.pool,
      });
    }
    e.book.startHeartbeat();
    return e;
  }

  get currentEpoch(): number {
    return this.epoch;
  }

  /** Leases this instance holds now (live or draining). */
  get openLeases(): number {
    return this.book.byId.size;
  }

  // ---------------------------------------------------------------------------------------------
  // Admission

  async reserve(input: ReserveInput): Promise<Hold> {
    if (this.halted !== undefined) throw stoppedAnswer();
    if (this.closing) throw unavailable('The gateway is shutting down; retry on another instance.');
    if (!this.book.leasing) return this.exact(input);
    // Checked here as the exact path checks its own: a record the flush cannot write would stop every batch behind it.
    checkReserveInput(input);
    const nowMs = performance.now();
    const ks = this.book.keyState(input.keyId);
    ks.rate.add(input.holdInk, nowMs);
    const lease = this.book.byKey.get(input.keyId);
    if (lease !== undefined) {
      const h = this.holdFrom(lease, ks, input, nowMs);
      if (h !== undefined) return h;
    }
    if (ks.edgeUntilMs > nowMs) return this.exact(input);
    for (let attempt = 0; attempt < 3; attempt++) {
      const l = await this.book.acquire(ks, input.accountId, input.keyId, input.holdInk);
      if (l === undefined) break;
      const h = this.holdFrom(l, ks, input, performance.now());
      if (h !== undefined) return h;
    }
    return this.exact(input);
  }

  /** The hold from `lease`, synchronously, or undefined when it is not live, late or short. */
  private holdFrom(lease: LocalLease, keyState: KeyState, input: ReserveInput, nowMs: number): Hold | undefined {
    if (lease.accountId !== input.accountId) return undefined;
    if (this.journal.full) throw unavailable('The ledger cannot write its journal now; retry after Retry-After.');
    const split = lease.take(input.holdInk, nowMs);
    if (split === undefined) return undefined;
    const record = startedRecord({
      requestId: input.requestId,
      accountId: input.accountId,
      keyId: input.keyId,
      product: input.product,
      model: input.model,
      leaseId: lease.id,
      holdInk: input.holdInk,
      holdGrantInk: split.grantInk,
      grantPeriod: lease.grantPeriod,
      createdAt: this.now().toISOString(),
    });
    this.active.set(input.requestId, { record, lease, hold: new CheckedHold(input.requestId, input.holdInk, split.grantInk, split.paygInk) });
    this.journal.start(record);
    this.stats.leaseHolds++;
    if (lease.wantsRefill(this.lc.refillBelowPermille) && keyState.acquiring === undefined)
      void this.book.acquire(keyState, lease.accountId, lease.keyId, input.holdInk).catch(() => undefined);
    return { requestId: input.requestId, holdInk: input.holdInk, grantInk: split.grantInk, paygInk: split.paygInk };
  }

  /** The exact path: one durable conditional move; a refusal is final only when nothing is leased anywhere. */
  private async exact(input: ReserveInput): Promise<Hold> {
    this.stats.exactHolds++;
    // A refusal names one limit (the key's cap is checked first, then the wallet); once the leases
    // behind it gave their Ink back, the retry may meet the other one: recall that too, once.
    const recalled = new Set<string>();
    for (;;) {
      try {
        return await this.guard(this.ledger.reserve(input)); // a broken rule halts this escrow too
      } catch (e) {
        if (!this.book.leasing || !isApiError(e) || (e.code !== 'insufficient_ink' && e.code !== 'key_ink_limit_reached')) throw e;
        if (recalled.has(e.code)) throw e;
        recalled.add(e.code);
        const scope = e.code === 'key_ink_limit_reached' ? { keyId: input.keyId } : { accountId: input.accountId };
        if (!(await this.recallAndWait(scope))) {
          throw unavailable('Part of this wallet is still leased by another gateway instance; retry after Retry-After.', e);
        }
      }
    }
  }

  /**
   * Recalls every lease of an account or key, here and on every instance, and waits (bounded) until
   * each has given its spare Ink back. False: some did not in time (an instance that stopped
   * answering; its lease expires and is recovered).
   */
  async recallAndWait(scope: { accountId?: string; keyId?: string }): Promise<boolean> {
    const a = scope.accountId ?? null,
      k = scope.keyId ?? null;
    const until = performance.now() + this.lc.recallWaitMs;
    let first = true;
    for (;;) {
      let marked: number, undrained: number;
      try {
        // Marks every undrained lease in scope, also one taken since the last round (a take that
        // committed as the recall began), and pauses new leases on the account or key meanwhile.
        const pauseUntil = new Date(this.now().getTime() + this.lc.recallWaitMs);
        marked = (await this.pool.query<{ marked: number }>(SQL.RECALL_LEASES, [a, k, this.now(), pauseUntil])).rows[0]!.marked;
        undrained = (await this.pool.query<{ n: number }>(SQL.UNDRAINED_LEASES, [a, k])).rows[0]!.n;
      } catch (e) {
        storeError(e);
      }
      if (undrained === 0) return true;
      if (marked > 0) {
        if (first) this.stats.recalls++;
        const s: RecallScope = { accountId: scope.accountId, keyId: scope.keyId, why: 'edge' };
        await this.book.heard(s);
        await this.bus?.publish(s).catch((err: Error) => this.log({ err }, 'ledger.recall_publish_failed'));
      }
      first = false;
      if (performance.now() >= until) return false;
      await new Promise((r) => setTimeout(r, RECALL_POLL_MS));
    }
  }

  /** Resolves when this instance next learns that the key changed (revoked, expired, cap edited). */
  nextKeyChange(keyId: string): Promise<void> {
    return this.book.nextKeyChange(keyId);
  }

  // ---------------------------------------------------------------------------------------------
  // Settlement

  async settle(requestId: string, chargeInk: number, details: { usage?: RecordedUsage | object; vendorRequestId?: string } = {}): Promise<ResolveResult> {
    if (this.halted !== undefined) throw stoppedAnswer();
    const a = this.active.get(requestId);
    if (a === undefined) return this.guard(this.ledger.settle(requestId, chargeInk, details)); // a durable hold: the ledger's own checked move
    if (a.record.end !== null) return ALREADY_RESOLVED;
    wholeInk('chargeInk', chargeInk);
    const usage = usageJson(details.usage);
    const vendorId = details.vendorRequestId === undefined ? undefined : checkVendorRequestId(details.vendorRequestId);
    const r = a.record;
    if (chargeInk > r.holdInk) this.log({ requestId, chargeInk, holdInk: r.holdInk, kind: 'settle' }, 'ledger.charge_above_hold');
    // The vendor's id is bookkeeping, not money: kept even if the end is refused, so that the hold
    // left open can still be matched by reconciliation.
    if (vendorId !== undefined) r.vendorRequestId = vendorId;
    return this.guard(endInLease(this.ends, a, 'settle', Math.min(chargeInk, r.holdInk), { usage, reason: undefined }));
  }

  async release(requestId: string, reason: string): Promise<ResolveResult> {
    if (this.halted !== undefined) throw stoppedAnswer();
    const a = this.active.get(requestId);
    if (a === undefined) return this.guard(this.ledger.release(requestId, reason));
    if (a.record.end !== null) return ALREADY_RESOLVED;
    return this.guard(endInLease(this.ends, a, 'release', 0, { usage: undefined, reason: reason.slice(0, 500) }));
  }

  /** The hold leaves its lease as a durable open hold (usage_unknown), written before this resolves. */
  async markUsageUnknownEventually(requestId: string, details: { vendorRequestId?: string; reason?: string } = {}): Promise<void> {
    if (this.halted !== undefined) throw stoppedAnswer();
    const a = this.active.get(requestId);
    if (a === undefined) return this.ledger.markUsageUnknownEventually(requestId, details);
    if (a.record.end !== null) return;
    return this.guard(keepInLease(this.ends, a, details));
  }

  async setVendorRequestId(requestId: string, vendorRequestId: string): Promise<void> {
    if (this.halted !== undefined) return; // bookkeeping only; recovery keeps the hold open either way
    const a = this.active.get(requestId);
    if (a === undefined) return this.ledger.setVendorRequestId(requestId, vendorRequestId);
    a.record.vendorRequestId = checkVendorRequestId(vendorRequestId);
    if (a.hold.state === 'reserved') a.hold.dispatch(); // the vendor answered: the request was sent
    this.journal.touch(a.record);
  }

  /** A broken money rule met in `move` goes to the fail-stop, then on to the caller: never caught to carry on. */
  private async guard<T>(move: Promise<T>): Promise<T> {
    try {
      return await move;
    } catch (e) {
      if (isLedgerAssertion(e)) this.violated(e);
      throw e;
    }
  }

  /** The first broken rule halts this escrow at once (no holds, no renewals) and tells the fail-stop. */
  private violated(error: LedgerAssertionError): void {
    if (this.halted === undefined) {
      this.halted = error;
      void this.book.stopHeartbeat();
    }
    if (this.options.failStop) this.options.failStop(error);
    else this.log({ err: error.message, figures: error.figures, note: 'no fail-stop handler: moves stopped' }, 'ledger.assertion_failed');
  }

  /** True once a broken money rule halted this escrow. */
  get isHalted(): boolean {
    return this.halted !== undefined;
  }

  /**
   * The fail-stop's halt: writes the journal records known good (bounded) and stops, without
   * returning a lease or recovering one: they expire and are recovered as after a kill.
   */
  async halt(): Promise<void> {
    this.closing = true;
    await this.book.stopHeartbeat();
    const written = await this.journal.flushAll(CLOSE_FLUSH_MS);
    if (!written) this.log({ records: this.journal.pending, note: 'left for lease recovery' }, 'ledger.halt_unwritten');
    this.journal.close();
    await this.bus?.close();
    this.bus = undefined;
  }

  /** A record's end is in Postgres: a draining lease with nothing left in flight can close. */
  private endWritten(record: JournalRecord): void {
    if (this.halted !== undefined) return; // the halted picture is not trusted: only the journal is written
    // Until now a second end of the same request was answered here; from now on Postgres answers it.
    if (this.active.get(record.requestId)?.record === record) this.active.delete(record.requestId);
    this.book.endWritten(record);
  }

  // ---------------------------------------------------------------------------------------------
  // Views

  /** Read-your-writes: every record this instance has is written before a view reads Postgres. */
  async beforeView(): Promise<void> {
    if (!(await this.journal.flushAll(this.cfg.flushMs * 2 + 2000))) {
      throw unavailable('The ledger cannot write its journal now; retry after Retry-After.');
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Lease life (lease-book.ts)

  /** Recovers leases anyone left past their expiry (a killed or paused instance). */
  recoverExpired(): Promise<number> {
    return this.book.recoverExpired();
  }

  /** Runs one heartbeat now and waits for the lease returns it (or anything before it) started. */
  beatNow(): Promise<void> {
    return this.book.beatNow();
  }

  /**
   * Shutdown, after the server stopped admitting and drained: no new holds, everything written,
   * every lease returned. What cannot be written in time stays for recovery to find.
   */
  async close(): Promise<void> {
    if (this.halted !== undefined) return this.halt();
    if (this.closing) return;
    this.closing = true;
    await this.book.stopHeartbeat();
    await this.book.retireAll('shutting down');
    const written = await this.journal.flushAll(CLOSE_FLUSH_MS);
    if (!written) this.log({ records: this.journal.pending, note: 'left for lease recovery' }, 'ledger.close_unwritten');
    // Closing a lease waits for its last write; a return still running finishes first.
    for (let round = 0; round < 3 && this.book.byId.size > 0; round++) {
      await this.book.returnsEnded();
      await this.book.retireAll('shutting down');
    }
    // Anything of this epoch still live now is an orphan (a take whose answer was lost) or a lease
    // whose return failed: nothing is in flight any more, so recovering it is exact.
    try {
      const left = await this.pool.query<{ id: number }>(SQL.OWN_LIVE_LEASES, [this.instanceId, this.epoch]);
      for (const row of left.rows) await this.book.recover(row.id, 'left at shutdown');
    } catch (e) {
      this.log({ leases: this.book.byId.size, err: e as Error, note: 'recovered when they expire' }, 'ledger.close_leases_left');
    }
    this.journal.close();
    await this.bus?.close();
  }
}
