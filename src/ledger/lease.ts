// One escrow lease as its owner holds it in memory: spare Ink (grant and pay-as-you-go parts),
// holds in flight, and the local deadline after which it must not be spent any more.
//
// Durable view of the same lease (leases row) = spare + holds in flight + charges not yet flushed.
// Every change below happens in one synchronous block: check and subtract with no await between.

export type LeaseState = 'live' | 'draining' | 'closed';

export class LocalLease {
  spareGrantInk = 0;
  sparePaygInk = 0;
  /**
   * The part of spare that ended holds gave back and whose end is not written yet: in Postgres that
   * Ink still counts as a hold in flight in this lease, so it may not be returned before the write.
   */
  pendingGrantInk = 0;
  pendingPaygInk = 0;
  /** Holds taken and not yet ended. */
  inFlight = 0;
  /** Records of this lease whose end is not yet written (the lease closes only at zero). */
  unwritten = 0;
  /** Size of the last take or refill, for the refill threshold. */
  lastTakeInk = 0;
  /** performance.now() after which no hold may come from it (renewed by take, refill and heartbeat). */
  deadlineMs: number;
  lastHoldMs: number;
  state: LeaseState = 'live';
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
    this.deadlineMs = deadlineMs;
    this.lastHoldMs = performance.now();
  }

  get spareInk(): number {
    return this.spareGrantInk + this.sparePaygInk;
  }

  /** Adds a take or refill (grant and pay-as-you-go parts as the database split them). */
  add(grantInk: number, paygInk: number): void {
    this.spareGrantInk += grantInk;
    this.sparePaygInk += paygInk;
    this.lastTakeInk = grantInk + paygInk;
  }

  /** Takes `holdInk`, grant first, if the lease is live, in time and holds enough; else undefined. */
  take(holdInk: number, nowMs: number): { grantInk: number; paygInk: number } | undefined {
    if (this.state !== 'live' || nowMs >= this.deadlineMs || this.spareGrantInk + this.sparePaygInk < holdInk) return undefined;
    const g = this.spareGrantInk < holdInk ? this.spareGrantInk : holdInk;
    this.spareGrantInk -= g;
    this.sparePaygInk -= holdInk - g;
    this.inFlight++;
    this.unwritten++;
    this.lastHoldMs = nowMs;
    return { grantInk: g, paygInk: holdInk - g };
  }

  /**
   * Ends a hold: `chargeInk` (at most the hold) is spent grant first out of the hold's own split,
   * the rest goes back to spare (pending until the end is written). `keep`: the whole hold leaves
   * the lease (usage unknown), nothing comes back. Returns what came back.
   */
  end(holdGrantInk: number, holdPaygInk: number, chargeInk: number, keep: boolean): { restGrantInk: number; restPaygInk: number } {
    this.inFlight--;
    if (keep) return { restGrantInk: 0, restPaygInk: 0 };
    const cg = chargeInk < holdGrantInk ? chargeInk : holdGrantInk;
    const restGrantInk = holdGrantInk - cg;
    const restPaygInk = holdPaygInk - (chargeInk - cg);
    this.spareGrantInk += restGrantInk;
    this.sparePaygInk += restPaygInk;
    this.pendingGrantInk += restGrantInk;
    this.pendingPaygInk += restPaygInk;
    return { restGrantInk, restPaygInk };
  }

  /** An ended hold's record is written: what it gave back may now leave the lease. */
  written(restGrantInk: number, restPaygInk: number): void {
    this.pendingGrantInk -= restGrantInk;
    this.pendingPaygInk -= restPaygInk;
  }

  /** True when spare Ink is low enough for a background refill (one per key at a time: the escrow's take). */
  wantsRefill(refillBelowPermille: number): boolean {
    return this.state === 'live' && !this.noRefill && this.spareInk * 1000 < this.lastTakeInk * refillBelowPermille;
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
export function leaseWantInk(s: LeaseSizing, holdInk: number, inkPerS: number): number {
  const want = Math.max(holdInk * s.minHolds, Math.ceil((inkPerS * s.targetMs) / 1000));
  return Math.min(Math.max(want, holdInk), Math.max(s.maxInk, holdInk));
}
