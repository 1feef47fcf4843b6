// What the job runner does with one claimed image row (it holds the lease):
//   submitting  the submit's instance died before handing the row over: run it when an
//               Idempotency-Key binds it (the client's retry finds it), else fail + refund (nobody has its id)
//   queued      download the references (safeFetch, bounded), call Gemini (the call is the whole
//               generation; across its deployments, moved only before the vendor started work), store the image under a key derived from the id, then settle the fixed
//               price and mark succeeded in one transaction
//   running     a worker died mid-call (Gemini keeps no task to find): call again, at most
//               MAX_VENDOR_CALLS calls per generation, then fail + refund
// Vendor unavailable (429/5xx/network): back to `queued` with back-off, until config.jobs.timeoutMs
// after submit (then `timeout`). Vendor refused or answered nonsense: `provider_failed`. A safety
// refusal (IMAGE_SAFETY, promptFeedback.blockReason): `content_policy`. Every failure refunds in full.
import type { Services } from '../../services.js';
import type { Logger } from '../../util/log.js';
import {
  type GeminiClient,
  GeminiError,
  type GeminiImageInput,
  type GeminiImageResult,
  type GeminiInlineImage,
  geminiUnreachable,
} from '../../vendors/gemini/client.js';
import { callPooled, type Pooled } from '../../vendors/pool/job-pools.js';
import type { VendorPool } from '../../vendors/pool/pool.js';
import type { GenerationDeps } from '../deps.js';
import { boundToKey, failGeneration, mediaKeyFor, pollDelayMs, succeedGeneration } from '../finish.js';
import { markImageRunning, rescheduleImage, type FailureCode, type GenerationRow } from '../store.js';
import { fetchClientUrl } from '../url-check.js';
import { imagePixelSize } from './image-size.js';
import type { NormalisedImageRequest } from './validate.js';

/** Vendor calls per generation (a crash mid-call, or an unavailable vendor, costs one each). */
export const MAX_VENDOR_CALLS = 5;
/** Gemini's limit on inline data in one request. */
export const MAX_INLINE_REFERENCE_BYTES = 20 * 1024 * 1024;
const REFERENCE_TYPES: ReadonlySet<string> = new Set(['image/png', 'image/jpeg', 'image/webp', 'image/heic', 'image/heif']);

/** Media key of a generation's image. */
export function imageResultKey(id: string, contentType: string): string {
  return mediaKeyFor('image', id, contentType === 'image/jpeg' ? 'jpg' : contentType === 'image/webp' ? 'webp' : 'png');
}

class ReferenceFetchError extends Error {}

export class ImageRunner {
  constructor(
    private readonly services: Services,
    private readonly deps: GenerationDeps,
  ) {}

  private get jobs() {
    return this.services.config.jobs;
  }

  /** Works one claimed row; `log` is the runner's child for it (generation, request_id). */
  async run(row: GenerationRow, log: Logger): Promise<void> {
    switch (row.state) {
      case 'submitting': {
        if (!(await boundToKey(this.services, row.id)))
          return this.fail(log, row, 'provider_failed', 'The generation was interrupted before it was started; the hold was refunded.');
        return this.generate(log, row);
      }
      case 'queued':
      case 'running':
        return this.generate(log, row);
      default:
        return;
    }
  }

