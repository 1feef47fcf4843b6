// The three routes every asynchronous generation product has (submit, poll, download redirect),
// built from what differs between products: path, id shape, body cap, submit and presentation; and
// the media host that serves their signed links (plug `mediaHostHandler(deps)` into the server's
// `other` hook).
import { ApiError } from '../errors.js';
import type { Services } from '../services.js';
import type { HttpContext } from '../server/http-context.js';
import { readJsonObject } from '../server/json-body.js';
import type { Route } from '../server/router.js';
import type { OtherAnswer } from '../server/server.js';
import { handleMediaRequest, writeMediaResponse, type Headers as MediaHeaders, type MediaSink } from '../media/media-host.js';
import { MEDIA_PATH_PREFIX, signedMediaLink, type SignedLink } from '../media/signed-link.js';
import type { GenerationDeps } from './deps.js';
import { ReplayedRefusal } from './idempotency.js';
import { getGeneration, type GenerationRow } from './store.js';
import type { SubmitInput, SubmitResult } from './submit.js';
import { withRetention } from './sweep.js';

export interface GenerationProduct {
  /** e.g. `/v1/video/generations` */
  readonly path: string;
  readonly kind: GenerationRow['kind'];
  /** e.g. /^vgen_[A-Za-z0-9]{1,64}$/ */
  readonly idPattern: RegExp;
  /** For messages: "video generation", "image generation". */
  readonly noun: string;
  readonly bodyBytes: number;
  submit(services: Services, deps: GenerationDeps, input: SubmitInput): Promise<SubmitResult>;
  present(row: GenerationRow, link: (key: string) => SignedLink): Record<string, unknown>;
}

const LOOPBACK_HOST_RE = /^(127\.0\.0\.1|localhost|\[::1\])(:\d{1,5})?$/;
const HOST_RE = /^[A-Za-z0-9.-]{1,253}(:\d{1,5})?$|^\[[0-9A-Fa-f:.]{2,45}\](:\d{1,5})?$/;
const PORT_RE = /:(\d{1,5})$/;

/**
 * Origin of signed links: config.mediaUrl, else deps.publicBaseUrl, else the request's own Host
 * (http only for a loopback host, https otherwise). A forged Host only changes the link the same
 * caller receives; the signature covers the path and expiry, not the origin. A Host we will not
 * echo (say `inkgate_gw:8080`, a container name) gives the listening address with the Host's
 * port, so the link still reaches the port the client called.
 */
export function mediaOrigin(services: Services, deps: GenerationDeps, ctx: HttpContext): string {
  if (services.config.mediaUrl !== null) return services.config.mediaUrl;
  if (deps.publicBaseUrl !== undefined) return deps.publicBaseUrl;
  const host = ctx.header('host') ?? '';
  if (HOST_RE.test(host)) return `${LOOPBACK_HOST_RE.test(host) ? 'http' : 'https'}://${host}`;
  const listen = services.config.server.host;
  const port = PORT_RE.exec(host)?.[1];
  return `http://${listen.includes(':') ? `[${listen}]` : listen}${port === undefined ? '' : `:${port}`}`;
}

