// Composition: config -> stores -> services -> routes -> server. Used by `npm start` (main.ts)
// and by the tests, which start a real gateway on port 0 against a real Postgres schema.
import { accountRoutes } from './accounts/routes.js';
import { loadCatalog, type Catalog } from './catalog/models.js';
import { catalogRoutes } from './catalog/routes.js';
import type { Config } from './config/config.js';
import { DeploymentState } from './deployment/state.js';
import { AuthFailureBudget } from './limits/auth-failures.js';
import { createRateLimiter } from './limits/create-rate-limiter.js';
import type { RateLimiter } from './limits/rate-limiter.js';
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { Escrow, type EscrowFaults } from './ledger/escrow.js';
import { TextBilling } from './ledger/text-billing.js';
import { FailStop } from './ledger/fail-stop.js';
import { DriftGauge } from './ledger/drift.js';
import { Ledger } from './ledger/ledger.js';
import { UnbilledLedger } from './ledger/unbilled.js';
import { responsesWebSocketRoute } from './lanes/responses/ws-route.js';
import { textRoutes } from './lanes/routes.js';
import { createTextPool, type TextPool } from './vendors/pool/text-pools.js';
import { startJobRunner, type JobRunner, type JobRunnerOptions } from './generations/job-runner.js';
import { createGenerationDeps, type GenerationDeps, type GenerationDepsOptions } from './generations/deps.js';
import { mediaHostHandler } from './generations/routes.js';
import { videoRoutes } from './generations/video/routes.js';
import { imageRoutes } from './generations/images/routes.js';
import { Router, type Route } from './server/router.js';
import { startServer, type RunningServer } from './server/server.js';
import type { WebSocketRoute } from './server/ws-hub.js';
import type { EngineName } from './server/engine.js';
import type { HttpContext } from './server/http-context.js';
import { KeyAuthenticator, isLookedUpRefusal } from './auth/authenticate.js';
import { migrate } from './store/migrate.js';
import { createPool, type Pool } from './store/pool.js';
import { createLogger, eventSink, type Logger } from './util/log.js';
import { createAccessLog, type AccessLog } from './server/access-log.js';
import type { Services } from './services.js';
import { GatewayMetrics } from './metrics/metrics.js';
import { ReadinessCheck } from './ops/readiness.js';
import { clientAddressResolver } from './ops/client-address.js';
import { listMigrations } from './store/migrate.js';
import { consoleHandler, selfBaseUrl } from './console/console.js';
import { startTracing } from './tracing/tracing.js';
import type { Tracing } from './tracing/hooks.js';
import { openApiRoute } from './console/openapi.js';

export interface Gateway {
  readonly url: string;
  readonly port: number;
  /** The HTTP engine serving (server/engine.ts). */
  readonly engine: EngineName;
  readonly services: Services;
  /** The generation products' (video and images) dependencies and this instance's job runner. */
  readonly jobs: { readonly deps: GenerationDeps; readonly runner: JobRunner };
  /** Metrics and readiness, served by the admin listener (ops/serve.ts). */
  readonly ops: { readonly metrics: GatewayMetrics; readonly readiness: ReadinessCheck; readonly drift: DriftGauge; readonly vendorPools: VendorPools };
  /** Fails readiness at once, then drains and stops everything. */
  /** The /v1 routes served (method and pattern), for the OpenAPI check. */
  readonly routes: ReadonlyArray<{ readonly method: string; readonly pattern: string }>;
  close(): Promise<void>;
}

