// The three routes every asynchronous generation product has (submit, poll, download redirect),
// built from what differs between products: path, id shape, body cap, submit and presentation.
import { ApiError } from '../errors.js';
import type { Services } from '../services.js';
import type { HttpContext } from '../server/http-context.js';
import { readJsonObject } from '../server/json-body.js';
import type { Route } from '../server/router.js';
import { getGeneration, type GenerationRow } from './store.js';
import { withRetention } from './sweep.js';
import type { VideoDeps } from './video/deps.js';
import { signedMediaLink, type SignedLink } from '../media/signed-link.js';
import type { SubmitInput, SubmitResult } from './video/submit.js';

export interface GenerationProduct {
  /** e.g. `/v1/video/generations` */
  readonly path: string;
  readonly kind: GenerationRow['kind'];
  /** e.g. /^vgen_[A-Za-z0-9]{1,64}$/ */
  readonly idPattern: RegExp;
  /** For messages: "video generation", "image generation". */
  readonly noun: string;
  readonly bodyBytes: number;
  submit(services: Services, deps: VideoDeps, input: SubmitInput): Promise<SubmitResult>;
  present(row: GenerationRow, link: (key: string) => SignedLink): Record<string, unknown>;
}

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

export function generationRoutes(services: Services, deps: VideoDeps, p: GenerationProduct): Route[] {
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
    const row = p.idPattern.test(id) ? await getGeneration(services.pool, id) : undefined;
    // Another account's generation and one never accepted (voided) look exactly like an unknown id.
    if (!row || row.kind !== p.kind || row.account_id !== ctx.auth!.accountId || row.state === 'voided') {
      throw new ApiError('generation_not_found', { message: `No ${p.noun} with this id on your account.` });
    }
    // Past its retention the result is gone at once, not when the hourly sweep gets to its file.
    return withRetention(row, deps.clock(), services.config.media.retentionDays);
  };
  return [
    {
      method: 'POST',
      pattern: p.path,
      access: 'key',
      bodyBytes: p.bodyBytes,
      handler: async (ctx) => {
        const body = await readJsonObject(ctx);
        const r = await p.submit(services, deps, { auth: ctx.auth!, requestId: ctx.requestId, body, idempotencyKey: ctx.header('idempotency-key') });
        ctx.sendJson(202, r.body, r.replayed ? [['Idempotent-Replayed', 'true']] : undefined);
      },
    },
    {
      method: 'GET',
      pattern: `${p.path}/:id`,
      access: 'key',
      handler: async (ctx) => {
        const row = await own(ctx);
        ctx.sendJson(200, p.present(row, linker(ctx, row)));
      },
    },
    {
      method: 'GET',
      pattern: `${p.path}/:id/content`,
      access: 'key',
      handler: async (ctx) => {
        const row = await own(ctx);
        if (row.state === 'failed') throw new ApiError('result_unavailable', { message: 'The generation failed; there is no result to download.' });
        if (row.state !== 'succeeded') throw new ApiError('generation_not_ready', { message: 'The generation has not finished; poll it until `status` is `succeeded`.' });
        if (row.result_expired || row.media_key === null) throw new ApiError('result_expired', { message: 'The result is past its 7-day retention and was deleted.' });
        ctx.sendEmpty(302, [['Location', linker(ctx, row)(row.media_key).url]]);
      },
    },
  ];
}
