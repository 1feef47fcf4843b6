// The shared text-lane proxy: hold, dispatch, map the vendor's answer, pass the stream through
// event-aligned while tallying usage on the side, settle, and add the service's frame at the end.
// Each lane (Messages, Responses) supplies only what differs: parsing, headers, tally, frames.
//
// Money rules on this path (docs/ledger.md):
// - Nothing reaches the vendor without a hold; every hold ends exactly once, or is deliberately
//   left open (usage_unknown) for reconciliation.
// - Refused before running (vendor 4xx, capacity, never sent): release in full.
// - After dispatch without a usable receipt: keep the hold; never charge 0 or the hold.
import type { Dispatcher } from 'undici';
import type { UsageFrame } from '../accounts/usage-frame.js';
import { ApiError } from '../errors.js';
import type { ReserveInput } from '../ledger/ledger.js';
import type { TextBilling } from '../ledger/text-billing.js';
import type { ServeStep } from '../server/router.js';
import type { HttpContext } from '../server/http-context.js';
import { readJsonObject } from '../server/json-body.js';
import type { Services } from '../services.js';
import { forEachEvent, modelRewrite, rewriteModels, SseFramer, type ModelRewrite } from './sse-framer.js';
import { neverSent } from '../vendors/text-upstream.js';
import type { TextPool } from '../vendors/pool/text-pools.js';
import type { TryResult } from '../vendors/pool/try-loop.js';
import { type MemberRequests, memberRequests, noteTries, postAcross } from './vendor-send.js';
import { readBounded } from '../vendors/vendor-http.js';
import { requestedUsageFrame } from './usage-frame.js';
import { type BodyResult, closedLaneMessage, type ParsedTextRequest, type StreamTally, type TextLane } from './text-lane.js';
import { headerValue, isTimeout, mapVendorStatus, storableId, VENDOR_ID_HEADERS, withoutErrorEvents } from './vendor-answer.js';
import { ClientWriter, FirstByte, VendorIdOnce } from './relay-pieces.js';

const MAX_VENDOR_BODY_BYTES = 32 * 1024 * 1024;
const MAX_VENDOR_ERROR_BYTES = 256 * 1024;
const MAX_PENDING_EVENT_BYTES = 8 * 1024 * 1024;
const STREAM_HEADERS: ReadonlyArray<readonly [string, string]> = [
  ['Content-Type', 'text/event-stream; charset=utf-8'],
  ['X-Accel-Buffering', 'no'],
];

export interface TextProxyDeps {
  readonly services: Services;
  /** The one billing boundary: every move of the request's hold, and the fail-stop around them. */
  readonly billing: TextBilling;
  /** The vendor's deployments (vendors/pool); undefined when none is configured. */
  readonly upstream: TextPool | undefined;
}

/** What every request of one lane's handler shares: built once, when the handler is made. */
interface ProxyEnv {
  readonly lane: TextLane;
  readonly services: Services;
  readonly billing: TextBilling;
  readonly pool: TextPool;
  /** Each deployment's path for this lane (its base URL's path + the lane's) and headers. */
  readonly members: MemberRequests;
  readonly vendor: 'anthropic' | 'openai';
  /** Per model: the bytes that start the vendor's model field, and ours to put in its place. */
  readonly rewrites: ReadonlyMap<string, ModelRewrite>;
}

/**
 * The lane's handler, in the two phases of a billed route (server/router.ts): the first checks and
 * parses with nothing held; the serve step it returns starts with the hold, which re-checks the key.
 */
export function createTextHandler(lane: TextLane, deps: TextProxyDeps): (ctx: HttpContext) => Promise<ServeStep> {
  const { services, billing, upstream } = deps;
  const rewrites = new Map<string, ModelRewrite>();
  for (const m of services.catalog.models) {
    if (m.type === 'text') rewrites.set(m.id, modelRewrite(m.vendorModel, m.id));
  }
  const closedMessage = closedLaneMessage(lane, upstream !== undefined);
  const env: ProxyEnv | undefined = upstream
    ? {
        lane,
        services,
        billing,
        pool: upstream,
        members: memberRequests(upstream, lane, lane.vendorPath),
        vendor: lane.lane === 'messages' ? 'anthropic' : 'openai',
        rewrites,
      }
    : undefined;

  return async (ctx) => {
    const startedMs = performance.now();
    billing.admit();
    const snap = services.state.current;
    if (!env || !snap.lanes[lane.lane]) {
      throw new ApiError('provider_unavailable', { message: closedMessage, retryAfterS: 300 });
    }
    const auth = ctx.auth!;
    // Picked once, before the hold: a bad X-Service-Usage-Frame is refused with nothing held.
    const frame = requestedUsageFrame(ctx, auth.usageFrame);
    const parsed = lane.parse(await readJsonObject(ctx), ctx);
    const req = parsed instanceof Promise ? await parsed : parsed;
    const pausedFor = snap.paused.get(req.model.id);
    if (pausedFor !== undefined) throw new ApiError('provider_unavailable', { message: `${req.model.id} is paused.`, retryAfterS: pausedFor });
    const requestId = ctx.requestId;
    // A hold from a lease does not read the key row: a remembered key that expired since is refused here.
    if (auth.expiresAtMs !== null && auth.expiresAtMs <= Date.now()) throw new ApiError('invalid_api_key', { message: 'The API key has expired.' });
    const hold = { requestId, accountId: auth.accountId, keyId: auth.keyId, product: lane.product, model: req.model.id, holdInk: req.holdInk };
    return () => serve(env, ctx, req, hold, frame, startedMs);
  };
}