  private async generate(log: Logger, row: GenerationRow): Promise<void> {
    const { deps, services } = this;
    const now = deps.clock();
    if (now >= row.created_at.getTime() + this.jobs.timeoutMs) return this.fail(log, row, 'timeout', 'No image arrived in time; the hold was refunded.');
    if (row.polls >= MAX_VENDOR_CALLS)
      return this.fail(log, row, 'provider_failed', `The vendor did not deliver the image in ${MAX_VENDOR_CALLS} calls; the hold was refunded.`);
    const model = services.catalog.image(row.model);
    if (deps.gemini === undefined || model === undefined) {
      return this.later(log, row, 'The image vendor is not configured.');
    }
    const req = row.request as unknown as NormalisedImageRequest;
    let references: GeminiInlineImage[];
    try {
      references = await this.fetchReferences(log, req);
    } catch (e) {
      if (e instanceof ReferenceFetchError) return this.fail(log, row, 'provider_failed', `${e.message}; the hold was refunded.`);
      throw e;
    }
    if (!(await markImageRunning(services.pool, row.id, deps.owner, deps.clock(), this.jobs.leaseMs))) return; // lost the lease
    let made: Pooled<GeminiImageResult>;
    try {
      made = await this.callVendor(deps.gemini, {
        vendorModel: model.vendorModel,
        prompt: req.prompt,
        imageSize: req.size,
        aspectRatio: req.aspect_ratio,
        seed: req.seed,
        references,
      });
    } catch (e) {
      const msg = (e as Error).message.slice(0, 300);
      log.warn({ call: row.polls + 1, err: msg }, 'images.vendor_failed');
      if (e instanceof GeminiError && e.kind === 'unavailable') return this.later(log, { ...row, polls: row.polls + 1 }, msg);
      return this.fail(log, row, 'provider_failed', `The vendor did not make the image (${msg}); the hold was refunded.`);
    }
    const result = made.value;
    if (result.kind === 'blocked') {
      const why = result.message ? `${result.reason}: ${result.message}` : result.reason;
      return this.fail(log, row, 'content_policy', `The vendor refused to make this image on safety grounds (${why.slice(0, 600)}); the hold was refunded.`);
    }
    if (result.kind === 'no_image') {
      return this.fail(log, row, 'provider_failed', `The vendor finished (${result.reason}) without an image; the hold was refunded.`);
    }
    return this.persist(log, row, req, result, made.deployment);
  }

  /**
   * The image call across the Gemini deployments, moved to another one only when the vendor
   * certainly did not start work (vendors/pool/retry-rule.ts): an image is never made (or paid for) twice.
   */
  private callVendor(gemini: VendorPool<GeminiClient>, input: GeminiImageInput): Promise<Pooled<GeminiImageResult>> {
    const cfg = this.services.config;
    return callPooled(gemini, cfg.upstream.maxTries, cfg.jobs.imageCallTimeoutMs, {
      send: (client, timeoutMs) => client.sendImage(input, timeoutMs),
      read: (client, res) => client.readImage(res),
      unreachable: geminiUnreachable,
      none: (retryAfterS) =>
        new GeminiError('unavailable', 'every image vendor deployment is cooling down, full or refused the call', undefined, undefined, retryAfterS),
    });
  }

  /** Downloads each reference once, in order; Gemini takes them inline. */
  private async fetchReferences(log: Logger, req: NormalisedImageRequest): Promise<GeminiInlineImage[]> {
    const urls = req.reference_image_urls ?? [];
    const out: GeminiInlineImage[] = [];
    const seen = new Map<string, GeminiInlineImage>();
    let total = 0;
    for (let i = 0; i < urls.length; i++) {
      const href = urls[i]!;
      const img = seen.get(href) ?? (await this.fetchReference(log, href, `reference_image_urls[${i}]`));
      seen.set(href, img);
      total += img.data.length;
      if (total > MAX_INLINE_REFERENCE_BYTES) throw new ReferenceFetchError(`the reference images add up to more than ${MAX_INLINE_REFERENCE_BYTES} bytes`);
      out.push(img);
    }
    return out;
  }

