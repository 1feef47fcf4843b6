// Durable resolutions: settle (charge min(charge, hold), grant first out of the hold's own split,
// the rest back to the pools it came from), release and refund (the whole hold back), and
// reconcile (a settle from a vendor's record). Every hold resolves at most once: a second resolver
// gets { resolved: false } (docs/api/billing.md).
//
// Money rules kept here, and where they are asserted:
// - before the statement: a well-formed request id and a charge of whole Ink within MAX_MOVE_INK
//   (settleItem / returnItem: a RangeError, nothing sent), then `assertResolvable`: a known kind,
//   whole Ink, a release or refund that charges nothing;
// - in the statement, under the request's and the wallet's row locks: the hold is open and not in
//   a lease, the wallet split (Postgres CHECKs) (src/store/schema.sql);
// - before COMMIT (`assertResolved`, run by checkedMove in move-statement.ts): every figure whole
//   Ink, charged = min(charge, hold) for a settle and 0 for a release or refund, and
//   charged + released + expired = hold. A broken figure rolls the statement back, stops the
//   instance, and reaches the caller as LedgerAssertionError.
import { storeError, type Queryable } from '../store/pool.js';
import { assertLedger, wholeNonNegative as whole } from './assertion.js';
import type { RecordedUsage, ResolveResult } from './ledger-types.js';
import { checkRequestId, MAX_REASON_CHARS, text, usageJson, wholeInk } from './move-input.js';
import { byItem, checkedMove, lockParam, skew, lockTimedOut, overloaded, retryAlone, type LockWait, type MoveContext } from './move-statement.js';
import * as SQL from './statements.js';
import type { EventLog } from '../util/log.js';

const RESOLVE_KINDS = ['settle', 'release', 'refund', 'reconcile'] as const;
type ResolveKind = (typeof RESOLVE_KINDS)[number];

export interface ResolveItem {
  id: string;
  kind: ResolveKind;
  chargeInk: number;
  usage: string | null;
  vendorRequestId: string | null;
  reason: string | null;
}

export interface ResolveRow {
  item: number;
  result: 'ok' | 'already_resolved' | 'unknown_request';
  charged_total_ink: number | null;
  released_total_ink: number | null;
  expired_total_ink: number | null;
  held_total_ink: number | null;
}

export function settleItem(requestId: string, chargeInk: number, details: { usage?: RecordedUsage | object; vendorRequestId?: string }): ResolveItem {
  checkRequestId(requestId);
  wholeInk('chargeInk', chargeInk);
  return {
    id: requestId,
    kind: 'settle',
    chargeInk,
    usage: usageJson(details.usage),
    vendorRequestId: text('vendorRequestId', details.vendorRequestId, 256),
    reason: null,
  };
}

export function returnItem(kind: 'release' | 'refund', requestId: string, reason: string): ResolveItem {
  checkRequestId(requestId);
  return { id: requestId, kind, chargeInk: 0, usage: null, vendorRequestId: null, reason: text('reason', reason, MAX_REASON_CHARS) };
}

const charges = (kind: ResolveKind): boolean => kind === 'settle' || kind === 'reconcile';

/** Preconditions, before the statement is sent: a known kind, whole Ink, a return that charges nothing. */
export function assertResolvable(items: readonly ResolveItem[]): void {
  for (const it of items) {
    assertLedger(
      RESOLVE_KINDS.includes(it.kind) && whole(it.chargeInk) && (charges(it.kind) || it.chargeInk === 0),
      () => `resolve ${it.id}: ${it.kind} of ${it.chargeInk} Ink is not a move`,
      () => ({
        request_id: it.id,
        kind: it.kind,
        charge_ink: it.chargeInk,
      }),
    );
  }
}

/** Postconditions of a resolve statement, asserted before its COMMIT: every Ink of each hold went somewhere, and no more was charged than asked. */
export function assertResolved(items: readonly ResolveItem[], rows: readonly ResolveRow[]): void {
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i]!,
      it = items[i]!;
    if (row.result !== 'ok') continue;
    const held = row.held_total_ink ?? 0,
      c = row.charged_total_ink ?? 0,
      r = row.released_total_ink ?? 0,
      x = row.expired_total_ink ?? 0;
    const want = charges(it.kind) ? Math.min(it.chargeInk, held) : 0;
    assertLedger(
      whole(held) && whole(c) && whole(r) && whole(x) && c === want && c + r + x === held,
      () => `resolve ${it.id} (${it.kind}): charged ${c} (asked ${it.chargeInk}) + released ${r} + expired ${x} != hold ${held}`,
      () => ({
        request_id: it.id,
        kind: it.kind,
        charge_ink: it.chargeInk,
        hold_ink: held,
        charged_ink: c,
        released_ink: r,
        expired_ink: x,
      }),
    );
  }
}

