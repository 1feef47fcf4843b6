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

import { assertLedger, wholeNonNegative as whole } from './assertion.js';

export type HoldState = 'reserved' | 'dispatched' | 'settled' | 'released' | 'unknown';

const NEXT: Readonly<Record<HoldState, readonly HoldState[]>> = Object.freeze({
  reserved: ['dispatched', 'released'],
  dispatched: ['settled', 'released', 'unknown'],
  settled: [],
  released: [],
  unknown: [],
});

export { LedgerAssertionError } from './assertion.js';

/** What an end moved, split by source: charged + released = hold, and grant + payg of each part adds up. */
export interface HoldOutcome {
  readonly chargedInk: number;
  readonly releasedInk: number;
  readonly chargedGrantInk: number;
  readonly releasedGrantInk: number;
  readonly releasedPaygInk: number;
}

/**
 * One hold, guarding itself: its state is private and moves only through the methods below. Each
 * method asserts its preconditions before it changes anything (a refused move leaves the hold as it
 * was) and returns figures whose postconditions it asserted.
 */
export class CheckedHold {
  private current: HoldState = 'reserved';

  constructor(
    readonly requestId: string,
    readonly holdInk: number,
    readonly grantInk: number,
    readonly paygInk: number,
  ) {
    assertLedger(
      whole(holdInk) && whole(grantInk) && whole(paygInk),
      () => `hold ${requestId}: amounts must be whole Ink (${holdInk} = ${grantInk} + ${paygInk})`,
      () => this.figures(),
    );
    assertLedger(
      grantInk + paygInk === holdInk,
      () => `hold ${requestId}: grant part ${grantInk} + payg part ${paygInk} != hold ${holdInk}`,
      () => this.figures(),
    );
  }

  get state(): HoldState {
    return this.current;
  }

  /** True once the hold has ended (settled, released, or left open as unknown). */
  get ended(): boolean {
    return NEXT[this.current].length === 0;
  }

  /** Everything a violation report needs about this hold. */
  figures(): Record<string, number | string> {
    return { request_id: this.requestId, hold_state: this.current, hold_ink: this.holdInk, hold_grant_ink: this.grantInk, hold_payg_ink: this.paygInk };
  }

  private assertMove(target: HoldState): void {
    assertLedger(
      NEXT[this.current].includes(target),
      () => `hold ${this.requestId}: ${this.current} -> ${target} is not a transition`,
      () => ({ ...this.figures(), to: target }),
    );
  }

  /** The request went to the vendor: from now on it may cost something. */
  dispatch(): void {
    this.assertMove('dispatched');
    this.current = 'dispatched';
  }

  /**
   * What ending the hold would move, without moving it: asserts the end is a legal transition (a
   * settle of a hold still `reserved` counts its dispatch) and the charge is whole Ink within it.
   */
  checkEnd(end: 'settle' | 'release', chargeInk: number): HoldOutcome {
    if (end === 'settle') {
      assertLedger(
        whole(chargeInk) && chargeInk <= this.holdInk,
        () => `hold ${this.requestId}: charge ${chargeInk} is not whole Ink within the hold ${this.holdInk}`,
        () => ({ ...this.figures(), charge_ink: chargeInk }),
      );
      assertLedger(
        this.current === 'reserved' || NEXT[this.current].includes('settled'),
        () => `hold ${this.requestId}: ${this.current} -> settled is not a transition`,
        () => this.figures(),
      );
    } else {
      assertLedger(
        chargeInk === 0,
        () => `hold ${this.requestId}: a release charges nothing, not ${chargeInk}`,
        () => ({ ...this.figures(), charge_ink: chargeInk }),
      );
      this.assertMove('released');
    }
    return this.outcome(chargeInk);
  }

  /** Charges `chargeInk` (whole, at most the hold), grant first; the rest is released. */
  settle(chargeInk: number): HoldOutcome {
    assertLedger(
      this.current === 'dispatched',
      () => `hold ${this.requestId}: ${this.current} -> settled is not a transition`,
      () => this.figures(),
    );
    const o = this.checkEnd('settle', chargeInk);
    this.current = 'settled';
    return o;
  }

  /** Nothing charged: the whole hold goes back. */
  release(): HoldOutcome {
    const o = this.checkEnd('release', 0);
    this.current = 'released';
    return o;
  }

  /** The vendor's usage is unknown: the whole hold stays held until reconciliation. */
  markUnknown(): void {
    this.assertMove('unknown');
    this.current = 'unknown';
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
    assertLedger(
      o.chargedInk + o.releasedInk === this.holdInk,
      () => `hold ${this.requestId}: charged ${o.chargedInk} + released ${o.releasedInk} != hold ${this.holdInk}`,
      () => ({ ...this.figures(), charged_ink: o.chargedInk, released_ink: o.releasedInk }),
    );
    assertLedger(
      o.releasedGrantInk + o.releasedPaygInk === o.releasedInk && o.releasedGrantInk >= 0 && o.releasedPaygInk >= 0,
      () => `hold ${this.requestId}: released parts do not add up`,
      () => ({ ...this.figures(), released_grant_ink: o.releasedGrantInk, released_payg_ink: o.releasedPaygInk }),
    );
    return o;
  }
}
