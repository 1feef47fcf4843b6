// HTTP side of video generations: submit, poll, download redirect; and the media host that serves
// signed links for non-/v1 paths (plug `mediaHostHandler(deps)` into the server's `other` hook).
import { ApiError } from '../../errors.js';
import type { Services } from '../../gateway.js';
import { handleMediaRequest, writeMediaResponse, type MediaSink } from '../../media/media-host.js';
import { MEDIA_PATH_PREFIX } from '../../media/signed-link.js';
import type { HttpContext } from '../../server/http-context.js';
import { readJsonObject } from '../../server/json-body.js';
import type { Route } from '../../server/router.js';
import { getGeneration, type GenerationRow } from '../store.js';
import type { VideoDeps } from './deps.js';
import { presentGeneration, signedMediaLink } from './present.js';
import { submitVideo } from './submit.js';

const ID_RE = /^vgen_[A-Za-z0-9]{1,64}$/;
const LOOPBACK_HOST_RE = /^(127\.0\.0\.1|localhost|\[::1\])(:\d{1,5})?$/;
const HOST_RE = /^[A-Za-z0-9.-]{1,253}(:\d{1,5})?$|^\[[0-9A-Fa-f:.]{2,45}\](:\d{1,5})?$/;

/**
 * Origin of signed links: config.mediaUrl, else deps.publicBaseUrl, else the request's own Host
 * (http only for a loopback host, https otherwise). A forged Host only changes the link the same
 * caller receives; the signature covers the path and expiry, not the origin.
 */
export function mediaOrigin(services: Services, deps: VideoDeps, ctx: HttpContext): string {
  if (services.config.mediaUrl !== null) return services.config.mediaUrl;
  if (deps.publicBaseUrl !== undefined) return deps.publicBaseUrl;
  const host = ctx.header('host') ?? '';
  if (!HOST_RE.test(host)) return `http://${services.config.server.host}`;
  return `${LOOPBACK_HOST_RE.test(host) ? 'http' : 'https'}://${host}`;
}

async function ownGeneration(services: Services, ctx: HttpContext): Promise<GenerationRow> {
  const id = ctx.params[0] ?? '';
  const row = ID_RE.test(id) ? await getGeneration(services.pool, id) : undefined;
  // Another account's generation and one never accepted (voided) look exactly like an unknown id.
  if (!row || row.kind !== 'video' || row.account_id !== ctx.auth!.accountId || row.state === 'voided') {
    throw new ApiError('generation_not_found', { message: 'No video generation with this id on your account.' });
  }
  return row;
}

export function videoRoutes(services: Services, deps: VideoDeps): Route[] {
  const ttlS = services.config.media.linkTtlS;
  const linker = (ctx: HttpContext) => {
    const origin = mediaOrigin(services, deps, ctx);
    return (key: string) => signedMediaLink(deps.mediaSecret, origin, key, deps.clock(), ttlS);
  };
  return [
    {
      method: 'POST',
      pattern: '/v1/video/generations',
      access: 'key',
      bodyBytes: services.config.limits.videoBodyBytes,
      handler: async (ctx) => {
        const body = await readJsonObject(ctx);
        const r = await submitVideo(services, deps, { auth: ctx.auth!, requestId: ctx.requestId, body, idempotencyKey: ctx.header('idempotency-key') });
        ctx.sendJson(202, r.body, r.replayed ? [['Idempotent-Replayed', 'true']] : undefined);
      },
    },
    {
      method: 'GET',
      pattern: '/v1/video/generations/:id',
      access: 'key',
      handler: async (ctx) => {
        const row = await ownGeneration(services, ctx);
        ctx.sendJson(200, presentGeneration(row, linker(ctx)));
      },
    },
    {
      method: 'GET',
      pattern: '/v1/video/generations/:id/content',
      access: 'key',
      handler: async (ctx) => {
        const row = await ownGeneration(services, ctx);
        if (row.state === 'failed') throw new ApiError('result_unavailable', { message: 'The generation failed; there is no result to download.' });
        if (row.state !== 'succeeded') throw new ApiError('generation_not_ready', { message: 'The generation has not finished; poll it until `status` is `succeeded`.' });
        if (row.result_expired || row.media_key === null) throw new ApiError('result_expired', { message: 'The result is past its retention and was deleted.' });
        const link = linker(ctx)(row.media_key);
        ctx.sendEmpty(302, [['Location', link.url]]);
      },
    },
  ];
}

/**
 * The media host for the server's `other` hook (non-/v1 paths): GET /media/<key>?exp=&sig= served
 * from the media store after the signature check. Returns false for any other path (-> 404).
 */
export function mediaHostHandler(deps: Pick<VideoDeps, 'media' | 'mediaSecret' | 'clock'>): (ctx: HttpContext) => boolean {
  return (ctx) => {
    if (!ctx.path.startsWith(MEDIA_PATH_PREFIX) || ctx.method !== 'GET') return false;
    const sink: MediaSink = {
      // The context already sends Cache-Control: no-store; uWS frames the body itself (chunked),
      // so a Content-Length of our own would contradict it.
      head: (status, headers) => ctx.startStream(status, headers.filter(([k]) => k !== 'content-length' && k !== 'cache-control')),
      write: (chunk) => ctx.write(chunk),
      drained: () => ctx.waitWritable(),
      end: (body) => ctx.end(body),
      get aborted() {
        return ctx.aborted;
      },
    };
    handleMediaRequest({ path: ctx.path, query: ctx.query, requestId: ctx.requestId }, deps.media, deps.mediaSecret, Math.floor(deps.clock() / 1000))
      .then((r) => writeMediaResponse(r, sink))
      .catch(() => {
        if (!ctx.responded) ctx.sendError(new ApiError('not_found', { message: 'There is no media at this link.' }));
        else ctx.end();
      });
    return true;
  };
}
