// Idempotency-Key claims for asynchronous generation submits (table idempotency_keys, migrations
// 010 and 013), shared by video and image submits. One claim per (API key, product,
// Idempotency-Key) within 24 hours. A repeated submit gets the original 202 whatever its body
// (docs/api/video.md: it returns the original 202 body; a new intent needs a new key).
import { ApiError } from '../errors.js';
import type { Product } from '../ledger/ledger.js';
import type { Queryable } from '../store/pool.js';
import { getGeneration, type GenerationRow } from './store.js';

/** The header's allowed form (docs/api/video.md: 1 to 128 of [A-Za-z0-9._:-]). */
export const IDEMPOTENCY_KEY_RE = /^[A-Za-z0-9._:-]{1,128}$/;

/** Throws 400 invalid_idempotency_key for a header outside the allowed form. */
export function assertIdempotencyKey(idemKey: string | undefined): void {
  if (idemKey !== undefined && !IDEMPOTENCY_KEY_RE.test(idemKey)) throw new ApiError('invalid_idempotency_key', { param: 'Idempotency-Key' });
}

/** A key binds one accepted submit for this long. */
export const IDEMPOTENCY_WINDOW_MS = 24 * 3600 * 1000;

/** The key spaces: one per submit endpoint, named as the ledger names the products. */
export type IdempotencyProduct = Extract<Product, 'video' | 'images'>;

export type KeyState = { kind: 'free' } | { kind: 'replay'; row: GenerationRow } | { kind: 'in_use' };

interface KeyRow {
  generation_id: string;
  claimed_until: Date;
  created_at: Date;
  g_state: string | null;
}

export async function keyState(q: Queryable, keyId: string, product: IdempotencyProduct, idemKey: string, nowMs: number): Promise<KeyState> {
  const r = await q.query<KeyRow>(
    `SELECT k.generation_id, k.claimed_until, k.created_at, g.state AS g_state
       FROM idempotency_keys k LEFT JOIN generations g ON g.id = k.generation_id
      WHERE k.key_id = $1 AND k.product = $2 AND k.idem_key = $3`,
    [keyId, product, idemKey],
  );
  const k = r.rows[0];
  if (k === undefined || k.created_at.getTime() <= nowMs - IDEMPOTENCY_WINDOW_MS) return { kind: 'free' };
  const accepted = k.g_state !== null && ['queued', 'running', 'succeeded', 'failed'].includes(k.g_state);
  const inFlight =
    k.g_state === 'submitting' || k.g_state === 'creating' || ((k.g_state === null || k.g_state === 'voided') && k.claimed_until.getTime() > nowMs);
  if (!accepted && !inFlight) return { kind: 'free' };
  if (inFlight) return { kind: 'in_use' };
  const row = await getGeneration(q, k.generation_id);
  return row ? { kind: 'replay', row } : { kind: 'in_use' };
}

export async function claimKey(
  q: Queryable,
  keyId: string,
  product: IdempotencyProduct,
  idemKey: string,
  generationId: string,
  nowMs: number,
  ttlMs: number,
): Promise<boolean> {
  const r = await q.query(
    `INSERT INTO idempotency_keys AS k (key_id, product, idem_key, generation_id, claimed_until, created_at)
     VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT (key_id, product, idem_key) DO UPDATE
        SET generation_id = EXCLUDED.generation_id,
            claimed_until = EXCLUDED.claimed_until, created_at = EXCLUDED.created_at
      WHERE k.created_at <= $7
         OR (k.claimed_until <= $6
             AND NOT EXISTS (SELECT 1 FROM generations g WHERE g.id = k.generation_id AND g.state <> 'voided'))
     RETURNING k.generation_id`,
    [keyId, product, idemKey, generationId, new Date(nowMs + ttlMs), new Date(nowMs), new Date(nowMs - IDEMPOTENCY_WINDOW_MS)],
  );
  return r.rowCount === 1;
}

