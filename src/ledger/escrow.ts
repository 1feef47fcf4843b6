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
import { ApiError, isApiError } from '../errors.js';
import type { Config } from '../config/config.js';
import { storeError, type Pool } from '../store/pool.js';
import { assertLedger, isLedgerAssertion, type LedgerAssertionError } from './assertion.js';
import { stoppedAnswer } from './fail-stop.js';
import { CheckedHold } from './hold.js';
import type { Hold, Ledger, RecordedUsage, ReserveInput, ResolveResult } from './ledger.js';
import { checkReserveInput, checkVendorRequestId, usageJson, wholeInk } from './move-input.js';
import { HoldRate, leaseWantInk, LocalLease } from './lease.js';
import { createRecallBus, type RecallBus, type RecallScope } from './recalls.js';
import * as SQL from './statements.js';
import type { TextBilling } from './text-billing.js';
import { WriteBehind, type JournalRecord } from './write-behind.js';
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

export interface EscrowFaults {
  /** The charge the lease is told for this request in place of the hold's (undefined: the true one). */
  readonly skewLeaseCharge?: (requestId: string, chargeInk: number) => number | undefined;
}

/** What an end writes on the request record besides its amounts (and the vendor's id): set only once the end is checked and made. */
interface EndFields {
  readonly usage: string | null | undefined;
  readonly reason: string | undefined;
}

interface KeyState {
  readonly rate: HoldRate;
  /** performance.now() until which holds of this key take the exact path (a lease met the edge). */
  edgeUntilMs: number;
  /** A take or refill in flight for this key; requests that do not fit wait for it. */
  acquiring: Promise<LocalLease | undefined> | undefined;
}

interface ActiveHold {
  readonly record: JournalRecord;
  readonly lease: LocalLease;
  /** Its life, checked at every move. */
  readonly hold: CheckedHold;
}

/** How long an end that must be durable (unknown usage, sync mode) waits for its write before the answer goes anyway. */
const WRITE_WAIT_MS = 5000;
const MAX_KEY_STATES = 100_000;
const RECOVER_BATCH = 50;
const RECALL_POLL_MS = 10;
const CLOSE_FLUSH_MS = 10_000;
/**
 * A live lease of ours that we do not know is an orphan once it is this old: a take whose answer we
 * never got. Longer than any statement can run (statement_timeout), so a take still in flight is
 * never mistaken for one.
 */
const ORPHAN_AFTER_MS = 30_000;

/** A hold of a lease ends once: a second end, until its record is written, is answered from memory. */
const ALREADY_RESOLVED: ResolveResult = Object.freeze({ resolved: false, reason: 'already_resolved' });

const unavailable = (message: string, cause?: unknown) => new ApiError('provider_unavailable', { message, retryAfterS: 1, cause });

export class Escrow implements TextBilling {
  private readonly pool: Pool;
  private readonly ledger: Ledger;
  private readonly cfg: LedgerConfig;
  private readonly lc: LedgerConfig['lease'];
  private readonly now: () => Date;
  private readonly log: EscrowOptions['log'];
  readonly instanceId: string;
  private epoch = 0;
  /** Leasing on (config) and not superseded by another start under our instance id. */
  private leasing: boolean;
  private closing = false;
  /** A money rule broke here: no more holds or moves; the leases are left for recovery. */
  private halted: LedgerAssertionError | undefined;
  /** The live lease of each key (holds come from it). */
  private readonly byKey = new Map<string, LocalLease>();
  /** Every lease not yet closed, live or draining, by id. */
  private readonly byId = new Map<number, LocalLease>();
  private readonly keys = new Map<string, KeyState>();
  private readonly active = new Map<string, ActiveHold>();
  readonly journal: WriteBehind;
  private bus: RecallBus | undefined;
  private heartbeat: NodeJS.Timeout | undefined;
  private ticking: Promise<void> | undefined;
  /** Lease returns in flight (close waits for them). */
  private readonly returns = new Set<Promise<void>>();
  private readonly keyWaiters = new Map<string, Array<() => void>>();
  /** Counters for the bench and tests. */
  readonly stats = { leaseHolds: 0, exactHolds: 0, takes: 0, refills: 0, edges: 0, recalls: 0, recovered: 0 };