export interface GatewayOptions {
  /** Overrides the catalogue file (tests). */
  catalog?: Catalog;
  log?: Logger;
  /** Injected limiter (tests of a shared limiter across two gateways). */
  limiter?: RateLimiter;
  /** More routes (tests of the server layer). */
  extraRoutes?: (services: Services) => Route[];
  /** The generation jobs' (video and images) dependencies and runner (tests inject a clock, fetch allow-list, a runner without timers). */
  jobs?: GenerationDepsOptions & { runner?: JobRunnerOptions };
  /** Where access lines go (the bench); default: `log` when given, else a buffered stdout logger. */
  accessLog?: Logger;
  /** Skip migrations when the caller already ran them. */
  skipMigrate?: boolean;
  /**
   * Bench only ("billing off" runs): the text lanes reserve and settle nothing. Code-only on
   * purpose, never a configuration setting, so no deployment can serve text for free.
   */
  unbilled?: boolean;
  /**
   * How a fail-stop (a broken money rule, ledger/fail-stop.ts) ends the process once the known-good
   * journal is written; main.ts passes its own. Default: process.exit. Tests inject one to observe it.
   */
  exit?: (code: number) => void;
  /** Test-only: money rules broken on purpose (escrow.ts EscrowFaults). Code-only, never configuration. */
  ledgerFaults?: EscrowFaults;
  /** How often the ledger drift gauge runs (default a minute; tests call `ops.drift.checkNow()`). */
  driftCheckMs?: number;
}

/** The drift gauge's period: cheap enough every minute, soon enough for an alert. */
const DRIFT_CHECK_MS = 60_000;

/** Shutdown steps, run in reverse order of their push. */
type Cleanups = Array<() => Promise<void> | void>;

export async function createGateway(config: Config, opts: GatewayOptions = {}): Promise<Gateway> {
  if (config.db.url === null) throw new Error('createGateway needs config.db.url (main.ts starts the embedded Postgres)');
  const log = opts.log ?? createLogger(config.log.level);
  const clientAddress = clientAddressResolver(config.server); // throws on a bad trustedProxies entry, before anything opens
  const metrics = new GatewayMetrics();
  const pool = createPool({ ...config.db, url: config.db.url });
  const cleanups: Cleanups = [() => pool.end()];
  const cleanup = async () => {
    for (const c of cleanups.reverse()) await c();
  };
  try {
    // First started, last stopped: the spans of the drain and of the journal's last flush are sent too.
    const tracing = await startTraces(config, log, cleanups);
    const state = await openStore(config, pool, opts, cleanups);
    const limiter = await startLimiter(config, log, opts, cleanups);
    const catalog = opts.catalog ?? loadCatalog();
    const { failStop, haltSteps } = createFailStop(log, opts);
    const { ledger, keys, escrow } = await startLedger(config, config.db.url, pool, state, log, { failStop, faults: opts.ledgerFaults }, cleanups);
    keys.onUnknownRefused = () => metrics.authRefused('negative_cache');
    haltSteps.push(() => escrow.halt());
    if (tracing) escrow.journal.onFlushStarted = (batch) => tracing.startFlush(batch);
    const services: Services = { config, pool, state, limiter, catalog, ledger, escrow, failStop, log, metrics, ...(tracing ? { tracing } : {}) };
    const drift = startDrift(services, opts, cleanups);
    const generationDeps = await createGenerationDeps(services, opts.jobs ?? {});
    cleanups.push(() => generationDeps.close());
    const vendorPools = createVendorPools(services, cleanups);
    const readiness = startOps(services, metrics, generationDeps, drift, vendorPools);
    haltSteps.unshift(() => readiness.drain()); // a balancer stops sending here first
    // The text path's one billing boundary, shared by the lanes' routes and the Responses socket.
    const billing = new TextBilling(opts.unbilled ? new UnbilledLedger() : escrow, failStop, metrics);
    const routes = apiRoutes(services, generationDeps, opts, vendorPools, billing);
    const websockets = [responsesWebSocketRoute(services, billing, vendorPools.openai !== undefined, config.responses.websocket)];
    const running = await serveHttp(
      services,
      { accessLog: opts.accessLog ?? opts.log, metrics, keys, clientAddress, generationDeps, routes, websockets },
      cleanups,
    );
    // Started last and stopped first: no job runs against a closing ledger or pool.
    const runner = startJobRunner(services, generationDeps, opts.jobs?.runner ?? {});
    cleanups.push(() => runner.stop());
    // On a fail-stop, no job is claimed any more; one running ends with the exit, recovered as after a kill.
    haltSteps.push(() => void runner.stop());
    let closing: Promise<void> | undefined;
    const host = config.server.host.includes(':') ? `[${config.server.host}]` : config.server.host;
    return {
      url: `http://${host}:${running.port}`,
      port: running.port,
      engine: running.engine,
      services,
      jobs: { deps: generationDeps, runner },
      routes,
      ops: { metrics, readiness, drift, vendorPools },
      // Once: a second call (a test's teardown after its own shutdown) waits for the first.
      close: () =>
        (closing ??= (async () => {
          readiness.drain();
          await cleanup();
        })()),
    };
  } catch (e) {
    await cleanup();
    throw e;
  }
}