export async function dropClaim(q: Queryable, keyId: string, product: IdempotencyProduct, idemKey: string, generationId: string): Promise<void> {
  await q.query('DELETE FROM idempotency_keys WHERE key_id = $1 AND product = $2 AND idem_key = $3 AND generation_id = $4', [
    keyId,
    product,
    idemKey,
    generationId,
  ]);
}

/** The answer for a key already taken: the replayed 202 body (rendered by `present`), or 409. */
export function answerForKey(
  state: Exclude<KeyState, { kind: 'free' }>,
  present: (row: GenerationRow) => Record<string, unknown>,
): { body: Record<string, unknown>; replayed: true } {
  if (state.kind === 'replay') return { body: present(state.row), replayed: true };
  throw new ApiError('idempotency_key_in_use', {
    param: 'Idempotency-Key',
    message: 'A submit with this Idempotency-Key is still being admitted; retry shortly to get its answer.',
  });
}

/** First and longest pause between two looks at a key held by a submit still being admitted. */
const IN_USE_FIRST_PAUSE_MS = 20;
const IN_USE_MAX_PAUSE_MS = 250;

/**
 * The key's state, waiting while another submit holds it (it is being admitted right now) for up
 * to `waitMs` of real time, so that a duplicate sent during the first one's admission gets the
 * first one's answer (docs/api/video.md: a repeated submit returns the original 202 body) instead of a 409 the
 * client would have to retry. Looks at the key with growing pauses (a few dozen queries at most).
 */
async function settledKeyState(
  q: Queryable,
  keyId: string,
  product: IdempotencyProduct,
  idemKey: string,
  clock: () => number,
  waitMs: number,
): Promise<KeyState> {
  const deadline = performance.now() + waitMs;
  let pauseMs = IN_USE_FIRST_PAUSE_MS;
  for (;;) {
    const st = await keyState(q, keyId, product, idemKey, clock());
    const left = deadline - performance.now();
    if (st.kind !== 'in_use' || left <= 0) return st;
    await new Promise((r) => setTimeout(r, Math.min(pauseMs, left)));
    pauseMs = Math.min(pauseMs * 2, IN_USE_MAX_PAUSE_MS);
  }
}

/**
 * The answer owed to a submit whose key is already taken (the replayed 202, or 409), or
 * undefined when the key is free: the caller then admits the submit and claims the key.
 */
export async function priorAnswer(
  q: Queryable,
  c: { keyId: string; product: IdempotencyProduct; idemKey: string; clock: () => number; waitMs: number },
  present: (row: GenerationRow) => Record<string, unknown>,
): Promise<{ body: Record<string, unknown>; replayed: true } | undefined> {
  const st = await settledKeyState(q, c.keyId, c.product, c.idemKey, c.clock, c.waitMs);
  return st.kind === 'free' ? undefined : answerForKey(st, present);
}

/**
 * Claims the key for a new generation, or gives the answer owed when another submit holds it.
 * Two tries: a claim lost to a racer is answered from the racer's state once it is settled
 * (replay, or 409 after `waitMs`); a key freed meanwhile (the racer failed) is claimed on the
 * second try; one that stays contended after that is in use (409). Undefined: claimed, admit.
 */
export async function claimOrAnswer(
  q: Queryable,
  c: { keyId: string; product: IdempotencyProduct; idemKey: string; generationId: string; clock: () => number; ttlMs: number; waitMs: number },
  present: (row: GenerationRow) => Record<string, unknown>,
): Promise<{ body: Record<string, unknown>; replayed: true } | undefined> {
  for (let attempt = 0; attempt < 2; attempt++) {
    if (await claimKey(q, c.keyId, c.product, c.idemKey, c.generationId, c.clock(), c.ttlMs)) return undefined;
    const prior = await priorAnswer(q, c, present);
    if (prior) return prior;
  }
  return answerForKey({ kind: 'in_use' }, present);
}