  /** One reference image; why a download failed goes to the log only (the message is the client's). */
  private async fetchReference(log: Logger, href: string, param: string): Promise<GeminiInlineImage> {
    const maxBytes = Math.min(this.services.config.media.referenceMaxBytes, MAX_INLINE_REFERENCE_BYTES);
    let bytes: Buffer;
    let declared: string;
    try {
      const res = await fetchClientUrl(
        this.services,
        this.deps,
        log,
        new URL(href),
        { param, method: 'GET', maxBytes, accept: 'image/*' },
        'images.reference_refused',
      );
      bytes = res.bytes ?? Buffer.alloc(0);
      declared = res.contentType.split(';')[0]!.trim().toLowerCase();
    } catch {
      throw new ReferenceFetchError(`\`${param}\` could not be downloaded`);
    }
    const sniffed = imagePixelSize(bytes)?.contentType;
    const mimeType = sniffed ?? (REFERENCE_TYPES.has(declared) ? declared : undefined);
    if (mimeType === undefined || bytes.length === 0) throw new ReferenceFetchError(`\`${param}\` is not a PNG, JPEG, WebP or HEIC image`);
    return { mimeType, data: bytes };
  }

  private async persist(
    log: Logger,
    row: GenerationRow,
    req: NormalisedImageRequest,
    result: Extract<GeminiImageResult, { kind: 'image' }>,
    deployment: string,
  ): Promise<void> {
    const { deps, services } = this;
    const pixels = imagePixelSize(result.bytes);
    const contentType = pixels?.contentType ?? (/^image\/[a-z0-9.+-]{1,60}$/.test(result.mimeType) ? result.mimeType : 'image/png');
    const key = imageResultKey(row.id, contentType);
    let sizeBytes: number;
    try {
      if (result.bytes.length > services.config.media.maxResultBytes) throw new Error(`the image is larger than ${services.config.media.maxResultBytes} bytes`);
      sizeBytes = (await deps.media.put(key, result.bytes, contentType)).sizeBytes;
    } catch (e) {
      const reason = (e as Error).message.slice(0, 300);
      log.warn({ err: reason }, 'images.persist_failed');
      await deps.media.delete(key).catch(() => undefined);
      return this.fail(log, row, 'result_persistence_failed', `The image could not be stored (${reason}); the hold was refunded.`);
    }
    // One image at a fixed price per size: the charge is the hold.
    const charge = Number(row.hold_ink);
    await succeedGeneration(
      services,
      deps,
      log,
      'images',
      row,
      {
        chargedInk: charge,
        mediaKey: key,
        contentType,
        sizeBytes,
        durationS: null,
        resolution: req.size,
        aspectRatio: req.aspect_ratio,
        seed: null,
        nowMs: deps.clock(),
        vendorTaskId: result.responseId ?? `gemini:${row.id}`,
        vendorDeployment: deployment,
        width: pixels?.width ?? null,
        height: pixels?.height ?? null,
      },
      {
        // Token counts as Gemini reported them (absent = not reported); the price is per image.
        usage: {
          images: 1,
          size: req.size,
          prompt_tokens: result.usage.promptTokens,
          output_tokens: result.usage.candidatesTokens,
          thinking_tokens: result.usage.thoughtsTokens,
          total_tokens: result.usage.totalTokens,
        },
        vendorRequestId: result.responseId,
      },
    );
  }

  /** Vendor unavailable: back to `queued`, retried after the back-off (or failed once past the deadline / call budget). */
  private async later(log: Logger, row: GenerationRow, why: string): Promise<void> {
    const now = this.deps.clock();
    const deadline = row.created_at.getTime() + this.jobs.timeoutMs;
    if (row.polls >= MAX_VENDOR_CALLS)
      return this.fail(log, row, 'provider_failed', `The vendor was unavailable for ${MAX_VENDOR_CALLS} calls (${why.slice(0, 200)}); the hold was refunded.`);
    const delay = pollDelayMs(Math.max(0, row.polls - 1), this.jobs.pollIntervalMs, this.jobs.maxPollIntervalMs);
    if (now + delay >= deadline) return this.fail(log, row, 'timeout', 'No image arrived in time; the hold was refunded.');
    await rescheduleImage(this.services.pool, row.id, this.deps.owner, now + delay, now);
  }

  /** Any active state -> failed, with the whole hold refunded, in one transaction. */
  fail(log: Logger, row: GenerationRow, code: FailureCode, message: string): Promise<void> {
    return failGeneration(this.services, this.deps, log, 'images', row, code, message);
  }
}
