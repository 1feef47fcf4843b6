// Tombstones: a reserve whose outcome the caller could not learn (the statement timed out or the
// connection dropped mid-flight) may still commit on the server, leaving a hold nobody knows about.
// Its id is claimed with a `void` request row (hold 0: no Ink moves), so a reserve still running
// finds the id taken and takes nothing; when the reserve got there first, its hold is released.
//
// Money rules kept here: a tombstone moves no Ink (VOID_REQUEST writes a zero hold, in
// statements.ts); a hold the lost reserve did take is released whole, through runResolve
// (resolve.ts), which asserts its preconditions before the statement and its figures before COMMIT.
import type { BackgroundRetries } from './background.js';
import type { ReserveInput } from './ledger-types.js';
import type { MoveContext } from './move-statement.js';
import { runResolve } from './resolve.js';
import * as SQL from './statements.js';
import type { EventLog } from '../util/log.js';

export type VoidOutcome = 'voided' | 'released' | 'already_resolved' | 'no_account';

/** Claims the id of a reservation whose outcome is unknown, or releases the hold if it was taken; retried in the background. */
export function abandonReserve(context: MoveContext, background: BackgroundRetries, input: ReserveInput, now: () => Date, log: EventLog): void {
  const requestId = input.requestId;
  const tryVoid = () => voidReservation(context, input, now).then((outcome) => log({ requestId, outcome }, 'ledger.reserve_abandoned'));
  background.track(tryVoid().catch((e: unknown) => background.failed(e, 'ledger.reserve_abandon_failed', requestId, tryVoid)));
}

export async function voidReservation(context: MoveContext, input: ReserveInput, now: () => Date): Promise<VoidOutcome> {
  const r = await context.pool.query<{ key_known: boolean; voided: boolean }>(SQL.VOID_REQUEST, [
    input.requestId,
    input.accountId,
    input.keyId,
    input.product,
    input.model,
    'reserve_abandoned',
    now(),
  ]);
  if (!r.rows[0]!.key_known) return 'no_account'; // unknown account/key: nothing could be held
  if (r.rows[0]!.voided) return 'voided';
  const [row] = await runResolve(context, [
    { id: input.requestId, kind: 'release', chargeInk: 0, usage: null, vendorRequestId: null, reason: 'reserve_abandoned' },
  ]);
  if (row instanceof Error) throw row;
  return row!.result === 'ok' ? 'released' : 'already_resolved';
}
