// The life of this instance's Ink leases, apart from the holds drawn from them (escrow.ts): which
// lease serves each key, giving a lease's spare Ink back (retire: on a recall, a key change, idle,
// shutdown), the heartbeat that renews them and hears what changed, and recovering leases that a
// killed or paused instance left past their expiry.
//
// Invariants it keeps:
// - A key has at most one live lease here (`byKey`); every lease not yet closed is in `byId`.
// - A lease gives back only what Postgres already counts as spare: ends still unwritten are
//   written first, so a recall gets everything back, not most.
// - A lease closes only with nothing in flight and every end written.
// - Once a money rule broke (the escrow is halted), nothing is returned or recovered here: the
//   leases expire and are recovered as after a kill.
import type { Config } from '../config/config.js';
import type { EventLog } from '../util/log.js';
import { isLedgerAssertion, type LedgerAssertionError } from './assertion.js';
import { ApiError } from '../errors.js';
import { storeError, type Pool } from '../store/pool.js';
import { HoldRate, leaseWantInk, LocalLease } from './lease.js';
import type { RecallScope } from './recalls.js';
import * as SQL from './statements.js';
import type { JournalRecord } from './journal-record.js';
import type { WriteBehind } from './write-behind.js';

/** What the holds of one key need to know between requests. */
export interface KeyState {
  readonly rate: HoldRate;
  /** performance.now() until which holds of this key take the exact path (a lease met the edge). */
  edgeUntilMs: number;
  /** A take or refill in flight for this key; requests that do not fit wait for it. */
  acquiring: Promise<LocalLease | undefined> | undefined;
}

/** Counters for the bench and tests, shared with the escrow. */
export interface EscrowStats {
  leaseHolds: number;
  exactHolds: number;
  takes: number;
  refills: number;
  edges: number;
  recalls: number;
  recovered: number;
}

export interface LeaseBookOptions {
  readonly pool: Pool;
  readonly lease: Config['ledger']['lease'];
  readonly instanceId: string;
  readonly epoch: () => number;
  readonly now: () => Date;
  readonly log: EventLog;
  readonly journal: WriteBehind;
  readonly stats: EscrowStats;
  /** True once a broken money rule halted the escrow. */
  readonly halted: () => boolean;
  /** A broken money rule met while returning a lease. */
  readonly violated: (error: LedgerAssertionError) => void;
  /** Leasing is on (configuration); turned off here when another start takes the instance id. */
  readonly leasing: boolean;
  /** True once the escrow is shutting down: a lease taken then is given back at once. */
  readonly closing: () => boolean;
  readonly onKeyChanged?: (keyId: string) => void;
  readonly onSwitchChanged?: () => void;
}

/** How long an end that must be durable waits for its write before the caller goes on anyway. */
export const WRITE_WAIT_MS = 5000;
const MAX_KEY_STATES = 100_000;
const RECOVER_BATCH = 50;
/**
 * A live lease of ours that we do not know is an orphan once it is this old: a take whose answer we
 * never got. Longer than any statement can run (statement_timeout), so a take still in flight is
 * never mistaken for one.
 */
const ORPHAN_AFTER_MS = 30_000;

export class LeaseBook {
  /** The live lease of each key (holds come from it). */
  readonly byKey = new Map<string, LocalLease>();
  /** Every lease not yet closed, live or draining, by id. */
  readonly byId = new Map<number, LocalLease>();
  private readonly keys = new Map<string, KeyState>();
  /** Lease returns in flight (close waits for them). */
  private readonly returns = new Set<Promise<void>>();
  private readonly keyWaiters = new Map<string, Array<() => void>>();
  private heartbeat: NodeJS.Timeout | undefined;
  private ticking: Promise<void> | undefined;
  private leasingOn: boolean;

  constructor(private readonly options: LeaseBookOptions) {
    this.leasingOn = options.leasing;
  }

  /** Leasing on (configuration) and not superseded by another start under our instance id. */
  get leasing(): boolean {
    return this.leasingOn;
  }