  private constructor(private readonly o: EscrowOptions) {
    this.pool = o.pool;
    this.ledger = o.ledger;
    this.cfg = o.config;
    this.lc = o.config.lease;
    this.now = o.now ?? (() => new Date());
    this.log = o.log;
    this.instanceId = o.instanceId;
    this.leasing = o.config.lease.enabled;
    this.journal = new WriteBehind(o.pool, {
      instanceId: o.instanceId,
      epoch: () => this.epoch,
      flushMs: o.config.flushMs,
      flushMaxRecords: o.config.flushMaxRecords,
      journalMaxRecords: o.config.journalMaxRecords,
      asyncCommit: o.config.durability === 'write-behind',
      now: this.now,
      log: o.log,
      onEndWritten: (r) => this.endWritten(r),
      onViolation: (e) => this.violated(e),
    });
  }

  /** Registers this instance (a new epoch), recovers what an earlier start under the same id left, starts the heartbeat. */
  static async start(o: EscrowOptions): Promise<Escrow> {
    const e = new Escrow(o);
    const r = await o.pool.query<{ epoch: number }>(SQL.INSTANCE_START, [o.instanceId, e.now()]);
    e.epoch = r.rows[0]!.epoch;
    const old = await o.pool.query<{ id: number }>(SQL.OWN_OLD_LEASES, [o.instanceId, e.epoch]);
    for (const row of old.rows) await e.recover(row.id, 'instance restarted');
    if (o.bus) {
      e.bus = createRecallBus({
        ...o.bus,
        onRecall: (s) => void e.heard(s),
        onError: (err) => o.log({ err }, 'ledger.recall_bus_error'),
        publishVia: o.pool,
      });
    }
    e.heartbeat = setInterval(() => void e.tick(), o.config.lease.heartbeatMs);
    e.heartbeat.unref();
    return e;
  }

  get currentEpoch(): number {
    return this.epoch;
  }

  /** Leases this instance holds now (live or draining). */
  get openLeases(): number {
    return this.byId.size;
  }

  // ---------------------------------------------------------------------------------------------
  // Admission

  async reserve(input: ReserveInput): Promise<Hold> {
    if (this.halted !== undefined) throw stoppedAnswer();
    if (this.closing) throw unavailable('The gateway is shutting down; retry on another instance.');
    if (!this.leasing) return this.exact(input);
    // Checked here as the exact path checks its own: a record the flush cannot write would stop every batch behind it.
    checkReserveInput(input);
    const nowMs = performance.now();
    const ks = this.keyState(input.keyId);
    ks.rate.add(input.holdInk, nowMs);
    const lease = this.byKey.get(input.keyId);
    if (lease !== undefined) {
      const h = this.holdFrom(lease, ks, input, nowMs);
      if (h !== undefined) return h;
    }
    if (ks.edgeUntilMs > nowMs) return this.exact(input);
    for (let attempt = 0; attempt < 3; attempt++) {
      const l = await this.acquire(ks, input.accountId, input.keyId, input.holdInk);
      if (l === undefined) break;
      const h = this.holdFrom(l, ks, input, performance.now());
      if (h !== undefined) return h;
    }
    return this.exact(input);
  }

  /** The hold from `lease`, synchronously, or undefined when it is not live, late or short. */
  private holdFrom(lease: LocalLease, ks: KeyState, input: ReserveInput, nowMs: number): Hold | undefined {
    if (lease.accountId !== input.accountId) return undefined;
    if (this.journal.full) throw unavailable('The ledger cannot write its journal now; retry after Retry-After.');
    const split = lease.take(input.holdInk, nowMs);
    if (split === undefined) return undefined;
    const record: JournalRecord = {
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
      vendorRequestId: null,
      end: null,
      chargeInk: 0,
      restGrantInk: 0,
      restPaygInk: 0,
      usage: null,
      reason: null,
      resolvedAt: null,
      queued: false,
      endWritten: false,
      waiters: undefined,
    };
    this.active.set(input.requestId, { record, lease, hold: new CheckedHold(input.requestId, input.holdInk, split.grantInk, split.paygInk) });
    this.journal.start(record);
    this.stats.leaseHolds++;
    if (lease.wantsRefill(this.lc.refillBelowPermille) && ks.acquiring === undefined)
      void this.acquire(ks, lease.accountId, lease.keyId, input.holdInk).catch(() => undefined);
    return { requestId: input.requestId, holdInk: input.holdInk, grantInk: split.grantInk, paygInk: split.paygInk };
  }