/** OpenTelemetry traces when an endpoint is configured (tracing/); undefined, and nothing of the SDK loaded, otherwise. */
async function startTraces(config: Config, log: Logger, cleanups: Cleanups): Promise<Tracing | undefined> {
  const sink = eventSink(log.child({ component: 'tracing' }));
  const tracing = await startTracing(config.tracing, sink);
  if (tracing) cleanups.push(() => tracing.shutdown(config.tracing.shutdownTimeoutMs));
  return tracing;
}

/** The schema migrated (unless the caller did it) and the deployment switches read and followed. */
async function openStore(config: Config, pool: Pool, opts: GatewayOptions, cleanups: Cleanups): Promise<DeploymentState> {
  if (!opts.skipMigrate) await migrate(pool, config.db.schema);
  const state = new DeploymentState(pool);
  await state.start();
  cleanups.push(() => state.stop());
  return state;
}

/** The rate limiter (injected, else Redis or in-process), waited for within a bound. */
async function startLimiter(config: Config, log: Logger, opts: GatewayOptions, cleanups: Cleanups): Promise<RateLimiter> {
  const limiter =
    opts.limiter ??
    createRateLimiter({
      redisUrl: config.redis.url,
      redis: config.redis,
      onRedisError: (e) => log.warn({ err: e.message }, 'limits.redis_unavailable'),
    });
  if (!opts.limiter) cleanups.push(() => limiter.close());
  // Listen only once the limiter can answer (bounded): otherwise the first requests after
  // start-up would meet a Redis connection still opening and get 503s.
  if (!(await limiter.waitReady(config.redis.connectTimeoutMs * 2))) {
    log.warn({ kind: limiter.kind }, 'limits.not_ready');
  }
  return limiter;
}

/** The one fail-stop handler (ledger/fail-stop.ts); its halt runs `haltSteps` in order. */
function createFailStop(log: Logger, opts: GatewayOptions): { failStop: FailStop; haltSteps: Array<() => unknown> } {
  const haltSteps: Array<() => unknown> = [];
  const sink = eventSink(log.child({ component: 'fail_stop' }));
  const failStop = new FailStop({
    // Each event at its table level (ledger.fail_stop is fatal), written out before the exit.
    log: (fields, event) => {
      sink(fields, event);
      void log.flush?.();
    },
    halt: async () => {
      for (const step of haltSteps) await step();
    },
    exit: opts.exit ?? ((code) => process.exit(code)),
  });
  return { failStop, haltSteps };
}