  startHeartbeat(): void {
    this.heartbeat = setInterval(() => void this.tick(), this.options.lease.heartbeatMs);
    this.heartbeat.unref();
  }

  /** No more renewals; waits for a heartbeat under way. */
  async stopHeartbeat(): Promise<void> {
    if (this.heartbeat) clearInterval(this.heartbeat);
    this.heartbeat = undefined;
    await this.ticking;
  }

  keyState(keyId: string): KeyState {
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

  /** A lease just taken serves its key from now on; the one it replaces gives its Ink back. */
  private adopt(lease: LocalLease, replaced: LocalLease | undefined): void {
    this.byId.set(lease.id, lease);
    if (replaced !== undefined && replaced.state === 'live') void this.retire(replaced, 'replaced');
    this.byKey.set(lease.keyId, lease);
  }

  /** One take or refill per key at a time; the requests that arrive meanwhile wait for it. */
  acquire(keyState: KeyState, accountId: string, keyId: string, holdInk: number): Promise<LocalLease | undefined> {
    if (keyState.acquiring) return keyState.acquiring;
    const p = this.take(keyState, accountId, keyId, holdInk).finally(() => {
      if (keyState.acquiring === p) keyState.acquiring = undefined;
    });
    keyState.acquiring = p;
    return p;
  }

  private async take(keyState: KeyState, accountId: string, keyId: string, holdInk: number): Promise<LocalLease | undefined> {
    const current = this.byKey.get(keyId);
    const sentMs = performance.now();
    const refill = current !== undefined && current.state === 'live' && !current.noRefill && sentMs < current.deadlineMs;
    const want = leaseWantInk(this.options.lease, holdInk, keyState.rate.inkPerS(sentMs));
    let row: { result: string; lease_id: number | null; take_grant_ink: number; take_payg_ink: number; grant_period: number | null };
    try {
      const r = await this.options.pool.query<typeof row>({
        name: 'ledger_lease_take',
        text: SQL.LEASE_TAKE,
        values: [
          refill ? current.id : null,
          accountId,
          keyId,
          this.options.instanceId,
          this.options.epoch(),
          refill ? 1 : holdInk,
          want,
          this.options.lease.floorInk,
          this.options.lease.walletPermille,
          this.options.lease.keyPermille,
          this.options.lease.ttlMs,
          this.options.now(),
        ],
      });
      row = r.rows[0]!;
    } catch (e) {
      if (refill) return current; // a refill is best effort: the lease still serves what it has
      storeError(e);
    }
    switch (row.result) {
      case 'ok': {
        const deadline = sentMs + this.options.lease.ttlMs - this.options.lease.deadlineMarginMs;
        if (refill && current.id === row.lease_id) {
          current.add(row.take_grant_ink, row.take_payg_ink);
          current.extend(deadline);
          this.options.stats.refills++;
          return current;
        }
        const lease = new LocalLease(row.lease_id!, accountId, keyId, row.grant_period!, deadline);
        lease.add(row.take_grant_ink, row.take_payg_ink);
        this.adopt(lease, current);
        this.options.stats.takes++;
        if (this.options.closing()) void this.retire(lease, 'shutting down');
        return lease;
      }
      case 'edge':
        this.options.stats.edges++;
        keyState.edgeUntilMs = performance.now() + this.options.lease.edgeRetryMs;
        if (refill) current.noRefill = true;
        return undefined;
      case 'key_not_live':
        if (current !== undefined) void this.retire(current, 'key not live');
        this.keyChanged(keyId);
        throw new ApiError('invalid_api_key', { message: 'The API key has been revoked or has expired.' });
      case 'lease_gone':
        if (current !== undefined) void this.retire(current, 'recalled');
        keyState.edgeUntilMs = performance.now() + this.options.lease.edgeRetryMs;
        return undefined;
      case 'stale_instance':
        this.superseded();
        return undefined;
      default:
        return undefined; // unknown_key: the exact path answers it
    }
  }

  /** A recall heard on the bus (or made here): this instance's leases in scope give their spare Ink back. */
  async heard(scope: RecallScope): Promise<void> {
    if (scope.why === 'switch') {
      this.options.onSwitchChanged?.();
      return;
    }
    const done: Promise<void>[] = [];
    const edgeUntil = performance.now() + this.options.lease.edgeRetryMs;
    for (const lease of this.byId.values()) {
      if ((scope.accountId !== undefined && lease.accountId === scope.accountId) || (scope.keyId !== undefined && lease.keyId === scope.keyId)) {
        this.keyState(lease.keyId).edgeUntilMs = edgeUntil;
        done.push(this.retire(lease, `recalled (${scope.why})`));
      }
    }
    if (scope.keyId !== undefined && scope.why === 'key') this.keyChanged(scope.keyId);
    await Promise.all(done);
  }

  keyChanged(keyId: string): void {
    this.options.onKeyChanged?.(keyId);
    const waiting = this.keyWaiters.get(keyId);
    if (waiting === undefined) return;
    this.keyWaiters.delete(keyId);
    for (const wake of waiting) wake();
  }

  /** Resolves when this instance next learns that the key changed (revoked, expired, cap edited). */
  nextKeyChange(keyId: string): Promise<void> {
    return new Promise((resolve) => {
      const waiting = this.keyWaiters.get(keyId);
      if (waiting) waiting.push(resolve);
      else this.keyWaiters.set(keyId, [resolve]);
    });
  }

  /**
   * Stops holds from a lease and gives its spare Ink back; closes it once nothing is in flight and
   * everything is written. Safe to call again (the heartbeat does, for leases still draining).
   */
  retire(lease: LocalLease, why: string): Promise<void> {
    if (this.options.halted()) return Promise.resolve(); // left for recovery
    const p = this.retireOnce(lease, why).catch((error: unknown) => {
      if (!isLedgerAssertion(error)) throw error;
      this.options.violated(error);
    });
    this.returns.add(p);
    void p.finally(() => this.returns.delete(p));
    return p;
  }

  /** Every lease gives its Ink back (shutdown). */
  async retireAll(why: string): Promise<void> {
    await Promise.all([...this.byId.values()].map((l) => this.retire(l, why)));
  }

  /** Resolves once the lease returns under way now have ended. */
  async returnsEnded(): Promise<void> {
    await Promise.all([...this.returns]);
  }

  /**
   * A hold of a recalled lease ended and gave Ink back to it: that Ink goes back to the wallet before
   * the caller hears of the settlement, as a durable hold's release would (the refusal that recalled
   * the lease must find it there). Rare: only holds in flight when their lease was recalled.
   */
  async returnFromDrained(lease: LocalLease, record: JournalRecord): Promise<void> {
    await this.waitWritten(record); // until then Postgres counts that Ink as the hold, still in the lease
    while (lease.returnDone !== undefined) await lease.returnDone;
    if (lease.state === 'draining') await this.retire(lease, 'a recalled hold ended');
  }

  /** Waits (bounded) for a record's end to be written; past the bound it stays queued and is logged. */
  async waitWritten(record: JournalRecord): Promise<void> {
    if (!(await this.options.journal.whenWritten(record, WRITE_WAIT_MS))) {
      this.options.log(
        { request_id: record.requestId, end: record.end, note: 'kept in the journal queue; written when the store answers' },
        'ledger.end_not_yet_written',
      );
    }
  }

  /** A record's end is in Postgres: its lease takes the rest back, and closes once drained. */
  endWritten(record: JournalRecord): void {
    const lease = this.byId.get(record.leaseId);
    if (lease === undefined) return;
    lease.written(record.restGrantInk, record.restPaygInk);
    if (lease.state === 'draining' && lease.inFlight === 0 && lease.unwritten === 0) void this.retire(lease, 'drained');
  }

  private async retireOnce(lease: LocalLease, why: string): Promise<void> {
    if (lease.state === 'closed') return;
    if (lease.drain() && this.byKey.get(lease.keyId) === lease) this.byKey.delete(lease.keyId);
    if (lease.returning) return;
    lease.returning = true;
    let done!: () => void;
    lease.returnDone = new Promise<void>((resolve) => (done = resolve));
    // Only what Postgres already sees as spare leaves: Ink an ended hold gave back stays until its
    // end is written, so write those ends first (a recall must get everything back, not most).
    if (lease.pendingInk > 0) await this.options.journal.flushAll(WRITE_WAIT_MS);
    const close = lease.inFlight === 0 && lease.unwritten === 0;
    const { grantInk, paygInk } = lease.beginReturn();
    try {
      const r = await this.options.pool.query<{ result: string }>({
        name: 'ledger_lease_return',
        text: SQL.LEASE_RETURN,
        values: [lease.id, this.options.instanceId, this.options.epoch(), grantInk, paygInk, close, true, this.options.now()],
      });
      const result = r.rows[0]!.result;
      if (result === 'ok') {
        if (close) this.closeLocal(lease);
      } else {
        // lease_gone: recovered meanwhile (its Ink went back there); mismatch: a bug, left to recovery.
        if (result !== 'lease_gone') this.options.log({ lease_id: lease.id, result, why }, 'ledger.lease_return_refused');
        this.closeLocal(lease);
      }
    } catch (e) {
      lease.undoReturn(grantInk, paygInk);
      this.options.log({ lease_id: lease.id, why, err: e as Error }, 'ledger.lease_return_failed');
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
  superseded(): void {
    if (!this.leasingOn) return;
    this.leasingOn = false;
    this.options.log({ instance_id: this.options.instanceId, epoch: this.options.epoch() }, 'ledger.instance_superseded');
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
    const lc = this.options.lease;
    const sentMs = performance.now();
    try {
      const r = await this.options.pool.query<{ lease_id: number | null; give_up: string | null }>({
        name: 'ledger_heartbeat',
        text: SQL.HEARTBEAT,
        values: [this.options.instanceId, this.options.epoch(), lc.ttlMs, this.options.now(), [...this.byId.keys()], ORPHAN_AFTER_MS],
      });
      const deadline = sentMs + lc.ttlMs - lc.deadlineMarginMs;
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
          this.keyState(lease.keyId).edgeUntilMs = performance.now() + lc.edgeRetryMs;
          void this.retire(lease, row.give_up);
        }
      }
      const nowMs = performance.now();
      for (const lease of this.byId.values()) {
        if (lease.state === 'draining' && !lease.returning) void this.retire(lease, 'draining');
        else if (lease.state === 'live' && lease.inFlight === 0 && nowMs - lease.lastHoldMs > lc.idleMs) void this.retire(lease, 'idle');
      }
      await this.recoverExpired();
    } catch (e) {
      this.options.log({ err: e as Error }, 'ledger.heartbeat_failed');
    }
  }

  /** Recovers leases anyone left past their expiry (a killed or paused instance). */
  async recoverExpired(): Promise<number> {
    const cutoff = new Date(this.options.now().getTime() - this.options.lease.recoverGraceMs);
    const r = await this.options.pool.query<{ id: number }>(SQL.EXPIRED_LEASES, [cutoff, RECOVER_BATCH]);
    let n = 0;
    for (const row of r.rows) {
      // One lease that cannot be recovered (its rows disagree: a bug to look at) must not block the rest.
      try {
        if (await this.recover(row.id, 'lease expired')) n++;
      } catch (e) {
        this.options.log({ lease_id: row.id, err: e as Error }, 'ledger.lease_recover_failed');
      }
    }
    return n;
  }

  async recover(leaseId: number, why: string): Promise<boolean> {
    const r = await this.options.pool.query<{ kept: number | null }>(SQL.LEASE_RECOVER, [leaseId, this.options.now(), `${why}; hold kept for reconciliation`]);
    const kept = r.rows[0]?.kept;
    if (kept === null || kept === undefined) return false;
    this.options.stats.recovered++;
    this.options.log({ lease_id: leaseId, why, holds_kept: kept }, 'ledger.lease_recovered');
    return true;
  }

  /** Runs one heartbeat now and waits for the lease returns it (or anything before it) started. */
  async beatNow(): Promise<void> {
    await this.tick();
    while (this.returns.size > 0) await Promise.all([...this.returns]);
  }
}
