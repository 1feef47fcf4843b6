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
import type { TextModel } from '../catalog/models.js';
import type { Lane } from '../deployment/state.js';
import { ApiError } from '../errors.js';
import { isLedgerAssertion } from '../ledger/assertion.js';
import { stoppedAnswer } from '../ledger/fail-stop.js';
import type { TextBilling } from '../ledger/text-billing.js';
import type { HttpContext } from '../server/http-context.js';
import { readJsonObject } from '../server/json-body.js';
import type { Services } from '../services.js';
import { forEachEvent, modelRewrite, rewriteModels, SseFramer, type ModelRewrite } from './sse-framer.js';
import { neverSent } from '../vendors/text-upstream.js';
import type { TextPool } from '../vendors/pool/text-pools.js';
import type { TryResult } from '../vendors/pool/try-loop.js';
import { type MemberRequests, memberRequests, noteTries, postAcross, type VendorHeaders } from './vendor-send.js';
import { readBounded } from '../vendors/vendor-http.js';
import { requestedUsageFrame } from './usage-frame.js';
import { within } from '../tracing/hooks.js';

export interface ParsedTextRequest {
  readonly model: TextModel;
  readonly stream: boolean;
  readonly holdInk: number;
  readonly vendorBody: string;
  /** Per-request vendor headers the lane allows (already filtered). */
  readonly extraHeaders?: Readonly<Record<string, string>>;
  /** The output token cap sent to the vendor (a trace's gen_ai.request.max_tokens). */
  readonly maxTokens?: number;
}

export type StreamOutcome = 'complete' | 'usage_unknown' | 'incomplete_stream';

export interface StreamTally {
  push(chunk: Buffer): void;
  end(): void;
  outcome(): StreamOutcome;
  /** Whole Ink for what the vendor reported; undefined when the receipt cannot be priced. */
  chargeInk(): number | undefined;
  /** Usage buckets for the request record (unknown buckets absent). */
  usage(): object;
  vendorRequestId(): string | undefined;
  /** The vendor's own error event, when one arrived (passed on inside our final error frame). */
  vendorError?(): { type?: string; message?: string } | undefined;
  /** True when the lane wants the proxy to stop reading (the service's own output cap). */
  readonly capped?: boolean;
  /** Why the vendor stopped (stop_reason, a response's status), for a trace's gen_ai.response.finish_reasons. */
  finishReason?(): string | undefined;
  /** True once the stream's terminal event has been read (lanes that know it; the others leave it out). */
  readonly sawTerminal?: boolean;
  /**
   * True when `bytes` more bytes of stream could cross the lane's cap (lanes without one leave it
   * out). The proxy then feeds that chunk event by event, so the events before the one that
   * crosses are still relayed (the first ones carry `response.created`, which the SDK needs).
   */
  mayCap?(bytes: number): boolean;
}

export interface BodyResult {
  /** undefined when the body carries no usable usage receipt */
  readonly chargeInk: number | undefined;
  readonly usage: object;
  readonly vendorRequestId: string | undefined;
  /** The body the client receives (model ids rewritten). */
  readonly clientBody: string;
  /** Why the vendor stopped, as in StreamTally.finishReason. */
  readonly finishReason?: string;
}

export interface TextLane extends VendorHeaders {
  readonly product: 'messages' | 'responses';
  readonly lane: Lane;
  /** Path on the vendor, appended to the base URL's path. */
  readonly vendorPath: string;
  /** The request field that carries the prompt (`param` of a 413). */
  readonly promptParam: string;
  /** A promise when the parse takes work off the event loop (a long Responses prompt's token count). */
  parse(body: Record<string, unknown>, ctx: HttpContext): ParsedTextRequest | Promise<ParsedTextRequest>;
  newTally(req: ParsedTextRequest): StreamTally;
  finishBody(json: unknown, req: ParsedTextRequest): BodyResult;
  /** The closing usage frame in the form the request asked for (the lane may map it to one it can send); '' for none. */
  usageFrame(inkCharged: number, requestId: string, tally: StreamTally, form: UsageFrame): string;
  errorFrame(code: 'usage_unknown' | 'incomplete_stream', message: string, requestId: string, tally: StreamTally): string;
  /** Settles a stream the service stopped at its own cap (Responses); absent when there is none. */
  cappedFrame?(inkCharged: number, requestId: string, tally: StreamTally, form: UsageFrame): string;
}

