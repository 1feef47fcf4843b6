// Bearer key -> account. Only `Authorization: Bearer` is read (x-api-key and query strings are ignored).
// No cache: revocation must take effect on the very next request. Every request's lookup is a
// statement that starts after the request arrived, so it sees every revocation committed before.
import { findLiveKey, findLiveKeys, type AuthRow } from '../accounts/accounts.js';
import { ApiError } from '../errors.js';
import { GroupCommit, type GroupCommitOptions } from '../ledger/group-commit.js';
import type { AuthInfo } from '../server/http-context.js';
import { storeError, type Queryable } from '../store/pool.js';
import { bearerToken, hashKey, isWellFormedKey } from './api-key.js';

function tokenHash(authorization: string | undefined): Buffer {
  const token = bearerToken(authorization);
  if (token === undefined || !isWellFormedKey(token)) throw new ApiError('invalid_api_key');
  return hashKey(token);
}

function authInfo(row: AuthRow | undefined): AuthInfo {
  if (!row) throw new ApiError('invalid_api_key');
  return { keyId: row.id, accountId: row.account_id, keyName: row.name, keyPrefix: row.prefix, planId: row.plan_id };
}

export async function authenticate(db: Queryable, authorization: string | undefined): Promise<AuthInfo> {
  const hash = tokenHash(authorization);
  let row;
  try {
    row = await findLiveKey(db, hash);
  } catch (e) {
    storeError(e);
  }
  return authInfo(row);
}

/**
 * The server's authenticator: lookups that arrive together go to Postgres as one indexed read
 * (group-commit.ts's policy: a lone request waits for nothing, concurrent ones share a statement),
 * which under load saves a round trip and a statement per request. Still no cache: a lookup
 * always runs after its request arrived.
 */
export class KeyAuthenticator {
  private readonly batch: GroupCommit<Buffer, AuthRow | undefined>;

  constructor(db: Queryable, opts: GroupCommitOptions = { maxItems: 128, maxInFlight: 2, maxQueued: 10_000 }) {
    this.batch = new GroupCommit('key lookup', (hashes) => lookup(db, hashes), opts);
  }

  async authenticate(authorization: string | undefined): Promise<AuthInfo> {
    const hash = tokenHash(authorization);
    let row;
    try {
      row = await this.batch.submit(hash);
    } catch (e) {
      if ((e as Error).name === 'QueueFullError') {
        throw new ApiError('provider_unavailable', { message: 'The service is overloaded; retry after Retry-After.', retryAfterS: 1, cause: e });
      }
      storeError(e);
    }
    return authInfo(row);
  }

  close(): Promise<void> {
    return this.batch.close();
  }
}

/** One read for a batch; the same key sent by many requests is looked up once. */
async function lookup(db: Queryable, hashes: Buffer[]): Promise<Array<AuthRow | undefined>> {
  if (hashes.length === 1) return [await findLiveKey(db, hashes[0]!)];
  const index = new Map<string, number>();
  const unique: Buffer[] = [];
  const slot = new Array<number>(hashes.length);
  for (let i = 0; i < hashes.length; i++) {
    const k = hashes[i]!.toString('latin1');
    let j = index.get(k);
    if (j === undefined) {
      j = unique.length;
      index.set(k, j);
      unique.push(hashes[i]!);
    }
    slot[i] = j;
  }
  const rows = await findLiveKeys(db, unique);
  return slot.map((j) => rows[j]);
}