  private keyState(keyId: string): KeyState {
    let ks = this.keys.get(keyId);
    if (ks === undefined) {
      if (this.keys.size >= MAX_KEY_STATES) {
        for (const [k, v] of this.keys) {
          if (v.acquiring === undefined && !this.byKey.has(k)) {
            this.keys.delete(k);
            break;
          }
        }
      }
      ks = { rate: new HoldRate(), edgeUntilMs: 0, acquiring: undefined };
      this.keys.set(keyId, ks);
    }
    return ks;
  }

  /** One take or refill per key at a time; the requests that arrive meanwhile wait for it. */
  private acquire(ks: KeyState, accountId: string, keyId: string, holdInk: number): Promise<LocalLease | undefined> {
    if (ks.acquiring) return ks.acquiring;
    const p = this.take(ks, accountId, keyId, holdInk).finally(() => {
      if (ks.acquiring === p) ks.acquiring = undefined;
    });
    ks.acquiring = p;
    return p;
  }

  private async take(ks: KeyState, accountId: string, keyId: string, holdInk: number): Promise<LocalLease | undefined> {
    const current = this.byKey.get(keyId);
    const sentMs = performance.now();
    const refill = current !== undefined && current.state === 'live' && !current.noRefill && sentMs < current.deadlineMs;
    const want = leaseWantInk(this.lc, holdInk, ks.rate.inkPerS(sentMs));
    let row: { result: string; lease_id: number | null; take_grant_ink: number; take_payg_ink: number; grant_period: number | null };
    try {
      const r = await this.pool.query<typeof row>({
        name: 'ledger_lease_take',
        text: SQL.LEASE_TAKE,
        values: [
          refill ? current.id : null,
          accountId,
          keyId,
          this.instanceId,
          this.epoch,
          refill ? 1 : holdInk,
          want,
          this.lc.floorInk,
          this.lc.walletPermille,
          this.lc.keyPermille,
          this.lc.ttlMs,
          this.now(),
        ],
      });
      row = r.rows[0]!;
    } catch (e) {
      if (refill) return current; // a refill is best effort: the lease still serves what it has
      storeError(e);
    }
    switch (row.result) {
      case 'ok': {
        const deadline = sentMs + this.lc.ttlMs - this.lc.deadlineMarginMs;
        if (refill && current.id === row.lease_id) {
          current.add(row.take_grant_ink, row.take_payg_ink);
          current.extend(deadline);
          this.stats.refills++;
          return current;
        }
        const lease = new LocalLease(row.lease_id!, accountId, keyId, row.grant_period!, deadline);
        lease.add(row.take_grant_ink, row.take_payg_ink);
        this.byId.set(lease.id, lease);
        if (current !== undefined && current.state === 'live') void this.retire(current, 'replaced');
        this.byKey.set(keyId, lease);
        this.stats.takes++;
        if (this.closing) void this.retire(lease, 'shutting down');
        return lease;
      }
      case 'edge':
        this.stats.edges++;
        ks.edgeUntilMs = performance.now() + this.lc.edgeRetryMs;
        if (refill) current.noRefill = true;
        return undefined;
      case 'key_not_live':
        if (current !== undefined) void this.retire(current, 'key not live');
        this.keyChanged(keyId);
        throw new ApiError('invalid_api_key', { message: 'The API key has been revoked or has expired.' });
      case 'lease_gone':
        if (current !== undefined) void this.retire(current, 'recalled');
        ks.edgeUntilMs = performance.now() + this.lc.edgeRetryMs;
        return undefined;
      case 'stale_instance':
        this.superseded();
        return undefined;
      default:
        return undefined; // unknown_key: the exact path answers it
    }
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
        if (!this.leasing || !isApiError(e) || (e.code !== 'insufficient_ink' && e.code !== 'key_ink_limit_reached')) throw e;
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
        await this.heard(s);
        await this.bus?.publish(s).catch((err: Error) => this.log({ err }, 'ledger.recall_publish_failed'));
      }
      first = false;
      if (performance.now() >= until) return false;
      await new Promise((r) => setTimeout(r, RECALL_POLL_MS));
    }
  }

  /** A recall heard on the bus (or made here): this instance's leases in scope give their spare Ink back. */
  private async heard(s: RecallScope): Promise<void> {
    if (s.why === 'switch') {
      this.o.onSwitchChanged?.();
      return;
    }
    const done: Promise<void>[] = [];
    const edgeUntil = performance.now() + this.lc.edgeRetryMs;
    for (const lease of this.byId.values()) {
      if ((s.accountId !== undefined && lease.accountId === s.accountId) || (s.keyId !== undefined && lease.keyId === s.keyId)) {
        this.keyState(lease.keyId).edgeUntilMs = edgeUntil;
        done.push(this.retire(lease, `recalled (${s.why})`));
      }
    }
    if (s.keyId !== undefined && s.why === 'key') this.keyChanged(s.keyId);
    await Promise.all(done);
  }

  private keyChanged(keyId: string): void {
    this.o.onKeyChanged?.(keyId);
    const w = this.keyWaiters.get(keyId);
    if (w === undefined) return;
    this.keyWaiters.delete(keyId);
    for (const f of w) f();
  }

  /** Resolves when this instance next learns that the key changed (revoked, expired, cap edited). */
  nextKeyChange(keyId: string): Promise<void> {
    return new Promise((resolve) => {
      const w = this.keyWaiters.get(keyId);
      if (w) w.push(resolve);
      else this.keyWaiters.set(keyId, [resolve]);
    });
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
    return this.guard(this.endInLease(a, 'settle', Math.min(chargeInk, r.holdInk), { usage, reason: undefined }));
  }

  async release(requestId: string, reason: string): Promise<ResolveResult> {
    if (this.halted !== undefined) throw stoppedAnswer();
    const a = this.active.get(requestId);
    if (a === undefined) return this.guard(this.ledger.release(requestId, reason));
    if (a.record.end !== null) return ALREADY_RESOLVED;
    return this.guard(this.endInLease(a, 'release', 0, { usage: undefined, reason: reason.slice(0, 500) }));
  }

  /**
   * Ends a leased hold in memory: `chargeInk` (at most the hold) is charged, the rest goes back to
   * the lease, the record joins the journal. Answered at once, except when its lease was recalled
   * (the freed Ink goes back to the wallet first) or in sync mode (after the write).
   */
  private async endInLease(a: ActiveHold, end: 'settle' | 'release', chargeInk: number, fields: EndFields): Promise<ResolveResult> {
    const r = a.record;
    // A text lane settles only what it sent (usage exists only for a dispatched request); it does
    // not report the dispatch apart, so a settle of a hold still `reserved` records it first.
    // Preconditions first, nothing changed yet (not the hold, the lease, nor the record): the end
    // is a legal move of the hold, the record's split is the hold's, and the lease would give back
    // exactly what the hold releases, source by source (lease.end refuses before it changes).
    const o = a.hold.checkEnd(end, chargeInk);
    assertLedger(
      r.holdInk === a.hold.holdInk && r.holdGrantInk === a.hold.grantInk && r.end === null,
      () => `hold ${r.requestId}: its record (${r.holdInk}, grant ${r.holdGrantInk}, end ${r.end}) is not the hold's`,
      () => a.hold.figures(),
    );
    const leaseCharge = this.o.faults?.skewLeaseCharge?.(r.requestId, chargeInk) ?? chargeInk;
    const rest = a.lease.end(r.requestId, r.holdGrantInk, r.holdInk - r.holdGrantInk, leaseCharge, o.releasedGrantInk, o.releasedPaygInk);
    if (end === 'settle' && a.hold.state === 'reserved') a.hold.dispatch();
    const done = end === 'settle' ? a.hold.settle(chargeInk) : a.hold.release();
    // Postconditions: the hold moved exactly what was checked, and the lease took back exactly what it released.
    assertLedger(
      done.chargedInk === o.chargedInk &&
        done.chargedInk + done.releasedInk === r.holdInk &&
        done.releasedGrantInk === rest.restGrantInk &&
        done.releasedPaygInk === rest.restPaygInk,
      () =>
        `hold ${r.requestId}: ended charging ${done.chargedInk} and releasing ${done.releasedGrantInk} + ${done.releasedPaygInk}, the lease took back ${rest.restGrantInk} + ${rest.restPaygInk}`,
      () => ({ ...a.hold.figures(), charged_ink: done.chargedInk, rest_grant_ink: rest.restGrantInk, rest_payg_ink: rest.restPaygInk }),
    );
    if (fields.usage !== undefined) r.usage = fields.usage;
    if (fields.reason !== undefined) r.reason = fields.reason;
    r.restGrantInk = rest.restGrantInk;
    r.restPaygInk = rest.restPaygInk;
    r.end = end;
    r.chargeInk = chargeInk;
    r.resolvedAt = this.now().toISOString();
    this.journal.touch(r);
    if (a.lease.state === 'draining' && chargeInk < r.holdInk) await this.returnFromDrained(a.lease, r);
    else if (this.cfg.durability === 'sync') await this.waitWritten(r);
    return { resolved: true, chargedInk: chargeInk, releasedInk: r.holdInk - chargeInk, expiredInk: 0 };
  }

  /** The hold leaves its lease as a durable open hold (usage_unknown), written before this resolves. */
  async markUsageUnknownEventually(requestId: string, details: { vendorRequestId?: string; reason?: string } = {}): Promise<void> {
    if (this.halted !== undefined) throw stoppedAnswer();
    const a = this.active.get(requestId);
    if (a === undefined) return this.ledger.markUsageUnknownEventually(requestId, details);
    if (a.record.end !== null) return;
    return this.guard(this.keepInLease(a, details));
  }

  /** The hold leaves its lease whole (usage unknown); its record is written before this resolves. */
  private async keepInLease(a: ActiveHold, details: { vendorRequestId?: string; reason?: string }): Promise<void> {
    const r = a.record;
    const requestId = r.requestId;
    const vendorId = details.vendorRequestId === undefined ? undefined : checkVendorRequestId(details.vendorRequestId);
    assertLedger(
      !a.hold.ended,
      () => `hold ${requestId}: ended as ${a.hold.state}, cannot be left open`,
      () => a.hold.figures(),
    );
    a.lease.endKept(requestId, r.holdGrantInk, r.holdInk - r.holdGrantInk); // asserts before it changes the lease
    if (a.hold.state === 'reserved') a.hold.dispatch(); // unknown usage is only ever of a request sent
    a.hold.markUnknown();
    r.end = 'unknown';
    if (vendorId !== undefined) r.vendorRequestId = vendorId;
    r.reason = (details.reason ?? 'usage unknown').slice(0, 500);
    this.journal.touch(r);
    await this.waitWritten(r);
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
  private violated(e: LedgerAssertionError): void {
    if (this.halted === undefined) {
      this.halted = e;
      if (this.heartbeat) clearInterval(this.heartbeat);
    }
    if (this.o.failStop) this.o.failStop(e);
    else this.log({ err: e.message, figures: e.figures, note: 'no fail-stop handler: moves stopped' }, 'ledger.assertion_failed');
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
    if (this.heartbeat) clearInterval(this.heartbeat);
    await this.ticking;
    const written = await this.journal.flushAll(CLOSE_FLUSH_MS);
    if (!written) this.log({ records: this.journal.pending, note: 'left for lease recovery' }, 'ledger.halt_unwritten');
    this.journal.close();
    await this.bus?.close();
    this.bus = undefined;
  }

  private async waitWritten(r: JournalRecord): Promise<void> {
    if (!(await this.journal.whenWritten(r, WRITE_WAIT_MS))) {
      this.log({ request_id: r.requestId, end: r.end, note: 'kept in the journal queue; written when the store answers' }, 'ledger.end_not_yet_written');
    }
  }

  /** A record's end is in Postgres: a draining lease with nothing left in flight can close. */
  private endWritten(r: JournalRecord): void {
    if (this.halted !== undefined) return; // the halted picture is not trusted: only the journal is written
    // Until now a second end of the same request was answered here; from now on Postgres answers it.
    if (this.active.get(r.requestId)?.record === r) this.active.delete(r.requestId);
    const lease = this.byId.get(r.leaseId);
    if (lease === undefined) return;
    lease.written(r.restGrantInk, r.restPaygInk);
    if (lease.state === 'draining' && lease.inFlight === 0 && lease.unwritten === 0) void this.retire(lease, 'drained');
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
  // Lease life: return, heartbeat, recovery

  /**
   * Stops holds from a lease and gives its spare Ink back; closes it once nothing is in flight and
   * everything is written. Safe to call again (the heartbeat does, for leases still draining).
   */
  private retire(lease: LocalLease, why: string): Promise<void> {
    if (this.halted !== undefined) return Promise.resolve(); // left for recovery
    const p = this.retireOnce(lease, why).catch((e: unknown) => {
      if (!isLedgerAssertion(e)) throw e;
      this.violated(e);
    });
    this.returns.add(p);
    void p.finally(() => this.returns.delete(p));
    return p;
  }

  /**
   * A hold of a recalled lease ended and gave Ink back to it: that Ink goes back to the wallet before
   * the caller hears of the settlement, as a durable hold's release would (the refusal that recalled
   * the lease must find it there). Rare: only holds in flight when their lease was recalled.
   */
  private async returnFromDrained(lease: LocalLease, r: JournalRecord): Promise<void> {
    await this.waitWritten(r); // until then Postgres counts that Ink as the hold, still in the lease
    while (lease.returnDone !== undefined) await lease.returnDone;
    if (lease.state === 'draining') await this.retire(lease, 'a recalled hold ended');
  }

  private async retireOnce(lease: LocalLease, why: string): Promise<void> {
    if (lease.state === 'closed') return;
    if (lease.drain() && this.byKey.get(lease.keyId) === lease) this.byKey.delete(lease.keyId);
    if (lease.returning) return;
    lease.returning = true;
    let done!: () => void;
    lease.returnDone = new Promise<void>((r) => (done = r));
    // Only what Postgres already sees as spare leaves: Ink an ended hold gave back stays until its
    // end is written, so write those ends first (a recall must get everything back, not most).
    if (lease.pendingInk > 0) await this.journal.flushAll(WRITE_WAIT_MS);
    const close = lease.inFlight === 0 && lease.unwritten === 0;
    const { grantInk: g, paygInk: p } = lease.beginReturn();
    try {
      const r = await this.pool.query<{ result: string }>({
        name: 'ledger_lease_return',
        text: SQL.LEASE_RETURN,
        values: [lease.id, this.instanceId, this.epoch, g, p, close, true, this.now()],
      });
      const result = r.rows[0]!.result;
      if (result === 'ok') {
        if (close) this.closeLocal(lease);
      } else {
        // lease_gone: recovered meanwhile (its Ink went back there); mismatch: a bug, left to recovery.
        if (result !== 'lease_gone') this.log({ lease_id: lease.id, result, why }, 'ledger.lease_return_refused');
        this.closeLocal(lease);
      }
    } catch (e) {
      lease.undoReturn(g, p);
      this.log({ lease_id: lease.id, why, err: e as Error }, 'ledger.lease_return_failed');
    } finally {
      lease.returning = false;
      lease.returnDone = undefined;
      done();
    }
  }

  private closeLocal(lease: LocalLease): void {
    lease.close();
    this.byId.delete(lease.id);
    if (this.byKey.get(lease.keyId) === lease) this.byKey.delete(lease.keyId);
  }

  /** Another start took our instance id: nothing leased is ours any more (it is recovered there). */
  private superseded(): void {
    if (!this.leasing) return;
    this.leasing = false;
    this.log({ instance_id: this.instanceId, epoch: this.epoch }, 'ledger.instance_superseded');
    for (const lease of this.byId.values()) {
      lease.expire();
      lease.drain();
    }
    this.byKey.clear();
  }

  private tick(): Promise<void> {
    if (this.ticking) return this.ticking;
    this.ticking = this.beat().finally(() => {
      this.ticking = undefined;
    });
    return this.ticking;
  }

  private async beat(): Promise<void> {
    const sentMs = performance.now();
    try {
      const r = await this.pool.query<{ lease_id: number | null; give_up: string | null }>({
        name: 'ledger_heartbeat',
        text: SQL.HEARTBEAT,
        values: [this.instanceId, this.epoch, this.lc.ttlMs, this.now(), [...this.byId.keys()], ORPHAN_AFTER_MS],
      });
      const deadline = sentMs + this.lc.ttlMs - this.lc.deadlineMarginMs;
      for (const row of r.rows) {
        if (row.give_up === 'stale') {
          this.superseded();
          break;
        }
        if (row.give_up === 'orphan' && row.lease_id !== null) {
          await this.recover(row.lease_id, 'a take whose answer was lost');
          continue;
        }
        const lease = row.lease_id === null ? undefined : this.byId.get(row.lease_id);
        if (lease === undefined) continue;
        lease.extend(deadline);
        if (row.give_up !== null) {
          if (row.give_up === 'key_not_live') this.keyChanged(lease.keyId);
          this.keyState(lease.keyId).edgeUntilMs = performance.now() + this.lc.edgeRetryMs;
          void this.retire(lease, row.give_up);
        }
      }
      const nowMs = performance.now();
      for (const lease of this.byId.values()) {
        if (lease.state === 'draining' && !lease.returning) void this.retire(lease, 'draining');
        else if (lease.state === 'live' && lease.inFlight === 0 && nowMs - lease.lastHoldMs > this.lc.idleMs) void this.retire(lease, 'idle');
      }
      await this.recoverExpired();
    } catch (e) {
      this.log({ err: e as Error }, 'ledger.heartbeat_failed');
    }
  }

  /** Recovers leases anyone left past their expiry (a killed or paused instance). */
  async recoverExpired(): Promise<number> {
    const cutoff = new Date(this.now().getTime() - this.lc.recoverGraceMs);
    const r = await this.pool.query<{ id: number }>(SQL.EXPIRED_LEASES, [cutoff, RECOVER_BATCH]);
    let n = 0;
    for (const row of r.rows) {
      // One lease that cannot be recovered (its rows disagree: a bug to look at) must not block the rest.
      try {
        if (await this.recover(row.id, 'lease expired')) n++;
      } catch (e) {
        this.log({ lease_id: row.id, err: e as Error }, 'ledger.lease_recover_failed');
      }
    }
    return n;
  }

  private async recover(leaseId: number, why: string): Promise<boolean> {
    const r = await this.pool.query<{ kept: number | null }>(SQL.LEASE_RECOVER, [leaseId, this.now(), `${why}; hold kept for reconciliation`]);
    const kept = r.rows[0]?.kept;
    if (kept === null || kept === undefined) return false;
    this.stats.recovered++;
    this.log({ lease_id: leaseId, why, holds_kept: kept }, 'ledger.lease_recovered');
    return true;
  }

  /** Runs one heartbeat now and waits for the lease returns it (or anything before it) started. */
  async beatNow(): Promise<void> {
    await this.tick();
    while (this.returns.size > 0) await Promise.all([...this.returns]);
  }

  /**
   * Shutdown, after the server stopped admitting and drained: no new holds, everything written,
   * every lease returned. What cannot be written in time stays for recovery to find.
   */
  async close(): Promise<void> {
    if (this.halted !== undefined) return this.halt();
    if (this.closing) return;
    this.closing = true;
    if (this.heartbeat) clearInterval(this.heartbeat);
    await this.ticking;
    await Promise.all([...this.byId.values()].map((l) => this.retire(l, 'shutting down')));
    const written = await this.journal.flushAll(CLOSE_FLUSH_MS);
    if (!written) this.log({ records: this.journal.pending, note: 'left for lease recovery' }, 'ledger.close_unwritten');
    // Closing a lease waits for its last write; a return still running finishes first.
    for (let round = 0; round < 3 && this.byId.size > 0; round++) {
      await Promise.all([...this.returns]);
      await Promise.all([...this.byId.values()].map((l) => this.retire(l, 'shutting down')));
    }
    // Anything of this epoch still live now is an orphan (a take whose answer was lost) or a lease
    // whose return failed: nothing is in flight any more, so recovering it is exact.
    try {
      const left = await this.pool.query<{ id: number }>(SQL.OWN_LIVE_LEASES, [this.instanceId, this.epoch]);
      for (const row of left.rows) await this.recover(row.id, 'left at shutdown');
    } catch (e) {
      this.log({ leases: this.byId.size, err: e as Error, note: 'recovered when they expire' }, 'ledger.close_leases_left');
    }
    this.journal.close();
    await this.bus?.close();
  }
}
