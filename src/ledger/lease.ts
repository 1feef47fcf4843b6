// One escrow lease as its owner holds it in memory: spare Ink (grant and pay-as-you-go parts),
// holds in flight, and the local deadline after which it must not be spent any more.
//
// Durable view of the same lease (leases row) = spare + holds in flight + charges not yet flushed.
// Every change below happens in one synchronous block: check and subtract with no await between.

import { LedgerAssertionError, wholeNonNegative as whole } from './assertion.js';

export type LeaseState = 'live' | 'draining' | 'closed';

/** What an end gave back to the lease, by source. */
export interface LeaseRest {
  readonly restGrantInk: number;
  readonly restPaygInk: number;
}

const NOTHING_BACK: LeaseRest = Object.freeze({ restGrantInk: 0, restPaygInk: 0 });

/**
 * One lease, guarding itself: its amounts are private and change only through the methods below.
 * Each method asserts its preconditions before it changes anything, and the lease's conservation
 * after, source by source (grant, pay-as-you-go):
 *
 *   took (takes and refills, less what was returned) = spare + holds in flight + spent
 *
 * where spent is what ended holds charged or kept (usage unknown: it left as a durable hold), and
 * nothing negative. Pending Ink has no upper bound of its own: it may be held, even charged and
 * given back again, before the first end is written (so it may pass spare and even took); only
 * spare above pending may be returned, and a write never takes back more than is pending
 * (`written`). A broken rule throws LedgerAssertionError with every figure. The checks allocate
 * nothing unless they fail (the hold path runs them per request).
 */
export class LocalLease {
  private spareG = 0;
  private spareP = 0;
  /**
   * The part of spare that ended holds gave back and whose end is not written yet: in Postgres that
   * Ink still counts as a hold in flight in this lease, so it may not be returned before the write.
   */
  private pendingG = 0;
  private pendingP = 0;
  private inFlightG = 0;
  private inFlightP = 0;
  private holds = 0;
  private tookG = 0;
  private tookP = 0;
  private spentG = 0;
  private spentP = 0;
  private records = 0;
  private lastTake = 0;
  private deadline: number;
  private lastHold: number;
  private current: LeaseState = 'live';
  /** The last refill met the edge: no more until the key leaves the exact path. */
  noRefill = false;
  /** A return or close is running. */
  returning = false;
  /** The return running now, if any. */
  returnDone: Promise<void> | undefined;

  constructor(
    readonly id: number,
    readonly accountId: string,
    readonly keyId: string,
    readonly grantPeriod: number,
    deadlineMs: number,
  ) {
    this.deadline = deadlineMs;
    this.lastHold = performance.now();
  }

  get spareGrantInk(): number {
    return this.spareG;
  }
  get sparePaygInk(): number {
    return this.spareP;
  }
  get spareInk(): number {
    return this.spareG + this.spareP;
  }
  get pendingInk(): number {
    return this.pendingG + this.pendingP;
  }
  /** Holds taken and not yet ended. */
  get inFlight(): number {
    return this.holds;
  }
  /** Records of this lease whose end is not yet written (the lease closes only at zero). */
  get unwritten(): number {
    return this.records;
  }
  /** performance.now() after which no hold may come from it (renewed by take, refill and heartbeat). */
  get deadlineMs(): number {
    return this.deadline;
  }
  get lastHoldMs(): number {
    return this.lastHold;
  }
  get state(): LeaseState {
    return this.current;
  }

  /** Every figure of the lease, for a violation report. */
  figures(): Record<string, number | string> {
    return {
      lease_id: this.id,
      account_id: this.accountId,
      key_id: this.keyId,
      lease_state: this.current,
      spare_grant_ink: this.spareG,
      spare_payg_ink: this.spareP,
      pending_grant_ink: this.pendingG,
      pending_payg_ink: this.pendingP,
      in_flight_grant_ink: this.inFlightG,
      in_flight_payg_ink: this.inFlightP,
      holds_in_flight: this.holds,
      took_grant_ink: this.tookG,
      took_payg_ink: this.tookP,
      spent_grant_ink: this.spentG,
      spent_payg_ink: this.spentP,
      unwritten: this.records,
    };
  }

  private violation(what: string, extra?: Record<string, number | string | boolean>): LedgerAssertionError {
    return new LedgerAssertionError(`lease ${this.id}: ${what}`, { ...this.figures(), ...extra });
  }

