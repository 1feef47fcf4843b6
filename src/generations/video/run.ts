// What the job runner does with one claimed video row (it holds the lease):
//   submitting  the submit's instance died before calling the vendor: call it now when an Idempotency-Key
//               binds the row (the client's retry will find it; never called, so no duplicate), else fail + refund
//   creating    it died during the create call: whether a task exists is unknown, so fail + refund
//               (never charge for a task we cannot find; never start a second one)
//   queued/running  poll the deployment that created the task (its name is on the row); on success download the result (safeFetch, bounded), store it
//               under a key derived from the id (a retry overwrites the same key), then settle on the
//               delivered seconds and mark succeeded in one transaction; on failure refund in one transaction.
import type { Services } from '../../services.js';
import type { Logger } from '../../util/log.js';
import { videoSettleInk } from '../../catalog/pricing.js';
import type { VideoPriceSet, VideoResolution } from '../../catalog/models.js';
import { FetchRefusal, safeFetch } from '../../net/safe-fetch.js';
import { type ArkClient, ArkError, type ArkTask } from '../../vendors/ark/client.js';
import { memberFor } from '../../vendors/pool/job-pools.js';
import type { GenerationDeps } from '../deps.js';
import { boundToKey, failGeneration, mediaKeyFor, pollDelayMs, succeedGeneration } from '../finish.js';
import { reschedule, type FailureCode, type GenerationRow } from '../store.js';
import { arkInput, startTask } from './submit.js';
import type { NormalisedVideoRequest } from './validate.js';

/** Download (or store) attempts for a delivered result before the generation fails `result_persistence_failed`. */
export const MAX_PERSIST_ATTEMPTS = 3;

/** Media key of a generation's result. */
export const resultKey = (id: string): string => mediaKeyFor('video', id, 'mp4');

/** Whole seconds billed: delivered (rounded to the nearest second) never above requested; requested when the vendor did not say. */
export function billedSeconds(requestedS: number, deliveredS: number | undefined): number {
  if (deliveredS === undefined || !Number.isFinite(deliveredS)) return requestedS;
  return Math.max(0, Math.min(requestedS, Math.round(deliveredS)));
}

export class VideoRunner {
  constructor(
    private readonly services: Services,
    private readonly deps: GenerationDeps,
  ) {}

  /** Works one claimed row; `log` is the runner's child for it (generation, request_id). */
  async run(row: GenerationRow, log: Logger): Promise<void> {
    switch (row.state) {
      case 'submitting':
        return this.resubmit(log, row);
      case 'creating':
        return this.fail(log, row, 'provider_failed', 'The generation was interrupted while its vendor task was being created; the hold was refunded.');
      case 'queued':
      case 'running':
        return this.poll(log, row);
      default:
        return;
    }
  }

  private get jobs() {
    return this.services.config.jobs;
  }

  private async resubmit(log: Logger, row: GenerationRow): Promise<void> {
    const { deps } = this;
    // The submit died before its 202 went out. Only a client that sent an Idempotency-Key can find
    // this generation (its retry replays it), so only then is it worth starting; otherwise nobody
    // knows the id, and a video nobody can find must not be charged: refund it.
    if (!(await boundToKey(this.services, row.id))) {
      return this.fail(log, row, 'provider_failed', 'The generation was interrupted before it was started; the hold was refunded.');
    }
    const model = this.services.catalog.video(row.model);
    if (deps.ark === undefined || model === undefined) {
      return this.fail(log, row, 'provider_failed', 'The generation could not be started: the video vendor is not configured.');
    }
    await startTask(this.services, deps, log, row, arkInput(row.request as unknown as NormalisedVideoRequest, model.vendorModel), (error) =>
      this.fail(log, row, 'provider_failed', `The vendor did not start the generation: ${(error as Error).message.slice(0, 300)}`),
    );
  }

  private async poll(log: Logger, row: GenerationRow): Promise<void> {
    const { deps } = this;
    const now = deps.clock();
    const pastDeadline = now >= row.created_at.getTime() + this.jobs.timeoutMs;
    if (deps.ark === undefined || row.vendor_task_id === null) {
      if (pastDeadline) return this.fail(log, row, 'timeout', 'No result arrived in time; the hold was refunded.');
      return this.later(row, row.state as 'queued' | 'running', null, true);
    }
    // Polls, cancel and download stay with the deployment that created the task (no other knows it).
    const member = memberFor(deps.ark, row.vendor_deployment);
    if (member === undefined) {
      log.warn({ deployment: row.vendor_deployment }, 'video.deployment_unknown');
      return this.fail(log, row, 'provider_failed', 'The vendor deployment that started the generation is no longer configured; the hold was refunded.');
    }
    const ark = member.client;
    let task: ArkTask;
    try {
      task = await ark.getTask(row.vendor_task_id);
    } catch (e) {
      if (e instanceof ArkError && e.kind === 'not_found') {
        return this.fail(log, row, 'provider_failed', 'The vendor no longer knows the task; the hold was refunded.');
      }
      if (pastDeadline) return this.fail(log, row, 'timeout', 'No result arrived in time; the hold was refunded.');
      return this.later(row, row.state as 'queued' | 'running', null, true);
    }
    switch (task.status) {
      case 'queued':
      case 'running':
        if (pastDeadline) {
          ark.cancelTask(task.id).catch(() => undefined); // only a queued task can be cancelled
          return this.fail(log, row, 'timeout', `No result within ${Math.round(this.jobs.timeoutMs / 1000)} s; the hold was refunded.`);
        }
        // The vendor's word moves queued -> running (never back).
        return this.later(row, task.status === 'running' || row.state === 'running' ? 'running' : 'queued', task.progress ?? null, false);
      case 'failed':
      case 'cancelled':
      case 'expired': {
        const why = task.error ? `${task.error.code}: ${task.error.message}` : `the task ended ${task.status}`;
        return this.fail(log, row, 'provider_failed', `The vendor did not deliver the video (${why.slice(0, 400)}); the hold was refunded.`);
      }
      case 'succeeded':
        return this.persist(log, row, task, ark);
    }
  }

