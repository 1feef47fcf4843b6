// POST /v1/messages/count_tokens: the protocol's token count of a Messages prompt, asked of the
// vendor's own count endpoint (coding agents call it to show how full their context is). The
// Messages lane's rules where they overlap: the same field rules (request.ts, with the count's own
// allow-list from request-fields.ts), model resolution, `anthropic-beta` filter, closed-lane and
// paused-model answers, vendor headers and upstream pool, and vendor refusals mapped as the lane
// maps them (text-proxy.ts mapVendorStatus).
//
// Never billed: a count costs the service one vendor call and no model time, so there is no hold,
// no request record and no Ink moved, and a key whose wallet is empty may count too. It is limited
// per key in a bucket of its own (limits.countTokensPerMinute, the route's rateBucket), so an agent
// counting often cannot use up the key's requests per minute meant for generation.
import type { Dispatcher } from 'undici';
import { ApiError } from '../../errors.js';
import type { HttpContext } from '../../server/http-context.js';
import { readJsonObject } from '../../server/json-body.js';
import type { Services } from '../../services.js';
import type { TextPool } from '../../vendors/pool/text-pools.js';
import { neverSent } from '../../vendors/text-upstream.js';
import { readBounded } from '../../vendors/vendor-http.js';
import { closedLaneMessage, type TextLane } from '../text-lane.js';
import { isTimeout, mapVendorStatus } from '../vendor-answer.js';
import { type MemberRequests, memberRequests, noteTries, postAcross } from '../vendor-send.js';
import { forwardedBetaHeader, parseCountTokensRequest } from './request.js';

/** The vendor's count endpoint, after the base URL's path. */
const VENDOR_COUNT_PATH = '/v1/messages/count_tokens';
/** `{"input_tokens":N}` is a few dozen bytes; an error envelope a few hundred. */
const MAX_VENDOR_ANSWER_BYTES = 256 * 1024;

export interface CountTokensDeps {
  readonly services: Services;
  /** The Messages lane: its product, lane switch and vendor headers. */
  readonly lane: TextLane;
  /** The Messages lane's deployments (the same pool); undefined when the vendor is not configured. */
  readonly upstream: TextPool | undefined;
}

export function createCountTokensHandler(deps: CountTokensDeps): (ctx: HttpContext) => Promise<void> {
  const { services, lane, upstream } = deps;
  const closedMessage = closedLaneMessage(lane, upstream !== undefined);
  const members = upstream === undefined ? undefined : memberRequests(upstream, lane, VENDOR_COUNT_PATH);
  return async (ctx) => {
    const snap = services.state.current;
    if (upstream === undefined || members === undefined || !snap.lanes[lane.lane]) {
      throw new ApiError('provider_unavailable', { message: closedMessage, retryAfterS: 300 });
    }
    const req = parseCountTokensRequest(await readJsonObject(ctx), services.catalog);
    const pausedFor = snap.paused.get(req.model.id);
    if (pausedFor !== undefined) throw new ApiError('provider_unavailable', { message: `${req.model.id} is paused.`, retryAfterS: pausedFor });
    const beta = forwardedBetaHeader(ctx.header('anthropic-beta') ?? ctx.header('vendor-beta'));
    const { status, text, res } = await askVendor(services, ctx, upstream, members, beta, req.vendorBody);
    if (status !== 200) throw mapVendorStatus(status, text, res.headers, lane.promptParam).error;
    if (!isCountAnswer(text)) {
      services.metrics?.upstreamError('anthropic', 'body');
      throw new ApiError('provider_error', { message: 'The vendor answered the count without a token count; nothing was charged.' });
    }
    ctx.sendJson(200, text); // the vendor's answer as it came
  };
}

/**
 * One call to the vendor's count endpoint, its answer read whole. The wait is bounded by
 * upstream.countTokensTimeoutMs (10 s), for the headers and again for the body: a count's answer
 * is small and comes at once, and an agent waits on it before it shows its user anything.
 */
async function askVendor(
  services: Services,
  ctx: HttpContext,
  pool: TextPool,
  members: MemberRequests,
  beta: string | undefined,
  body: string,
): Promise<{ status: number; text: string; res: Dispatcher.ResponseData }> {
  const timeoutMs = services.config.upstream.countTokensTimeoutMs;
  // The same tries as a generation's (vendors/pool/try-loop.ts), within the count's own bound.
  const limits = { maxTries: services.config.upstream.maxTries, deadlineMs: performance.now() + timeoutMs };
  const tried = await postAcross(pool, members, limits, body, beta ? { 'anthropic-beta': beta } : undefined);
  noteTries(ctx, pool, tried);
  if (tried.kind === 'none') {
    throw new ApiError('provider_unavailable', {
      message: 'Every deployment of the vendor is cooling down or refused the count.',
      retryAfterS: tried.retryAfterS,
    });
  }
  if (tried.kind === 'error') {
    const e = tried.error;
    services.metrics?.upstreamError('anthropic', neverSent(e) ? 'connect' : isTimeout(e) ? 'timeout' : 'dispatch');
    if (neverSent(e)) throw new ApiError('provider_unavailable', { message: 'The vendor is unreachable.', retryAfterS: 30, cause: e });
    throw new ApiError('provider_error', { message: 'The vendor did not answer the count; nothing was charged.', cause: e });
  }
  const res = tried.res;
  let text: string;
  try {
    text = (await readBounded(res.body, MAX_VENDOR_ANSWER_BYTES, timeoutMs)).toString('utf8');
  } catch (e) {
    services.metrics?.upstreamError('anthropic', 'body');
    throw new ApiError('provider_error', { message: 'The vendor answer to the count could not be read; nothing was charged.', cause: e });
  } finally {
    pool.end(tried.member);
  }
  if (res.statusCode !== 200)
    services.metrics?.upstreamError('anthropic', res.statusCode === 429 ? 'rate_limited' : res.statusCode < 500 ? 'status_4xx' : 'status_5xx');
  return { status: res.statusCode, text, res };
}

/** `{"input_tokens": N}` with N a whole number: what the client's SDK reads. */
function isCountAnswer(text: string): boolean {
  try {
    const j = JSON.parse(text) as { input_tokens?: unknown } | null;
    return typeof j === 'object' && j !== null && Number.isInteger(j.input_tokens) && (j.input_tokens as number) >= 0;
  } catch {
    return false;
  }
}
