// Account views: an account's wallet and its request records, as stored. Reads only: no Ink moves
// here, so no money rule is asserted; what they show is what the moves asserted (reserve.ts,
// resolve.ts, credits.ts) and what `inkgate ledger check` (invariant.ts) checks over the whole
// database. Each read is bounded (one wallet, one request, at most 1,000 requests).
import type { Queryable } from '../store/pool.js';
import type { RequestRecord, WalletView } from './ledger-types.js';
import * as SQL from './statements.js';

export async function walletView(database: Queryable, accountId: string): Promise<WalletView | undefined> {
  return (await database.query<WalletView>(SQL.WALLET_VIEW, [accountId])).rows[0];
}

/** Newest first; limit 1 to 1,000 (default 50). */
export async function listRequests(database: Queryable, accountId: string, opts: { limit?: number } = {}): Promise<RequestRecord[]> {
  const limit = opts.limit ?? 50;
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > 1000) throw new RangeError('ledger: limit must be 1 to 1000');
  return (await database.query<RequestRecord>(SQL.LIST_REQUESTS, [accountId, limit])).rows;
}

export async function getRequest(database: Queryable, requestId: string): Promise<RequestRecord | undefined> {
  return (await database.query<RequestRecord>(SQL.GET_REQUEST, [requestId])).rows[0];
}
