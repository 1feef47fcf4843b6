// Durable reserves: one conditional statement takes a whole hold from a wallet (grant first, then
// pay-as-you-go) and the same Ink from the key's lifetime cap, or takes nothing (docs/api/billing.md).
//
// Money rules kept here, and where they are asserted:
// - before the statement: the input is whole Ink within MAX_MOVE_INK, with a well-formed request id
//   (checkReserveInput, move-input.ts; a RangeError, nothing sent), the instance has not stopped
//   (Ledger.reserve / Ledger.using answer 503 first), and `assertReservable`;
// - in the statement, under the wallet's and the key's row locks: enough Ink and cap room, one
//   reserve per request id, the wallet split (Postgres CHECKs) (src/store/schema.sql);
// - before COMMIT (`assertReserved`, run by checkedMove in move-statement.ts): a hold taken is
//   whole Ink from both sources and grant + pay-as-you-go = the hold asked; a refused item took
//   nothing. A broken figure rolls the whole statement back and stops the instance.
import { ApiError } from '../errors.js';
import { storeError, type Queryable } from '../store/pool.js';
import { assertLedger, wholeNonNegative as whole } from './assertion.js';
import type { Hold, ReserveInput } from './ledger-types.js';
import { byItem, checkedMove, ID_RACES, lockParam, skew, lockTimedOut, overloaded, retryAlone, type LockWait, type MoveContext } from './move-statement.js';
import * as SQL from './statements.js';

export interface ReserveRow {
  item: number;
  result: 'ok' | 'key_limit' | 'insufficient' | 'duplicate' | 'unknown_key' | 'key_not_live' | 'invalid';
  take_grant_ink: number;
  take_payg_ink: number;
  available_ink: number | null;
  key_room_ink: number | null;
}

/**
 * The request id was taken by a concurrent insert after the function's own check (the request
 * row or its reserve journal row, whichever the statement happened to write first).
 */
const idTaken = (error: unknown): boolean => {
  const c = (error as { constraint?: unknown }).constraint;
  return (error as { code?: unknown }).code === '23505' && typeof c === 'string' && ID_RACES.has(c);
};
const DUPLICATE: ReserveRow = Object.freeze({ item: 1, result: 'duplicate', take_grant_ink: 0, take_payg_ink: 0, available_ink: null, key_room_ink: null });

/** Preconditions, before the statement is sent: each hold is whole Ink. */
export function assertReservable(items: readonly ReserveInput[]): void {
  for (const it of items)
    assertLedger(
      whole(it.holdInk),
      () => `reserve ${it.requestId}: hold ${it.holdInk} is not whole Ink`,
      () => ({ request_id: it.requestId, hold_ink: it.holdInk }),
    );
}

/** Postconditions of a reserve statement, asserted before its COMMIT: each item took its whole hold, split, or nothing. */
export function assertReserved(items: readonly ReserveInput[], rows: readonly ReserveRow[]): void {
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i]!,
      input = items[i]!;
    const g = row.take_grant_ink ?? 0,
      p = row.take_payg_ink ?? 0;
    const want = row.result === 'ok' ? input.holdInk : 0;
    assertLedger(
      whole(g) && whole(p) && g + p === want,
      () => `reserve ${input.requestId} (${row.result}): grant ${g} + payg ${p} != ${want}`,
      () => ({
        request_id: input.requestId,
        result: row.result,
        hold_ink: input.holdInk,
        take_grant_ink: g,
        take_payg_ink: p,
      }),
    );
  }
}

/** The rows as answered, or with a test-only fault's skew (LedgerOptions.faults). */
function skewed(context: MoveContext, items: readonly ReserveInput[], rows: ReserveRow[]): ReserveRow[] {
  if (context.faults === undefined) return rows;
  return rows.map((r, i) => ({ ...r, take_payg_ink: r.take_payg_ink + skew(context, 'reserve', items[i]!.requestId) }));
}

