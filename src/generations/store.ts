// The generations table (migration 010): the row type and every state move, each one conditional
// UPDATE on (id, state, lease owner). A move that returns 0 rows lost a race (another instance took
// the row after our lease lapsed) and must not touch money: callers run money moves in the same
// transaction and roll back when the row did not move.
import type { Queryable } from '../store/pool.js';

export type GenerationState = 'submitting' | 'creating' | 'queued' | 'running' | 'succeeded' | 'failed' | 'voided';
export type FailureCode = 'provider_failed' | 'timeout' | 'result_persistence_failed' | 'content_policy';

export interface GenerationRow {
  id: string;
  kind: 'video' | 'image';
  account_id: string;
  key_id: string;
  request_id: string;
  model: string;
  state: GenerationState;
  progress: number | null;
  request: Record<string, unknown>;
  price_set: string;
  hold_ink: number;
  charged_ink: number | null;
  vendor_task_id: string | null;
  /** The vendor deployment that created the task or made the image (migration 023); null before. */
  vendor_deployment: string | null;
  error_code: string | null;
  error_message: string | null;
  media_key: string | null;
  media_content_type: string | null;
  media_size_bytes: number | null;
  result_duration_s: number | null;
  result_resolution: string | null;
  result_aspect_ratio: string | null;
  result_seed: number | null;
  /** Image results only (migration 011). */
  result_width: number | null;
  result_height: number | null;
  result_expired: boolean;
  created_at: Date;
  updated_at: Date;
  completed_at: Date | null;
  lease_owner: string | null;
  lease_expires_at: Date | null;
  next_poll_at: Date;
  polls: number;
  poll_errors: number;
  persist_attempts: number;
  claims: number;
  /** The submit's server span as a W3C traceparent (migration 022), null when it was not traced. */
  trace_parent: string | null;
}

const d = (ms: number): Date => new Date(ms);
const ACTIVE_SQL = `('submitting', 'creating', 'queued', 'running')`;

export interface NewGeneration {
  id: string;
  kind: 'video' | 'image';
  accountId: string;
  keyId: string;
  requestId: string;
  model: string;
  request: Record<string, unknown>;
  priceSet: string;
  holdInk: number;
  nowMs: number;
  owner: string;
  leaseMs: number;
  /** The submit's traceparent (tracing/), for the job spans' links. */
  traceParent?: string | undefined;
}

/** The new row, `submitting`, leased to the submitting instance; due for recovery when that lease lapses. */
export async function insertGeneration(database: Queryable, generation: NewGeneration): Promise<GenerationRow> {
  const r = await database.query<GenerationRow>(
    `INSERT INTO generations (id, kind, account_id, key_id, request_id, model, state, request, price_set, hold_ink,
                              created_at, updated_at, lease_owner, lease_expires_at, next_poll_at, trace_parent)
     VALUES ($1, $2, $3, $4, $5, $6, 'submitting', $7, $8, $9, $10, $10, $11, $12, $12, $13)
     RETURNING *`,
    [
      generation.id,
      generation.kind,
      generation.accountId,
      generation.keyId,
      generation.requestId,
      generation.model,
      JSON.stringify(generation.request),
      generation.priceSet,
      generation.holdInk,
      d(generation.nowMs),
      generation.owner,
      d(generation.nowMs + generation.leaseMs),
      generation.traceParent ?? null,
    ],
  );
  return r.rows[0]!;
}

export async function getGeneration(database: Queryable, id: string): Promise<GenerationRow | undefined> {
  return (await database.query<GenerationRow>('SELECT * FROM generations WHERE id = $1', [id])).rows[0];
}

/** submitting -> creating: the vendor create call is about to go out (after this, its outcome is unknown until recorded). */
export async function markCreating(database: Queryable, id: string, owner: string, nowMs: number, leaseMs: number): Promise<boolean> {
  const r = await database.query(
    `UPDATE generations SET state = 'creating', updated_at = $3, lease_expires_at = $4, next_poll_at = $4
      WHERE id = $1 AND state = 'submitting' AND lease_owner = $2`,
    [id, owner, d(nowMs), d(nowMs + leaseMs)],
  );
  return r.rowCount === 1;
}

