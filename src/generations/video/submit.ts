// Submitting a video generation: validation, Idempotency-Key, reference URLs, admission (tier,
// daily cap, concurrency, Ink hold, the row) committed in one transaction, then the vendor task.
//
// Order of answers (docs/api/video.md documents it):
//   415 / 400 invalid_json / invalid_body / 413         body (server layer, readJsonObject)
//   400 invalid_idempotency_key                         header format
//   202 replay / 409 idempotency_key_in_use             an earlier submit with the key, whatever its body (a
//   duplicate during its admission waits jobs.idempotencyWaitMs for its answer before the 409)
//   400 field codes                                     validate.ts, in its documented order
//   403 tier_gated                                      plan without video
//   503 provider_unavailable                            lane off, vendor unconfigured, model paused
//   429 daily_cap_reached, concurrency_limit            (first a cheap look, so a refused submit fetches nothing)
//   400 invalid_url                                     each URL fetched once (HEAD, else a bounded GET)
//   403 / 429 again, 402 insufficient_ink / key_ink_limit_reached   the authoritative admission transaction
//   502 provider_error / 503 provider_unavailable       the vendor refused / could not be reached: hold released
//   202                                                 accepted
import { checkAdmissionCounts, requireAccess, utcDayStartMs } from '../plan-access.js';
import { assertIdempotencyKey, claimOrAnswer, dropClaim, priorAnswer } from '../idempotency.js';
import { newId } from '../../util/ids.js';
import { unavailability } from '../../catalog/availability.js';
import type { AuthInfo } from '../../server/http-context.js';
import { ApiError } from '../../errors.js';
import type { Services } from '../../services.js';
import { videoClipInk } from '../../catalog/pricing.js';
import { safeFetch } from '../../net/safe-fetch.js';
import { isStoreUnavailable, withTx } from '../../store/pool.js';
import { ArkError, type ArkCreateInput } from '../../vendors/ark/client.js';
import { admissionCounts, insertGeneration, markCreating, markQueued, markVoided, type GenerationRow } from '../store.js';
import type { VideoDeps } from './deps.js';
import { presentAccepted } from './present.js';
import { validateVideoRequest, type CheckedUrl, type NormalisedVideoRequest } from './validate.js';

export { IDEMPOTENCY_KEY_RE } from '../idempotency.js';
export { IDEMPOTENCY_WINDOW_MS } from '../idempotency.js';
const URL_CHECK_CONCURRENCY = 8;

export interface SubmitInput {
  readonly auth: AuthInfo;
  /** The HTTP request id (`req_…`): also the id of the ledger hold. */
  readonly requestId: string;
  readonly body: Record<string, unknown>;
  /** The raw Idempotency-Key header, if any. */
  readonly idempotencyKey: string | undefined;
}

export interface SubmitResult {
  readonly body: Record<string, unknown>;
  readonly replayed: boolean;
}


export { secondsUntilUtcMidnight } from '../plan-access.js';

// ---------------------------------------------------------------------------------------------
// Idempotency

// ---------------------------------------------------------------------------------------------
// Admission

// ---------------------------------------------------------------------------------------------
// Reference URLs

