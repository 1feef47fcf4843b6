// Bearer key -> account. Only `Authorization: Bearer` is read (x-api-key and query strings are ignored).
// Revocation must reach every instance at once. How:
// - `authenticate`: a lookup per request, a statement that starts after the request arrived, so
//   it sees every revocation committed before.
// - `authenticateCached` (the text lanes): a key authenticated in the last `keyCacheMs` is taken
//   from memory. A revoke, expiry or edit of the key (its cap, its usage frame) drops it: the
//   change sends a notification that every instance hears when it commits, and the Ink lease
//   heartbeat reads a revoke back within a second at worst (src/ledger/escrow.ts); an edit whose
//   notification was lost applies when the entry expires. A hold from a lease reads no key row;
//   an exact-path reserve still refuses a key revoked or expired since (003_reserve_live_key.sql).
//   A request that fails before its hold is looked up afresh before it is answered (the server's
//   error path), so a revoked key still gets 401 rather than, say, a validation error.
// A key the store found not live is refused from memory for `unknownKeyMs` (unknown-keys.ts), on
// every route: refusing needs no freshness, so that cache cannot let a revoked key through.
import { findLiveKey, findLiveKeys, type AuthRow } from '../accounts/accounts.js';
import { ApiError, isApiError } from '../errors.js';
import { GroupCommit, type GroupCommitOptions } from '../store/group-commit.js';
import type { AuthInfo } from '../server/http-context.js';
import { storeError, type Queryable } from '../store/pool.js';
import { bearerToken, hashKey, isWellFormedKey, keyDigest } from '../accounts/api-key.js';
import { UnknownKeys } from './unknown-keys.js';

/** The header's bearer key when it has the key's form, else undefined (no lookup can find it). */
function wellFormedKey(authorization: string | undefined): string | undefined {
  const token = bearerToken(authorization);
  return token !== undefined && isWellFormedKey(token) ? token : undefined;
}

function tokenKey(authorization: string | undefined): string {
  const token = wellFormedKey(authorization);
  if (token === undefined) throw new ApiError('invalid_api_key');
  return token;
}

/** The cause a 401 carries when the store was asked and has no live key with this hash. */
const NOT_LIVE = new Error('the store has no live key with this hash');

/**
 * True for a 401 that cost a store lookup (the key unknown, revoked or expired), false for one
 * given from memory (no key, a malformed one, one the negative cache holds): only the first kind
 * counts against the caller's failed-authentication budget (limits/auth-failures.ts).
 */
export const isLookedUpRefusal = (e: unknown): boolean => isApiError(e) && e.cause === NOT_LIVE;

function authInfo(row: AuthRow | undefined): AuthInfo {
  if (!row) throw new ApiError('invalid_api_key', { cause: NOT_LIVE });
  return {
    keyId: row.id,
    accountId: row.account_id,
    keyName: row.name,
    keyPrefix: row.prefix,
    planId: row.plan_id,
    expiresAtMs: row.expires_at === null ? null : row.expires_at.getTime(),
    usageFrame: row.usage_frame,
  };
}

export async function authenticate(database: Queryable, authorization: string | undefined): Promise<AuthInfo> {
  const hash = hashKey(tokenKey(authorization));
  let row;
  try {
    row = await findLiveKey(database, hash);
  } catch (e) {
    storeError(e);
  }
  return authInfo(row);
}

/** How long, and how many, authenticated keys authenticateCached may remember. */
export interface KeyCacheOptions {
  /** How long a positive lookup is reused (0: never). */
  readonly keyCacheMs: number;
  /** Most keys remembered; the oldest entry goes first. */
  readonly keyCacheEntries: number;
  /** How long a key the store found not live is refused without a lookup (0: off; unknown-keys.ts). */
  readonly unknownKeyMs?: number;
  /** Most such keys remembered; the oldest entry goes first. */
  readonly unknownKeyEntries?: number;
  /** The clock the caches' lifetimes are read on (monotonic ms); tests step a clock of their own. */
  readonly nowMs?: () => number;
}

interface Cached {
  readonly info: AuthInfo;
  readonly untilMs: number;
}

/**
 * The server's authenticator: lookups that arrive together go to Postgres as one indexed read
 * (group-commit.ts's policy: a lone request waits for nothing, concurrent ones share a statement),
 * which under load saves a round trip and a statement per request. `authenticate` always looks the
 * key up; `authenticateCached` (routes whose reserve re-checks the key) may answer from a short
 * cache, which a revoke or an edit on any instance clears (`forgetKey`).
 */