/** The ledger, key authentication and the escrow over them. */
async function startLedger(
  config: Config,
  dbUrl: string,
  pool: Pool,
  state: DeploymentState,
  log: Logger,
  failure: { failStop: FailStop; faults: EscrowFaults | undefined },
  cleanups: Cleanups,
): Promise<{ ledger: Ledger; keys: KeyAuthenticator; escrow: Escrow }> {
  // The ledger's (fields, event) callback: each event at the level log-events.ts gives it.
  const ledgerLog = eventSink(log.child({ component: 'ledger' }));
  // Every reserve, the exact path and the generations' own transactions included, stops with the instance.
  const ledger = new Ledger(pool, { log: ledgerLog, stopped: () => failure.failStop.stopped, failStop: (err) => failure.failStop.trip(err) });
  cleanups.push(() => ledger.close());
  // Key authentication, shared by the server and the escrow (a key changed elsewhere is dropped from its cache).
  const keys = new KeyAuthenticator(pool, config.auth);
  cleanups.push(() => keys.close());
  const escrow = await Escrow.start({
    pool,
    ledger,
    config: config.ledger,
    instanceId: config.ledger.instanceId ?? defaultInstanceId(),
    bus: { dbUrl, dbSchema: config.db.schema, connectTimeoutMs: config.db.connectionTimeoutMs, redis: config.redis },
    log: ledgerLog,
    onKeyChanged: (keyId) => keys.forgetKey(keyId),
    onSwitchChanged: () => void state.refresh(),
    failStop: (err) => failure.failStop.trip(err),
    ...(failure.faults ? { faults: failure.faults } : {}),
  });
  cleanups.push(() => escrow.close());
  return { ledger, keys, escrow };
}

/** Metrics fed from the escrow and the store, and the readiness check the admin listener serves. */
function startOps(services: Services, metrics: GatewayMetrics, jobs: GenerationDeps, drift: DriftGauge, vendorPools: VendorPools): ReadinessCheck {
  const media = jobs.media;
  // The text lanes' pools and the generation vendors' (their clients are the job deps').
  const pools = [vendorPools.anthropic, vendorPools.openai, jobs.ark, jobs.gemini].filter((p) => p !== undefined);
  metrics.attach({
    escrow: services.escrow,
    drift,
    store: { db: services.pool },
    storeScrapeMs: services.config.admin.storeScrapeMs,
    vendorPools: () => pools,
  });
  return new ReadinessCheck({
    db: services.pool,
    latestMigration: Math.max(0, ...listMigrations().map((m) => m.version)),
    // A take on a bucket of its own proves the limiter's script runs (a refusal is an answer too).
    redis: services.limiter.kind === 'redis' ? () => services.limiter.take('probe:ready', 1) : undefined,
    mediaStore: media.check === undefined ? undefined : () => media.check!(),
    mediaStoreIn: media.location,
    timeoutMs: services.config.admin.readyTimeoutMs,
    vendors: () => Object.fromEntries(pools.map((p) => [p.vendor, p.view()])),
  });
}

/** The text vendors' pools (vendors/pool), made at start-up; undefined where a vendor has no deployment. */
export interface VendorPools {
  readonly anthropic: TextPool | undefined;
  readonly openai: TextPool | undefined;
}

function createVendorPools(services: Services, cleanups: Cleanups): VendorPools {
  const pools = { anthropic: createTextPool('anthropic', services.config, services.log), openai: createTextPool('openai', services.config, services.log) };
  // Closed after the server drained (cleanups run in reverse): no admitted request meets a closed pool.
  cleanups.push(async () => {
    const all = [pools.anthropic, pools.openai].filter((p) => p !== undefined);
    await Promise.all(all.flatMap((p) => p.members.map((m) => m.client.pool.close())));
  });
  return pools;
}

/** The ledger drift gauge (ledger/drift.ts): every instance tries its lock each minute; one runs it. */
function startDrift(services: Services, opts: GatewayOptions, cleanups: Cleanups): DriftGauge {
  const drift = new DriftGauge({
    pool: services.pool,
    intervalMs: opts.driftCheckMs ?? DRIFT_CHECK_MS,
    log: eventSink(services.log.child({ component: 'drift' })),
  });
  drift.start();
  cleanups.push(() => drift.stop());
  return drift;
}

