// The server: every request, from whichever engine (engine.ts), goes request id -> API open? ->
// route -> limit/auth -> handler, and every failure leaves as the error envelope (docs/api/errors.md). Nothing
// here knows about products, nor which engine serves.
import type { DeploymentState } from '../deployment/state.js';
import { ApiError, isApiError } from '../errors.js';
import type { RateLimiter } from '../limits/rate-limiter.js';
import { isStoreUnavailable, storeError, type Queryable } from '../store/pool.js';
import type { Logger } from '../util/log.js';
import type { HttpContext, AuthInfo } from './http-context.js';
import type { Route, Router } from './router.js';
import { chooseEngine, type EngineChoice, type EngineListener, type EngineName, type EngineOptions } from './engine.js';
import type { AccessLog } from './access-log.js';

/** The route label of a request no route took (404, API closed, draining, the media host). */
export const UNMATCHED_ROUTE = 'unmatched';

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

export function toApiError(e: unknown, ctx: HttpContext): ApiError {
  if (isApiError(e)) return e;
  if (isStoreUnavailable(e)) {
    try {
      storeError(e);
    } catch (mapped) {
      return mapped as ApiError;
    }
  }
  ctx.log.error({ path: ctx.path, err: e instanceof Error ? e.stack : String(e) }, 'http.unhandled_error');
  return new ApiError('internal_error', { message: `The service failed; quote request id ${ctx.requestId}.` });
}

/** The requests admitted and not yet ended, and whether the server still admits any. */
interface Admission {
  draining: boolean;
  inFlight: number;
  /** Called when the last admitted request ends during a drain. */
  drained: (() => void) | undefined;
}

export async function startServer(d: ServerDeps): Promise<RunningServer> {
  const engine = chooseEngine(d.engine); // throws for `uws` where no native build loads
  const admission: Admission = { draining: false, inFlight: 0, drained: undefined };
  const listener = await engine.listen(d.listen, (ctx) => {
    const startedMs = performance.now();
    ctx.serverLog = d.log;
    if (d.accessLog && d.clientAddress) ctx.caller = d.clientAddress(ctx);
    const later = handle(d, admission, ctx, startedMs);
    if (!later && ctx.responded) {
      d.metrics?.observe(ctx.method, UNMATCHED_ROUTE, ctx.status, (performance.now() - startedMs) / 1000);
      d.accessLog?.(ctx, UNMATCHED_ROUTE, startedMs);
    }
  });
  return {
    port: listener.port,
    engine: engine.name,
    engineReason: engine.reason,
    close: (drainMs = 30_000) => drain(admission, listener, drainMs),
  };
}

/** Stops admitting, waits (at most drainMs) for the admitted requests to end, then closes every connection. */
async function drain(admission: Admission, listener: EngineListener, drainMs: number): Promise<boolean> {
  admission.draining = true;
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
  listener.closeAll();
  return drained;
}

/** The error answer of a route that threw, after re-checking a remembered key where that decides the answer. */
async function answerFailure(d: ServerDeps, ctx: HttpContext, r: Route, e: unknown): Promise<void> {
  const keys = d.keys;
  if (
    r.keyRecheckedByReserve &&
    ctx.auth !== undefined &&
    !ctx.keyConfirmed &&
    keys.caching &&
    !ctx.done &&
    isApiError(e) &&
    e.status < 500 &&
    e.status !== 429
  ) {
    // A remembered key got a client error before its reserve could re-check it (validation,
    // 415): look it up afresh, so a key revoked since gets its 401 (docs/api/authentication.md:
    // refused at once), not the other error. Not for a 503 (a store outage, a paused model: no
    // second wait) nor a 429 (a client over its limit must not buy a lookup per refusal).
    try {
      await keys.authenticate(ctx.header('authorization'));
    } catch (fresh) {
      if (isApiError(fresh) && fresh.code === 'invalid_api_key') e = fresh;
    }
  }
  // The key is revoked or expired (found by its reserve or just now): forget it, so the next request looks it up.
  if (r.keyRecheckedByReserve && isApiError(e) && e.code === 'invalid_api_key') keys.forget(ctx.header('authorization'));
  if (ctx.done) return;
  ctx.sendError(toApiError(e, ctx));
}