export class KeyAuthenticator {
  private readonly batch: GroupCommit<Buffer, AuthRow | undefined>;
  /** Key hash (latin1) -> what the lookup found; insertion-ordered, so the first entry is the oldest. */
  private readonly cache = new Map<string, Cached>();
  private readonly nowMs: () => number;
  private readonly unknown: UnknownKeys;
  /** Called for each request refused from the negative cache (the metrics count it). */
  onUnknownRefused: (() => void) | undefined;

  constructor(
    database: Queryable,
    private readonly cacheOpts: KeyCacheOptions = { keyCacheMs: 0, keyCacheEntries: 1 },
    opts: GroupCommitOptions = { maxItems: 128, maxInFlight: 2, maxQueued: 10_000 },
  ) {
    this.batch = new GroupCommit('key lookup', (hashes) => lookup(database, hashes), opts);
    this.nowMs = cacheOpts.nowMs ?? (() => performance.now());
    this.unknown = new UnknownKeys({
      unknownKeyMs: cacheOpts.unknownKeyMs ?? 0,
      unknownKeyEntries: cacheOpts.unknownKeyEntries ?? 1,
      nowMs: this.nowMs,
    });
  }

  async authenticate(authorization: string | undefined): Promise<AuthInfo> {
    return this.lookupHash(hashKey(tokenKey(authorization)));
  }

  /**
   * For routes whose reserve re-checks the key: a recent positive answer from memory, otherwise a
   * lookup whose answer is remembered. Unknown keys are never remembered.
   */
  async authenticateCached(authorization: string | undefined): Promise<AuthInfo> {
    if (this.cacheOpts.keyCacheMs === 0) return this.lookupHash(hashKey(tokenKey(authorization)));
    const id = keyDigest(tokenKey(authorization));
    const hit = this.cache.get(id);
    const nowMs = this.nowMs();
    if (hit !== undefined && hit.untilMs > nowMs) return hit.info;
    let info: AuthInfo;
    try {
      info = await this.lookupHash(Buffer.from(id, 'latin1'), id);
    } catch (e) {
      // The store cannot answer (paused, failing over): a key remembered until recently is still
      // taken, for at most one more keyCacheMs. Its holds still need a live Ink lease (or the store),
      // and no revocation can have been written meanwhile either.
      if (hit !== undefined && isApiError(e) && e.code === 'provider_unavailable' && nowMs - hit.untilMs < this.cacheOpts.keyCacheMs) return hit.info;
      throw e;
    }
    this.cache.delete(id);
    if (this.cache.size >= this.cacheOpts.keyCacheEntries) this.cache.delete(this.cache.keys().next().value!);
    this.cache.set(id, { info, untilMs: nowMs + this.cacheOpts.keyCacheMs });
    return info;
  }

  /** The remembered answer for this header, if any and still fresh; never a lookup. */
  peekCached(authorization: string | undefined): AuthInfo | undefined {
    if (this.cacheOpts.keyCacheMs === 0) return undefined;
    const token = wellFormedKey(authorization);
    if (token === undefined) return undefined;
    const hit = this.cache.get(keyDigest(token));
    return hit !== undefined && hit.untilMs > this.nowMs() ? hit.info : undefined;
  }

  /** True when positive lookups are remembered (`keyCacheMs` > 0). */
  get caching(): boolean {
    return this.cacheOpts.keyCacheMs > 0;
  }

  /** Drops a key from the cache (its reserve found it revoked or expired). */
  forget(authorization: string | undefined): void {
    const token = wellFormedKey(authorization);
    if (token !== undefined) this.cache.delete(keyDigest(token));
  }

  /** Drops every remembered answer for a key (revoked, expired or changed on another instance). */
  forgetKey(keyId: string): void {
    for (const [h, c] of this.cache) if (c.info.keyId === keyId) this.cache.delete(h);
  }

  private async lookupHash(hash: Buffer, id = hash.toString('latin1')): Promise<AuthInfo> {
    if (this.unknown.has(id)) {
      this.onUnknownRefused?.();
      throw new ApiError('invalid_api_key');
    }
    let row;
    try {
      row = await this.batch.submit(hash);
    } catch (e) {
      if ((e as Error).name === 'QueueFullError') {
        throw new ApiError('provider_unavailable', { message: 'The service is overloaded; retry after Retry-After.', retryAfterS: 1, cause: e });
      }
      storeError(e);
    }
    // Only an answer from the store is remembered: an outage (above) proves nothing about the key.
    if (row === undefined) this.unknown.add(id);
    return authInfo(row);
  }

  close(): Promise<void> {
    return this.batch.close();
  }
}

/** One read for a batch; the same key sent by many requests is looked up once. */
async function lookup(database: Queryable, hashes: Buffer[]): Promise<Array<AuthRow | undefined>> {
  if (hashes.length === 1) return [await findLiveKey(database, hashes[0]!)];
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
  const rows = await findLiveKeys(database, unique);
  return slot.map((j) => rows[j]);
}
