// Credits: a top-up (pay-as-you-go), an admin grant (the current period's grant), and the period
// roll-over (the unspent grant lapses, the plan's grant is credited). They only add to the
// unleased wallet, or move grant to expired, so no hold and no lease changes (a roll-over recalls
// the account's leases so their old-period grant lapses when it comes back; docs/ledger.md).
//
// Money rules kept here, and where they are asserted (`creditMove`, in one transaction):
// - before any change: the amount is whole Ink of at least 1 (RangeError), the wallet exists and
//   is locked (ROLL_LOCK ... FOR UPDATE), and its figures read under that lock are whole Ink;
// - before COMMIT, against the wallet read again under the same lock (`assertCredited`): exactly
//   the expected columns moved by exactly the amount (top-up: payg and credited; grant: grant and
//   credited; roll-over: the old grant to expired, the plan's grant in, the period + 1), every
//   other figure unchanged, nothing negative. The wallet's CHECK (the sum of its parts = credited)
//   holds in Postgres. A broken figure rolls back, goes to the fail-stop, then to the caller.
import type { Queryable } from '../store/pool.js';
import { assertLedger, wholeNonNegative as whole } from './assertion.js';
import type { WalletView } from './ledger-types.js';
import { MAX_REASON_CHARS, text, wholeInk } from './move-input.js';
import { checkedMove, skew, type MoveContext } from './move-statement.js';
import * as SQL from './statements.js';

const WALLET_FIGURES = [
  'grant_ink',
  'payg_ink',
  'held_grant_ink',
  'held_payg_ink',
  'charged_ink',
  'expired_ink',
  'credited_ink',
  'topups_completed',
  'grant_period',
] as const;
type WalletFigure = (typeof WALLET_FIGURES)[number];
type Delta = Partial<Record<WalletFigure, number>>;

interface Credited {
  before: WalletView;
  after: WalletView;
  /** What each figure must have grown by (absent: unchanged); `grant_ink` may be set outright by `grantTo`. */
  delta: Delta;
  grantTo?: number;
}

/** Postconditions of a credit, before its COMMIT. */
export function assertCredited(what: string, credited: Credited): void {
  const { before, after } = credited;
  for (const f of WALLET_FIGURES) {
    const want = f === 'grant_ink' && credited.grantTo !== undefined ? credited.grantTo : before[f] + (credited.delta[f] ?? 0);
    assertLedger(
      whole(after[f]) && after[f] === want,
      () => `${what} ${before.account_id}: ${f} is ${after[f]}, expected ${want}`,
      () => ({
        account_id: before.account_id,
        figure: f,
        before: before[f],
        after: after[f],
        expected: want,
      }),
    );
  }
}

/** Preconditions of a credit: the wallet as read under its lock is whole Ink everywhere. */
function assertWallet(what: string, walletView: WalletView): void {
  for (const f of WALLET_FIGURES)
    assertLedger(
      whole(walletView[f]),
      () => `${what} ${walletView.account_id}: ${f} is ${walletView[f]}, not whole`,
      () => ({ account_id: walletView.account_id, figure: f, value: walletView[f] }),
    );
}

async function wallet(client: Queryable, accountId: string): Promise<WalletView> {
  return (await client.query<WalletView>(SQL.WALLET_VIEW, [accountId])).rows[0]!;
}

/**
 * One credit in one transaction: lock the wallet, read it, check it, `apply`, read it again and
 * assert exactly the expected figures moved, then COMMIT (checkedMove rolls back otherwise).
 */
async function creditMove<T>(
  context: MoveContext,
  what: string,
  accountId: string,
  apply: (client: Queryable, lock: { grant_ink: number; period_grant_ink: number }) => Promise<{ delta: Delta; grantTo?: number; out: T }>,
): Promise<T> {
  const run = async (client: Queryable): Promise<Credited & { out: T }> => {
    const lock = (await client.query<{ grant_ink: number; period_grant_ink: number }>(SQL.ROLL_LOCK, [accountId])).rows[0];
    if (!lock) throw new Error(`unknown account ${accountId} (no wallet)`);
    const before = await wallet(client, accountId);
    assertWallet(what, before);
    assertLedger(
      whole(lock.period_grant_ink) && before.grant_ink === lock.grant_ink,
      () => `${what} ${accountId}: the locked wallet disagrees with itself`,
      () => ({ account_id: accountId, grant_ink: lock.grant_ink, view_grant_ink: before.grant_ink, period_grant_ink: lock.period_grant_ink }),
    );
    const moved = await apply(client, lock);
    const after = await wallet(client, accountId);
    if (context.faults !== undefined) after.credited_ink += skew(context, 'credit', accountId);
    return { before, after, ...moved };
  };
  // On the pool: its own transaction, so the lock holds from the first read to the COMMIT.
  return (await checkedMove(context, context.pool, run, (r) => assertCredited(what, r))).out;
}

/** Credits pay-as-you-go; counts one completed top-up. */
export async function topUp(context: MoveContext, now: Date, accountId: string, ink: number, note?: string): Promise<void> {
  wholeInk('ink', ink, 1);
  const n = text('note', note, MAX_REASON_CHARS);
  await creditMove(context, 'top-up', accountId, async (client) => {
    const r = await client.query(SQL.TOP_UP, [accountId, ink, now, n]);
    assertLedger(r.rowCount === 1, () => `top-up ${accountId}: ${r.rowCount} wallet rows credited`);
    return { delta: { payg_ink: ink, credited_ink: ink, topups_completed: 1 }, out: undefined };
  });
}

/** Admin: extends the current period's grant by `ink` (adds; never lowers it); spent first, lapses at the next roll-over. */
export async function grant(context: MoveContext, now: Date, accountId: string, ink: number, note?: string): Promise<void> {
  wholeInk('ink', ink, 1);
  const n = text('note', note, MAX_REASON_CHARS) ?? 'admin grant';
  await creditMove(context, 'grant', accountId, async (client) => {
    const r = await client.query(SQL.GRANT, [accountId, ink, now, n]);
    assertLedger(r.rowCount === 1, () => `grant ${accountId}: ${r.rowCount} wallet rows credited`);
    return { delta: { grant_ink: ink, credited_ink: ink }, out: undefined };
  });
}

/**
 * Period roll-over: the unspent grant lapses (expired) and the grant is reset to the plan's
 * period_grant_ink. Holds open across the roll keep their Ink (the request in flight is still
 * paid for); when they resolve, whatever of their old-period grant part is not charged lapses
 * too instead of returning to the new grant. Pay-as-you-go never lapses.
 */
export async function rollPeriod(context: MoveContext, now: Date, accountId: string): Promise<{ expiredInk: number; grantInk: number }> {
  return creditMove(context, 'roll-over', accountId, async (client, row) => {
    await client.query(SQL.ROLL_APPLY, [accountId, row.period_grant_ink, now]);
    // Leases keep old-period grant: recalled now, their grant part lapses when it comes back.
    await client.query(SQL.RECALL_FOR_PERIOD, [accountId, now]);
    if (row.grant_ink > 0) await client.query(SQL.JOURNAL_EXPIRE, [accountId, row.grant_ink, now]);
    if (row.period_grant_ink > 0) await client.query(SQL.JOURNAL_PERIOD_GRANT, [accountId, row.period_grant_ink, now]);
    return {
      delta: { expired_ink: row.grant_ink, credited_ink: row.period_grant_ink, grant_period: 1 },
      grantTo: row.period_grant_ink,
      out: { expiredInk: row.grant_ink, grantInk: row.period_grant_ink },
    };
  });
}
