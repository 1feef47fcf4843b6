// The text path's ledger moves on its failure paths, and the fail-stop around them: a broken money
// rule is never caught to carry on; any other failed move is logged and leaves the hold open for
// reconciliation, never replacing the answer the client is owed.
import { isLedgerAssertion } from '../ledger/assertion.js';
import { stoppedAnswer } from '../ledger/fail-stop.js';
import type { TextBilling } from '../ledger/text-billing.js';
import type { HttpContext } from '../server/http-context.js';
import type { Services } from '../services.js';
import { within } from '../tracing/hooks.js';

/** The request a billing line is about: its id (the hold's) and its logger, read only when a line is written. */
export type RequestScope = Pick<HttpContext, 'requestId' | 'log' | 'trace'>;

/**
 * A ledger move on a failure path must not replace the answer the client is owed: if it fails, it
 * is logged and the hold stays open, listed by reconciliation.
 */
export async function moveOrLog(services: Services, r: RequestScope, what: string, move: Promise<unknown>): Promise<void> {
  try {
    await move;
  } catch (e) {
    violation(services, e);
    r.log.error({ move: what, err: e as Error }, 'text.ledger_move_failed');
  }
}

/**
 * A broken money rule is never caught to carry on: it goes to the fail-stop and on up (the request
 * ends without a billing answer; the instance stops). Any other error is the caller's to handle.
 */
function violation(services: Services, e: unknown): void {
  if (!isLedgerAssertion(e)) return;
  services.failStop?.trip(e);
  throw e;
}

/**
 * Before a response has started, a broken money rule met by a request's move (reserve, release,
 * settle, an unknown-usage mark) is answered with the fail-stop's own 503 (`stoppedAnswer`:
 * provider_unavailable, Retry-After; docs/api/errors.md), never a generic 500: the instance is
 * stopping and the client's retry belongs on another one. The rule reaches the fail-stop first
 * (tripping is idempotent): it is handed on, never caught to carry on. A stream that has started
 * keeps its own ending (streamThrough); any other error passes through unchanged.
 */
export async function answeredByFailStop<T>(services: Services, move: Promise<T>): Promise<T> {
  try {
    return await move;
  } catch (e) {
    if (!isLedgerAssertion(e)) throw e;
    services.failStop?.trip(e);
    throw stoppedAnswer();
  }
}

/**
 * Leaves the hold open for reconciliation (usage_unknown) and says so in the log, with why and the
 * vendor's request id when there is one: an operator reconciling sees every open hold explained.
 */
export function holdOpen(services: Services, ledger: TextBilling, r: RequestScope, info: { vendorRequestId?: string; reason: string }): Promise<void> {
  r.log.warn({ vendor_request_id: info.vendorRequestId ?? null, reason: info.reason }, 'text.hold_left_open');
  return moveOrLog(services, r, 'markUsageUnknown', within(r.trace?.step('usage_unknown'), ledger.markUsageUnknownEventually(r.requestId, info)));
}

/**
 * A settle that could not be written leaves a charge we know: mark the hold usage_unknown with the
 * vendor id (best effort), so reconciliation can match it to the vendor's record.
 */
export async function settleFailed(
  services: Services,
  ledger: TextBilling,
  r: RequestScope,
  chargeInk: number,
  usage: object,
  vendorRequestId: string | undefined,
  e: unknown,
): Promise<void> {
  violation(services, e);
  r.log.error({ vendor_request_id: vendorRequestId, charge_ink: chargeInk, usage, err: e as Error }, 'text.settle_failed');
  await holdOpen(services, ledger, r, { vendorRequestId, reason: 'settle failed' });
}