/** Fetches each distinct URL once (HEAD; a GET bounded by referenceMaxBytes when HEAD is refused). First failure in field order wins. */
export async function checkUrlsFetchable(urls: readonly CheckedUrl[], services: Services, deps: VideoDeps): Promise<void> {
  if (urls.length === 0) return;
  const m = services.config.media;
  const distinct = new Map<string, CheckedUrl>();
  for (const u of urls) if (!distinct.has(u.url.href)) distinct.set(u.url.href, u);
  const results = new Map<string, ApiError | null>();
  const queue = [...distinct.values()];
  const one = async (u: CheckedUrl): Promise<void> => {
    const base = {
      param: u.param,
      maxBytes: m.referenceMaxBytes,
      timeoutMs: m.referenceTimeoutMs,
      maxRedirects: m.referenceMaxRedirects,
      allowList: deps.fetch.allowList,
      resolver: deps.fetch.resolver,
      ca: deps.fetch.ca,
    };
    try {
      await safeFetch(u.url, { ...base, method: 'HEAD' });
      results.set(u.url.href, null);
    } catch (e) {
      // Some hosts (signed object-store URLs among them) answer HEAD with 403/405: try one GET.
      if (e instanceof ApiError && e.code === 'invalid_url' && /the server answered \d+/.test(e.message)) {
        try {
          await safeFetch(u.url, { ...base, method: 'GET' });
          results.set(u.url.href, null);
          return;
        } catch (e2) {
          results.set(u.url.href, e2 instanceof ApiError ? e2 : new ApiError('invalid_url', { param: u.param }));
          return;
        }
      }
      results.set(u.url.href, e instanceof ApiError ? e : new ApiError('invalid_url', { param: u.param }));
    }
  };
  const workers = Array.from({ length: Math.min(URL_CHECK_CONCURRENCY, queue.length) }, async () => {
    for (let u = queue.shift(); u !== undefined; u = queue.shift()) await one(u);
  });
  await Promise.all(workers);
  for (const u of urls) {
    const err = results.get(u.url.href);
    if (err) {
      // Name the field this URL came from (a repeated URL is reported at its first field).
      throw err.param === u.param ? err : new ApiError(err.code, { param: u.param, message: err.message });
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Vendor

export function arkInput(req: NormalisedVideoRequest, vendorModel: string): ArkCreateInput {
  return {
    vendorModel,
    prompt: req.prompt,
    resolution: req.resolution,
    ratio: req.aspect_ratio,
    durationS: req.duration,
    generateAudio: req.generate_audio,
    seed: req.seed,
    firstFrameUrl: req.first_frame_url,
    lastFrameUrl: req.last_frame_url,
    referenceImageUrls: req.reference_image_urls,
    referenceVideoUrls: req.reference_video_urls,
    referenceAudioUrls: req.reference_audio_urls,
  };
}

/** The vendor refused or could not be reached at submit: release the hold and void the row, in one transaction. */
async function voidSubmit(services: Services, deps: VideoDeps, row: GenerationRow, err: ApiError): Promise<void> {
  const code = err.code === 'provider_error' ? 'provider_error' : 'provider_unavailable';
  try {
    await withTx(services.pool, async (c) => {
      if (!(await markVoided(c, row.id, deps.owner, code, err.message, deps.clock()))) return; // recovery took it: it refunds
      await services.ledger.using(c).release(row.request_id, `vendor_${code}`);
    });
  } catch (e) {
    // The row stays `creating` under our lease; when the lease lapses the engine fails and refunds it.
    services.log.warn('video.void_failed', { generation: row.id, err: (e as Error).message });
  }
}

function vendorError(e: unknown): ApiError {
  if (e instanceof ArkError && (e.kind === 'refused' || e.kind === 'protocol' || e.kind === 'not_found')) {
    return new ApiError('provider_error', { message: `The video vendor refused the request: ${e.message.slice(0, 400)}` });
  }
  const retry = e instanceof ArkError && e.retryAfterS !== undefined ? Math.min(3600, Math.max(1, e.retryAfterS)) : 30;
  return new ApiError('provider_unavailable', { message: 'The video vendor is unavailable; retry after Retry-After.', retryAfterS: retry });
}

/** A few quick tries of a statement whose failure would orphan a vendor task (a store blip). */
async function retryStore<T>(fn: () => Promise<T>, tries = 3): Promise<T> {
  for (let i = 0; ; i++) {
    try {
      return await fn();
    } catch (e) {
      if (i + 1 >= tries || !isStoreUnavailable(e)) throw e;
      await new Promise((r) => setTimeout(r, 100 * (i + 1)));
    }
  }
}

// ---------------------------------------------------------------------------------------------

export async function submitVideo(services: Services, deps: VideoDeps, input: SubmitInput): Promise<SubmitResult> {
  const { config, pool, catalog, ledger } = services;
  const { auth } = input;
  const idemKey = input.idempotencyKey;
  assertIdempotencyKey(idemKey);
  if (idemKey !== undefined) {
    const prior = await priorAnswer(pool, { keyId: auth.keyId, product: 'video', idemKey, clock: deps.clock, waitMs: config.jobs.idempotencyWaitMs }, presentAccepted);
    if (prior) return prior;
  }

  const v = validateVideoRequest(input.body, catalog, { allowList: deps.fetch.allowList });
  const plan = await requireAccess(pool, auth.accountId, false, services.config.jobs.paygDailyCap, 'video');
  const down = unavailability(config, services.state.current, v.model);
  if (down !== null || deps.ark === undefined) {
    throw new ApiError('provider_unavailable', {
      message: down?.reason === 'paused' ? `${v.model.id} is paused; retry after Retry-After.` : 'Video generation is not available on this deployment now.',
      retryAfterS: down?.retryAfterS ?? 300,
    });
  }
  const priceSet = config.pricing.videoPriceSet;
  const holdInk = videoClipInk(v.model, v.request.resolution, v.request.duration, priceSet);

  const id = newId('vgen_');
  if (idemKey !== undefined) {
    const urlWaves = Math.ceil(v.urls.length / URL_CHECK_CONCURRENCY);
    const ttlMs = config.jobs.leaseMs + urlWaves * 2 * config.media.referenceTimeoutMs;
    const owed = await claimOrAnswer(pool, { keyId: auth.keyId, product: 'video', idemKey, generationId: id, clock: deps.clock, ttlMs, waitMs: config.jobs.idempotencyWaitMs }, presentAccepted);
    if (owed) return owed;
  }

  let row: GenerationRow;
  try {
    // A cheap look first, so a submit that will be refused fetches nothing.
    checkAdmissionCounts(plan, await admissionCounts(pool, auth.accountId, utcDayStartMs(deps.clock())), config.jobs.maxRunningPerAccount, deps.clock(), 'video');
    await checkUrlsFetchable(v.urls, services, deps);
    // The authoritative admission: the account row lock serialises admissions of one account, and the
    // counts are read by a later statement, so they see every admission committed before the lock.
    row = await withTx(pool, async (c) => {
      const locked = await requireAccess(c, auth.accountId, true, services.config.jobs.paygDailyCap, 'video');
      const nowMs = deps.clock();
      checkAdmissionCounts(locked, await admissionCounts(c, auth.accountId, utcDayStartMs(nowMs)), config.jobs.maxRunningPerAccount, nowMs, 'video');
      await ledger.using(c).reserve({ requestId: input.requestId, accountId: auth.accountId, keyId: auth.keyId, product: 'video', model: v.model.id, holdInk });
      return insertGeneration(c, {
        id, kind: 'video', accountId: auth.accountId, keyId: auth.keyId, requestId: input.requestId, model: v.model.id,
        request: v.request as unknown as Record<string, unknown>, priceSet, holdInk, nowMs, owner: deps.owner, leaseMs: config.jobs.leaseMs,
      });
    });
  } catch (e) {
    if (idemKey !== undefined) await dropClaim(pool, auth.keyId, 'video', idemKey, id).catch(() => undefined);
    throw e;
  }

  // Committed: from here on the row is a recovery point. submitting -> creating -> (vendor) -> queued.
  if (!(await markCreating(pool, row.id, deps.owner, deps.clock(), config.jobs.leaseMs))) {
    return { body: presentAccepted(row), replayed: false }; // recovery already took it over (we stalled past the lease)
  }
  let taskId: string;
  try {
    taskId = await deps.ark.createTask(arkInput(v.request, v.model.vendorModel));
  } catch (e) {
    const err = vendorError(e);
    services.log.warn('video.vendor_create_failed', { generation: row.id, err: (e as Error).message });
    await voidSubmit(services, deps, row, err);
    throw err;
  }
  // If this cannot be recorded at all, the row stays `creating` and recovery refunds it (the task is then an orphan we pay for).
  if (!(await retryStore(() => markQueued(pool, row.id, deps.owner, taskId, deps.clock(), config.jobs.pollIntervalMs)))) {
    // Recovery failed the row (and refunded it) while the create was in flight: the task is an orphan.
    services.log.warn('video.task_orphaned', { generation: row.id, task: taskId });
    deps.ark.cancelTask(taskId).catch(() => undefined);
  }
  return { body: presentAccepted(row), replayed: false };
}