  private async later(row: GenerationRow, state: 'queued' | 'running', progress: number | null, pollError: boolean, persistFailed = false): Promise<void> {
    const now = this.deps.clock();
    const delay = pollDelayMs(row.polls, this.jobs.pollIntervalMs, this.jobs.maxPollIntervalMs);
    await reschedule(this.services.pool, row.id, this.deps.owner, { state, progress, nextPollMs: now + delay, nowMs: now, pollError, persistFailed });
  }

  private async persist(log: Logger, row: GenerationRow, task: ArkTask, ark: ArkClient): Promise<void> {
    const { deps, services } = this;
    if (task.videoUrl === undefined) {
      return this.fail(log, row, 'provider_failed', 'The vendor reported success without a video; the hold was refunded.');
    }
    const key = resultKey(row.id);
    let stored: { sizeBytes: number; contentType: string };
    try {
      stored = await this.download(log, ark, task.videoUrl, key);
    } catch (e) {
      const reason = (e as Error).message.slice(0, 300);
      log.warn({ attempt: row.persist_attempts + 1, err: reason }, 'video.persist_failed');
      if (row.persist_attempts + 1 >= MAX_PERSIST_ATTEMPTS) {
        await deps.media.delete(key).catch(() => undefined);
        return this.fail(log, row, 'result_persistence_failed', `The video could not be downloaded or stored (${reason}); the hold was refunded.`);
      }
      return this.later(row, 'running', null, false, true);
    }
    const req = row.request as unknown as NormalisedVideoRequest;
    const billed = billedSeconds(req.duration, task.durationS);
    const charge = this.charge(log, row, req, billed);
    await succeedGeneration(
      services,
      deps,
      log,
      'video',
      row,
      {
        chargedInk: charge,
        mediaKey: key,
        contentType: stored.contentType,
        sizeBytes: stored.sizeBytes,
        durationS: task.durationS === undefined ? null : Math.round(task.durationS),
        resolution: task.resolution ?? null,
        aspectRatio: task.ratio ?? null,
        seed: task.seed ?? null,
        nowMs: deps.clock(),
      },
      {
        // seconds_delivered is absent when the vendor did not report it (not reported is not zero).
        usage: { seconds_requested: req.duration, seconds_delivered: task.durationS, seconds_billed: billed, resolution: req.resolution },
        vendorRequestId: task.id,
      },
    );
  }

  /** Downloads the vendor's result and stores it under `key`. */
  private async download(log: Logger, ark: ArkClient, videoUrl: string, key: string): Promise<{ sizeBytes: number; contentType: string }> {
    const { deps, services } = this;
    let url: URL;
    try {
      url = new URL(videoUrl);
    } catch {
      throw new Error('the vendor result URL is not a URL');
    }
    // From the creating deployment's own API origin (operator-configured) directly; from anywhere
    // else under the public-https rules.
    const bounds = { maxBytes: services.config.media.maxResultBytes, timeoutMs: deps.downloadTimeoutMs, accept: 'video/*' };
    const res =
      (await ark.downloadOwnResult(url, bounds)) ??
      (await safeFetch(url, {
        ...bounds,
        param: 'video_url',
        maxRedirects: services.config.media.referenceMaxRedirects,
        allowList: deps.fetch.allowList,
        resolver: deps.fetch.resolver,
        ca: deps.fetch.ca,
      }).catch((error: unknown) => {
        // The reason stays in the log: the failure message is shown to the client.
        if (error instanceof FetchRefusal) log.warn({ host: url.host, detail: error.detail }, 'video.result_fetch_refused');
        throw error;
      }));
    const declared = res.contentType.split(';')[0]!.trim();
    const contentType = /^video\/[A-Za-z0-9.+-]{1,60}$/.test(declared) ? declared : 'video/mp4';
    const put = await deps.media.put(key, res.bytes ?? Buffer.alloc(0), contentType);
    return { sizeBytes: put.sizeBytes, contentType };
  }

  /** The charge for `billed` seconds at the row's price set, never above the hold. */
  private charge(log: Logger, row: GenerationRow, req: NormalisedVideoRequest, billed: number): number {
    const model = this.services.catalog.video(row.model);
    let charge: number;
    try {
      charge = model
        ? videoSettleInk(model, req.resolution as VideoResolution, req.duration, billed, row.price_set as VideoPriceSet)
        : Math.ceil((row.hold_ink * billed) / Math.max(1, req.duration));
    } catch (e) {
      // The row's price set no longer prices this clip: charge what was held (never more), and say so.
      log.error({ price_set: row.price_set, err: (e as Error).message }, 'video.price_failed');
      charge = row.hold_ink;
    }
    return Math.min(charge, row.hold_ink);
  }

  /** Any active state -> failed, with the whole hold refunded, in one transaction. */
  fail(log: Logger, row: GenerationRow, code: FailureCode, message: string): Promise<void> {
    return failGeneration(this.services, this.deps, log, 'video', row, code, message);
  }
}
