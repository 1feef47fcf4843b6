// The server: every request, from whichever engine (engine.ts), goes request id -> API open? ->
// route -> limit/auth -> handler, and every failure leaves as the error envelope (docs/api/errors.md). Nothing
// here knows about products, nor which engine serves.
import type { DeploymentState } from '../deployment/state.js';
import { ApiError, isApiError } from '../errors.js';
import type { RateLimiter } from '../limits/rate-limiter.js';
import { isStoreUnavailable, storeError, type Queryable } from '../store/pool.js';
import type { Logger } from '../util/log.js';
import { SERVED_METHODS, type HttpContext, type AuthInfo } from './http-context.js';
import type { Route, Router, ServeStep } from './router.js';
import { chooseEngine, type EngineChoice, type EngineListener, type EngineName, type EngineOptions } from './engine.js';
import type { AccessLog } from './access-log.js';
import { clipped } from '../errors.js';
import { within, type Tracing } from '../tracing/hooks.js';
import { WsHub, type WebSocketRoute, type WsMetrics } from './ws-hub.js';
import { TurnSlices } from './turn-slices.js';
import { FRAMING_ROUTE, UNMATCHED_ROUTE } from '../metrics/request-metrics.js';

/** The answer to a request that arrives while the server stops. */
export const shuttingDown = (): ApiError => new ApiError('provider_unavailable', { message: 'This instance is shutting down; retry.', retryAfterS: 1 });

/** How a part beside /v1 takes a path: false, or its name and the end of its answer. */
export type OtherAnswer = false | { readonly route: string; readonly answered: Promise<void> };

export interface ServerDeps {
  /** Where and how to listen (server.* settings). */
  readonly listen: Omit<EngineOptions, 'proxyProtocol'> & { readonly proxyProtocol: boolean };
  readonly engine: EngineChoice;
  readonly router: Router;
  readonly state: DeploymentState;
  readonly limiter: RateLimiter;
  readonly db: Queryable;
  readonly requestsPerMinute: number;
  /** Key authentication (auth/authenticate.ts), with its cache for routes whose reserve re-checks the key. */
  readonly keys: KeyCheck;
  readonly publicRequestsPerMinute: number;
  readonly log: Logger;
  /**
   * Non-/v1 paths (the console, the media host) are handed here: false for 404, else the name the
   * access log gives the route and a promise settled once the answer has ended.
   */
  readonly other?: (ctx: HttpContext) => OtherAnswer;
  /** One line per finished request (access-log.ts); absent: none. */
  readonly accessLog?: AccessLog;
  /** Counts each answered request and each 429 (metrics/); absent: nothing is counted. */
  readonly metrics?: ServerMetrics;
  /** The caller's address for the public routes' limit (ops/client-address.ts); absent: the TCP peer. */
  readonly clientAddress?: (ctx: HttpContext) => string;
  /** Failed authentications per caller address (limits/auth-failures.ts); absent: not limited. */
  readonly authFailures?: AuthFailureGuard;
  /** One server span per request (tracing/); absent: traces are off. */
  readonly tracing?: Pick<Tracing, 'startRequest'>;
  /** Paths that also take WebSockets whose messages are requests (ws-hub.ts); absent: none. */
  readonly websockets?: { readonly routes: readonly WebSocketRoute[]; readonly metrics?: WsMetrics };
}

/** What the server needs of the failed-authentication budget (implemented by limits/auth-failures.ts). */
export interface AuthFailureGuard {
  /**
   * Runs the key check: 429 first when the caller's address is over its budget; counts a 401 that
   * cost a lookup. `address` is read only when some address is over its budget, or on a failure.
   */
  guard<T>(address: () => string, attempt: () => Promise<T>): Promise<T>;
}

/** What the server tells the metrics. Declared here so the HTTP layer imports no metrics code. */
export interface ServerMetrics {
  observe(method: string, route: string, status: number, seconds: number): void;
  rateLimited(scope: 'key' | 'address'): void;
}

/**
 * What the server needs of key authentication. Declared here, implemented by auth/: the server
 * only calls it, so the HTTP layer does not depend on how keys are stored.
 */