  /** The postcondition of every move: each amount in its bounds, and conservation per source. */
  private assertBounds(move: string): void {
    if (
      this.spareG < 0 ||
      this.spareP < 0 ||
      this.pendingG < 0 ||
      this.pendingP < 0 ||
      this.inFlightG < 0 ||
      this.inFlightP < 0 ||
      this.holds < 0 ||
      this.records < 0 ||
      this.tookG !== this.spareG + this.inFlightG + this.spentG ||
      this.tookP !== this.spareP + this.inFlightP + this.spentP
    ) {
      throw this.violation(`after ${move}: an amount out of its bounds (none negative; took = spare + in flight + spent)`);
    }
  }

  /** Adds a take or refill (grant and pay-as-you-go parts as the database split them). */
  add(grantInk: number, paygInk: number): void {
    if (!whole(grantInk) || !whole(paygInk) || this.current === 'closed')
      throw this.violation('add: not whole Ink, or the lease is closed', { grant_ink: grantInk, payg_ink: paygInk });
    this.spareG += grantInk;
    this.spareP += paygInk;
    this.tookG += grantInk;
    this.tookP += paygInk;
    this.lastTake = grantInk + paygInk;
    this.assertBounds('add');
  }

  /** Takes `holdInk`, grant first, if the lease is live, in time and holds enough; else undefined. */
  take(holdInk: number, nowMs: number): { grantInk: number; paygInk: number } | undefined {
    if (this.current !== 'live' || nowMs >= this.deadline || this.spareG + this.spareP < holdInk) return undefined;
    if (!whole(holdInk)) throw this.violation('take: the hold is not whole Ink', { hold_ink: holdInk });
    const g = Math.min(this.spareG, holdInk);
    this.spareG -= g;
    this.spareP -= holdInk - g;
    this.inFlightG += g;
    this.inFlightP += holdInk - g;
    this.holds++;
    this.records++;
    this.lastHold = nowMs;
    this.assertBounds('take');
    return { grantInk: g, paygInk: holdInk - g };
  }

  /**
   * Ends a hold: `chargeInk` (at most the hold) is spent grant first out of the hold's own split,
   * the rest goes back to spare (pending until the end is written). `expectGrantInk` and
   * `expectPaygInk` are what the hold says it released: the lease gives back exactly that, source by
   * source, or refuses before changing anything.
   */
  end(requestId: string, holdGrantInk: number, holdPaygInk: number, chargeInk: number, expectGrantInk: number, expectPaygInk: number): LeaseRest {
    const cg = Math.min(chargeInk, holdGrantInk);
    const restGrantInk = holdGrantInk - cg;
    const restPaygInk = holdPaygInk - (chargeInk - cg);
    if (
      this.holds < 1 ||
      !whole(holdGrantInk) ||
      !whole(holdPaygInk) ||
      !whole(chargeInk) ||
      chargeInk > holdGrantInk + holdPaygInk ||
      holdGrantInk > this.inFlightG ||
      holdPaygInk > this.inFlightP ||
      restGrantInk !== expectGrantInk ||
      restPaygInk !== expectPaygInk
    ) {
      throw this.violation(`end: the lease would give back ${restGrantInk} + ${restPaygInk}, the hold released ${expectGrantInk} + ${expectPaygInk}`, {
        request_id: requestId,
        hold_grant_ink: holdGrantInk,
        hold_payg_ink: holdPaygInk,
        charge_ink: chargeInk,
        expect_grant_ink: expectGrantInk,
        expect_payg_ink: expectPaygInk,
      });
    }
    this.holds--;
    this.inFlightG -= holdGrantInk;
    this.inFlightP -= holdPaygInk;
    this.spentG += cg;
    this.spentP += chargeInk - cg;
    this.spareG += restGrantInk;
    this.spareP += restPaygInk;
    this.pendingG += restGrantInk;
    this.pendingP += restPaygInk;
    this.assertBounds('end');
    return { restGrantInk, restPaygInk };
  }

  /** Ends a hold whose usage is unknown: the whole hold leaves the lease as a durable hold, nothing comes back. */
  endKept(requestId: string, holdGrantInk: number, holdPaygInk: number): LeaseRest {
    if (this.holds < 1 || !whole(holdGrantInk) || !whole(holdPaygInk) || holdGrantInk > this.inFlightG || holdPaygInk > this.inFlightP) {
      throw this.violation('endKept: no such hold in flight', { request_id: requestId, hold_grant_ink: holdGrantInk, hold_payg_ink: holdPaygInk });
    }
    this.holds--;
    this.inFlightG -= holdGrantInk;
    this.inFlightP -= holdPaygInk;
    this.spentG += holdGrantInk;
    this.spentP += holdPaygInk;
    this.assertBounds('endKept');
    return NOTHING_BACK;
  }