/** creating -> queued: the vendor task id is recorded; the lease is let go and the first poll scheduled. */
export async function markQueued(
  database: Queryable,
  id: string,
  owner: string,
  taskId: string,
  deployment: string,
  nowMs: number,
  firstPollMs: number,
): Promise<boolean> {
  const r = await database.query(
    `UPDATE generations SET state = 'queued', vendor_task_id = $3, vendor_deployment = $6, updated_at = $4, next_poll_at = $5,
            lease_owner = NULL, lease_expires_at = NULL
      WHERE id = $1 AND state = 'creating' AND lease_owner = $2`,
    [id, owner, taskId, d(nowMs), d(nowMs + firstPollMs), deployment],
  );
  return r.rowCount === 1;
}

/** submitting|creating -> voided (refused at submit): run with the ledger's release in one transaction. */
export async function markVoided(
  database: Queryable,
  id: string,
  owner: string,
  code: 'provider_error' | 'provider_unavailable',
  message: string,
  nowMs: number,
): Promise<boolean> {
  const r = await database.query(
    `UPDATE generations SET state = 'voided', error_code = $3, error_message = $4, charged_ink = 0, completed_at = $5, updated_at = $5,
            lease_owner = NULL, lease_expires_at = NULL
      WHERE id = $1 AND state IN ('submitting', 'creating') AND lease_owner = $2`,
    [id, owner, code, message.slice(0, 1000), d(nowMs)],
  );
  // A refused submit binds no Idempotency-Key, but its claim stays: the submit records the refusal
  // on it (idempotency.ts, settleClaim) for the duplicates waiting, and that frees the key.
  return r.rowCount === 1;
}

/**
 * Claims up to `limit` due rows of `kinds` whose lease is free or lapsed: one statement, SKIP LOCKED,
 * so instances never wait on each other and never take the same row.
 */
export async function claimDue(
  database: Queryable,
  kinds: readonly string[],
  owner: string,
  nowMs: number,
  leaseMs: number,
  limit: number,
): Promise<GenerationRow[]> {
  const r = await database.query<GenerationRow>(
    `UPDATE generations g SET lease_owner = $2, lease_expires_at = $4, claims = g.claims + 1
      WHERE g.id IN (
        SELECT id FROM generations
         WHERE state IN ${ACTIVE_SQL} AND kind = ANY($1) AND next_poll_at <= $3
           AND (lease_expires_at IS NULL OR lease_expires_at <= $3)
         ORDER BY next_poll_at
         LIMIT $5
         FOR UPDATE SKIP LOCKED)
      RETURNING g.*`,
    [kinds, owner, d(nowMs), d(nowMs + leaseMs), limit],
  );
  return r.rows;
}

export async function renewLease(database: Queryable, id: string, owner: string, nowMs: number, leaseMs: number): Promise<boolean> {
  const r = await database.query('UPDATE generations SET lease_expires_at = $3 WHERE id = $1 AND lease_owner = $2 AND state IN ' + ACTIVE_SQL, [
    id,
    owner,
    d(nowMs + leaseMs),
  ]);
  return r.rowCount === 1;
}

/** queued|running stays active: record what the vendor said and when to look again; let go of the lease. */
export async function reschedule(
  database: Queryable,
  id: string,
  owner: string,
  update: { state: 'queued' | 'running'; progress: number | null; nextPollMs: number; nowMs: number; pollError: boolean; persistFailed?: boolean },
): Promise<boolean> {
  const r = await database.query(
    `UPDATE generations SET state = $3, progress = coalesce($4, progress), next_poll_at = $5, updated_at = $6,
            polls = polls + 1, poll_errors = poll_errors + $7, persist_attempts = persist_attempts + $8,
            lease_owner = NULL, lease_expires_at = NULL
      WHERE id = $1 AND lease_owner = $2 AND state IN ('queued', 'running')`,
    [id, owner, update.state, update.progress, d(update.nextPollMs), d(update.nowMs), update.pollError ? 1 : 0, update.persistFailed ? 1 : 0],
  );
  return r.rowCount === 1;
}

export interface SuccessUpdate {
  chargedInk: number;
  mediaKey: string;
  contentType: string;
  sizeBytes: number;
  durationS: number | null;
  resolution: string | null;
  aspectRatio: string | null;
  seed: number | null;
  nowMs: number;
  /** Image rows: the vendor's response id (image rows have none until the result arrives). */
  vendorTaskId?: string;
  /** Image rows: the deployment that made the image. */
  vendorDeployment?: string;
  width?: number | null;
  height?: number | null;
}

