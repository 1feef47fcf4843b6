// Ending a hold drawn from a lease, in memory: settle or release (the charge to the wallet, the
// rest back to the lease), or keep it whole as a durable open hold when usage is unknown. The
// record joins the write-behind journal; the escrow (escrow.ts) decides which holds come here.
//
// Invariants, asserted before anything changes and again after:
// - an end is a legal move of the hold (hold.ts), made once;
// - the record's figures are the hold's, and the lease takes back exactly what the hold releases,
//   source by source (grant, pay-as-you-go);
// - unknown usage and sync mode wait for the record's write: a hold the client is told is open is
//   durable by then.
import type { Config } from '../config/config.js';
import { assertLedger } from './assertion.js';
import type { CheckedHold } from './hold.js';
import type { LeaseBook } from './lease-book.js';
import type { LocalLease } from './lease.js';
import type { ResolveResult } from './ledger.js';
import { checkVendorRequestId } from './move-input.js';
import type { JournalRecord } from './journal-record.js';
import type { WriteBehind } from './write-behind.js';

export interface EscrowFaults {
  /** The charge the lease is told for this request in place of the hold's (undefined: the true one). */
  readonly skewLeaseCharge?: (requestId: string, chargeInk: number) => number | undefined;
}

/** What an end writes on the request record besides its amounts (and the vendor's id): set only once the end is checked and made. */
export interface EndFields {
  readonly usage: string | null | undefined;
  readonly reason: string | undefined;
}

export interface ActiveHold {
  readonly record: JournalRecord;
  readonly lease: LocalLease;
  /** Its life, checked at every move. */
  readonly hold: CheckedHold;
}

/** What an end needs from the escrow around it. */
export interface EndDeps {
  readonly journal: WriteBehind;
  readonly book: LeaseBook;
  readonly now: () => Date;
  readonly durability: Config['ledger']['durability'];
  readonly faults: EscrowFaults | undefined;
}

/**
 * Ends a leased hold in memory: `chargeInk` (at most the hold) is charged, the rest goes back to
 * the lease, the record joins the journal. Answered at once, except when its lease was recalled
 * (the freed Ink goes back to the wallet first) or in sync mode (after the write).
 */
export async function endInLease(deps: EndDeps, active: ActiveHold, end: 'settle' | 'release', chargeInk: number, fields: EndFields): Promise<ResolveResult> {
  const r = active.record;
  // A text lane settles only what it sent (usage exists only for a dispatched request); it does
  // not report the dispatch apart, so a settle of a hold still `reserved` records it first.
  // Preconditions first, nothing changed yet (not the hold, the lease, nor the record): the end
  // is a legal move of the hold, the record's split is the hold's, and the lease would give back
  // exactly what the hold releases, source by source (lease.end refuses before it changes).
  const o = active.hold.checkEnd(end, chargeInk);
  assertLedger(
    r.holdInk === active.hold.holdInk && r.holdGrantInk === active.hold.grantInk && r.end === null,
    () => `hold ${r.requestId}: its record (${r.holdInk}, grant ${r.holdGrantInk}, end ${r.end}) is not the hold's`,
    () => active.hold.figures(),
  );
  const leaseCharge = deps.faults?.skewLeaseCharge?.(r.requestId, chargeInk) ?? chargeInk;
  const rest = active.lease.end(r.requestId, r.holdGrantInk, r.holdInk - r.holdGrantInk, leaseCharge, o.releasedGrantInk, o.releasedPaygInk);
  if (end === 'settle' && active.hold.state === 'reserved') active.hold.dispatch();
  const done = end === 'settle' ? active.hold.settle(chargeInk) : active.hold.release();
  // Postconditions: the hold moved exactly what was checked, and the lease took back exactly what it released.
  assertLedger(
    done.chargedInk === o.chargedInk &&
      done.chargedInk + done.releasedInk === r.holdInk &&
      done.releasedGrantInk === rest.restGrantInk &&
      done.releasedPaygInk === rest.restPaygInk,
    () =>
      `hold ${r.requestId}: ended charging ${done.chargedInk} and releasing ${done.releasedGrantInk} + ${done.releasedPaygInk}, the lease took back ${rest.restGrantInk} + ${rest.restPaygInk}`,
    () => ({ ...active.hold.figures(), charged_ink: done.chargedInk, rest_grant_ink: rest.restGrantInk, rest_payg_ink: rest.restPaygInk }),
  );
  if (fields.usage !== undefined) r.usage = fields.usage;
  if (fields.reason !== undefined) r.reason = fields.reason;
  r.restGrantInk = rest.restGrantInk;
  r.restPaygInk = rest.restPaygInk;
  r.end = end;
  r.chargeInk = chargeInk;
  r.resolvedAt = deps.now().toISOString();
  deps.journal.touch(r);
  if (active.lease.state === 'draining' && chargeInk < r.holdInk) await deps.book.returnFromDrained(active.lease, r);
  else if (deps.durability === 'sync') await deps.book.waitWritten(r);
  return { resolved: true, chargedInk: chargeInk, releasedInk: r.holdInk - chargeInk, expiredInk: 0 };
}

/** The hold leaves its lease whole (usage unknown); its record is written before this resolves. */
export async function keepInLease(deps: EndDeps, active: ActiveHold, details: { vendorRequestId?: string; reason?: string }): Promise<void> {
  const r = active.record;
  const requestId = r.requestId;
  const vendorId = details.vendorRequestId === undefined ? undefined : checkVendorRequestId(details.vendorRequestId);
  assertLedger(
    !active.hold.ended,
    () => `hold ${requestId}: ended as ${active.hold.state}, cannot be left open`,
    () => active.hold.figures(),
  );
  active.lease.endKept(requestId, r.holdGrantInk, r.holdInk - r.holdGrantInk); // asserts before it changes the lease
  if (active.hold.state === 'reserved') active.hold.dispatch(); // unknown usage is only ever of a request sent
  active.hold.markUnknown();
  r.end = 'unknown';
  if (vendorId !== undefined) r.vendorRequestId = vendorId;
  r.reason = (details.reason ?? 'usage unknown').slice(0, 500);
  deps.journal.touch(r);
  await deps.book.waitWritten(r);
}