/** From the hold on: the hold, the vendor's answer, and the charge. */
async function serve(env: ProxyEnv, ctx: HttpContext, req: ParsedTextRequest, hold: ReserveInput, frame: UsageFrame, startedMs: number): Promise<void> {
  await env.billing.hold(ctx, hold);
  const { res, member } = await dispatch(env, ctx, req);
  try {
    if (res.statusCode !== 200) return await refuseVendorStatus(env, ctx, res);
    const rw = env.rewrites.get(req.model.id)!;
    if (req.stream) return await streamThrough(env, ctx, req, res, rw, startedMs, frame);
    return await answerBody(env, ctx, req, res);
  } finally {
    env.pool.end(member); // in flight until the answer is read: a slow deployment keeps its count
  }
}

/**
 * The request's tries across the vendor's deployments (vendors/pool/try-loop.ts): a try moves to
 * another only where the vendor certainly did not start work. One hold, one request id cover
 * every try; the deadline is the one a single try had.
 */
function sendTries(env: ProxyEnv, ctx: HttpContext, req: ParsedTextRequest): Promise<TryResult> {
  const up = env.services.config.upstream;
  // A non-streaming answer's headers come only when the whole reply is written: a large
  // reply takes minutes (the official SDKs wait 10). A stream's headers come at once.
  const deadlineMs = performance.now() + (req.stream ? up.headersTimeoutMs : up.nonStreamTimeoutMs);
  // Traced: one vendor span covers every try, and its traceparent goes with each (the span records no header).
  const traced = ctx.trace?.vendorCall({ system: env.vendor, model: req.model.vendorModel, maxTokens: req.maxTokens });
  const extra = traced === undefined ? req.extraHeaders : { ...req.extraHeaders, ...traced };
  return postAcross(env.pool, env.members, { maxTries: up.maxTries, deadlineMs }, req.vendorBody, extra);
}

/**
 * Sends the request to the vendor (its deployments in turn where allowed); a failure to send
 * releases the hold, one after sending keeps it. Every deployment down: 503 with the soonest
 * reopening as Retry-After, the hold released.
 */
async function dispatch(env: ProxyEnv, ctx: HttpContext, req: ParsedTextRequest): Promise<{ res: Dispatcher.ResponseData; member: number }> {
  const { services, billing } = env;
  const tried = await sendTries(env, ctx, req);
  noteTries(ctx, env.pool, tried);
  if (tried.kind === 'answer') return tried;
  ctx.trace?.vendorDone(undefined, undefined, tried.kind === 'none' ? new Error('every deployment unavailable') : tried.error);
  if (tried.kind === 'none') {
    await billing.release(ctx, 'every vendor deployment unavailable before the request was sent');
    throw new ApiError('provider_unavailable', {
      message: 'Every deployment of the vendor is cooling down or refused the request before starting it; nothing was charged.',
      retryAfterS: tried.retryAfterS,
    });
  }
  const e = tried.error;
  services.metrics?.upstreamError(env.vendor, neverSent(e) ? 'connect' : isTimeout(e) ? 'timeout' : 'dispatch');
  if (neverSent(e)) {
    await billing.release(ctx, 'vendor unreachable before the request was sent');
    throw new ApiError('provider_unavailable', { message: 'The vendor is unreachable.', retryAfterS: 30, cause: e });
  }
  await billing.keepOpen(ctx, { reason: `dispatch failed: ${(e as Error).message.slice(0, 200)}` });
  throw new ApiError('provider_error', { message: 'The vendor failed after the request was sent; the hold is kept until reconciled.', cause: e });
}

