// Bench of a bad-key flood: one address sends made-up keys as fast as it can while a good client
// from another address measures GET /v1/me (concurrency 1), with the failed-authentication limit
// off (limits.authFailuresPerMinute 1,000,000) and on (the default, 60). Both gateways (the default
// engine, behind a trusted proxy so each client has its own X-Forwarded-For address) run in one
// child process over the same database; the flood runs in another, the good client here.
//   node --import ./test/loader/register.js bench/auth-flood.ts [--seconds 5] [--flood-rate 1400] [--flood-connections 8]
import { randomBytes } from 'node:crypto';
import { fork } from 'node:child_process';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';
import { createAccount, createKey } from '../src/accounts/accounts.js';
import { loadConfig } from '../src/config/config.js';
import { createGateway, type Gateway } from '../src/gateway.js';
import { silentLogger } from '../src/util/log.js';
import { benchDatabaseUrl } from './lib/env.js';
import { runLoad, type LoadResult } from './lib/load.js';

const arg = (name: string, fallback: number): number => Number(process.argv[process.argv.indexOf(name) + 1]) || fallback;
const seconds = arg('--seconds', 5);
const floodConnections = arg('--flood-connections', 8);
/** Bad keys a second (0: unpaced); 1,400 is what one address managed against an unlimited gateway here. */
const floodRate = process.argv.includes('--flood-rate') ? Number(process.argv[process.argv.indexOf('--flood-rate') + 1]) : 1400;
const GOOD_ADDRESS = '198.51.100.1';
const FLOOD_ADDRESS = '203.0.113.66';

interface Served {
  readonly off: string;
  readonly on: string;
  readonly key: string;
  readonly db: string;
  readonly engine: string;
}

async function serve(): Promise<void> {
  const schema = 'bench_af_' + process.pid;
  const url = await benchDatabaseUrl();
  const start = async (authFailuresPerMinute: number, migrate: boolean): Promise<Gateway> =>
    createGateway(
      loadConfig(
        {},
        {
          server: { port: 0, trustedProxies: ['127.0.0.1'] },
          db: { url: url.url, schema },
          log: { access: false },
          ledger: { instanceId: `bench-af-${authFailuresPerMinute}` },
          limits: { requestsPerMinute: 1_000_000, publicRequestsPerMinute: 1_000_000, authFailuresPerMinute },
        },
      ),
      { log: silentLogger, skipMigrate: !migrate },
    );
  const off = await start(1_000_000, true);
  const on = await start(60, false);
  const acc = await createAccount(off.services.pool, { name: 'bench', planId: 'pro' });
  const key = await createKey(off.services.pool, { accountId: acc.id, name: 'bench' });
  process.send!({ off: off.url, on: on.url, key: key.key, db: url.kind, engine: off.engine } satisfies Served);
  process.on('message', async () => {
    await off.services.pool.query(`DROP SCHEMA ${schema} CASCADE`).catch(() => undefined);
    await Promise.all([off.close(), on.close()]);
    await url.stop();
    process.exit(0);
  });
}

/**
 * Made-up keys from one address for `ms`: `rate` a second on a fixed schedule (0: as fast as
 * `connections` connections go), so that both runs put the same number of bad keys on the gateway.
 */
async function flood(target: string, connections: number, ms: number, rate: number): Promise<void> {
  const pool = new Pool(target, { connections, pipelining: 1 });
  const statuses: Record<string, number> = {};
  const started = performance.now();
  const until = started + ms;
  let next = 0;
  const worker = async () => {
    while (performance.now() < until) {
      if (rate > 0) {
        const dueMs = started + (next++ * 1000) / rate - performance.now();
        if (dueMs > 0) await new Promise((r) => setTimeout(r, dueMs));
      }
      const authorization = 'Bearer svc_' + randomBytes(32).toString('base64url');
      try {
        const r = await pool.request({ path: '/v1/me', method: 'GET', headers: { authorization, 'x-forwarded-for': FLOOD_ADDRESS } });
        await r.body.dump();
        statuses[r.statusCode] = (statuses[r.statusCode] ?? 0) + 1;
      } catch {
        statuses.error = (statuses.error ?? 0) + 1;
      }
    }
  };
  await Promise.all(Array.from({ length: connections }, worker));
  await pool.close();
  process.send!(statuses);
  process.exit(0);
}

async function measured(label: string, target: string, key: string, withFlood: boolean): Promise<string> {
  const ms = seconds * 1000;
  const flooder = withFlood
    ? fork(fileURLToPath(import.meta.url), ['--flood', target, String(floodConnections), String(ms + 1000), String(floodRate)], { execArgv: process.execArgv })
    : undefined;
  const floodDone: Promise<Record<string, number>> = flooder ? new Promise((r) => flooder.once('message', r as never)) : Promise.resolve({});
  const good: LoadResult = await runLoad({
    label,
    url: target,
    path: '/v1/me',
    headers: { authorization: `Bearer ${key}`, 'x-forwarded-for': GOOD_ADDRESS },
    connections: 1,
    durationMs: ms,
    warmupMs: 1000,
  });
  const statuses = await floodDone;
  const floodTotal = Object.values(statuses).reduce((a: number, b: number) => a + b, 0);
  const floodCell = withFlood
    ? `${(floodTotal / (seconds + 1)).toFixed(0)} req/s (${Object.entries(statuses)
        .map(([s, n]) => `${s}: ${n}`)
        .join(', ')})`
    : 'none';
  const bad = good.errors + Object.entries(good.statuses).filter(([s]) => s !== '200').length;
  return `| ${label} | ${floodCell} | ${good.p50Ms.toFixed(2)} | ${good.p90Ms.toFixed(2)} | ${good.rps.toFixed(0)} |${bad ? ' (non-200 seen)' : ''}`;
}

async function main(): Promise<void> {
  const child = fork(fileURLToPath(import.meta.url), ['--serve'], { execArgv: process.execArgv });
  const s = await new Promise<Served>((r) => child.once('message', r as never));
  console.log(
    `# bench/auth-flood.ts: ${seconds}s per run, flood ${floodRate || 'unpaced'}/s over ${floodConnections} connections, engine ${s.engine}, database ${s.db}, in-process limiter, Node ${process.version}, load ${loadavg()[0]!.toFixed(2)}`,
  );
  const rows: string[] = [];
  for (const [label, target] of [
    ['limit off', s.off],
    ['limit on (60/min)', s.on],
  ] as const) {
    rows.push(await measured(`${label}, alone`, target, s.key, false));
    rows.push(await measured(`${label}, flooded`, target, s.key, true));
  }
  console.log('| run | flood from one address | good p50 ms | good p90 ms | good req/s |');
  console.log('|---|---|---|---|---|');
  for (const r of rows) console.log(r);
  child.send('stop');
}

const floodAt = process.argv.indexOf('--flood');
if (process.argv.includes('--serve')) void serve();
else if (floodAt >= 0)
  void flood(process.argv[floodAt + 1]!, Number(process.argv[floodAt + 2]), Number(process.argv[floodAt + 3]), Number(process.argv[floodAt + 4]));
else void main();