const MAX_VENDOR_BODY_BYTES = 32 * 1024 * 1024;
const MAX_VENDOR_ERROR_BYTES = 256 * 1024;
const MAX_PENDING_EVENT_BYTES = 8 * 1024 * 1024;
const STREAM_HEADERS: ReadonlyArray<readonly [string, string]> = [
  ['Content-Type', 'text/event-stream; charset=utf-8'],
  ['X-Accel-Buffering', 'no'],
];

/** undici's own timeouts (headers, body idle) and our total cap. */
export function isTimeout(e: unknown): boolean {
  const code = (e as { code?: unknown }).code;
  return code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT' || code === 'UND_ERR_CONNECT_TIMEOUT';
}

function vendorMessage(text: string): string {
  try {
    const j = JSON.parse(text) as { error?: { message?: unknown } | string; message?: unknown };
    const e = j.error;
    if (e && typeof e === 'object' && typeof e.message === 'string') return e.message.slice(0, 2000);
    if (typeof e === 'string') return e.slice(0, 2000);
    if (typeof j.message === 'string') return j.message.slice(0, 2000);
  } catch {
    /* not JSON */
  }
  return text.slice(0, 500) || 'The vendor refused the request.';
}

function retryAfterOf(headers: Dispatcher.ResponseData['headers'], fallbackS: number): number {
  const v = headers['retry-after'];
  const n = Number(Array.isArray(v) ? v[0] : v);
  return Number.isFinite(n) && n >= 1 ? Math.min(Math.ceil(n), 3600) : fallbackS;
}

const PROMPT_TOO_LONG = /prompt is too long|context[_ ]length|maximum context|too many (input )?tokens|input exceeds/i;

/**
 * Maps a vendor refusal to the documented answer (docs/api/errors.md) and says whether the hold goes back. `promptParam`
 * names the lane's prompt field for the 413 (`messages`, `input`).
 */
export function mapVendorStatus(
  status: number,
  text: string,
  headers: Dispatcher.ResponseData['headers'],
  promptParam: string,
): { error: ApiError; release: boolean } {
  const msg = vendorMessage(text);
  // The vendor's own "prompt is too long" is our 413 (docs/api/errors.md): we never refuse first on a guess.
  if ((status === 400 || status === 422) && PROMPT_TOO_LONG.test(msg)) {
    return {
      error: new ApiError('payload_too_large', { message: `The prompt is longer than the model's context: ${msg}`, param: promptParam }),
      release: true,
    };
  }
  // Its gateway refusing before running (docs/api/errors.md: its 400, 404, 413, 415, 422) is the client's to fix.
  if (status === 400 || status === 404 || status === 413 || status === 415 || status === 422) {
    return { error: new ApiError('upstream_rejected', { message: msg }), release: true };
  }
  if (status === 429 || status === 529 || status === 503) {
    return {
      error: new ApiError('provider_unavailable', { message: `The vendor is at capacity or rate-limiting: ${msg}`, retryAfterS: retryAfterOf(headers, 30) }),
      release: true,
    };
  }
  if (status === 401 || status === 402 || status === 403) {
    // Our vendor account was refused (credentials, billing): nothing ran, and it is not the
    // client's doing; an operator must act. The vendor's message is not passed on.
    return { error: new ApiError('provider_error', { message: 'The vendor refused the service account; nothing was charged.' }), release: true };
  }
  // Other 4xx are the vendor refusing before running; 5xx may have run: keep the hold.
  if (status < 500) return { error: new ApiError('upstream_rejected', { message: msg }), release: true };
  return {
    error: new ApiError('provider_error', { message: `The vendor failed (${status}); the hold is kept until the vendor's record reconciles it.` }),
    release: false,
  };
}

/** `event: error` at an event's start or on one of its lines. */
const ERROR_EVENT = Buffer.from('event: error');
const isErrorEvent = (ev: Buffer): boolean => {
  const at = ev.indexOf(ERROR_EVENT);
  return at === 0 || (at > 0 && (ev[at - 1] === 0x0a || ev[at - 1] === 0x0d));
};