/** A vendor answer other than 200: release or keep the hold as the status says, then throw the mapped error. */
async function refuseVendorStatus(env: ProxyEnv, ctx: HttpContext, res: Dispatcher.ResponseData): Promise<never> {
  const { services, billing } = env;
  let text = '';
  try {
    text = (await readBounded(res.body, MAX_VENDOR_ERROR_BYTES, services.config.upstream.streamTotalMs)).toString('utf8');
  } catch {
    /* the status decides; the message is best effort */
  }
  ctx.trace?.vendorDone(res.statusCode, undefined);
  services.metrics?.upstreamError(env.vendor, res.statusCode === 429 ? 'rate_limited' : res.statusCode < 500 ? 'status_4xx' : 'status_5xx');
  const mapped = mapVendorStatus(res.statusCode, text, res.headers, env.lane.promptParam);
  if (mapped.release) await billing.release(ctx, `vendor ${res.statusCode}`);
  else await billing.keepOpen(ctx, { vendorRequestId: storableId(headerValue(res.headers, VENDOR_ID_HEADERS)), reason: `vendor ${res.statusCode}` });
  throw mapped.error;
}

/** A non-streaming answer: read it, settle on its receipt, send it with the charge in a header. */
async function answerBody(env: ProxyEnv, ctx: HttpContext, req: ParsedTextRequest, res: Dispatcher.ResponseData): Promise<void> {
  const { lane, services, billing } = env;
  const requestId = ctx.requestId;
  let result: BodyResult;
  try {
    const buf = await readBounded(res.body, MAX_VENDOR_BODY_BYTES, services.config.upstream.streamTotalMs);
    result = lane.finishBody(JSON.parse(buf.toString('utf8')), req);
    ctx.trace?.vendorDone(200, { usage: result.usage, finishReason: result.finishReason });
  } catch (e) {
    ctx.trace?.vendorDone(200, undefined, e);
    services.metrics?.upstreamError(env.vendor, 'body');
    await billing.keepOpen(ctx, {
      vendorRequestId: storableId(headerValue(res.headers, VENDOR_ID_HEADERS)),
      reason: `unreadable vendor body: ${(e as Error).message.slice(0, 200)}`,
    });
    throw new ApiError('provider_error', { message: 'The vendor answer could not be read; the hold is kept until reconciled.', cause: e });
  }
  if (result.chargeInk === undefined) {
    await billing.keepOpen(ctx, { vendorRequestId: storableId(result.vendorRequestId), reason: 'no usable usage receipt' });
    throw new ApiError('provider_error', { message: 'The vendor answered without a usable usage receipt; the hold is kept until reconciled.' });
  }
  const headers: Array<[string, string]> = [['X-Service-Request-Id', requestId]];
  // The vendor ran and we hold the answer: it is delivered whether or not the charge was recorded.
  const charged = await billing.settle(ctx, lane.product, req.model.id, result.chargeInk, result.usage, storableId(result.vendorRequestId));
  if (charged !== undefined) headers.unshift(['X-Service-Ink-Charged', String(charged)]);
  ctx.sendJson(200, result.clientBody, headers);
}

/** One stream's mutable state, shared by its event handlers (one object per request). */
interface StreamRun {
  failure: Error | undefined;
  /** False once the lane's cap stopped the stream. */
  relaying: boolean;
}

async function streamThrough(
  env: ProxyEnv,
  ctx: HttpContext,
  req: ParsedTextRequest,
  res: Dispatcher.ResponseData,
  rewrite: ModelRewrite,
  startedMs: number,
  frame: UsageFrame,
): Promise<void> {
  const tally = env.lane.newTally(req);
  ctx.startStream(200, [...STREAM_HEADERS, ['X-Service-Request-Id', ctx.requestId]]);
  const run: StreamRun = { failure: undefined, relaying: true };
  await pumpStream(env, ctx, res.body, rewrite, tally, run, startedMs);
  tally.end();
  const failure = run.failure;
  ctx.trace?.vendorDone(200, { usage: tally.usage(), finishReason: tally.finishReason() }, failure);
  if (failure) env.services.metrics?.upstreamError(env.vendor, /time/.test(failure.message) ? 'timeout' : 'stream');
  let last: string;
  try {
    last = await settleStream(env, ctx, req, tally, failure, frame);
  } catch (e) {
    // A broken money rule (the fail-stop has it): the stream still ends, with no charge in it, and
    // the error goes on up. The hold stays open; recovery keeps it for reconciliation.
    if (env.billing.stopped)
      ctx.end(
        env.lane.errorFrame(
          'usage_unknown',
          'An internal ledger fault stopped this gateway instance; the hold is kept until reconciled.',
          ctx.requestId,
          tally,
        ),
      );
    throw e;
  }
  ctx.end(last === '' ? undefined : last);
}

