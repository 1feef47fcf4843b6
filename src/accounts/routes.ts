// GET /v1/me: the account object of the spec's "Account" table, straight from the ledger's rows.
import { inkToUsd } from '../catalog/pricing.js';
import { ApiError } from '../errors.js';
import type { Route } from '../server/router.js';
import type { Escrow } from '../ledger/escrow.js';
import { LEASED_VIEW_COLUMNS, LEASED_VIEW_JOINS } from '../ledger/statements.js';
import type { Queryable } from '../store/pool.js';

interface MeRow {
  user_id: string;
  key_id: string;
  prefix: string;
  name: string;
  ink_limit: number | null;
  ink_charged: number;
  ink_reserved: number;
  grant_ink: number;
  payg_ink: number;
}

/** The spec's account object (GET /v1/me). */
export interface AccountObject {
  readonly object: 'account';
  readonly user_id: string;
  readonly key: {
    readonly id: string;
    readonly prefix: string;
    readonly name: string;
    readonly ink_limit: number | null;
    readonly ink_charged: number;
    readonly ink_reserved: number;
  };
  readonly ink: { readonly balance: number; readonly period_grant_remaining: number; readonly payg_balance: number; readonly usd_payg_equivalent: number };
}

/**
 * The account object for a key, or undefined when the key is gone. One indexed read; the only
 * place these numbers are computed (a lease's spare Ink counts as balance, its holds as reserved).
 */
export async function readAccountObject(db: Queryable, keyId: string): Promise<AccountObject | undefined> {
  const r = await db.query<MeRow>(
    `SELECT a.id AS user_id, k.id AS key_id, k.prefix, k.name, ${LEASED_VIEW_COLUMNS}
       FROM api_keys k JOIN accounts a ON a.id = k.account_id JOIN wallets w ON w.account_id = a.id
       ${LEASED_VIEW_JOINS}
      WHERE k.id = $1`,
    [keyId],
  );
  const row = r.rows[0];
  if (!row) return undefined;
  const balance = row.grant_ink + row.payg_ink;
  return {
    object: 'account',
    user_id: row.user_id,
    key: {
      id: row.key_id,
      prefix: row.prefix,
      name: row.name,
      ink_limit: row.ink_limit,
      ink_charged: row.ink_charged,
      ink_reserved: row.ink_reserved,
    },
    ink: {
      balance,
      period_grant_remaining: row.grant_ink,
      payg_balance: row.payg_ink,
      usd_payg_equivalent: inkToUsd(balance),
    },
  };
}

/** `escrow`: this instance's unflushed records are written first (read-your-writes). */
export function accountRoutes(db: Queryable, escrow?: Pick<Escrow, 'beforeView'>): Route[] {
  return [
    {
      method: 'GET',
      pattern: '/v1/me',
      access: 'key',
      handler: async (ctx) => {
        await escrow?.beforeView();
        const body = await readAccountObject(db, ctx.auth!.keyId);
        if (!body) throw new ApiError('invalid_api_key');
        ctx.sendJson(200, body);
      },
    },
  ];
}
