// The Ink figures of GET /v1/me, computed in one place: an account's balance (period grant and
// pay-as-you-go, leases included) and a key's spend. /v1/me reads them for one key; the console's
// overview reads the same columns for the account and each of its keys, so both show one number.
import { inkToUsd } from '../catalog/pricing.js';

/**
 * An account's Ink as its keys see it, leases included: a lease's spare Ink is still the account's
 * balance. (Correct as of the last flush; the serving instance flushes before it reads.) Needs
 * `wallets w` and ACCOUNT_INK_JOIN; gives grant_ink and payg_ink.
 */
export const ACCOUNT_INK_COLUMNS = `w.grant_ink + w.leased_grant_ink - coalesce(al.g, 0)::bigint AS grant_ink,
         w.payg_ink + w.leased_payg_ink - coalesce(al.p, 0)::bigint AS payg_ink`;

/**
 * The account's Ink held by running requests: durable holds and the holds in flight inside leases.
 * Not in GET /v1/me (it reports a key's reserved Ink); the console's overview shows it for the account.
 */
export const ACCOUNT_RESERVED_COLUMN = `w.held_grant_ink + w.held_payg_ink + coalesce(al.g, 0)::bigint + coalesce(al.p, 0)::bigint AS reserved_ink`;

/** The holds in flight inside the account's live leases, split by the Ink they came from. */
export const ACCOUNT_INK_JOIN = `LEFT JOIN LATERAL (SELECT sum(r.hold_grant_ink) AS g, sum(r.hold_payg_ink) AS p FROM leases l JOIN requests r ON r.lease_id = l.id AND r.leased
                      WHERE l.account_id = w.account_id AND l.state = 'live') al ON true`;

/**
 * A key's spend: its cap, what it was charged, and what it holds (durable holds and the holds in
 * flight inside its leases, like durable ones). Needs `api_keys k` and KEY_SPEND_JOIN.
 */
export const KEY_SPEND_COLUMNS = `k.ink_limit, k.ink_charged, k.ink_reserved + coalesce(kl.h, 0)::bigint AS ink_reserved`;

export const KEY_SPEND_JOIN = `LEFT JOIN LATERAL (SELECT sum(r.hold_ink) AS h FROM leases l JOIN requests r ON r.lease_id = l.id AND r.leased
                      WHERE l.key_id = k.id AND l.state = 'live') kl ON true`;

/** The `ink` member of the account object. */
export interface InkFigures {
  readonly balance: number;
  readonly period_grant_remaining: number;
  readonly payg_balance: number;
  /**
   * The whole balance (grant included) valued at the pay-as-you-go rate, 100 Ink per USD: what it
   * would cost to buy as pay-as-you-go Ink. Not the pay-as-you-go wallet in USD (payg_balance / 100).
   */
  readonly usd_payg_equivalent: number;
}

/** The spend members of the account object's `key`. */
export interface KeySpend {
  readonly ink_limit: number | null;
  readonly ink_charged: number;
  readonly ink_reserved: number;
}

/** A row holding ACCOUNT_INK_COLUMNS (bigint columns arrive as numbers: store/pool.ts). */
export interface AccountInkRow {
  readonly grant_ink: number;
  readonly payg_ink: number;
}

/** A row holding KEY_SPEND_COLUMNS. */
export interface KeySpendRow {
  readonly ink_limit: number | null;
  readonly ink_charged: number;
  readonly ink_reserved: number;
}

export function inkFigures(row: AccountInkRow): InkFigures {
  const balance = row.grant_ink + row.payg_ink;
  return { balance, period_grant_remaining: row.grant_ink, payg_balance: row.payg_ink, usd_payg_equivalent: inkToUsd(balance) };
}

export function keySpend(row: KeySpendRow): KeySpend {
  return { ink_limit: row.ink_limit, ink_charged: row.ink_charged, ink_reserved: row.ink_reserved };
}