/** Runs a batch of reserves (or one) as one statement whose answer is asserted before COMMIT. */
export async function runReserve(
  context: MoveContext,
  items: ReserveInput[],
  wait: LockWait = 'first',
  database: Queryable = context.pool,
): Promise<Array<ReserveRow | Error>> {
  const n = items.length;
  if (n === 1 && wait === 'first' && !context.functionForSingles) return [await reserveOne(context, items[0]!, database).catch((e: Error) => e)];
  const ids = new Array<string>(n),
    accounts = new Array<string>(n),
    keys = new Array<string>(n);
  const products = new Array<string>(n),
    models = new Array<string>(n),
    holds = new Array<number>(n);
  for (let i = 0; i < n; i++) {
    const it = items[i]!;
    ids[i] = it.requestId;
    accounts[i] = it.accountId;
    keys[i] = it.keyId;
    products[i] = it.product;
    models[i] = it.model;
    holds[i] = it.holdInk;
  }
  try {
    const values = [ids, accounts, keys, products, models, holds, context.nowText(), lockParam(context, n, wait)];
    const run = async (client: Queryable) =>
      skewed(context, items, byItem((await client.query<ReserveRow>({ name: 'ledger_reserve', text: SQL.RESERVE, values })).rows, n));
    return await checkedMove(
      context,
      database,
      run,
      (rows) => assertReserved(items, rows),
      () => assertReservable(items),
    );
  } catch (e) {
    // One bad item (an id that raced in elsewhere, a wedged wallet) must not fail its neighbours.
    if (n > 1 && wait === 'first' && database === context.pool && lockTimedOut(e)) return runReserve(context, items, 'patient', database);
    if (n > 1 && retryAlone(e)) return Promise.all(items.map((it) => runReserve(context, [it], context.batchLockTimeoutMs).then((o) => o[0]!)));
    if (n === 1) return [idTaken(e) ? DUPLICATE : (e as Error)];
    throw e;
  }
}

/** One reserve, one statement (ledger_reserve_one); same outcomes and the same check as the batch function. */
async function reserveOne(context: MoveContext, input: ReserveInput, database: Queryable): Promise<ReserveRow> {
  const values = [input.requestId, input.accountId, input.keyId, input.product, input.model, input.holdInk, context.nowText()];
  try {
    const run = async (client: Queryable) =>
      skewed(context, [input], (await client.query<ReserveRow>({ name: 'ledger_reserve_one', text: SQL.RESERVE_ONE, values })).rows)[0]!;
    return await checkedMove(
      context,
      database,
      run,
      (row) => assertReserved([input], [row]),
      () => assertReservable([input]),
    );
  } catch (e) {
    if (idTaken(e)) return DUPLICATE;
    throw e;
  }
}

/** The caller's answer for one reserve row: the hold, or the error docs/api/errors.md names. */
export function reserveOutcome(input: ReserveInput, row: ReserveRow | Error): Hold {
  if (row instanceof Error) {
    if (row.name === 'QueueFullError') throw overloaded(row);
    storeError(row); // a LedgerAssertionError goes on as it is (the fail-stop already has it)
  }
  switch (row.result) {
    case 'ok':
      return { requestId: input.requestId, holdInk: input.holdInk, grantInk: row.take_grant_ink, paygInk: row.take_payg_ink };
    case 'insufficient':
      throw new ApiError('insufficient_ink', {
        message: `Insufficient Ink: this request needs ${input.holdInk} Ink and the wallet has ${row.available_ink ?? 0} Ink available.`,
      });
    case 'key_limit':
      throw new ApiError('key_ink_limit_reached', {
        message: `This key's Ink cap would be crossed: this request needs ${input.holdInk} Ink and the key has ${row.key_room_ink ?? 0} Ink left under its cap.`,
      });
    case 'duplicate':
      throw new Error(`ledger: request id ${input.requestId} already exists`);
    case 'key_not_live':
      // Revoked or expired since the caller authenticated it (the text lanes' key cache): refused
      // like any dead key, and nothing was held.
      throw new ApiError('invalid_api_key', { message: 'The API key has been revoked or has expired.' });
    case 'unknown_key':
      throw new Error(`ledger: ${input.keyId} is not a key of account ${input.accountId}`);
    default:
      throw new RangeError(`ledger: reserve refused ${input.requestId}: ${row.result}`);
  }
}