/** The rows as answered, or with a test-only fault's skew (LedgerOptions.faults). */
function skewed(context: MoveContext, items: readonly ResolveItem[], rows: ResolveRow[]): ResolveRow[] {
  if (context.faults === undefined) return rows;
  return rows.map((r, i) => (r.released_total_ink === null ? r : { ...r, released_total_ink: r.released_total_ink + skew(context, 'resolve', items[i]!.id) }));
}

/** Runs a batch of resolutions (or one) as one statement whose answer is asserted before COMMIT. */
export async function runResolve(
  context: MoveContext,
  items: ResolveItem[],
  wait: LockWait = 'first',
  database: Queryable = context.pool,
): Promise<Array<ResolveRow | Error>> {
  const n = items.length;
  if (n === 1 && wait === 'first' && !context.functionForSingles) return [await resolveOne(context, items[0]!, database).catch((e: Error) => e)];
  const ids = new Array<string>(n),
    kinds = new Array<string>(n),
    amounts = new Array<number>(n);
  const usage = new Array<string | null>(n),
    vendorIds = new Array<string | null>(n),
    reasons = new Array<string | null>(n);
  for (let i = 0; i < n; i++) {
    const it = items[i]!;
    ids[i] = it.id;
    kinds[i] = it.kind;
    amounts[i] = it.chargeInk;
    usage[i] = it.usage;
    vendorIds[i] = it.vendorRequestId;
    reasons[i] = it.reason;
  }
  try {
    const alone = database === context.pool;
    const values = [ids, kinds, amounts, usage, vendorIds, reasons, context.nowText(), lockParam(context, n, wait)];
    const statement = { name: alone ? 'ledger_resolve_async_commit' : 'ledger_resolve', text: alone ? SQL.RESOLVE_ASYNC_COMMIT : SQL.RESOLVE, values };
    const run = async (c: Queryable) => skewed(context, items, byItem((await c.query<ResolveRow>(statement)).rows, n));
    return await checkedMove(
      context,
      database,
      run,
      (rows) => assertResolved(items, rows),
      () => assertResolvable(items),
    );
  } catch (e) {
    if (n > 1 && wait === 'first' && database === context.pool && lockTimedOut(e)) return runResolve(context, items, 'patient', database);
    if (n > 1 && retryAlone(e)) return Promise.all(items.map((it) => runResolve(context, [it], context.batchLockTimeoutMs).then((o) => o[0]!)));
    if (n === 1) return [e as Error];
    throw e;
  }
}

/** One resolution, one statement (ledger_resolve_one); same outcomes and the same check as the batch function. */
async function resolveOne(context: MoveContext, item: ResolveItem, database: Queryable): Promise<ResolveRow> {
  const alone = database === context.pool;
  const values = [item.id, item.kind, item.chargeInk, item.usage, item.vendorRequestId, item.reason, context.nowText()];
  const statement = {
    name: alone ? 'ledger_resolve_one_async_commit' : 'ledger_resolve_one',
    text: alone ? SQL.RESOLVE_ONE_ASYNC_COMMIT : SQL.RESOLVE_ONE,
    values,
  };
  const run = async (c: Queryable) => skewed(context, [item], (await c.query<ResolveRow>(statement)).rows)[0]!;
  return checkedMove(
    context,
    database,
    run,
    (row) => assertResolved([item], [row]),
    () => assertResolvable([item]),
  );
}

/** The caller's answer for one resolve row (a broken rule or an outage is thrown). */
export function resolveOutcome(item: ResolveItem, row: ResolveRow | Error, log: EventLog): ResolveResult {
  // The hold still sits in an instance's Ink lease (its request is running there): it ends through
  // that instance's journal, or through the lease's recovery, never by a resolution from outside.
  if (row instanceof Error && (row as { constraint?: unknown }).constraint === 'request_leased') return { resolved: false, reason: 'in_lease' };
  if (row instanceof Error) {
    if (row.name === 'QueueFullError') throw overloaded(row);
    // The hold stays open (or was resolved by a commit we did not see): a retry is safe either way.
    // A LedgerAssertionError goes on as it is: its move rolled back and the fail-stop has it.
    storeError(row);
  }
  return resolveResult(item, row, log);
}

/** A row already asserted before its COMMIT (assertResolved), as the caller's answer. */
export function resolveResult(item: ResolveItem, row: ResolveRow, log: EventLog): ResolveResult {
  if (row.result !== 'ok') return { resolved: false, reason: row.result };
  const held = row.held_total_ink ?? 0;
  if (charges(item.kind) && item.chargeInk > held) {
    log({ requestId: item.id, chargeInk: item.chargeInk, holdInk: held, kind: item.kind }, 'ledger.charge_above_hold');
  }
  return { resolved: true, chargedInk: row.charged_total_ink ?? 0, releasedInk: row.released_total_ink ?? 0, expiredInk: row.expired_total_ink ?? 0 };
}