/** Reads the vendor's stream to its end (or error, or total time cap), relaying whole events as they come. */
function pumpStream(
  env: ProxyEnv,
  ctx: HttpContext,
  body: Dispatcher.ResponseData['body'],
  rewrite: ModelRewrite,
  tally: StreamTally,
  run: StreamRun,
  startedMs: number,
): Promise<void> {
  const framer = new SseFramer(MAX_PENDING_EVENT_BYTES);
  const relay = createRelay(env, ctx, body, tally, startedMs);
  const relayEach = (event: Buffer): void => {
    if (run.relaying) run.relaying = relay(event);
  };
  return new Promise<void>((resolveS) => {
    const total = setTimeout(() => body.destroy(new Error('stream exceeded its total time cap')), env.services.config.upstream.streamTotalMs);
    const finish = (err?: Error) => {
      clearTimeout(total);
      run.failure = err;
      resolveS();
    };
    body.on('data', (chunk: Buffer) => {
      const framed = framer.push(chunk);
      if (framer.overflowed) {
        body.destroy(new Error('vendor event above the size cap'));
        return;
      }
      if (framed === null) return;
      const out = rewriteModels(framed, rewrite);
      // Near the cap, one event at a time, so that what comes before the crossing event is relayed.
      if (tally.mayCap(out.length)) forEachEvent(out, relayEach);
      else relayEach(out);
    });
    body.once('end', () => finish());
    body.once('error', (e: Error) => finish(e));
    body.once('close', () => finish(run.failure));
  });
}

/**
 * The per-request relay, composed of its pieces in the order each chunk of whole events meets
 * them (framing and the model rewrite came before, in pumpStream): the lane's tally, the vendor's
 * id on the record (VendorIdOnce), the lane's cap, the vendor's error events held back for the
 * final frame, the first byte's mark (FirstByte), the write with backpressure (ClientWriter), the
 * receipt's mark. Returns false once the lane's cap stopped the stream.
 */
function createRelay(
  env: ProxyEnv,
  ctx: HttpContext,
  body: Dispatcher.ResponseData['body'],
  tally: StreamTally,
  startedMs: number,
): (events: Buffer) => boolean {
  const { services, lane } = env;
  const vendorId = new VendorIdOnce(env.billing, ctx);
  const firstByte = new FirstByte(() => {
    services.metrics?.firstToken(lane.lane, (performance.now() - startedMs) / 1000);
    ctx.trace?.firstToken();
  });
  const writer = new ClientWriter(ctx, body);
  return (events) => {
    tally.push(events);
    vendorId.look(tally);
    if (tally.capped) {
      body.destroy();
      return false;
    }
    const out = withoutErrorEvents(events);
    if (out.length === 0) return true;
    firstByte.relayed();
    if (tally.sawTerminal) ctx.holdTail();
    writer.write(out);
    // Said on every chunk from the receipt on (the few after it): marking it is idempotent.
    if (tally.sawTerminal) ctx.receiptRelayed();
    return true;
  };
}

/**
 * Settles a finished stream on what the tally read, and returns the stream's final frame: the
 * usage frame in the request's form ('' for none), or a failure frame, which every form gets.
 */
async function settleStream(
  env: ProxyEnv,
  ctx: HttpContext,
  req: ParsedTextRequest,
  tally: StreamTally,
  failure: Error | undefined,
  frame: UsageFrame,
): Promise<string> {
  const { lane, billing } = env;
  const requestId = ctx.requestId;
  const outcome = tally.capped ? 'capped' : tally.outcome();
  const charge = outcome === 'capped' ? req.holdInk : outcome === 'usage_unknown' ? undefined : tally.chargeInk();
  if (charge === undefined) {
    await billing.keepOpen(ctx, {
      vendorRequestId: storableId(tally.vendorRequestId()),
      reason: failure ? `stream failed: ${failure.message.slice(0, 200)}` : 'no usage receipt',
    });
    return lane.errorFrame(
      'usage_unknown',
      'The stream ended without a usage receipt; the hold is kept until the vendor record reconciles it.',
      requestId,
      tally,
    );
  }
  const charged = await billing.settle(ctx, lane.product, req.model.id, charge, tally.usage(), storableId(tally.vendorRequestId()));
  if (charged === undefined) return lane.errorFrame('usage_unknown', 'The charge could not be recorded; the hold is kept until reconciled.', requestId, tally);
  if (outcome === 'incomplete_stream') {
    return lane.errorFrame(
      'incomplete_stream',
      `The stream ended without a terminal event; ${charged} Ink charged for what the vendor reported.`,
      requestId,
      tally,
    );
  }
  if (outcome === 'capped') return lane.cappedFrame(charged, requestId, tally, frame);
  return lane.usageFrame(charged, requestId, tally, frame);
}
