// GET /v1/me: the account object of docs/api/me.md, straight from the ledger's rows.
import { ApiError } from '../errors.js';
import type { Route } from '../server/router.js';
import type { Escrow } from '../ledger/escrow.js';
import type { Queryable } from '../store/pool.js';
import {
  ACCOUNT_INK_COLUMNS,
  ACCOUNT_INK_JOIN,
  inkFigures,
  KEY_SPEND_COLUMNS,
  KEY_SPEND_JOIN,
  keySpend,
  type AccountInkRow,
  type InkFigures,
  type KeySpend,
  type KeySpendRow,
} from './ink-figures.js';

interface MeRow extends AccountInkRow, KeySpendRow {
  user_id: string;
  key_id: string;
  prefix: string;
  name: string;
}

/** The account object (GET /v1/me, docs/api/me.md). */
export interface AccountObject {
  readonly object: 'account';
  readonly user_id: string;
  readonly key: { readonly id: string; readonly prefix: string; readonly name: string } & KeySpend;
  readonly ink: InkFigures;
}

/**
 * The account object for a key, or undefined when the key is gone. One indexed read; its figures
 * come from ink-figures.ts, which the console's overview uses too.
 */
export async function readAccountObject(database: Queryable, keyId: string): Promise<AccountObject | undefined> {
  const r = await database.query<MeRow>(
    `SELECT a.id AS user_id, k.id AS key_id, k.prefix, k.name, ${KEY_SPEND_COLUMNS}, ${ACCOUNT_INK_COLUMNS}
       FROM api_keys k JOIN accounts a ON a.id = k.account_id JOIN wallets w ON w.account_id = a.id
       ${KEY_SPEND_JOIN}
       ${ACCOUNT_INK_JOIN}
      WHERE k.id = $1`,
    [keyId],
  );
  const row = r.rows[0];
  if (!row) return undefined;
  return {
    object: 'account',
    user_id: row.user_id,
    key: { id: row.key_id, prefix: row.prefix, name: row.name, ...keySpend(row) },
    ink: inkFigures(row),
  };
}

/** `escrow`: this instance's unflushed records are written first (read-your-writes). */
export function accountRoutes(database: Queryable, escrow?: Pick<Escrow, 'beforeView'>): Route[] {
  return [
    {
      method: 'GET',
      pattern: '/v1/me',
      access: 'key',
      handler: async (ctx) => {
        await escrow?.beforeView();
        const body = await readAccountObject(database, ctx.auth!.keyId);
        if (!body) throw new ApiError('invalid_api_key');
        ctx.sendJson(200, body);
      },
    },
  ];
}
