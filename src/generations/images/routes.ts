// HTTP side of image generations: submit, poll, download redirect. Signed links are served by the
// same media host as video (mediaHostHandler in ../routes.ts), from the same media store.
import type { Services } from '../../services.js';
import type { Route } from '../../server/router.js';
import type { GenerationDeps } from '../deps.js';
import { generationRoutes } from '../routes.js';
import { presentImageGeneration } from './present.js';
import { submitImage } from './submit.js';

/**
 * Body limit of a submit: the largest valid body (8,000 four-byte characters of prompt, 14 URLs of
 * 2,048 characters, 4 KiB of metadata, JSON escaping) fits in 128 KiB; video's 64 KiB would not.
 */
export const IMAGE_BODY_BYTES = 128 * 1024;

/** The three image routes. */
export function imageRoutes(services: Services, deps: GenerationDeps): Route[] {
  return generationRoutes(services, deps, {
    path: '/v1/images/generations',
    kind: 'image',
    idPattern: /^igen_[A-Za-z0-9]{1,64}$/,
    noun: 'image generation',
    bodyBytes: Math.max(services.config.limits.videoBodyBytes, IMAGE_BODY_BYTES),
    submit: submitImage,
    present: presentImageGeneration,
  });
}
