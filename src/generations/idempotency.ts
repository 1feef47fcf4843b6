// Idempotency-Key claims for asynchronous generation submits (table idempotency_keys, migrations
// 010, 013 and 021), shared by video and image submits. One claim per (API key, product,
// Idempotency-Key) within 24 hours. A repeated submit gets the original 202 whatever its body
// (docs/api/video.md: it returns the original 202 body; a new intent needs a new key). A duplicate
// that arrives while the first is being admitted waits for it and gets its answer: the 202, or the
// refusal the first got (recorded on the claim, replayed only to submits that saw the key held).
// The wait is woken by the first's end on this instance, and looks at the key every 250 ms at most
// for a first running on another instance.
import { ApiError, ERRORS, type ErrorCode } from '../errors.js';
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

/** A refusal as the claim records it (the error's body without the request id, and its wait). */
interface StoredRefusal {
  readonly code: string;
  readonly message: string;
  readonly param?: string;
  readonly retry_after_s?: number;
}

export type KeyState =
  | { kind: 'free' }
  | { kind: 'replay'; row: GenerationRow }
  | { kind: 'in_use' }
  /** The submit that held the key was refused (at `refusedAt`). */
  | { kind: 'refused'; refusal: StoredRefusal; refusedAt: Date };

interface KeyRow {
  generation_id: string;
  claimed_until: Date;
  created_at: Date;
  refused_at: Date | null;
  refusal: StoredRefusal | null;
  g_state: string | null;
}

export async function keyState(database: Queryable, keyId: string, product: IdempotencyProduct, idemKey: string, nowMs: number): Promise<KeyState> {
  const r = await database.query<KeyRow>(
    `SELECT k.generation_id, k.claimed_until, k.created_at, k.refused_at, k.refusal, g.state AS g_state
       FROM idempotency_keys k LEFT JOIN generations g ON g.id = k.generation_id
      WHERE k.key_id = $1 AND k.product = $2 AND k.idem_key = $3`,
    [keyId, product, idemKey],
  );
  const k = r.rows[0];
  if (k === undefined || k.created_at.getTime() <= nowMs - IDEMPOTENCY_WINDOW_MS) return { kind: 'free' };
  const accepted = k.g_state !== null && ['queued', 'running', 'succeeded', 'failed'].includes(k.g_state);
  const unborn = k.g_state === null || k.g_state === 'voided';
  if (unborn && k.refused_at !== null && k.refusal !== null) return { kind: 'refused', refusal: k.refusal, refusedAt: k.refused_at };
  const inFlight = k.g_state === 'submitting' || k.g_state === 'creating' || (unborn && k.claimed_until.getTime() > nowMs);
  if (!accepted && !inFlight) return { kind: 'free' };
  if (inFlight) return { kind: 'in_use' };
  const row = await getGeneration(database, k.generation_id);
  return row ? { kind: 'replay', row } : { kind: 'in_use' };
}

/**
 * Takes the key for `generationId`: a new key, one past its window, or one whose holder let go (its
 * claim lapsed or was refused, and no live generation came of it). A refused claim lapsed when the
 * refusal was recorded, so it is taken over by the refusal alone, never by comparing two
 * instances' clocks: only by a submit that saw that very refusal at its first look
 * (`seenRefusedAt`). One it did not see was recorded while it was on its way to the claim: it is a
 * duplicate of the refused submit, owed that refusal, so it does not take the key over.
 */
export async function claimKey(
  database: Queryable,
  keyId: string,
  product: IdempotencyProduct,
  idemKey: string,
  generationId: string,
  nowMs: number,
  ttlMs: number,
  seenRefusedAt: Date | null,
): Promise<boolean> {
  const r = await database.query(
    `INSERT INTO idempotency_keys AS k (key_id, product, idem_key, generation_id, claimed_until, created_at)
     VALUES ($1, $2, $3, $4, $5, $6)
     ON CONFLICT (key_id, product, idem_key) DO UPDATE
        SET generation_id = EXCLUDED.generation_id,
            claimed_until = EXCLUDED.claimed_until, created_at = EXCLUDED.created_at,
            refused_at = NULL, refusal = NULL
      WHERE k.created_at <= $7
         OR (NOT EXISTS (SELECT 1 FROM generations g WHERE g.id = k.generation_id AND g.state <> 'voided')
             AND CASE WHEN k.refused_at IS NULL THEN k.claimed_until <= $6 ELSE k.refused_at = $8 END)
     RETURNING k.generation_id`,
    [keyId, product, idemKey, generationId, new Date(nowMs + ttlMs), new Date(nowMs), new Date(nowMs - IDEMPOTENCY_WINDOW_MS), seenRefusedAt],
  );
  return r.rowCount === 1;
}