/** The /v1 routes: catalogue, account, the text lanes, generations, the OpenAPI document (and a test's extras). */
function apiRoutes(services: Services, generationDeps: GenerationDeps, opts: GatewayOptions, pools: VendorPools, billing: TextBilling): Route[] {
  const { config, catalog, escrow, pool, state } = services;
  const routes: Route[] = [
    ...catalogRoutes(config, catalog, state),
    ...accountRoutes(pool, escrow),
    ...textRoutes(services, { billing, catalog, anthropic: pools.anthropic, openai: pools.openai }),
    ...videoRoutes(services, generationDeps),
    ...imageRoutes(services, generationDeps),
    openApiRoute(catalog),
    ...(opts.extraRoutes?.(services) ?? []),
  ];
  return routes;
}

interface HttpParts {
  /** Where access lines go: the injected logger (tests), else a buffered stdout logger of their own. */
  readonly accessLog: Logger | undefined;
  readonly metrics: GatewayMetrics;
  readonly keys: KeyAuthenticator;
  readonly clientAddress: (ctx: HttpContext) => string;
  readonly generationDeps: GenerationDeps;
  readonly routes: Route[];
  /** Paths that also take WebSockets (Responses over one socket). */
  readonly websockets: WebSocketRoute[];
}

/** The public server (uWS or node:http: server/engine.ts): the /v1 routes, and beside them the console and the media host. */
async function serveHttp(services: Services, parts: HttpParts, cleanups: Cleanups): Promise<RunningServer> {
  const { config, log, state, limiter, pool } = services;
  // The console (src/console) is served beside the media host; its playground calls our own /v1.
  let selfUrl = '';
  const media = mediaHostHandler(parts.generationDeps);
  const consolePages = consoleHandler({
    services,
    mediaSecret: parts.generationDeps.mediaSecret,
    mediaClock: parts.generationDeps.clock,
    selfUrl: () => selfUrl,
    routes: () => parts.routes,
  });
  const { engine, ...server } = config.server;
  // A message between the text body cap and this is refused with an error event; above it the socket closes (1009).
  const listen = { ...server, maxWebSocketMessageBytes: config.limits.textBodyBytes + 1024 * 1024 };
  const accessLog = startAccessLog(services, parts.accessLog, cleanups);
  const running = await startServer({
    engine,
    listen,
    router: new Router(parts.routes),
    state,
    limiter,
    db: pool,
    requestsPerMinute: config.limits.requestsPerMinute,
    keys: parts.keys,
    publicRequestsPerMinute: config.limits.publicRequestsPerMinute,
    log,
    other: (ctx) => consolePages(ctx) || media(ctx),
    accessLog,
    metrics: { observe: (m, r, s, sec) => parts.metrics.http.observe(m, r, s, sec), rateLimited: (scope) => parts.metrics.rateLimited(scope) },
    clientAddress: (ctx) => parts.clientAddress(ctx),
    authFailures: new AuthFailureBudget({
      limiter,
      perMinute: config.limits.authFailuresPerMinute,
      counts: isLookedUpRefusal,
      onRefused: () => parts.metrics.authRefused('over_budget'),
    }),
    ...(services.tracing ? { tracing: services.tracing } : {}),
    websockets: { routes: parts.websockets, metrics: parts.metrics.websockets },
  });
  log.info({ engine: running.engine, reason: running.engineReason }, 'http.engine_chosen');
  selfUrl = selfBaseUrl(config.server.host, running.port);
  cleanups.push(async () => {
    if (!(await running.close())) log.warn('http.drain_timed_out');
  });
  return running;
}

/**
 * The access log (server/access-log.ts), when `log.access` is on: into the given logger, else into
 * a buffered stdout logger of its own, written out when the server has stopped.
 */
function startAccessLog(services: Services, into: Logger | undefined, cleanups: Cleanups): AccessLog | undefined {
  const { config } = services;
  if (!config.log.access) return undefined;
  const log = into ?? createLogger(config.log.level, undefined, true);
  if (log.flush) cleanups.push(() => log.flush!());
  return createAccessLog(log);
}

/** An instance id nobody else has: host, process and a random part (set ledger.instanceId to keep one across restarts). */
function defaultInstanceId(): string {
  return `${hostname().slice(0, 100)}-${process.pid}-${randomBytes(3).toString('hex')}`;
}
