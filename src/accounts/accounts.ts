// Accounts, plans and keys: the records behind "one key, one wallet".
import { generateKey, type NewKey as KeyMaterial } from './api-key.js';
import { DEFAULT_USAGE_FRAME, isUsageFrame, USAGE_FRAME_CHOICES, type UsageFrame } from './usage-frame.js';
import { newId } from '../util/ids.js';
import { recallNotifySql } from '../ledger/recalls.js';
import type { Pool, Queryable } from '../store/pool.js';
import { withTx } from '../store/pool.js';

export interface PlanRow {
  id: string;
  label: string;
  paid: boolean;
  video_allowed: boolean;
  daily_generation_cap: number;
  period_grant_ink: number;
  period_days: number;
}

export interface KeyRow {
  id: string;
  account_id: string;
  name: string;
  prefix: string;
  last4: string;
  ink_limit: number | null;
  ink_charged: number;
  ink_reserved: number;
  expires_at: Date | null;
  revoked_at: Date | null;
  created_at: Date;
  usage_frame: UsageFrame;
}

export class AdminError extends Error {}

export async function listPlans(database: Queryable): Promise<PlanRow[]> {
  return (await database.query<PlanRow>('SELECT * FROM plans ORDER BY period_grant_ink, id')).rows;
}

export async function createAccount(pool: Pool, input: { name: string; planId: string }): Promise<{ id: string }> {
  const id = newId('usr_');
  return withTx(pool, async (client) => {
    const plan = await client.query('SELECT 1 FROM plans WHERE id = $1', [input.planId]);
    if (plan.rowCount === 0) throw new AdminError(`unknown plan ${JSON.stringify(input.planId)}`);
    await client.query('INSERT INTO accounts (id, name, plan_id) VALUES ($1, $2, $3)', [id, input.name, input.planId]);
    await client.query('INSERT INTO wallets (account_id) VALUES ($1)', [id]);
    return { id };
  });
}

export async function setAccountPlan(database: Queryable, accountId: string, planId: string): Promise<void> {
  const r = await database.query('UPDATE accounts SET plan_id = $2 WHERE id = $1', [accountId, planId]);
  if (r.rowCount === 0) throw new AdminError(`unknown account ${accountId}`);
}

export interface CreatedKey {
  id: string;
  key: string;
  prefix: string;
  last4: string;
  name: string;
  ink_limit: number | null;
  expires_at: string | null;
  usage_frame: UsageFrame;
}

export interface NewKey {
  accountId: string;
  name: string;
  inkLimit?: number | null;
  expiresAt?: Date | null;
  /** How its streams carry the usage frame (default `event`). */
  usageFrame?: UsageFrame;
}

/** Creating a key needs a paid plan or at least one completed top-up (docs/api/authentication.md). */
export async function createKey(pool: Pool, input: NewKey): Promise<CreatedKey> {
  return withTx(pool, (c) => createKeyIn(c, input));
}

/**
 * createKey inside a transaction the caller holds (the console claims its form's one-time nonce in
 * the same one, so a refused key leaves the nonce unused). `made` gives the id and key material
 * when the caller derives them (the console's playground key); by default both are random.
 */