export async function dropClaim(database: Queryable, keyId: string, product: IdempotencyProduct, idemKey: string, generationId: string): Promise<void> {
  await database.query('DELETE FROM idempotency_keys WHERE key_id = $1 AND product = $2 AND idem_key = $3 AND generation_id = $4', [
    keyId,
    product,
    idemKey,
    generationId,
  ]);
}

/** A refusal replayed to a duplicate that waited for it: the same status and error, sent with `Idempotent-Replayed: true`. */
export class ReplayedRefusal extends ApiError {}

/** The claim's record of a refusal, rebuilt as the error to throw; undefined for a code this version does not know. */
function replayRefusal(refusal: StoredRefusal): ReplayedRefusal | undefined {
  if (!Object.hasOwn(ERRORS, refusal.code)) return undefined;
  return new ReplayedRefusal(refusal.code as ErrorCode, { message: refusal.message, param: refusal.param, retryAfterS: refusal.retry_after_s });
}

const keyInUse = (): ApiError =>
  new ApiError('idempotency_key_in_use', {
    param: 'Idempotency-Key',
    message: 'A submit with this Idempotency-Key is still being admitted; retry shortly to get its answer.',
  });

/** The answer for a key already taken: the replayed 202 body (rendered by `present`), or 409. */
export function answerForKey(
  state: Exclude<KeyState, { kind: 'free' | 'refused' }>,
  present: (row: GenerationRow) => Record<string, unknown>,
): { body: Record<string, unknown>; replayed: true } {
  if (state.kind === 'replay') return { body: present(state.row), replayed: true };
  throw keyInUse();
}

/** One submit's view of its key: whose key, and until when (performance.now()) it may wait for another submit holding it. */
export interface KeyClaim {
  readonly keyId: string;
  readonly product: IdempotencyProduct;
  readonly idemKey: string;
  readonly clock: () => number;
  /** performance.now() past which a held key answers 409 (the arrival plus jobs.idempotencyWaitMs). */
  readonly waitUntil: number;
}

// Waiters on this instance, by key: woken by the end of the submit holding the key here.
const waiters = new Map<string, Set<() => void>>();
const waiterName = (c: Pick<KeyClaim, 'keyId' | 'product' | 'idemKey'>): string => `${c.product}\n${c.keyId}\n${c.idemKey}`;

/** Resolves after `delayMs`, or sooner when the submit holding the key on this instance ends. */
function pauseOrWake(name: string, delayMs: number): Promise<void> {
  return new Promise((resolve) => {
    let set = waiters.get(name);
    if (set === undefined) waiters.set(name, (set = new Set()));
    const own = set;
    const done = (): void => {
      clearTimeout(timer);
      own.delete(done);
      if (own.size === 0 && waiters.get(name) === own) waiters.delete(name);
      resolve();
    };
    const timer = setTimeout(done, delayMs);
    own.add(done);
  });
}

function wakeWaiters(name: string): void {
  const set = waiters.get(name);
  if (set !== undefined) for (const w of [...set]) w();
}

/** First and longest pause between two looks at a key held by a submit still being admitted (the longest bounds how late a waiter hears of another instance's end). */
const IN_USE_FIRST_PAUSE_MS = 20;
const IN_USE_MAX_PAUSE_MS = 250;

/**
 * What a submit owes for its key, waiting while another submit holds it (until `waitUntil`):
 * 'free' (go on), the replayed 202, or it throws the replayed refusal, or 409 once the wait ran out.
 * A refusal is owed only by a submit that saw the key held (`sawHeld`: it lost the claim to
 * another, or found it in use): that submit was a duplicate of the refused one. One that finds a
 * refusal at its first look came after it, and the key is free for it.
 */