/** queued|running -> succeeded; run with the ledger's settle in one transaction. */
export async function markSucceeded(database: Queryable, id: string, owner: string, update: SuccessUpdate): Promise<boolean> {
  const r = await database.query(
    `UPDATE generations SET state = 'succeeded', progress = NULL, charged_ink = $3, media_key = $4, media_content_type = $5,
            media_size_bytes = $6, result_duration_s = $7, result_resolution = $8, result_aspect_ratio = $9, result_seed = $10,
            completed_at = $11, updated_at = $11, lease_owner = NULL, lease_expires_at = NULL,
            vendor_task_id = coalesce($12, vendor_task_id), result_width = $13, result_height = $14,
            vendor_deployment = coalesce($15, vendor_deployment)
      WHERE id = $1 AND lease_owner = $2 AND state IN ('queued', 'running')`,
    [
      id,
      owner,
      update.chargedInk,
      update.mediaKey,
      update.contentType,
      update.sizeBytes,
      update.durationS,
      update.resolution,
      update.aspectRatio,
      update.seed,
      d(update.nowMs),
      update.vendorTaskId ?? null,
      update.width ?? null,
      update.height ?? null,
      update.vendorDeployment ?? null,
    ],
  );
  return r.rowCount === 1;
}

/** Any active state -> failed; run with the ledger's refund in one transaction. */
export async function markFailed(database: Queryable, id: string, owner: string, code: FailureCode, message: string, nowMs: number): Promise<boolean> {
  const r = await database.query(
    `UPDATE generations SET state = 'failed', progress = NULL, charged_ink = 0, error_code = $3, error_message = $4,
            completed_at = $5, updated_at = $5, lease_owner = NULL, lease_expires_at = NULL
      WHERE id = $1 AND lease_owner = $2 AND state IN ${ACTIVE_SQL}`,
    [id, owner, code, message.slice(0, 1000), d(nowMs)],
  );
  return r.rowCount === 1;
}

/**
 * Admission counts for one account and one kind: generations in flight, and those accepted since
 * `dayStartMs`. Video and images are counted apart: each has its own concurrency slots and daily count.
 */
export async function admissionCounts(
  database: Queryable,
  accountId: string,
  dayStartMs: number,
  kind: 'video' | 'image' = 'video',
): Promise<{ active: number; today: number }> {
  const r = await database.query<{ active: number; today: number }>(
    `SELECT (SELECT count(*) FROM generations WHERE account_id = $1 AND kind = $3 AND state IN ${ACTIVE_SQL})::int AS active,
            (SELECT count(*) FROM generations WHERE account_id = $1 AND kind = $3 AND created_at >= $2 AND state <> 'voided')::int AS today`,
    [accountId, d(dayStartMs), kind],
  );
  return r.rows[0]!;
}

// ---------------------------------------------------------------------------------------------
// Image rows (migration 011): no vendor task to poll; the vendor call is the generation.

/** submitting -> queued (image): the submit is done; the row is let go and due at once for a worker. */
export async function markImageQueued(database: Queryable, id: string, owner: string, nowMs: number): Promise<boolean> {
  const r = await database.query(
    `UPDATE generations SET state = 'queued', updated_at = $3, next_poll_at = $3, lease_owner = NULL, lease_expires_at = NULL
      WHERE id = $1 AND kind = 'image' AND state = 'submitting' AND lease_owner = $2`,
    [id, owner, d(nowMs)],
  );
  return r.rowCount === 1;
}

/** submitting|queued|running -> running (image), under the claimer's lease: a vendor call is about to go out (`polls` counts the calls). */
export async function markImageRunning(database: Queryable, id: string, owner: string, nowMs: number, leaseMs: number): Promise<boolean> {
  const r = await database.query(
    `UPDATE generations SET state = 'running', updated_at = $3, lease_expires_at = $4, polls = polls + 1
      WHERE id = $1 AND kind = 'image' AND lease_owner = $2 AND state IN ('submitting', 'queued', 'running')`,
    [id, owner, d(nowMs), d(nowMs + leaseMs)],
  );
  return r.rowCount === 1;
}

/** Image row back to `queued` after an unavailable vendor: due again at `nextPollMs`; the lease is let go. */
export async function rescheduleImage(database: Queryable, id: string, owner: string, nextPollMs: number, nowMs: number): Promise<boolean> {
  const r = await database.query(
    `UPDATE generations SET state = 'queued', next_poll_at = $3, updated_at = $4, poll_errors = poll_errors + 1,
            lease_owner = NULL, lease_expires_at = NULL
      WHERE id = $1 AND kind = 'image' AND lease_owner = $2 AND state IN ('submitting', 'queued', 'running')`,
    [id, owner, d(nextPollMs), d(nowMs)],
  );
  return r.rowCount === 1;
}