/**
 * The vendor's own mid-stream error events are held back (the tally has read them): the stream's
 * single final `error` event is ours, carrying the vendor's error type and message with our code.
 * Rare path: only runs when the bytes contain `event: error`.
 */
function withoutErrorEvents(buf: Buffer): Buffer {
  const kept: Buffer[] = [];
  forEachEvent(buf, (ev) => {
    if (!isErrorEvent(ev)) kept.push(ev);
  });
  return kept.length === 1 ? kept[0]! : Buffer.concat(kept);
}

/**
 * Where the vendors put their own id of a request (Anthropic `request-id`, OpenAI `x-request-id`):
 * kept on a hold whose outcome is unknown, so reconciliation can find the vendor's record of it.
 */
const VENDOR_ID_HEADERS = ['request-id', 'x-request-id'] as const;

function headerValue(headers: Dispatcher.ResponseData['headers'], names: readonly string[]): string | undefined {
  for (const n of names) {
    const v = headers[n];
    if (typeof v === 'string') return v;
    if (Array.isArray(v) && typeof v[0] === 'string') return v[0];
  }
  return undefined;
}

/** A vendor id the ledger can store (1 to 256 characters); another one is dropped, never fatal to a move. */
const storableId = (v: string | undefined): string | undefined => (v !== undefined && v.length >= 1 && v.length <= 256 ? v : undefined);

/** The request a billing line is about: its id (the hold's) and its logger, read only when a line is written. */
type RequestScope = Pick<HttpContext, 'requestId' | 'log' | 'trace'>;

/**
 * A ledger move on a failure path must not replace the answer the client is owed: if it fails, it
 * is logged and the hold stays open, listed by reconciliation.
 */
async function moveOrLog(services: Services, r: RequestScope, what: string, move: Promise<unknown>): Promise<void> {
  try {
    await move;
  } catch (e) {
    violation(services, e);
    r.log.error({ move: what, err: e as Error }, 'text.ledger_move_failed');
  }
}

/**
 * A broken money rule is never caught to carry on: it goes to the fail-stop and on up (the request
 * ends without a billing answer; the instance stops). Any other error is the caller's to handle.
 */
function violation(services: Services, e: unknown): void {
  if (!isLedgerAssertion(e)) return;
  services.failStop?.trip(e);
  throw e;
}

/**
 * Before a response has started, a broken money rule met by a request's move (reserve, release,
 * settle, an unknown-usage mark) is answered with the fail-stop's own 503 (`stoppedAnswer`:
 * provider_unavailable, Retry-After; docs/api/errors.md), never a generic 500: the instance is
 * stopping and the client's retry belongs on another one. The rule reaches the fail-stop first
 * (tripping is idempotent): it is handed on, never caught to carry on. A stream that has started
 * keeps its own ending (streamThrough); any other error passes through unchanged.
 */
async function answeredByFailStop<T>(services: Services, move: Promise<T>): Promise<T> {
  try {
    return await move;
  } catch (e) {
    if (!isLedgerAssertion(e)) throw e;
    services.failStop?.trip(e);
    throw stoppedAnswer();
  }
}

/**
 * Leaves the hold open for reconciliation (usage_unknown) and says so in the log, with why and the
 * vendor's request id when there is one: an operator reconciling sees every open hold explained.
 */
function holdOpen(services: Services, ledger: TextBilling, r: RequestScope, info: { vendorRequestId?: string; reason: string }): Promise<void> {
  r.log.warn({ vendor_request_id: info.vendorRequestId ?? null, reason: info.reason }, 'text.hold_left_open');
  return moveOrLog(services, r, 'markUsageUnknown', within(r.trace?.step('usage_unknown'), ledger.markUsageUnknownEventually(r.requestId, info)));
}

/**
 * A settle that could not be written leaves a charge we know: mark the hold usage_unknown with the
 * vendor id (best effort), so reconciliation can match it to the vendor's record.
 */