export async function createKeyIn(client: Queryable, input: NewKey, made?: (id: string) => KeyMaterial): Promise<CreatedKey> {
  const usageFrame = input.usageFrame ?? DEFAULT_USAGE_FRAME;
  if (!isUsageFrame(usageFrame)) throw new AdminError(`--usage-frame must be ${USAGE_FRAME_CHOICES}`);
  const id = newId('key_');
  const k = made ? made(id) : generateKey();
  const acc = await client.query<{ paid: boolean; topups_completed: number }>(
    `SELECT p.paid, w.topups_completed FROM accounts a JOIN plans p ON p.id = a.plan_id
       JOIN wallets w ON w.account_id = a.id WHERE a.id = $1`,
    [input.accountId],
  );
  const row = acc.rows[0];
  if (!row) throw new AdminError(`unknown account ${input.accountId}`);
  if (!row.paid && row.topups_completed === 0) {
    throw new AdminError('creating a key needs a paid plan or at least one completed Ink top-up');
  }
  await client.query(
    `INSERT INTO api_keys (id, account_id, name, key_hash, prefix, last4, ink_limit, expires_at, usage_frame)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
    [id, input.accountId, input.name, k.hash, k.prefix, k.last4, input.inkLimit ?? null, input.expiresAt ?? null, usageFrame],
  );
  return {
    id,
    key: k.raw,
    prefix: k.prefix,
    last4: k.last4,
    name: input.name,
    ink_limit: input.inkLimit ?? null,
    expires_at: input.expiresAt ? input.expiresAt.toISOString() : null,
    usage_frame: usageFrame,
  };
}

export async function listKeys(database: Queryable, accountId?: string): Promise<KeyRow[]> {
  const cols = 'id, account_id, name, prefix, last4, ink_limit, ink_charged, ink_reserved, expires_at, revoked_at, created_at, usage_frame';
  const r = accountId
    ? await database.query<KeyRow>(`SELECT ${cols} FROM api_keys WHERE account_id = $1 ORDER BY created_at`, [accountId])
    : await database.query<KeyRow>(`SELECT ${cols} FROM api_keys ORDER BY created_at LIMIT 1000`);
  return r.rows;
}

/**
 * A key's change reaches every gateway instance at once: in the same statement its live leases are
 * recalled (the heartbeat reads that within a second even if no message arrives) and a NOTIFY is
 * sent, which Postgres delivers only if the change commits.
 */
const keyChanged = (update: string): string => `WITH k AS (${update} RETURNING id),
    l AS (UPDATE leases SET recall_at = coalesce(recall_at, now()) WHERE key_id IN (SELECT id FROM k) AND state = 'live')
  SELECT ${recallNotifySql(null, 'id', 'key')} FROM k`;

/**
 * Leases of a key that some instance may still hold from: live, not drained (its owner has not yet
 * stopped holding from it and given its spare Ink back), not past its expiry (past it, its owner
 * stops by itself: its own deadline comes earlier, `ledger.lease.deadlineMarginMs`). A take that
 * committed while the change waited for the key's row escapes the change's recall; the owner's
 * heartbeat finds the key changed and drains it, so it is counted here too.
 */
const KEY_LEASES_HOLDING = `SELECT count(*)::int AS leases, count(DISTINCT instance_id)::int AS instances FROM leases
   WHERE key_id = $1 AND state = 'live' AND drained_at IS NULL AND expires_at > now()`;

/** How often a change in force is checked while it waits (a CLI or console action, not a request). */
const IN_FORCE_POLL_MS = 20;

/** Told once, when the wait lasts longer than `afterMs`: how many instances still hold from the key, and the bound. */
export interface InForceNote {
  readonly afterMs: number;
  readonly note: (instances: number, boundMs: number) => void;
}

/**
 * Resolves once a change of the key (revoke, expiry, cap or frame edit) is in force on every
 * instance: none holds from a lease the key had before the change (a hold without a lease reads the
 * key's row, so it sees the change at once). An instance hears of the change within milliseconds
 * (NOTIFY) or at its next heartbeat (a second), so this usually waits a few milliseconds; a stopped
 * instance is waited for until its lease expires. The bound is a lease's lifetime (`lease.ttlMs`:
 * a stopped instance's lease expires by then) and two heartbeats for a lease renewed just before
 * the change. Throws an AdminError when the bound passes first.
 */
export async function keyChangeInForce(
  database: Queryable,
  keyId: string,
  lease: { readonly ttlMs: number; readonly heartbeatMs: number },
  wait?: InForceNote,
): Promise<void> {
  const boundMs = lease.ttlMs + 2 * lease.heartbeatMs;
  const start = performance.now();
  let noted = wait === undefined;
  for (;;) {
    const r = (await database.query<{ leases: number; instances: number }>(KEY_LEASES_HOLDING, [keyId])).rows[0]!;
    if (r.leases === 0) return;
    const waitedMs = performance.now() - start;
    if (waitedMs >= boundMs)
      throw new AdminError(
        `the change is saved, but ${r.instances} instance(s) still hold Ink for key ${keyId} after ${Math.round(waitedMs)} ms; they stop once their lease expires`,
      );
    if (!noted && waitedMs >= wait!.afterMs) {
      noted = true;
      wait!.note(r.instances, boundMs);
    }
    await new Promise((resolve) => setTimeout(resolve, IN_FORCE_POLL_MS));
  }
}

export async function revokeKey(database: Queryable, keyId: string): Promise<void> {
  const r = await database.query(keyChanged('UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1'), [keyId]);
  if (r.rowCount === 0) throw new AdminError(`unknown key ${keyId}`);
}

/** Edits a key's lifetime cap (null removes it). Lowering it below what was spent blocks new holds only. */
export async function setKeyLimit(database: Queryable, keyId: string, inkLimit: number | null): Promise<void> {
  await updateKey(database, keyId, { inkLimit });
}

export interface KeyChanges {
  /** The lifetime cap; null removes it. */
  readonly inkLimit?: number | null;
  readonly usageFrame?: UsageFrame;
}

/**
 * Edits a key's settings in one statement (all or nothing): its cap and how its streams carry the
 * usage frame. Every instance hears of it as of a cap edit, and drops the key from its cache.
 */
export async function updateKey(database: Queryable, keyId: string, changes: KeyChanges): Promise<void> {
  const { inkLimit, usageFrame } = changes;
  if (inkLimit !== undefined && inkLimit !== null && (!Number.isSafeInteger(inkLimit) || inkLimit < 0))
    throw new AdminError('--ink-limit must be a whole number of Ink >= 0');
  if (usageFrame !== undefined && !isUsageFrame(usageFrame)) throw new AdminError(`--usage-frame must be ${USAGE_FRAME_CHOICES}`);
  if (inkLimit === undefined && usageFrame === undefined) throw new AdminError('nothing to change');
  // $3/$5 say whether the field is given: a cap of null is a change (no cap), not "leave it".
  const r = await database.query(
    keyChanged(`UPDATE api_keys SET ink_limit = CASE WHEN $3 THEN $2::bigint ELSE ink_limit END,
       usage_frame = CASE WHEN $5 THEN $4::text ELSE usage_frame END WHERE id = $1`),
    [keyId, inkLimit ?? null, inkLimit !== undefined, usageFrame ?? null, usageFrame !== undefined],
  );
  if (r.rowCount === 0) throw new AdminError(`unknown key ${keyId}`);
}

export interface AuthRow {
  id: string;
  account_id: string;
  name: string;
  prefix: string;
  plan_id: string;
  expires_at: Date | null;
  usage_frame: UsageFrame;
}

const LIVE_KEY_COLUMNS = `k.id, k.account_id, k.name, k.prefix, a.plan_id, k.expires_at, k.usage_frame
       FROM api_keys k JOIN accounts a ON a.id = k.account_id`;
const LIVE = `k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > now())`;
// Named (prepared once per connection): every authenticated request runs one of these, and
// parsing and planning the join each time cost Postgres several times what executing it does.
const FIND_LIVE_KEY = { name: 'find_live_key', text: `SELECT ${LIVE_KEY_COLUMNS} WHERE k.key_hash = $1 AND ${LIVE}` };
const FIND_LIVE_KEYS = { name: 'find_live_keys', text: `SELECT k.key_hash, ${LIVE_KEY_COLUMNS} WHERE k.key_hash = ANY($1::bytea[]) AND ${LIVE}` };

/** The key behind a hash, only when it is live: not revoked, not expired. One indexed read, no cache. */
export async function findLiveKey(database: Queryable, hash: Buffer): Promise<AuthRow | undefined> {
  const r = await database.query<AuthRow>({ ...FIND_LIVE_KEY, values: [hash] });
  return r.rows[0];
}

/**
 * The live keys behind several hashes in one indexed read (concurrent requests authenticated
 * together, see auth/authenticate.ts), one answer per hash in order; no cache.
 */
export async function findLiveKeys(database: Queryable, hashes: Buffer[]): Promise<Array<AuthRow | undefined>> {
  if (hashes.length === 1) return [await findLiveKey(database, hashes[0]!)];
  const r = await database.query<AuthRow & { key_hash: Buffer }>({ ...FIND_LIVE_KEYS, values: [hashes] });
  const byHash = new Map<string, AuthRow>();
  for (const row of r.rows) {
    byHash.set(row.key_hash.toString('latin1'), {
      id: row.id,
      account_id: row.account_id,
      name: row.name,
      prefix: row.prefix,
      plan_id: row.plan_id,
      expires_at: row.expires_at,
      usage_frame: row.usage_frame,
    });
  }
  return hashes.map((h) => byHash.get(h.toString('latin1')));
}
