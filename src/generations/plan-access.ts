// Who may submit generations, and how many a day (docs/api/authentication.md: video
// requires a paid tier or pay-as-you-go Ink, otherwise 403 tier_gated). A plan that includes generations uses its own
// daily cap; an account on a plan without them that has completed an Ink top-up (pay-as-you-go)
// may generate too, up to `jobs.paygDailyCap` a day. Images follow the same access rule.
import { ApiError } from '../errors.js';
import type { Queryable } from '../store/pool.js';

export interface GenerationAccess {
  /** May this account submit at all (else 403 tier_gated). */
  readonly allowed: boolean;
  readonly daily_generation_cap: number;
}

/** Reads the account's access; `lock` takes the account row for the admission transaction. */
export async function generationAccess(database: Queryable, accountId: string, lock: boolean, paygDailyCap: number): Promise<GenerationAccess | undefined> {
  const r = await database.query<GenerationAccess>(
    `SELECT p.video_allowed OR w.topups_completed > 0 AS allowed,
            CASE WHEN p.video_allowed THEN p.daily_generation_cap ELSE $2::int END AS daily_generation_cap
       FROM accounts a JOIN plans p ON p.id = a.plan_id JOIN wallets w ON w.account_id = a.id
      WHERE a.id = $1${lock ? ' FOR UPDATE OF a' : ''}`,
    [accountId, paygDailyCap],
  );
  return r.rows[0];
}

export type GenerationKind = 'video' | 'image';
const DAY_MS = 86_400_000;

/** The start of today (UTC): the daily cap counts generations accepted since then. */
export const utcDayStartMs = (nowMs: number): number => Math.floor(nowMs / DAY_MS) * DAY_MS;

/** Seconds until the next 00:00 UTC: when today's generation count starts again from zero. */
export function secondsUntilUtcMidnight(nowMs: number): number {
  return Math.max(1, Math.ceil((utcDayStartMs(nowMs) + DAY_MS - nowMs) / 1000));
}

/** The account's access, or 403 tier_gated. */
export async function requireAccess(
  database: Queryable,
  accountId: string,
  lock: boolean,
  paygDailyCap: number,
  kind: GenerationKind,
): Promise<GenerationAccess> {
  const row = await generationAccess(database, accountId, lock, paygDailyCap);
  if (!row?.allowed) {
    throw new ApiError('tier_gated', {
      message: `${kind === 'video' ? 'Video' : 'Image generation'} needs a paid plan or pay-as-you-go Ink: upgrade, or top up the wallet.`,
    });
  }
  return row;
}

/** 429 daily_cap_reached (Retry-After to 00:00 UTC) or concurrency_limit (Retry-After 15). */
export function checkAdmissionCounts(
  access: GenerationAccess,
  counts: { active: number; today: number },
  maxRunning: number,
  nowMs: number,
  kind: GenerationKind,
): void {
  if (counts.today >= access.daily_generation_cap) {
    throw new ApiError('daily_cap_reached', {
      message: `Your plan allows ${access.daily_generation_cap} ${kind} generations per day (UTC); the count starts again at 00:00 UTC.`,
      retryAfterS: secondsUntilUtcMidnight(nowMs),
    });
  }
  if (counts.active >= maxRunning) {
    throw new ApiError('concurrency_limit', {
      message: `${maxRunning} ${kind} generations are already queued or running on this account; retry when one finishes.`,
      retryAfterS: 15,
    });
  }
}