async function settleFailed(
  services: Services,
  ledger: TextBilling,
  r: RequestScope,
  chargeInk: number,
  usage: object,
  vendorRequestId: string | undefined,
  e: unknown,
): Promise<void> {
  violation(services, e);
  r.log.error({ vendor_request_id: vendorRequestId, charge_ink: chargeInk, usage, err: e as Error }, 'text.settle_failed');
  await holdOpen(services, ledger, r, { vendorRequestId, reason: 'settle failed' });
}

export interface TextProxyDeps {
  readonly services: Services;
  readonly ledger: TextBilling;
  /** The vendor's deployments (vendors/pool); undefined when none is configured. */
  readonly upstream: TextPool | undefined;
}

/** What every request of one lane's handler shares: built once, when the handler is made. */
interface ProxyEnv {
  readonly lane: TextLane;
  readonly services: Services;
  readonly ledger: TextBilling;
  readonly pool: TextPool;
  /** Each deployment's path for this lane (its base URL's path + the lane's) and headers. */
  readonly members: MemberRequests;
  readonly vendor: 'anthropic' | 'openai';
  /** Per model: the bytes that start the vendor's model field, and ours to put in its place. */
  readonly rewrites: ReadonlyMap<string, ModelRewrite>;
}

/** Said to whoever calls a closed lane, often someone who just ran `npm start`: what opens it. */
export function closedLaneMessage(lane: Pick<TextLane, 'product' | 'lane'>, configured: boolean): string {
  return !configured
    ? `The ${lane.product} lane has no vendor configured on this deployment. An operator sets the vendor's base URL and key, then runs \`inkgate lane enable ${lane.lane}\`; \`npm run demo\` does both against local simulators.`
    : `The ${lane.product} lane is not enabled on this deployment. An operator opens it with \`inkgate lane enable ${lane.lane}\`; \`npm run demo\` runs every lane against local simulators.`;
}

export function createTextHandler(lane: TextLane, d: TextProxyDeps): (ctx: HttpContext) => Promise<void> {
  const { services, ledger, upstream } = d;
  const rewrites = new Map<string, ModelRewrite>();
  for (const m of services.catalog.models) {
    if (m.type === 'text') rewrites.set(m.id, modelRewrite(m.vendorModel, m.id));
  }
  const closedMessage = closedLaneMessage(lane, upstream !== undefined);
  const env: ProxyEnv | undefined = upstream
    ? {
        lane,
        services,
        ledger,
        pool: upstream,
        members: memberRequests(upstream, lane, lane.vendorPath),
        vendor: lane.lane === 'messages' ? 'anthropic' : 'openai',
        rewrites,
      }
    : undefined;

  return async (ctx) => {
    const startedMs = performance.now();
    if (services.failStop?.stopped) throw stoppedAnswer();
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
    await answeredByFailStop(
      services,
      within(
        ctx.trace?.step('reserve'),
        ledger.reserve({ requestId, accountId: auth.accountId, keyId: auth.keyId, product: lane.product, model: req.model.id, holdInk: req.holdInk }),
      ),
    );
    ctx.keyConfirmed = true;
    services.metrics?.inkHeld(lane.product, req.model.id, req.holdInk);
    ctx.trace?.held(req.holdInk);

    const { res, member } = await answeredByFailStop(services, dispatch(env, ctx, req));
    try {
      if (res.statusCode !== 200) return await answeredByFailStop(services, refuseVendorStatus(env, ctx, res));
      const rw = rewrites.get(req.model.id)!;
      if (req.stream) return await streamThrough(env, ctx, req, res, rw, startedMs, frame);
      return await answeredByFailStop(services, answerBody(env, ctx, req, res));
    } finally {
      env.pool.end(member); // in flight until the answer is read: a slow deployment keeps its count
    }
  };
}

/**
 * The request's tries across the vendor's deployments (vendors/pool/try-loop.ts): a try moves to
 * another only where the vendor certainly did not start work. One hold, one request id cover
 * every try; the deadline is the one a single try had.
 */
