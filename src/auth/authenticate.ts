// Bearer key -> account. Only `Authorization: Bearer` is read (x-api-key and query strings are ignored).
// No cache: revocation must take effect on the very next request.
import { findLiveKey } from '../accounts/accounts.js';
import { ApiError } from '../errors.js';
import type { AuthInfo } from '../server/http-context.js';
import { storeError, type Queryable } from '../store/pool.js';
import { bearerToken, hashKey, isWellFormedKey } from './api-key.js';

export async function authenticate(db: Queryable, authorization: string | undefined): Promise<AuthInfo> {
  const token = bearerToken(authorization);
  if (token === undefined || !isWellFormedKey(token)) throw new ApiError('invalid_api_key');
  let row;
  try {
    row = await findLiveKey(db, hashKey(token));
  } catch (e) {
    storeError(e);
  }
  if (!row) throw new ApiError('invalid_api_key');
  return { keyId: row.id, accountId: row.account_id, keyName: row.name, keyPrefix: row.prefix, planId: row.plan_id };
}