export interface KeyCheck {
  /** True when authenticateCached may answer from memory. */
  readonly caching: boolean;
  authenticate(authorization: string | undefined): Promise<AuthInfo>;
  /** From the cache when fresh (a revoke or cap edit drops the key from it on every instance: the escrow hears it). */
  authenticateCached(authorization: string | undefined): Promise<AuthInfo>;
  peekCached(authorization: string | undefined): AuthInfo | undefined;
  forget(authorization: string | undefined): void;
}

export interface RunningServer {
  readonly port: number;
  /** The engine serving, and why it was chosen (logged at start-up). */
  readonly engine: EngineName;
  readonly engineReason: string;
  /**
   * Stops admitting (the listen socket closes; a request still arriving on a kept-alive connection
   * gets 503 and Connection: close) and resolves once every admitted request has ended, or after
   * `drainMs` (false).
   */
  close(drainMs?: number): Promise<boolean>;
}

export function toApiError(error: unknown, ctx: HttpContext): ApiError {
  if (isApiError(error)) return error;
  if (isStoreUnavailable(error)) {
    try {
      storeError(error);
    } catch (mapped) {
      return mapped as ApiError;
    }
  }
  ctx.log.error({ path: clipped(ctx.path), err: error instanceof Error ? error.stack : String(error) }, 'http.unhandled_error');
  return new ApiError('internal_error', { message: `The service failed; quote request id ${ctx.requestId}.` });
}

/** The requests admitted and not yet ended, and whether the server still admits any. */
interface Admission {
  draining: boolean;
  inFlight: number;
  /** Called when the last admitted request ends during a drain. */
  drained: (() => void) | undefined;
  /** The open WebSockets. */
  readonly hub: WsHub;
  /** The server's entry for a request (a WebSocket's turns come through it too). */
  serve: (ctx: HttpContext) => void;
  /** Request starts cut into slices of the thread's time, so a burst does not stall open streams. */
  readonly slices: TurnSlices;
}

export async function startServer(deps: ServerDeps): Promise<RunningServer> {
  const engine = chooseEngine(deps.engine); // throws for `uws` where no native build loads
  const hub = new WsHub(new Map((deps.websockets?.routes ?? []).map((r) => [r.path, r])), deps.websockets?.metrics);
  const admission: Admission = { draining: false, inFlight: 0, drained: undefined, hub, serve: () => undefined, slices: new TurnSlices() };
  // Every request, and every turn of a WebSocket (ws-turn-context.ts), comes through here.
  const serve = (ctx: HttpContext): void => {
    const startedMs = performance.now();
    ctx.serverLog = deps.log;
    if (deps.accessLog && deps.clientAddress) ctx.caller = deps.clientAddress(ctx);
    if (deps.tracing) ctx.trace = deps.tracing.startRequest(ctx.method, ctx.path, ctx.headers, ctx.requestId);
    const label = handle(deps, admission, ctx, startedMs);
    if (label !== undefined) {
      if (ctx.responded) record(deps, ctx, label, startedMs);
      else endTrace(ctx, label);
    }
  };
  admission.serve = serve;
  const listener = await engine.listen(deps.listen, serve);
  return {
    port: listener.port,
    engine: engine.name,
    engineReason: engine.reason,
    close: (drainMs = 30_000) => drain(admission, listener, drainMs),
  };
}

/** Counts and logs a finished request under `route`, with 499 for a client that left before its answer was complete. */
function record(deps: ServerDeps, ctx: HttpContext, route: string, startedMs: number, method = ctx.method): void {
  deps.metrics?.observe(method, route, ctx.loggedStatus, (performance.now() - startedMs) / 1000);
  deps.accessLog?.(ctx, route, startedMs);
  endTrace(ctx, route);
}

/** Ends the request's server span, if it has one, with what it answered. */
function endTrace(ctx: HttpContext, route: string): void {
  ctx.trace?.end(ctx.status, route, ctx.error?.code, ctx.auth?.keyPrefix);
}