function sendTries(env: ProxyEnv, r: RequestScope, req: ParsedTextRequest): Promise<TryResult> {
  const up = env.services.config.upstream;
  // A non-streaming answer's headers come only when the whole reply is written: a large
  // reply takes minutes (the official SDKs wait 10). A stream's headers come at once.
  const deadlineMs = performance.now() + (req.stream ? up.headersTimeoutMs : up.nonStreamTimeoutMs);
  // Traced: one vendor span covers every try, and its traceparent goes with each (the span records no header).
  const traced = r.trace?.vendorCall({ system: env.vendor, model: req.model.vendorModel, maxTokens: req.maxTokens });
  const extra = traced === undefined ? req.extraHeaders : { ...req.extraHeaders, ...traced };
  return postAcross(env.pool, env.members, { maxTries: up.maxTries, deadlineMs }, req.vendorBody, extra);
}

/**
 * Sends the request to the vendor (its deployments in turn where allowed); a failure to send
 * releases the hold, one after sending keeps it. Every deployment down: 503 with the soonest
 * reopening as Retry-After, the hold released.
 */
async function dispatch(env: ProxyEnv, r: HttpContext, req: ParsedTextRequest): Promise<{ res: Dispatcher.ResponseData; member: number }> {
  const { services, ledger } = env;
  const tried = await sendTries(env, r, req);
  noteTries(r, env.pool, tried);
  if (tried.kind === 'answer') return tried;
  r.trace?.vendorDone(undefined, undefined, tried.kind === 'none' ? new Error('every deployment unavailable') : tried.error);
  if (tried.kind === 'none') {
    await moveOrLog(
      services,
      r,
      'release',
      within(r.trace?.step('release'), ledger.release(r.requestId, 'every vendor deployment unavailable before the request was sent')),
    );
    throw new ApiError('provider_unavailable', {
      message: 'Every deployment of the vendor is cooling down or refused the request before starting it; nothing was charged.',
      retryAfterS: tried.retryAfterS,
    });
  }
  const e = tried.error;
  services.metrics?.upstreamError(env.vendor, neverSent(e) ? 'connect' : isTimeout(e) ? 'timeout' : 'dispatch');
  if (neverSent(e)) {
    await moveOrLog(services, r, 'release', within(r.trace?.step('release'), ledger.release(r.requestId, 'vendor unreachable before the request was sent')));
    throw new ApiError('provider_unavailable', { message: 'The vendor is unreachable.', retryAfterS: 30, cause: e });
  }
  await holdOpen(services, ledger, r, { reason: `dispatch failed: ${(e as Error).message.slice(0, 200)}` });
  throw new ApiError('provider_error', { message: 'The vendor failed after the request was sent; the hold is kept until reconciled.', cause: e });
}

/** A vendor answer other than 200: release or keep the hold as the status says, then throw the mapped error. */
async function refuseVendorStatus(env: ProxyEnv, r: RequestScope, res: Dispatcher.ResponseData): Promise<never> {
  const { services, ledger } = env;
  let text = '';
  try {
    text = (await readBounded(res.body, MAX_VENDOR_ERROR_BYTES, services.config.upstream.streamTotalMs)).toString('utf8');
  } catch {
    /* the status decides; the message is best effort */
  }
  r.trace?.vendorDone(res.statusCode, undefined);
  services.metrics?.upstreamError(env.vendor, res.statusCode === 429 ? 'rate_limited' : res.statusCode < 500 ? 'status_4xx' : 'status_5xx');
  const mapped = mapVendorStatus(res.statusCode, text, res.headers, env.lane.promptParam);
  if (mapped.release) await moveOrLog(services, r, 'release', within(r.trace?.step('release'), ledger.release(r.requestId, `vendor ${res.statusCode}`)));
  else await holdOpen(services, ledger, r, { vendorRequestId: storableId(headerValue(res.headers, VENDOR_ID_HEADERS)), reason: `vendor ${res.statusCode}` });
  throw mapped.error;
}

