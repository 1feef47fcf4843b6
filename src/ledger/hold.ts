// One hold's life, checked as it moves (TigerBeetle's habit: every transition is asserted, and an
// impossible one stops the program rather than moving money wrongly):
//
//   reserved ──> dispatched ──> settled     charged + released = hold
//       │             ├──────> released    nothing charged, the whole hold back
//       │             └──────> unknown     the whole hold stays held until reconciliation
//       └──────────────────────> released   never sent to the vendor
//
// A hold is taken from two sources: its grant part and its pay-as-you-go part add up to the hold,
// and what a settlement charges is spent grant first out of the hold's own split.

export type HoldState = 'reserved' | 'dispatched' | 'settled' | 'released' | 'unknown';

const NEXT: Readonly<Record<HoldState, readonly HoldState[]>> = Object.freeze({
  reserved: ['dispatched', 'released'],
  dispatched: ['settled', 'released', 'unknown'],
  settled: [],
  released: [],
  unknown: [],
});

/** A broken money rule: a bug, never a client's mistake. Thrown, never caught to carry on. */
export class LedgerAssertionError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'LedgerAssertionError';
  }
}

/** Throws LedgerAssertionError unless `ok`. */
export function assertLedger(ok: boolean, message: string): asserts ok {
  if (!ok) throw new LedgerAssertionError(message);
}

const whole = (n: number): boolean => Number.isSafeInteger(n) && n >= 0;

/** What an end moved, split by source: charged + released = hold, and grant + payg of each part adds up. */
export interface HoldOutcome {
  readonly chargedInk: number;
  readonly releasedInk: number;
  readonly chargedGrantInk: number;
  readonly releasedGrantInk: number;
  readonly releasedPaygInk: number;
}

export class CheckedHold {
  private current: HoldState = 'reserved';

  constructor(
    readonly requestId: string,
    readonly holdInk: number,
    readonly grantInk: number,
    readonly paygInk: number,
  ) {
    assertLedger(whole(holdInk) && whole(grantInk) && whole(paygInk), `hold ${requestId}: amounts must be whole Ink (${holdInk} = ${grantInk} + ${paygInk})`);
    assertLedger(grantInk + paygInk === holdInk, `hold ${requestId}: grant part ${grantInk} + payg part ${paygInk} != hold ${holdInk}`);
  }

  get state(): HoldState {
    return this.current;
  }

  /** True once the hold has ended (settled, released, or left open as unknown). */
  get ended(): boolean {
    return NEXT[this.current].length === 0;
  }

  private move(to: HoldState): void {
    assertLedger(NEXT[this.current].includes(to), `hold ${this.requestId}: ${this.current} -> ${to} is not a transition`);
    this.current = to;
  }

  /** The request went to the vendor: from now on it may cost something. */
  dispatch(): void {
    this.move('dispatched');
  }

  /** Charges `chargeInk` (whole, at most the hold), grant first; the rest is released. */
  settle(chargeInk: number): HoldOutcome {
    assertLedger(whole(chargeInk) && chargeInk <= this.holdInk, `hold ${this.requestId}: charge ${chargeInk} is not whole Ink within the hold ${this.holdInk}`);
    this.move('settled');
    return this.outcome(chargeInk);
  }

  /** Nothing charged: the whole hold goes back. */
  release(): HoldOutcome {
    this.move('released');
    return this.outcome(0);
  }

  /** The vendor's usage is unknown: the whole hold stays held until reconciliation. */
  markUnknown(): void {
    this.move('unknown');
  }

  private outcome(chargedInk: number): HoldOutcome {
    const chargedGrantInk = Math.min(chargedInk, this.grantInk);
    const o: HoldOutcome = {
      chargedInk,
      releasedInk: this.holdInk - chargedInk,
      chargedGrantInk,
      releasedGrantInk: this.grantInk - chargedGrantInk,
      releasedPaygInk: this.paygInk - (chargedInk - chargedGrantInk),
    };
    assertLedger(o.chargedInk + o.releasedInk === this.holdInk, `hold ${this.requestId}: charged ${o.chargedInk} + released ${o.releasedInk} != hold ${this.holdInk}`);
    assertLedger(o.releasedGrantInk + o.releasedPaygInk === o.releasedInk && o.releasedPaygInk >= 0, `hold ${this.requestId}: released parts do not add up`);
    return o;
  }
}
