// Submitting a video generation: the shared submit (../submit.ts, which documents the order of
// answers), then the vendor task: submitting -> creating -> (Ark create) -> queued. A vendor that
// refuses (502 provider_error) or cannot be reached (503 provider_unavailable) gets the hold
// released and the row voided, in one transaction.
import { videoClipInk } from '../../catalog/pricing.js';
import { ApiError } from '../../errors.js';
import type { Services } from '../../services.js';
import type { Logger } from '../../util/log.js';
import { isStoreUnavailable, withTx } from '../../store/pool.js';
import { type ArkClient, ArkError, type ArkCreateInput, unreachable } from '../../vendors/ark/client.js';
import { callPooled, type Pooled } from '../../vendors/pool/job-pools.js';
import type { VendorPool } from '../../vendors/pool/pool.js';
import { arkCallTimeoutMs, type GenerationDeps } from '../deps.js';
import { markCreating, markQueued, markVoided, type GenerationRow } from '../store.js';
import { submitGeneration, type SubmitInput, type SubmitProduct, type SubmitResult } from '../submit.js';
import { presentVideoAccepted } from './present.js';
import { validateVideoRequest, type NormalisedVideoRequest, type ValidatedVideo } from './validate.js';

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
async function voidSubmit(services: Services, deps: GenerationDeps, log: Logger, row: GenerationRow, err: ApiError): Promise<void> {
  const code = err.code === 'provider_error' ? 'provider_error' : 'provider_unavailable';
  try {
    await withTx(services.pool, async (client) => {
      if (!(await markVoided(client, row.id, deps.owner, code, err.message, deps.clock()))) return; // recovery took it: it refunds
      const r = await services.ledger.using(client).release(row.request_id, `vendor_${code}`);
      if (!r.resolved) log.error({ reason: r.reason }, 'video.release_not_open');
    });
  } catch (e) {
    // The row stays `creating` under our lease; when the lease lapses the job runner fails and refunds it.
    log.warn({ err: (e as Error).message }, 'video.void_failed');
  }
}

function vendorError(error: unknown): ApiError {
  if (error instanceof ArkError && (error.kind === 'refused' || error.kind === 'protocol' || error.kind === 'not_found')) {
    return new ApiError('provider_error', { message: `The video vendor refused the request: ${error.message.slice(0, 400)}` });
  }
  const retry = error instanceof ArkError && error.retryAfterS !== undefined ? Math.min(3600, Math.max(1, error.retryAfterS)) : 30;
  return new ApiError('provider_unavailable', { message: 'The video vendor is unavailable; retry after Retry-After.', retryAfterS: retry });
}

/** A few quick tries of a statement whose failure would orphan a vendor task (a store blip). */
async function retryStore<T>(run: () => Promise<T>, tries = 3): Promise<T> {
  for (let i = 0; ; i++) {
    try {
      return await run();
    } catch (e) {
      if (i + 1 >= tries || !isStoreUnavailable(e)) throw e;
      await new Promise((r) => setTimeout(r, 100 * (i + 1)));
    }
  }
}

/**
 * submitting -> creating -> (vendor create) -> queued, for a submit and for the runner's restart of
 * one that died before calling the vendor. `refused` ends the row when the create fails. A task that
 * cannot be recorded because another instance took the row is an orphan we pay for: cancelled.
 * `log` has the generation bound (the submit's child, or the runner's for the row).
 */
export async function startTask(
  services: Services,
  deps: GenerationDeps,
  log: Logger,
  row: GenerationRow,
  input: ArkCreateInput,
  refused: (error: unknown) => Promise<void>,
): Promise<void> {
  const { pool, config } = services;
  const ark = deps.ark!;
  if (!(await markCreating(pool, row.id, deps.owner, deps.clock(), config.jobs.leaseMs))) return; // recovery already took it over (we stalled past the lease)
  let created: Pooled<string>;
  try {
    created = await createOnPool(ark, config, input);
  } catch (e) {
    return refused(e);
  }
  const taskId = created.value;
  // If this cannot be recorded at all, the row stays `creating` and recovery refunds it (the task is then an orphan we pay for).
  if (!(await retryStore(() => markQueued(pool, row.id, deps.owner, taskId, created.deployment, deps.clock(), config.jobs.pollIntervalMs)))) {
    // Recovery failed the row (and refunded it) while the create was in flight: the task is an orphan.
    log.warn({ task: taskId, deployment: created.deployment }, 'video.task_orphaned');
    ark
      .byName(created.deployment)
      ?.client.cancelTask(taskId)
      .catch(() => undefined);
  }
}

/**
 * The task create across the Ark deployments: moved to another one only when the vendor certainly
 * did not start work (vendors/pool/retry-rule.ts), so a clip is never rendered (or paid for) twice.
 */
function createOnPool(ark: VendorPool<ArkClient>, config: Services['config'], input: ArkCreateInput): Promise<Pooled<string>> {
  return callPooled(ark, config.upstream.maxTries, arkCallTimeoutMs(config.jobs.leaseMs), {
    send: (client, timeoutMs) => client.sendCreate(input, timeoutMs),
    read: (client, res) => client.readCreate(res),
    unreachable,
    none: (retryAfterS) =>
      new ArkError('unavailable', 'every video vendor deployment is cooling down, full or refused the task', undefined, undefined, retryAfterS),
  });
}

/** Committed: from here on the row is a recovery point. A vendor that refuses voids the row and answers the client. */
function createTask(services: Services, deps: GenerationDeps, log: Logger, row: GenerationRow, validated: ValidatedVideo): Promise<void> {
  return startTask(services, deps, log, row, arkInput(validated.request, validated.model.vendorModel), async (error) => {
    const err = vendorError(error);
    log.warn({ err: (error as Error).message }, 'video.vendor_create_failed');
    await voidSubmit(services, deps, log, row, err);
    throw err;
  });
}

const VIDEO_SUBMIT: SubmitProduct<NormalisedVideoRequest, ValidatedVideo> = {
  kind: 'video',
  product: 'video',
  idPrefix: 'vgen_',
  notAvailable:
    'Video generation is not available on this deployment now. An operator sets INKGATE_ARK_BASE_URL and INKGATE_ARK_API_KEY, then runs `inkgate lane enable video`; `npm run demo` does both against local simulators.',
  validate: validateVideoRequest,
  vendorReady: (deps) => deps.ark !== undefined,
  price: (validated, services) => {
    const priceSet = services.config.pricing.videoPriceSet;
    return { priceSet, holdInk: videoClipInk(validated.model, validated.request.resolution, validated.request.duration, priceSet) };
  },
  presentAccepted: presentVideoAccepted,
  afterCommit: createTask,
};

export const submitVideo = (services: Services, deps: GenerationDeps, input: SubmitInput): Promise<SubmitResult> =>
  submitGeneration(VIDEO_SUBMIT, services, deps, input);