/** A non-streaming answer: read it, settle on its receipt, send it with the charge in a header. */
async function answerBody(env: ProxyEnv, ctx: HttpContext, req: ParsedTextRequest, res: Dispatcher.ResponseData): Promise<void> {
  const { lane, services, ledger } = env;
  const requestId = ctx.requestId;
  let result: BodyResult;
  try {
    const buf = await readBounded(res.body, MAX_VENDOR_BODY_BYTES, services.config.upstream.streamTotalMs);
    result = lane.finishBody(JSON.parse(buf.toString('utf8')), req);
    ctx.trace?.vendorDone(200, { usage: result.usage, finishReason: result.finishReason });
  } catch (e) {
    ctx.trace?.vendorDone(200, undefined, e);
    services.metrics?.upstreamError(env.vendor, 'body');
    await holdOpen(services, ledger, ctx, {
      vendorRequestId: storableId(headerValue(res.headers, VENDOR_ID_HEADERS)),
      reason: `unreadable vendor body: ${(e as Error).message.slice(0, 200)}`,
    });
    throw new ApiError('provider_error', { message: 'The vendor answer could not be read; the hold is kept until reconciled.', cause: e });
  }
  if (result.chargeInk === undefined) {
    await holdOpen(services, ledger, ctx, { vendorRequestId: storableId(result.vendorRequestId), reason: 'no usable usage receipt' });
    throw new ApiError('provider_error', { message: 'The vendor answered without a usable usage receipt; the hold is kept until reconciled.' });
  }
  const headers: Array<[string, string]> = [['X-Service-Request-Id', requestId]];
  try {
    const s = await within(
      ctx.trace?.step('settle'),
      ledger.settle(requestId, result.chargeInk, { usage: result.usage, vendorRequestId: storableId(result.vendorRequestId) }),
    );
    if (s.resolved) {
      headers.unshift(['X-Service-Ink-Charged', String(s.chargedInk)]);
      services.metrics?.inkCharged(lane.product, req.model.id, s.chargedInk);
      ctx.trace?.charged(s.chargedInk);
    }
  } catch (e) {
    // The vendor ran and we hold the answer: deliver it. The hold stays open for reconciliation.
    await settleFailed(services, ledger, ctx, result.chargeInk, result.usage, storableId(result.vendorRequestId), e);
  }
  ctx.sendJson(200, result.clientBody, headers);
}

/** One stream's mutable state, shared by its event handlers (one object per request). */
interface StreamRun {
  failure: Error | undefined;
  firstByte: boolean;
  /** The client's socket is full: the vendor's body is paused until it drains. */
  waiting: boolean;
  /** The vendor's id is on the request record (set once, not awaited). */
  vendorIdRecorded: boolean;
  /** False once the lane's cap stopped the stream. */
  relaying: boolean;
}

async function streamThrough(
  env: ProxyEnv,
  ctx: HttpContext,
  req: ParsedTextRequest,
  res: Dispatcher.ResponseData,
  rw: ModelRewrite,
  startedMs: number,
  frame: UsageFrame,
): Promise<void> {
  const tally = env.lane.newTally(req);
  ctx.startStream(200, [...STREAM_HEADERS, ['X-Service-Request-Id', ctx.requestId]]);
  const run: StreamRun = { failure: undefined, firstByte: true, waiting: false, vendorIdRecorded: false, relaying: true };
  await pumpStream(env, ctx, res.body, rw, tally, run, startedMs);
  tally.end();
  const failure = run.failure;
  ctx.trace?.vendorDone(200, { usage: tally.usage(), finishReason: tally.finishReason?.() }, failure);
  if (failure) env.services.metrics?.upstreamError(env.vendor, /time/.test(failure.message) ? 'timeout' : 'stream');
  let last: string;
  try {
    last = await settleStream(env, ctx, req, tally, failure, frame);
  } catch (e) {
    // A broken money rule (the fail-stop has it): the stream still ends, with no charge in it, and
    // the error goes on up. The hold stays open; recovery keeps it for reconciliation.
    if (isLedgerAssertion(e))
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
  rw: ModelRewrite,
  tally: StreamTally,
  run: StreamRun,
  startedMs: number,
): Promise<void> {
  const framer = new SseFramer(MAX_PENDING_EVENT_BYTES);
  const relay = createRelay(env, ctx, body, tally, run, startedMs);
  const relayEach = (ev: Buffer): void => {
    if (run.relaying) run.relaying = relay(ev);
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
      const out = rewriteModels(framed, rw);
      // Near the cap, one event at a time, so that what comes before the crossing event is relayed.
      if (tally.mayCap?.(out.length)) forEachEvent(out, relayEach);
      else relayEach(out);
    });
    body.once('end', () => finish());
    body.once('error', (e: Error) => finish(e));
    body.once('close', () => finish(run.failure));
  });
}

