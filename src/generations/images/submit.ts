// Submitting an image generation: validation, Idempotency-Key, reference URLs, admission (tier,
// daily count, concurrency, Ink hold, the row) committed in one transaction, then the row is handed
// to the job engine (`queued`, due at once). The vendor is not called here: with Gemini the call is
// the generation itself (tens of seconds), so a worker makes it and the client polls.
//
// Order of answers:
//   415 / 400 invalid_json / invalid_body / 413         body (server layer, readJsonObject)
//   400 invalid_idempotency_key                         header format
//   202 replay / 409 idempotency_key_in_use             an earlier submit with the key, whatever its body (a
//   duplicate during its admission waits jobs.idempotencyWaitMs for its answer before the 409)
//   400 field codes                                     validate.ts, in its documented order
//   403 tier_gated                                      plan without generation products (the video rule)
//   503 provider_unavailable                            images lane off, Gemini unconfigured, model paused
//   429 daily_cap_reached, concurrency_limit            image counts (apart from video), a cheap look first
//   400 invalid_url                                     each reference fetched once (HEAD, else a bounded GET)
//   403 / 429 again, 402 insufficient_ink / key_ink_limit_reached   the authoritative admission transaction
//   202                                                 accepted
import { checkAdmissionCounts, requireAccess, utcDayStartMs } from '../plan-access.js';
import { newId } from '../../util/ids.js';
import { unavailability } from '../../catalog/availability.js';
import { ApiError } from '../../errors.js';
import type { Services } from '../../services.js';
import { imageInk } from '../../catalog/pricing.js';
import { withTx } from '../../store/pool.js';
import { checkUrlsFetchable, type SubmitInput, type SubmitResult } from '../video/submit.js';
import type { VideoDeps } from '../video/deps.js';
import { assertIdempotencyKey, claimOrAnswer, dropClaim, priorAnswer } from '../idempotency.js';
import { admissionCounts, insertGeneration, markImageQueued, type GenerationRow } from '../store.js';
import { presentImageAccepted } from './present.js';
import { validateImageRequest } from './validate.js';

/** price_set of image rows: one fixed price per size (config/models.json ink_per_image). */
export const IMAGE_PRICE_SET = 'per_image';
const URL_CHECK_CONCURRENCY = 8;


export async function submitImage(services: Services, deps: VideoDeps, input: SubmitInput): Promise<SubmitResult> {
  const { config, pool, catalog, ledger } = services;
  const { auth } = input;
  const idemKey = input.idempotencyKey;
  assertIdempotencyKey(idemKey);
  if (idemKey !== undefined) {
    const prior = await priorAnswer(pool, { keyId: auth.keyId, product: 'images', idemKey, clock: deps.clock, waitMs: config.jobs.idempotencyWaitMs }, presentImageAccepted);
    if (prior) return prior;
  }

  const v = validateImageRequest(input.body, catalog, { allowList: deps.fetch.allowList });
  const plan = await requireAccess(pool, auth.accountId, false, services.config.jobs.paygDailyCap, 'image');
  const down = unavailability(config, services.state.current, v.model);
  if (down !== null || deps.gemini === undefined) {
    throw new ApiError('provider_unavailable', {
      message: down?.reason === 'paused' ? `${v.model.id} is paused; retry after Retry-After.` : 'Image generation is not available on this deployment now.',
      retryAfterS: down?.retryAfterS ?? 300,
    });
  }
  const holdInk = imageInk(v.request.size, v.model);

  const id = newId('igen_');
  if (idemKey !== undefined) {
    const urlWaves = Math.ceil(v.urls.length / URL_CHECK_CONCURRENCY);
    const ttlMs = config.jobs.leaseMs + urlWaves * 2 * config.media.referenceTimeoutMs;
    const owed = await claimOrAnswer(pool, { keyId: auth.keyId, product: 'images', idemKey, generationId: id, clock: deps.clock, ttlMs, waitMs: config.jobs.idempotencyWaitMs }, presentImageAccepted);
    if (owed) return owed;
  }

  let row: GenerationRow;
  try {
    const maxRunning = config.jobs.maxRunningPerAccount;
    checkAdmissionCounts(plan, await admissionCounts(pool, auth.accountId, utcDayStartMs(deps.clock()), 'image'), maxRunning, deps.clock(), 'image');
    await checkUrlsFetchable(v.urls, services, deps);
    row = await withTx(pool, async (c) => {
      const locked = await requireAccess(c, auth.accountId, true, services.config.jobs.paygDailyCap, 'image');
      const nowMs = deps.clock();
      checkAdmissionCounts(locked, await admissionCounts(c, auth.accountId, utcDayStartMs(nowMs), 'image'), maxRunning, nowMs, 'image');
      await ledger.using(c).reserve({ requestId: input.requestId, accountId: auth.accountId, keyId: auth.keyId, product: 'images', model: v.model.id, holdInk });
      return insertGeneration(c, {
        id, kind: 'image', accountId: auth.accountId, keyId: auth.keyId, requestId: input.requestId, model: v.model.id,
        request: v.request as unknown as Record<string, unknown>, priceSet: IMAGE_PRICE_SET, holdInk, nowMs, owner: deps.owner, leaseMs: config.jobs.leaseMs,
      });
    });
  } catch (e) {
    if (idemKey !== undefined) await dropClaim(pool, auth.keyId, 'images', idemKey, id).catch(() => undefined);
    throw e;
  }
  // Committed. Hand the row to the engine. If this fails the row stays `submitting` under our lease;
  // when the lease lapses the engine runs it (Idempotency-Key bound) or refunds it (nobody has its id).
  await markImageQueued(pool, row.id, deps.owner, deps.clock()).catch((e: unknown) => {
    services.log.warn('images.queue_failed', { generation: row.id, err: (e as Error).message });
  });
  return { body: presentImageAccepted(row), replayed: false };
}