/** Takes one request from `bucket`'s per-minute budget, or throws the 429. */
async function spend(d: ServerDeps, bucket: string, perMinute: number, message?: string): Promise<void> {
  const decision = await d.limiter.take(bucket, perMinute);
  if (decision.allowed) return;
  d.metrics?.rateLimited(bucket.startsWith('ip:') ? 'address' : 'key');
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
async function spendPublic(d: ServerDeps, ctx: HttpContext): Promise<void> {
  const keys = d.keys;
  const authorization = ctx.header('authorization');
  let keyId = authorization === undefined ? undefined : keys.peekCached(authorization)?.keyId;
  if (keyId === undefined) {
    await spend(
      d,
      'ip:' + (d.clientAddress?.(ctx) ?? ctx.remoteAddress),
      d.publicRequestsPerMinute,
      'More than the allowed requests per minute from this address on the public catalogue.',
    );
    if (authorization !== undefined)
      keyId = await keys.authenticateCached(authorization).then(
        (a) => a.keyId,
        () => undefined,
      );
  }
  if (keyId !== undefined) await spend(d, 'key:' + keyId, d.requestsPerMinute);
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

/** Limit and authentication, then the route's handler. */
async function run(d: ServerDeps, ctx: HttpContext, r: Route): Promise<void> {
  if (r.access === 'public') {
    await spendPublic(d, ctx);
  } else {
    const authorization = ctx.header('authorization');
    if (authorization === undefined && ctx.header('x-api-key') !== undefined) throw X_API_KEY_REFUSAL;
    ctx.auth = await (r.keyRecheckedByReserve ? d.keys.authenticateCached(authorization) : d.keys.authenticate(authorization));
    const b = r.rateBucket;
    await (b ? spend(d, b.prefix + ctx.auth.keyId, b.perMinute, b.message) : spend(d, 'key:' + ctx.auth.keyId, d.requestsPerMinute));
  }
  if (ctx.aborted) return;
  await r.handler(ctx);
}

/**
 * Answers at once what no route takes (framing error, draining, 404, API closed), else admits the
 * request to its route. True when the request is counted and logged later, when its answer ends.
 */
function handle(d: ServerDeps, admission: Admission, ctx: HttpContext, startedMs: number): boolean {
  const path = ctx.path;
  if (ctx.refusal !== undefined) {
    ctx.sendError(ctx.refusal, true);
    return false;
  }
  if (admission.draining) {
    ctx.sendError(shuttingDown(), true);
    return false;
  }
  if (!(path === '/v1' || path.startsWith('/v1/'))) {
    ctx.holdReading(); // the media host may answer later: no pipelined request read meanwhile
    const taken = d.other?.(ctx);
    if (taken) {
      // Answered later (or already): counted and logged once the answer has ended.
      void taken.answered.finally(() => {
        d.metrics?.observe(ctx.method, UNMATCHED_ROUTE, ctx.status, (performance.now() - startedMs) / 1000);
        d.accessLog?.(ctx, taken.route, startedMs);
      });
      return true;
    }
    ctx.sendError(new ApiError('not_found'));
    return false;
  }
  if (!d.state.current.apiOpen) {
    ctx.sendError(new ApiError('external_api_disabled'));
    return false;
  }
  const m = d.router.match(ctx.method, path);
  if (m === undefined) {
    ctx.sendError(new ApiError('not_found', { message: `No route ${ctx.method} ${path}.` }));
    return false;
  }
  if ('allow' in m) {
    // The API knows one answer for a path a client cannot use (docs/api/conventions.md): 404 not_found. Allow says what works.
    ctx.sendError(new ApiError('not_found', { message: `No route ${ctx.method} ${path}; this path takes ${m.allow}.` }), false, [['Allow', m.allow]]);
    return false;
  }
  ctx.params = m.params;
  ctx.requestIdHeader = m.route.requestIdHeader;
  // The body reader is attached in this tick (uWS requires it); auth runs while the body arrives.
  if (m.route.bodyBytes !== undefined) ctx.collectBody(m.route.bodyBytes);
  else ctx.holdReading();
  if (ctx.done) return false;
  ctx.admitted = true;
  admission.inFlight++;
  // On uWS, started once it has parsed everything it read with this request: when that held a
  // pipelined request, uWS has closed the connection (it refuses asynchronous pipelining) and
  // this request is dropped before anything ran or was charged (uws-context.ts, holdReading).
  if (ctx.admitsAfterParse) setImmediate(admit, d, admission, ctx, m.route, startedMs);
  else admit(d, admission, ctx, m.route, startedMs);
  return true;
}

function admit(d: ServerDeps, admission: Admission, ctx: HttpContext, r: Route, startedMs: number): void {
  if (ctx.aborted) {
    ended(d, admission, ctx, r, startedMs);
    return;
  }
  void run(d, ctx, r)
    .catch((e: unknown) => answerFailure(d, ctx, r, e))
    .catch((e: unknown) => ctx.log.error({ err: e as Error }, 'http.error_answer_failed'))
    .finally(() => ended(d, admission, ctx, r, startedMs));
}

function ended(d: ServerDeps, admission: Admission, ctx: HttpContext, r: Route, startedMs: number): void {
  d.metrics?.observe(r.method, r.pattern, ctx.status, (performance.now() - startedMs) / 1000);
  d.accessLog?.(ctx, r.pattern, startedMs);
  if (--admission.inFlight === 0) admission.drained?.();
}