/** Stops admitting, waits (at most drainMs) for the admitted requests to end, then closes every connection. */
async function drain(admission: Admission, listener: EngineListener, drainMs: number): Promise<boolean> {
  admission.draining = true;
  admission.hub.drain();
  listener.stopAccepting();
  let drained = true;
  if (admission.inFlight > 0) {
    drained = await new Promise<boolean>((done) => {
      const t = setTimeout(() => done(false), drainMs);
      admission.drained = () => {
        clearTimeout(t);
        done(true);
      };
    });
  }
  admission.hub.closeAll();
  listener.closeAll();
  return drained;
}

/**
 * The error of a billed route's first phase (before its hold could re-check the key): a
 * remembered key that got a client error there (validation, 415) is looked up afresh, so a key
 * revoked since gets its 401 (docs/api/authentication.md: refused at once), not the other error.
 * Not for a 503 (a store outage, a paused model: no second wait) nor a 429 (a client over its
 * limit must not buy a lookup per refusal).
 */
async function beforeHoldError(deps: ServerDeps, ctx: HttpContext, error: unknown): Promise<unknown> {
  if (ctx.auth === undefined || !deps.keys.caching || ctx.done || !isApiError(error) || error.status >= 500 || error.status === 429) return error;
  try {
    await deps.keys.authenticate(ctx.header('authorization'));
  } catch (fresh) {
    if (isApiError(fresh) && fresh.code === 'invalid_api_key') return fresh;
  }
  return error;
}

/** The error answer of a route that threw. */
function answerFailure(deps: ServerDeps, ctx: HttpContext, route: Route, error: unknown): void {
  const keys = deps.keys;
  // The key is revoked or expired (found by its hold or just now): forget it, so the next request looks it up.
  if (route.keyRecheckedByReserve && isApiError(error) && error.code === 'invalid_api_key') keys.forget(ctx.header('authorization'));
  if (ctx.done) return;
  ctx.sendError(toApiError(error, ctx));
}

/** Takes one request from `bucket`'s per-minute budget, or throws the 429. */
async function spend(deps: ServerDeps, bucket: string, perMinute: number, message?: string): Promise<void> {
  const decision = await deps.limiter.take(bucket, perMinute);
  if (decision.allowed) return;
  deps.metrics?.rateLimited(bucket.startsWith('ip:') ? 'address' : 'key');
  throw new ApiError('rate_limit_exceeded', { retryAfterS: decision.retryAfterS, message });
}

/**
 * A public route's limit. Public routes need no key, but a call that carries a valid one counts
 * against that key (docs/api/rate-limits.md: "60 requests per minute per key, every /v1 route counted");
 * without one (or with one that does not authenticate, which a public route ignores) it counts
 * against the caller's address. The cached lookup is enough here: no money moves on these routes.
 * A key not remembered is looked up only after the address limit let the call through, so a flood
 * of made-up keys costs the store nothing beyond the address's own budget.
 */
async function spendPublic(deps: ServerDeps, ctx: HttpContext): Promise<void> {
  const keys = deps.keys;
  const authorization = ctx.header('authorization');
  let keyId = authorization === undefined ? undefined : keys.peekCached(authorization)?.keyId;
  if (keyId === undefined) {
    await spend(
      deps,
      'ip:' + (deps.clientAddress?.(ctx) ?? ctx.remoteAddress),
      deps.publicRequestsPerMinute,
      'More than the allowed requests per minute from this address on the public catalogue.',
    );
    if (authorization !== undefined)
      keyId = await keys.authenticateCached(authorization).then(
        (a) => a.keyId,
        () => undefined,
      );
  }
  if (keyId !== undefined) await spend(deps, 'key:' + keyId, deps.requestsPerMinute);
}

/**
 * A key sent only as `x-api-key` (the Anthropic SDKs' `apiKey`, Claude Code's ANTHROPIC_API_KEY) is
 * not read: only `Authorization: Bearer` is. The 401 says what to send instead, since those
 * clients otherwise retry a bare 401 without telling their user why.
 */
