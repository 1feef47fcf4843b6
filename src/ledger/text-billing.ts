// The text path's one billing boundary: a text request holds, settles, releases or keeps its hold
// through `TextBilling` and through nothing else. Behind it, the escrow (escrow.ts) picks a lease
// or the exact path per hold; the bench's billing-off gateway puts a ledger that bills nothing
// (unbilled.ts) there. The boundary owns, so that no lane carries them:
// - The fail-stop. A broken money rule met by any move goes to the fail-stop (tripping is
//   idempotent) and comes out as the fail-stop's own 503 (`stoppedAnswer`: provider_unavailable,
//   Retry-After 1; docs/api/errors.md): the instance is stopping and the client's retry belongs on
//   another one. The rule is never caught to carry on.
// - The failure paths. A move that fails otherwise (Postgres slow or away) must not replace the
//   answer the client is owed: it is logged and the hold stays open (usage_unknown), listed by
//   reconciliation. Only the hold itself fails the request (the client gets its refusal).
// - What a move tells operators: its trace step, and the Ink held and charged in the metrics.
import { stoppedAnswer, type FailStop } from './fail-stop.js';
import { isLedgerAssertion } from './assertion.js';
import type { Ledger, ReserveInput } from './ledger.js';
import type { GatewayMetrics } from '../metrics/metrics.js';
import { type RequestTrace, within } from '../tracing/hooks.js';
import type { Logger } from '../util/log.js';

/** The moves a text request makes, as the escrow (and the no-op stand-in) serve them. */
export type TextMoves = Pick<Ledger, 'reserve' | 'settle' | 'release' | 'markUsageUnknownEventually' | 'setVendorRequestId'>;

/** The request a move is about: its id (the hold's), its logger and trace, read only when used. */
export interface BillingScope {
  readonly requestId: string;
  readonly log: Logger;
  readonly trace: RequestTrace | undefined;
}

/** Why a hold stays open, and the vendor's id where there is one (reconciliation matches on it). */
export interface KeptOpen {
  readonly vendorRequestId?: string;
  readonly reason: string;
}

export class TextBilling {
  constructor(
    private readonly moves: TextMoves,
    private readonly failStop: FailStop | undefined,
    private readonly metrics: Pick<GatewayMetrics, 'inkHeld' | 'inkCharged'> | undefined,
  ) {}

  /** Refuses at once (the fail-stop's 503) once the instance stopped: nothing is parsed or held. */
  admit(): void {
    if (this.failStop?.stopped) throw stoppedAnswer();
  }

  /**
   * The request's hold. A refusal (insufficient_ink, key_ink_limit_reached, a revoked key) is the
   * client's answer and passes through; a broken money rule is the fail-stop's 503.
   */
  async hold(request: BillingScope, input: ReserveInput): Promise<void> {
    try {
      await within(request.trace?.step('reserve'), this.moves.reserve(input));
    } catch (e) {
      this.stopOn(e);
      throw e;
    }
    this.metrics?.inkHeld(input.product, input.model, input.holdInk);
    request.trace?.held(input.holdInk);
  }

  /** The vendor certainly did not run the request: the hold goes back whole. */
  release(request: BillingScope, reason: string): Promise<void> {
    return this.orLog(request, 'release', within(request.trace?.step('release'), this.moves.release(request.requestId, reason)));
  }

  /**
   * Leaves the hold open for reconciliation (usage_unknown) and says so in the log, with why and
   * the vendor's id: an operator reconciling sees every open hold explained.
   */
  keepOpen(request: BillingScope, info: KeptOpen): Promise<void> {
    request.log.warn({ vendor_request_id: info.vendorRequestId ?? null, reason: info.reason }, 'text.hold_left_open');
    return this.orLog(
      request,
      'markUsageUnknown',
      within(request.trace?.step('usage_unknown'), this.moves.markUsageUnknownEventually(request.requestId, info)),
    );
  }

  /**
   * Charges what the vendor reported (at most the hold) and returns the Ink charged, or undefined
   * when no charge was recorded: the hold is then kept open with the vendor's id, so that
   * reconciliation can match it to the vendor's record. The answer is delivered either way.
   */
  async settle(
    request: BillingScope,
    product: string,
    model: string,
    chargeInk: number,
    usage: object,
    vendorRequestId: string | undefined,
  ): Promise<number | undefined> {
    try {
      const s = await within(request.trace?.step('settle'), this.moves.settle(request.requestId, chargeInk, { usage, vendorRequestId }));
      if (!s.resolved) return undefined;
      this.metrics?.inkCharged(product, model, s.chargedInk);
      request.trace?.charged(s.chargedInk);
      return s.chargedInk;
    } catch (e) {
      this.stopOn(e);
      request.log.error({ vendor_request_id: vendorRequestId, charge_ink: chargeInk, usage, err: e as Error }, 'text.settle_failed');
      await this.keepOpen(request, { vendorRequestId, reason: 'settle failed' });
      return undefined;
    }
  }

  /**
   * Puts the vendor's id on the request as soon as the stream names it, not awaited: a crash
   * mid-stream then leaves a hold that reconciliation can match. A broken rule met here has reached
   * the fail-stop; the stream's own end answers for it.
   */
  noteVendorId(request: BillingScope, vendorRequestId: string): void {
    this.orLog(request, 'setVendorRequestId', this.moves.setVendorRequestId(request.requestId, vendorRequestId)).catch(() => undefined);
  }

  /** True once a broken money rule stopped the instance. */
  get stopped(): boolean {
    return this.failStop?.stopped === true;
  }

  /** A move on a failure path: if it fails, it is logged and the hold stays open. */
  private async orLog(request: BillingScope, what: string, move: Promise<unknown>): Promise<void> {
    try {
      await move;
    } catch (e) {
      this.stopOn(e);
      request.log.error({ move: what, err: e as Error }, 'text.ledger_move_failed');
    }
  }

  /** A broken money rule: to the fail-stop, and out as its 503. Any other error is the caller's. */
  private stopOn(error: unknown): void {
    if (!isLedgerAssertion(error)) return;
    this.failStop?.trip(error);
    throw stoppedAnswer();
  }
}
