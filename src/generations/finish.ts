// The ends every product's worker shares: a failed generation refunds its whole hold, a succeeded
// one settles its charge, each in the same transaction as the row's move (a lost lease moves
// nothing: whoever holds the row now finishes it). Also the back-off between vendor looks, and
// the media key of a result.
import { createHash } from 'node:crypto';
import type { Services } from '../services.js';
import type { Logger } from '../util/log.js';
import { withTx } from '../store/pool.js';
import type { GenerationDeps } from './deps.js';
import { markFailed, markSucceeded, type FailureCode, type GenerationRow, type SuccessUpdate } from './store.js';
import { within } from '../tracing/hooks.js';

const MAX_BACKOFF_STEPS = 10;

/**
 * Wait before the next look, after `polls` earlier looks and the one just made: the first comes
 * pollIntervalMs after submit, then the wait doubles (2x, 4x, ...) up to maxPollIntervalMs.
 */
export function pollDelayMs(polls: number, pollIntervalMs: number, maxPollIntervalMs: number): number {
  return Math.min(maxPollIntervalMs, pollIntervalMs * 2 ** Math.min(polls + 1, MAX_BACKOFF_STEPS));
}

/** Media key of a result: lower case (the store's key alphabet) plus a hash of the exact id, so a retry overwrites the same key. */
export function mediaKeyFor(folder: 'video' | 'image', id: string, ext: string): string {
  return `${folder}/${id.toLowerCase()}-${createHash('sha256').update(id).digest('hex').slice(0, 12)}.${ext}`;
}

/**
 * Is the generation bound to an Idempotency-Key? A submit that died before its 202 went out left a
 * generation only a client that sent a key can find (its retry replays it); nobody else knows the
 * id, and a generation nobody can find must not be charged.
 */
export async function boundToKey(services: Services, id: string): Promise<boolean> {
  const r = await services.pool.query('SELECT 1 FROM idempotency_keys WHERE generation_id = $1', [id]);
  return (r.rowCount ?? 0) > 0;
}

/** Any active state -> failed, with the whole hold refunded, in one transaction. `tag` names the product in the log events. */
export async function failGeneration(
  services: Services,
  deps: GenerationDeps,
  log: Logger,
  tag: 'video' | 'images',
  row: GenerationRow,
  code: FailureCode,
  message: string,
): Promise<void> {
  // Traced (tracing/): a finish span under the row's job span, linked to its submit.
  await within(
    services.tracing?.jobStep(row, 'finish'),
    withTx(services.pool, async (client) => {
      if (!(await markFailed(client, row.id, deps.owner, code, message, deps.clock()))) return;
      const r = await services.ledger.using(client).refund(row.request_id, code);
      if (!r.resolved) log.error({ reason: r.reason }, tag === 'video' ? 'video.refund_not_open' : 'images.refund_not_open');
    }),
  );
}

/** The row -> succeeded and its hold settled to `update.chargedInk`, in one transaction. */
export async function succeedGeneration(
  services: Services,
  deps: GenerationDeps,
  log: Logger,
  tag: 'video' | 'images',
  row: GenerationRow,
  update: SuccessUpdate,
  settle: { usage: object; vendorRequestId?: string },
): Promise<void> {
  const chargedInk = await within(
    services.tracing?.jobStep(row, 'finish'),
    withTx(services.pool, async (client) => {
      if (!(await markSucceeded(client, row.id, deps.owner, update))) return undefined; // lost the lease: whoever holds the row now finishes it
      const r = await services.ledger.using(client).settle(row.request_id, update.chargedInk, settle);
      if (!r.resolved) log.error({ reason: r.reason }, tag === 'video' ? 'video.settle_not_open' : 'images.settle_not_open');
      return r.resolved ? r.chargedInk : undefined;
    }),
  );
  // Counted once committed, under the ledger's product name, like the text lanes' charges.
  if (chargedInk !== undefined) services.metrics?.inkCharged(PRODUCT_OF_KIND[row.kind], row.model, chargedInk);
}

/** A generation row's kind -> the ledger's (and the metrics') product name. */
const PRODUCT_OF_KIND = Object.freeze({ video: 'video', image: 'images' } as const);