const X_API_KEY_REFUSAL = new ApiError('invalid_api_key', {
  message:
    'No `Authorization: Bearer` key. An `x-api-key` header is not read here: send the key as a bearer token (Anthropic SDKs: `authToken`; Claude Code: ANTHROPIC_AUTH_TOKEN instead of ANTHROPIC_API_KEY).',
});

/** Sets ctx.auth from the request's bearer key, or throws the 401 (or the caller address's 429). */
async function authenticateKey(deps: ServerDeps, ctx: HttpContext, cached: boolean): Promise<void> {
  const authorization = ctx.header('authorization');
  const attempt = (): Promise<AuthInfo> => {
    if (authorization === undefined && ctx.header('x-api-key') !== undefined) throw X_API_KEY_REFUSAL;
    return cached ? deps.keys.authenticateCached(authorization) : deps.keys.authenticate(authorization);
  };
  // A failed authentication counts against the caller's address; a good key pays no round trip for it.
  const guard = deps.authFailures;
  ctx.auth = await within(
    ctx.trace?.step('auth'),
    guard ? guard.guard(() => ctx.caller ?? deps.clientAddress?.(ctx) ?? ctx.remoteAddress, attempt) : attempt(),
  );
}

/** Limit and authentication, then the route's handler. */
async function run(deps: ServerDeps, ctx: HttpContext, route: Route): Promise<void> {
  if (route.access === 'public') {
    await within(ctx.trace?.step('limits'), spendPublic(deps, ctx));
  } else {
    await authenticateKey(deps, ctx, route.keyRecheckedByReserve === true);
    const b = route.rateBucket;
    const keyId = ctx.auth!.keyId;
    await within(ctx.trace?.step('limits'), b ? spend(deps, b.prefix + keyId, b.perMinute, b.message) : spend(deps, 'key:' + keyId, deps.requestsPerMinute));
  }
  if (ctx.aborted) return;
  let serve: ServeStep | void;
  try {
    serve = await route.handler(ctx);
  } catch (e) {
    throw route.keyRecheckedByReserve ? await beforeHoldError(deps, ctx, e) : e;
  }
  if (serve) await serve();
}

/**
 * Answers a refused head with the envelope and closes the connection. On uWS only once uWS has
 * parsed what it read with this head: whatever it made of the bytes behind it (a body it cannot
 * frame, a smuggled request) then ends in the close, and never reaches a route.
 */
function refuse(deps: ServerDeps, ctx: HttpContext, refusal: ApiError, startedMs: number): void {
  if (ctx.aborted) return void record(deps, ctx, FRAMING_ROUTE, startedMs);
  ctx.sendError(refusal, true, refusal.code === 'method_not_allowed' ? [['Allow', SERVED_METHODS]] : undefined);
  record(deps, ctx, FRAMING_ROUTE, startedMs);
}

/**
 * Answers at once what no route takes (framing error, draining, 404, API closed), else admits the
 * request to its route. Returns the route label when the answer was given now, to be counted and
 * logged; undefined when the request is counted and logged later, when its answer ends.
 */