export function generationRoutes(services: Services, deps: GenerationDeps, product: GenerationProduct): Route[] {
  const ttlS = services.config.media.linkTtlS;
  const retentionMs = services.config.media.retentionDays * 86_400_000;
  // A link never outlives its result: it expires at the end of the 15 minutes or of the
  // retention, whichever comes first (the file may still be on disk until the hourly sweep).
  const linker = (ctx: HttpContext, row: GenerationRow) => {
    const origin = mediaOrigin(services, deps, ctx);
    const notAfterMs = row.completed_at === null ? undefined : row.completed_at.getTime() + retentionMs;
    return (key: string) => signedMediaLink(deps.mediaSecret, origin, key, deps.clock(), ttlS, notAfterMs);
  };
  const own = async (ctx: HttpContext): Promise<GenerationRow> => {
    const id = ctx.params[0] ?? '';
    const row = product.idPattern.test(id) ? await getGeneration(services.pool, id) : undefined;
    // Another account's generation and one never accepted (voided) look exactly like an unknown id.
    if (!row || row.kind !== product.kind || row.account_id !== ctx.auth!.accountId || row.state === 'voided') {
      throw new ApiError('generation_not_found', { message: `No ${product.noun} with this id on your account.` });
    }
    // Past its retention the result is gone at once, not when the hourly sweep gets to its file.
    return withRetention(row, deps.clock(), services.config.media.retentionDays);
  };
  return [
    {
      method: 'POST',
      pattern: product.path,
      access: 'key',
      bodyBytes: product.bodyBytes,
      handler: async (ctx) => {
        const body = await readJsonObject(ctx);
        const input = {
          auth: ctx.auth!,
          requestId: ctx.requestId,
          body,
          idempotencyKey: ctx.header('idempotency-key'),
          log: ctx.log,
          traceParent: ctx.trace?.traceparent(),
        };
        const r = await product.submit(services, deps, input).catch((error: unknown) => {
          if (!(error instanceof ReplayedRefusal)) throw error;
          // The refusal of the submit this one waited for: its status and error, marked as a replay.
          ctx.sendError(error, false, [['Idempotent-Replayed', 'true']]);
          return undefined;
        });
        if (r !== undefined) ctx.sendJson(202, r.body, r.replayed ? [['Idempotent-Replayed', 'true']] : undefined);
      },
    },
    {
      method: 'GET',
      pattern: `${product.path}/:id`,
      access: 'key',
      handler: async (ctx) => {
        const row = await own(ctx);
        ctx.sendJson(200, product.present(row, linker(ctx, row)));
      },
    },
    {
      method: 'GET',
      pattern: `${product.path}/:id/content`,
      access: 'key',
      handler: async (ctx) => {
        const row = await own(ctx);
        if (row.state === 'failed') throw new ApiError('result_unavailable', { message: 'The generation failed; there is no result to download.' });
        if (row.state !== 'succeeded')
          throw new ApiError('generation_not_ready', { message: 'The generation has not finished; poll it until `status` is `succeeded`.' });
        if (row.result_expired || row.media_key === null)
          throw new ApiError('result_expired', { message: 'The result is past its 7-day retention and was deleted.' });
        ctx.sendEmpty(302, [['Location', linker(ctx, row)(row.media_key).url]]);
      },
    },
  ];
}

/**
 * The media host for the server's `other` hook (non-/v1 paths): GET (or HEAD) /media/<key>?exp=&sig= served
 * from the media store after the signature check, with single byte ranges and ETag conditions
 * (media/media-host.ts). Returns false for any other path (-> 404).
 */
export function mediaHostHandler(deps: Pick<GenerationDeps, 'media' | 'mediaSecret' | 'clock'>): (ctx: HttpContext) => OtherAnswer {
  return (ctx) => {
    if (!ctx.path.startsWith(MEDIA_PATH_PREFIX) || (ctx.method !== 'GET' && ctx.method !== 'HEAD')) return false;
    // The context sends Cache-Control: no-store, the JSON Content-Type and the Content-Length
    // itself (each engine declares the length of a sized stream its own way), so ours are left out.
    const ours = (headers: MediaHeaders) => headers.filter(([k]) => k !== 'content-length' && k !== 'cache-control');
    const sink: MediaSink = {
      headOnly: ctx.method === 'HEAD',
      head: (status, headers, sizeBytes) => ctx.startStream(status, ours(headers), sizeBytes),
      json: (status, headers, body) =>
        ctx.sendJson(
          status,
          body,
          ours(headers).filter(([k]) => k !== 'content-type'),
        ),
      endHead: (status, headers, sizeBytes) => ctx.sendHead(status, ours(headers), sizeBytes),
      write: (chunk) => ctx.write(chunk),
      drained: () => ctx.waitWritable(),
      end: () => ctx.end(),
      cut: () => ctx.cutStream(),
      get aborted() {
        return ctx.aborted;
      },
    };
    const req = {
      path: ctx.path,
      query: ctx.query,
      requestId: ctx.requestId,
      headOnly: ctx.method === 'HEAD',
      range: ctx.header('range'),
      ifRange: ctx.header('if-range'),
      ifNoneMatch: ctx.header('if-none-match'),
    };
    const answered = handleMediaRequest(req, deps.media, deps.mediaSecret, Math.floor(deps.clock() / 1000))
      .then((r) => writeMediaResponse(r, sink))
      .catch((error: unknown) => {
        // The store failed (a missing object is not an error: that is the 404 above). Not a 404, which
        // would tell the client the result is gone: a 503 to retry. Mid-body, the connection is cut so
        // the client sees the body incomplete (and resumes with a Range), never a clean short end.
        if (!ctx.responded)
          ctx.sendError(new ApiError('provider_unavailable', { message: 'The media store did not answer; retry shortly.', retryAfterS: 5, cause: error }));
        else ctx.cutStream();
      });
    return { route: 'media', answered };
  };
}
