// Submitting an image generation: the shared submit (../submit.ts, which documents the order of
// answers), then the row is handed to the job runner (`queued`, due at once). The vendor is not
// called here: with Gemini the call is the generation itself (tens of seconds), so a worker makes
// it and the client polls. Image counts (daily cap, concurrency) are kept apart from video's.
import { imageInk } from '../../catalog/pricing.js';
import type { Services } from '../../services.js';
import type { Logger } from '../../util/log.js';
import type { GenerationDeps } from '../deps.js';
import { markImageQueued, type GenerationRow } from '../store.js';
import { submitGeneration, type SubmitInput, type SubmitProduct, type SubmitResult } from '../submit.js';
import { presentImageAccepted } from './present.js';
import { validateImageRequest, type NormalisedImageRequest, type ValidatedImage } from './validate.js';

/** price_set of image rows: one fixed price per size (config/models.json ink_per_image). */
export const IMAGE_PRICE_SET = 'per_image';

/**
 * Committed. Hand the row to the job runner. If this fails the row stays `submitting` under our lease;
 * when the lease lapses the job runner runs it (Idempotency-Key bound) or refunds it (nobody has its id).
 */
async function handOver(services: Services, deps: GenerationDeps, log: Logger, row: GenerationRow): Promise<void> {
  await markImageQueued(services.pool, row.id, deps.owner, deps.clock()).catch((error: unknown) => {
    log.warn({ err: (error as Error).message }, 'images.queue_failed');
  });
}

const IMAGE_SUBMIT: SubmitProduct<NormalisedImageRequest, ValidatedImage> = {
  kind: 'image',
  product: 'images',
  idPrefix: 'igen_',
  notAvailable:
    'Image generation is not available on this deployment now. An operator sets INKGATE_GEMINI_BASE_URL and INKGATE_GEMINI_API_KEY, then runs `inkgate lane enable images`; `npm run demo` does both against local simulators.',
  validate: validateImageRequest,
  vendorReady: (deps) => deps.gemini !== undefined,
  price: (v) => ({ priceSet: IMAGE_PRICE_SET, holdInk: imageInk(v.request.size, v.model) }),
  presentAccepted: presentImageAccepted,
  afterCommit: handOver,
};

export const submitImage = (services: Services, deps: GenerationDeps, input: SubmitInput): Promise<SubmitResult> =>
  submitGeneration(IMAGE_SUBMIT, services, deps, input);