function handle(deps: ServerDeps, admission: Admission, ctx: HttpContext, startedMs: number): string | undefined {
  const path = ctx.path;
  if (ctx.refusal !== undefined) {
    ctx.holdReading();
    if (ctx.admitsAfterParse) setImmediate(refuse, deps, ctx, ctx.refusal, startedMs);
    else refuse(deps, ctx, ctx.refusal, startedMs);
    return undefined;
  }
  if (admission.draining) {
    ctx.sendError(shuttingDown(), true);
    return UNMATCHED_ROUTE;
  }
  if (!(path === '/v1' || path.startsWith('/v1/'))) {
    ctx.holdReading(); // the media host may answer later: no pipelined request read meanwhile
    const taken = deps.other?.(ctx);
    if (taken) {
      // Answered later (or already): counted and logged once the answer has ended.
      void taken.answered.finally(() => record(deps, ctx, taken.route, startedMs));
      return undefined;
    }
    ctx.sendError(new ApiError('not_found'));
    return UNMATCHED_ROUTE;
  }
  if (!deps.state.current.apiOpen) {
    ctx.sendError(new ApiError('external_api_disabled'));
    return UNMATCHED_ROUTE;
  }
  if (ctx.upgrade !== undefined) return openSocket(deps, admission, ctx, startedMs);
  const m = deps.router.match(ctx.method, path);
  if (m === undefined) {
    ctx.sendError(new ApiError('not_found', { message: `No route ${ctx.method} ${path}.` }));
    return UNMATCHED_ROUTE;
  }
  if ('allow' in m) {
    // The API knows one answer for a path a client cannot use (docs/api/conventions.md): 404 not_found. Allow says what works.
    ctx.sendError(new ApiError('not_found', { message: `No route ${ctx.method} ${path}; this path takes ${m.allow}.` }), false, [['Allow', m.allow]]);
    return UNMATCHED_ROUTE;
  }
  ctx.params = m.params;
  ctx.requestIdHeader = m.route.requestIdHeader;
  // The body reader is attached in this tick (uWS requires it); auth runs while the body arrives.
  if (m.route.bodyBytes !== undefined) ctx.collectBody(m.route.bodyBytes);
  else ctx.holdReading();
  if (ctx.done) return m.route.pattern; // refused for its body's declared size or coding
  ctx.admitted = true;
  admission.inFlight++;
  // On uWS, started once it has parsed everything it read with this request: when that held a
  // pipelined request, uWS has closed the connection (it refuses asynchronous pipelining) and
  // this request is dropped before anything ran or was charged (uws-context.ts, holdReading).
  if (ctx.admitsAfterParse) setImmediate(admitInSlice, deps, admission, ctx, m.route, startedMs);
  else admitInSlice(deps, admission, ctx, m.route, startedMs);
  return undefined;
}

/** Starts an admitted request in the current slice of the thread's time, or in a later turn when it is spent (turn-slices.ts). */
function admitInSlice(deps: ServerDeps, admission: Admission, ctx: HttpContext, route: Route, startedMs: number): void {
  admission.slices.run(admit, deps, admission, ctx, route, startedMs);
}

/**
 * A WebSocket upgrade: the key is checked (a fresh look-up: a revoked key never gets a socket),
 * then the route's check and the key's socket cap; any refusal is the HTTP answer, and the
 * connection closes. Counted and logged as one request (101 when the socket opened); each turn on
 * the socket is counted and logged on its own.
 */
function openSocket(deps: ServerDeps, admission: Admission, ctx: HttpContext, startedMs: number): string | undefined {
  const r = admission.hub.route(ctx.path);
  if (r === undefined || ctx.method !== 'GET') {
    ctx.sendError(new ApiError('not_found', { message: `No WebSocket at ${clipped(ctx.method, 16)} ${clipped(ctx.path)}.` }), true);
    return UNMATCHED_ROUTE;
  }
  admission.inFlight++;
  void authenticateKey(deps, ctx, false)
    .then(() => {
      if (!ctx.aborted) admission.hub.accept(ctx, r, admission.serve);
    })
    .catch((error: unknown) => {
      if (isApiError(error) && error.code === 'invalid_api_key') deps.keys.forget(ctx.header('authorization'));
      ctx.sendError(toApiError(error, ctx), true);
    })
    .finally(() => {
      record(deps, ctx, r.path, startedMs);
      if (--admission.inFlight === 0) admission.drained?.();
    });
  return undefined;
}

function admit(deps: ServerDeps, admission: Admission, ctx: HttpContext, route: Route, startedMs: number): void {
  if (ctx.aborted) {
    ended(deps, admission, ctx, route, startedMs);
    return;
  }
  void run(deps, ctx, route)
    .catch((e: unknown) => answerFailure(deps, ctx, route, e))
    .catch((e: unknown) => ctx.log.error({ err: e as Error }, 'http.error_answer_failed'))
    .finally(() => ended(deps, admission, ctx, route, startedMs));
}

function ended(deps: ServerDeps, admission: Admission, ctx: HttpContext, route: Route, startedMs: number): void {
  record(deps, ctx, route.pattern, startedMs, route.method);
  if (--admission.inFlight === 0) admission.drained?.();
}