  /** An ended hold's record is written: what it gave back may now leave the lease. */
  written(restGrantInk: number, restPaygInk: number): void {
    if (this.records < 1 || !whole(restGrantInk) || !whole(restPaygInk) || restGrantInk > this.pendingG || restPaygInk > this.pendingP) {
      throw this.violation('written: more written back than is pending', { rest_grant_ink: restGrantInk, rest_payg_ink: restPaygInk });
    }
    this.records--;
    this.pendingG -= restGrantInk;
    this.pendingP -= restPaygInk;
    this.assertBounds('written');
  }

  /** A return begins: the spare Ink Postgres already sees as spare (spare less pending) leaves; returned to the caller to send. */
  beginReturn(): { grantInk: number; paygInk: number } {
    const g = this.spareG > this.pendingG ? this.spareG - this.pendingG : 0;
    const p = this.spareP > this.pendingP ? this.spareP - this.pendingP : 0;
    this.spareG -= g;
    this.spareP -= p;
    this.tookG -= g;
    this.tookP -= p;
    this.assertBounds('beginReturn');
    return { grantInk: g, paygInk: p };
  }

  /** The return's statement failed: what it carried is the lease's again. */
  undoReturn(grantInk: number, paygInk: number): void {
    if (!whole(grantInk) || !whole(paygInk)) throw this.violation('undoReturn: not whole Ink', { grant_ink: grantInk, payg_ink: paygInk });
    this.spareG += grantInk;
    this.spareP += paygInk;
    this.tookG += grantInk;
    this.tookP += paygInk;
    this.assertBounds('undoReturn');
  }

  /** Renewed (take, refill, heartbeat): the local deadline only moves forwards. */
  extend(deadlineMs: number): void {
    if (deadlineMs > this.deadline) this.deadline = deadlineMs;
  }

  /** No hold may come from it any more (another start under our id owns it now). */
  expire(): void {
    this.deadline = 0;
  }

  /** live -> draining: no new holds; true when it was live. */
  drain(): boolean {
    if (this.current !== 'live') return false;
    this.current = 'draining';
    return true;
  }

  /** Forgotten locally: its row was closed, recovered, or left to recovery. */
  close(): void {
    this.current = 'closed';
  }

  /** True when spare Ink is low enough for a background refill (one per key at a time: the escrow's take). */
  wantsRefill(refillBelowPermille: number): boolean {
    return this.current === 'live' && !this.noRefill && (this.spareG + this.spareP) * 1000 < this.lastTake * refillBelowPermille;
  }
}

/** The recent hold rate of one key (Ink per second), over windows of about a second. */
export class HoldRate {
  private windowStartMs = performance.now();
  private windowInk = 0;
  private lastInkPerS = 0;

  add(holdInk: number, nowMs: number): void {
    const elapsed = nowMs - this.windowStartMs;
    if (elapsed >= 1000) {
      this.lastInkPerS = (this.windowInk * 1000) / elapsed;
      this.windowStartMs = nowMs;
      this.windowInk = 0;
    }
    this.windowInk += holdInk;
  }

  /** Ink per second: the last full window, or the current one when it is busier. */
  inkPerS(nowMs: number): number {
    // A window younger than 250 ms is read as 250 ms long: one hold is not a burst.
    const current = (this.windowInk * 1000) / Math.max(nowMs - this.windowStartMs, 250);
    return Math.max(this.lastInkPerS, current);
  }
}

export interface LeaseSizing {
  readonly targetMs: number;
  readonly minHolds: number;
  readonly maxInk: number;
}

/** How much a take or refill asks for: a few seconds of the key's holds, at least `minHolds` holds, at most `maxInk`. */
export function leaseWantInk(sizing: LeaseSizing, holdInk: number, inkPerS: number): number {
  const want = Math.max(holdInk * sizing.minHolds, Math.ceil((inkPerS * sizing.targetMs) / 1000));
  return Math.min(Math.max(want, holdInk), Math.max(sizing.maxInk, holdInk));
}