async function settledAnswer(
  database: Queryable,
  claim: KeyClaim,
  present: (row: GenerationRow) => Record<string, unknown>,
  sawHeld: boolean,
): Promise<{ body: Record<string, unknown>; replayed: true } | FirstLook> {
  const name = waiterName(claim);
  let pauseMs = IN_USE_FIRST_PAUSE_MS;
  let held = sawHeld;
  for (;;) {
    const st = await keyState(database, claim.keyId, claim.product, claim.idemKey, claim.clock());
    if (st.kind === 'free') return { seenRefusedAt: null };
    if (st.kind === 'replay') return answerForKey(st, present);
    if (st.kind === 'refused') {
      const replay = held ? replayRefusal(st.refusal) : undefined;
      if (replay === undefined) return { seenRefusedAt: st.refusedAt };
      throw replay;
    }
    held = true;
    const left = claim.waitUntil - performance.now();
    if (left <= 0) throw keyInUse();
    await pauseOrWake(name, Math.min(pauseMs, left));
    pauseMs = Math.min(pauseMs * 2, IN_USE_MAX_PAUSE_MS);
  }
}

/** What a submit saw of a free key at its first look: the refusal it may take over, if any. */
export interface FirstLook {
  readonly seenRefusedAt: Date | null;
}

/**
 * The answer owed to a submit whose key is already taken (the replayed 202; a replayed refusal or
 * 409 are thrown), or, when the key is free, what it saw (FirstLook): the caller then admits the
 * submit and claims the key with it.
 */
export async function priorAnswer(
  database: Queryable,
  claim: KeyClaim,
  present: (row: GenerationRow) => Record<string, unknown>,
): Promise<{ body: Record<string, unknown>; replayed: true } | FirstLook> {
  return settledAnswer(database, claim, present, false);
}

/** Claims that fail on a key that then reads as free before a submit gives up (a racer took and let go of it each time). */
const MAX_CLAIM_TRIES = 8;

/**
 * Claims the key for a new generation, or gives the answer owed when another submit holds it: a
 * claim lost to a racer is answered from the racer's end (its 202 replayed, its refusal thrown,
 * 409 once `waitUntil` passed); a key freed meanwhile (an error with no recorded answer) is
 * claimed on the next try. Undefined: claimed, admit.
 */
export async function claimOrAnswer(
  database: Queryable,
  claim: KeyClaim & FirstLook & { generationId: string; ttlMs: number },
  present: (row: GenerationRow) => Record<string, unknown>,
): Promise<{ body: Record<string, unknown>; replayed: true } | undefined> {
  for (let attempt = 0; attempt < MAX_CLAIM_TRIES; attempt++) {
    if (await claimKey(database, claim.keyId, claim.product, claim.idemKey, claim.generationId, claim.clock(), claim.ttlMs, claim.seenRefusedAt))
      return undefined;
    const owed = await settledAnswer(database, claim, present, true);
    if ('body' in owed) return owed;
  }
  throw keyInUse();
}

/**
 * The submit holding the key ended, with `error` or without (accepted). A refusal (an ApiError) is
 * recorded on the claim for the duplicates waiting for it, and the claim lapses at once; any other
 * failure before the admission committed drops the claim (they then try themselves). Either way
 * the waiters on this instance are woken. Never throws: a claim left as it was lapses by itself.
 */
export async function settleClaim(
  database: Queryable,
  claim: Pick<KeyClaim, 'keyId' | 'product' | 'idemKey' | 'clock'> & { generationId: string; committed: boolean },
  error?: unknown,
): Promise<void> {
  try {
    if (error instanceof ApiError) await recordRefusal(database, claim, error, claim.clock());
    else if (error !== undefined && !claim.committed) await dropClaim(database, claim.keyId, claim.product, claim.idemKey, claim.generationId);
  } catch {
    // The store failed: the claim lapses at claimed_until, and the waiters answer 409 by then.
  } finally {
    wakeWaiters(waiterName(claim));
  }
}

async function recordRefusal(
  database: Queryable,
  claim: { keyId: string; product: IdempotencyProduct; idemKey: string; generationId: string },
  error: ApiError,
  nowMs: number,
) {
  const refusal: StoredRefusal = {
    code: error.code,
    message: error.message,
    ...(error.param !== undefined ? { param: error.param } : {}),
    ...(error.retryAfterS !== undefined ? { retry_after_s: error.retryAfterS } : {}),
  };
  await database.query(
    `UPDATE idempotency_keys SET refused_at = $5, refusal = $6, claimed_until = $5
      WHERE key_id = $1 AND product = $2 AND idem_key = $3 AND generation_id = $4`,
    [claim.keyId, claim.product, claim.idemKey, claim.generationId, new Date(nowMs), JSON.stringify(refusal)],
  );
}
