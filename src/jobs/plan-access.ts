// Who may submit generations, and how many a day (spec, Authentication 7: "Video requires a paid tier
// or pay-as-you-go Ink, otherwise 403 tier_gated"). A plan that includes generations uses its own
// daily cap; an account on a plan without them that has completed an Ink top-up (pay-as-you-go)
// may generate too, up to `jobs.paygDailyCap` a day. Images follow the same access rule.
import type { Queryable } from '../store/pool.js';

export interface GenerationAccess {
  /** May this account submit at all (else 403 tier_gated). */
  readonly allowed: boolean;
  readonly daily_generation_cap: number;
}

/** Reads the account's access; `lock` takes the account row for the admission transaction. */
export async function generationAccess(q: Queryable, accountId: string, lock: boolean, paygDailyCap: number): Promise<GenerationAccess | undefined> {
  const r = await q.query<GenerationAccess>(
    `SELECT p.video_allowed OR w.topups_completed > 0 AS allowed,
            CASE WHEN p.video_allowed THEN p.daily_generation_cap ELSE $2::int END AS daily_generation_cap
       FROM accounts a JOIN plans p ON p.id = a.plan_id JOIN wallets w ON w.account_id = a.id
      WHERE a.id = $1${lock ? ' FOR UPDATE OF a' : ''}`,
    [accountId, paygDailyCap],
  );
  return r.rows[0];
}
