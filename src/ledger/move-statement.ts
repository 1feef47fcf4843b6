// How a durable money move's statement runs, shared by reserve.ts and resolve.ts: which errors
// re-run a batch item by item, how long a batch waits for a locked row, what an unknown outcome
// is, and the one rule this module keeps for both: a move's figures are asserted *inside* its
// transaction, before COMMIT (`checkedMove`). A broken figure rolls the move back (nothing it
// changed stays), is handed to the fail-stop, then goes on to the caller as LedgerAssertionError;
// it is never caught to carry on, and never retried.
import { ApiError } from '../errors.js';
import { isStoreUnavailable, withTx, type Pool, type Queryable } from '../store/pool.js';
import { isLedgerAssertion, type LedgerAssertionError, schemaViolation } from './assertion.js';
import type { LedgerFaults } from './ledger-types.js';

/**
 * How long a move's statement waits for a locked row: 'first' (a batch waits `batchLockTimeoutMs`,
 * a lone move the session's lock_timeout), 'patient' (the session's lock_timeout), or a number of
 * ms (the single moves a batch was split into).
 *
 * A batch that timed out waiting for a row lock is retried once whole, waiting the session's
 * longer lock_timeout, before it is split into single moves. Why: under a burst on one busy
 * account the batches queue for the same wallet row, and splitting a batch there turns one
 * statement into a hundred that queue for the same row and the same connections (measured: 1,000
 * streams opened at once on one key got 503s). Splitting stays for what it is for: one wedged row
 * (held by a long transaction elsewhere) that would otherwise fail its neighbours.
 */
export type LockWait = 'first' | 'patient' | number;

/** What a move's statement needs from the ledger that runs it. */
export interface MoveContext {
  readonly pool: Pool;
  readonly batchLockTimeoutMs: number;
  /** Send a lone move through the batch function too (tests: both paths agree on every rule). */
  readonly functionForSingles: boolean;
  /** The clock as ISO-8601 text (pg's own Date formatting showed up in the gateway's CPU profile). */
  nowText(): string;
  /** Told of a broken money rule after its transaction rolled back (fail-stop.ts). */
  readonly failStop: ((err: LedgerAssertionError) => void) | undefined;
  /** Test-only (LedgerOptions.faults). */
  readonly faults: LedgerFaults | undefined;
}

/** The test-only skew of one figure (0 unless a fault is injected for this move and id). */
export function skew(context: MoveContext, move: 'reserve' | 'resolve' | 'credit', id: string): number {
  return context.faults?.skewFigure?.(move, id) ?? 0;
}

export function lockTimedOut(err: unknown): boolean {
  return (err as { code?: unknown }).code === '55P03';
}

/**
 * Errors after which a batch is re-run item by item: not an outage, or one wedged row's lock. A
 * broken money rule is neither: it stops the instance, and re-running its items would move Ink on
 * the picture that broke.
 */
export function retryAlone(err: unknown): boolean {
  if (isLedgerAssertion(err)) return false;
  return !isStoreUnavailable(err) || lockTimedOut(err);
}

/** The batch functions' lock-timeout argument for `wait` (null: the session's lock_timeout). */
export function lockParam(context: MoveContext, itemCount: number, wait: LockWait): number | null {
  if (wait === 'patient') return null;
  if (wait === 'first') return itemCount > 1 ? context.batchLockTimeoutMs : null;
  return wait;
}

export const overloaded = (cause: Error): ApiError =>
  new ApiError('provider_unavailable', { message: 'The ledger is overloaded; retry after Retry-After.', retryAfterS: 1, cause });

/** Rows of a batch function, indexed by their 1-based item number. */
export function byItem<R extends { item: number }>(rows: R[], itemCount: number): R[] {
  if (rows.length !== itemCount) throw new Error(`ledger: ${rows.length} results for ${itemCount} items`);
  const out = new Array<R>(itemCount);
  for (const r of rows) out[r.item - 1] = r;
  return out;
}

/**
 * Runs a move's statement and asserts what it answers before the move commits (and `before`, the
 * move's preconditions, before anything is sent). On the pool the
 * move gets its own transaction: BEGIN, the statement, `check`, COMMIT; a broken check rolls it
 * back. In a caller's transaction (`database` is not the pool) `check` runs right after the statement and
 * the error rolls the caller's transaction back. Either way the fail-stop hears of it first.
 * Cost: two more round trips per statement on the pool (one per batch under group commit).
 */
export async function checkedMove<R>(
  context: MoveContext,
  database: Queryable,
  run: (client: Queryable) => Promise<R>,
  check: (out: R) => void,
  before?: () => void,
): Promise<R> {
  try {
    before?.(); // preconditions: nothing is sent when one is broken
    if (database !== context.pool) {
      const out = await run(database);
      check(out);
      return out;
    }
    return await withTx(context.pool, run, check);
  } catch (e) {
    // The schema refusing a move (a CHECK, a foreign key) is a broken rule too, but a request id
    // taken by a concurrent insert is the reserve's own duplicate answer.
    const broken = isLedgerAssertion(e) ? e : schemaViolation(e, 'a ledger move', {}, ID_RACES);
    if (broken === undefined) throw e;
    context.failStop?.(broken);
    throw broken;
  }
}

/** Constraints a concurrent insert of the same request id trips (the request row, its reserve journal row). */
export const ID_RACES: ReadonlySet<string> = new Set(['requests_pkey', 'ledger_journal_one_reserve']);