/** The per-request relay: tallies and writes whole events; false once the lane's cap stopped the stream. */
function createRelay(
  env: ProxyEnv,
  ctx: HttpContext,
  body: Dispatcher.ResponseData['body'],
  tally: StreamTally,
  run: StreamRun,
  startedMs: number,
): (events: Buffer) => boolean {
  const { services, ledger, lane } = env;
  const requestId = ctx.requestId;
  const resume = () => {
    run.waiting = false;
    body.resume();
  };
  return (events) => {
    tally.push(events);
    // The vendor's id goes on the request record as soon as the stream names it (not awaited, once):
    // a crash mid-stream then leaves a hold that reconciliation can match to the vendor's record.
    if (!run.vendorIdRecorded) {
      const vendorId = storableId(tally.vendorRequestId());
      if (vendorId !== undefined) {
        run.vendorIdRecorded = true;
        // Not awaited: a broken rule met here already went to the fail-stop (moveOrLog), so its rethrow ends here.
        moveOrLog(services, ctx, 'setVendorRequestId', ledger.setVendorRequestId(requestId, vendorId)).catch(() => undefined);
      }
    }
    if (tally.capped) {
      body.destroy();
      return false;
    }
    let out = events;
    if (out.indexOf(ERROR_EVENT) !== -1) {
      out = withoutErrorEvents(out);
      if (out.length === 0) return true;
    }
    if (run.firstByte) {
      run.firstByte = false;
      services.metrics?.firstToken(lane.lane, (performance.now() - startedMs) / 1000);
      ctx.trace?.firstToken();
    }
    // A client that went away is not written to, but the vendor is read to its receipt.
    if (!ctx.aborted && !ctx.write(out) && !run.waiting) {
      run.waiting = true;
      body.pause();
      void ctx.waitWritable().then(resume);
    }
    // Said on every chunk from the receipt on (the few after it): marking it is idempotent.
    if (tally.sawTerminal === true) ctx.receiptRelayed();
    return true;
  };
}

/**
 * Settles a finished stream on what the tally read, and returns the stream's final frame: the
 * usage frame in the request's form ('' for none), or a failure frame, which every form gets.
 */
async function settleStream(
  env: ProxyEnv,
  r: RequestScope,
  req: ParsedTextRequest,
  tally: StreamTally,
  failure: Error | undefined,
  frame: UsageFrame,
): Promise<string> {
  const { lane, services, ledger } = env;
  const requestId = r.requestId;
  const outcome = tally.capped ? 'capped' : tally.outcome();
  const charge = outcome === 'capped' ? req.holdInk : outcome === 'usage_unknown' ? undefined : tally.chargeInk();
  if (charge === undefined) {
    await holdOpen(services, ledger, r, {
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
  let charged: number | undefined;
  const usage = tally.usage();
  const vendorId = storableId(tally.vendorRequestId());
  try {
    const s = await within(r.trace?.step('settle'), ledger.settle(requestId, charge, { usage, vendorRequestId: vendorId }));
    charged = s.resolved ? s.chargedInk : undefined;
    if (charged !== undefined) {
      services.metrics?.inkCharged(lane.product, req.model.id, charged);
      r.trace?.charged(charged);
    }
  } catch (e) {
    await settleFailed(services, ledger, r, charge, usage, vendorId, e);
  }
  if (charged === undefined) return lane.errorFrame('usage_unknown', 'The charge could not be recorded; the hold is kept until reconciled.', requestId, tally);
  if (outcome === 'incomplete_stream') {
    return lane.errorFrame(
      'incomplete_stream',
      `The stream ended without a terminal event; ${charged} Ink charged for what the vendor reported.`,
      requestId,
      tally,
    );
  }
  if (outcome === 'capped' && lane.cappedFrame) return lane.cappedFrame(charged, requestId, tally, frame);
  return lane.usageFrame(charged, requestId, tally, frame);
}
