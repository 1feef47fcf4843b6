// HTTP side of image generations: submit, poll, download redirect. Signed links are served by the
// same media host as video (mediaHostHandler in video/routes.ts), from the same media store.
import { ApiError } from '../../errors.js';
import type { Services } from '../../gateway.js';
import type { HttpContext } from '../../server/http-context.js';
import { readJsonObject } from '../../server/json-body.js';
import type { Route } from '../../server/router.js';
import { getGeneration, type GenerationRow } from '../store.js';
import type { VideoDeps } from '../video/deps.js';
import { signedMediaLink } from '../video/present.js';
import { mediaOrigin } from '../video/routes.js';
import { presentImageGeneration } from './present.js';
import { submitImage } from './submit.js';

const ID_RE = /^igen_[A-Za-z0-9]{1,64}$/;
/**
 * Body limit of a submit: the largest valid body (8,000 four-byte characters of prompt, 14 URLs of
 * 2,048 characters, 4 KiB of metadata, JSON escaping) fits in 128 KiB; video's 64 KiB would not.
 */
export const IMAGE_BODY_BYTES = 128 * 1024;

async function ownImage(services: Services, ctx: HttpContext): Promise<GenerationRow> {
  const id = ctx.params[0] ?? '';
  const row = ID_RE.test(id) ? await getGeneration(services.pool, id) : undefined;
  // Another account's generation and one never accepted (voided) look exactly like an unknown id.
  if (!row || row.kind !== 'image' || row.account_id !== ctx.auth!.accountId || row.state === 'voided') {
    throw new ApiError('generation_not_found', { message: 'No image generation with this id on your account.' });
  }
  return row;
}

/** The three image routes. `deps` is read only while handling requests (a lazy object is fine). */
export function imageRoutes(services: Services, deps: VideoDeps): Route[] {
  const linker = (ctx: HttpContext) => {
    const origin = mediaOrigin(services, deps, ctx);
    const ttlS = services.config.media.linkTtlS;
    return (key: string) => signedMediaLink(deps.mediaSecret, origin, key, deps.clock(), ttlS);
  };
  return [
    {
      method: 'POST',
      pattern: '/v1/images/generations',
      access: 'key',
      bodyBytes: Math.max(services.config.limits.videoBodyBytes, IMAGE_BODY_BYTES),
      handler: async (ctx) => {
        const body = await readJsonObject(ctx);
        const r = await submitImage(services, deps, { auth: ctx.auth!, requestId: ctx.requestId, body, idempotencyKey: ctx.header('idempotency-key') });
        ctx.sendJson(202, r.body, r.replayed ? [['Idempotent-Replayed', 'true']] : undefined);
      },
    },
    {
      method: 'GET',
      pattern: '/v1/images/generations/:id',
      access: 'key',
      handler: async (ctx) => {
        const row = await ownImage(services, ctx);
        ctx.sendJson(200, presentImageGeneration(row, linker(ctx)));
      },
    },
    {
      method: 'GET',
      pattern: '/v1/images/generations/:id/content',
      access: 'key',
      handler: async (ctx) => {
        const row = await ownImage(services, ctx);
        if (row.state === 'failed') throw new ApiError('result_unavailable', { message: 'The generation failed; there is no image to download.' });
        if (row.state !== 'succeeded') throw new ApiError('generation_not_ready', { message: 'The generation has not finished; poll it until `status` is `succeeded`.' });
        if (row.result_expired || row.media_key === null) throw new ApiError('result_expired', { message: 'The image is past its 7-day retention and was deleted.' });
        ctx.sendEmpty(302, [['Location', linker(ctx)(row.media_key).url]]);
      },
    },
  ];
}
