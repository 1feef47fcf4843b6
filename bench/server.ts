// Bench of the bare server: authenticated GET /v1/me and the public catalogue through
// inkgate (uWS) against the same handlers on plain node:http, same machine, same run, same database
// and limiter. Servers run in a child process; the load generator runs here.
//   node --import ./test/loader/register.js bench/server.ts [--seconds 5]
import { fork } from 'node:child_process';
import { createServer } from 'node:http';
import { fileURLToPath } from 'node:url';
import { runLoad, table, type LoadResult } from './lib/load.js';
import { createAccount, createKey } from '../src/accounts/accounts.js';
import { readAccountObject } from '../src/accounts/routes.js';
import { authenticate } from '../src/auth/authenticate.js';
import { createCardBuilder } from '../src/catalog/cards.js';
import { loadCatalog } from '../src/catalog/models.js';
import { loadConfig } from '../src/config/config.js';
import { isApiError } from '../src/errors.js';
import { createGateway } from '../src/gateway.js';
import { createRateLimiter } from '../src/limits/create-rate-limiter.js';
import { silentLogger } from '../src/util/log.js';
import { benchDatabaseUrl } from './lib/env.js';

const seconds = Number(process.argv[process.argv.indexOf('--seconds') + 1]) || 5;

async function serve(): Promise<void> {
  const schema = 'bench_' + process.pid;
  const url = await benchDatabaseUrl();
  const cfg = loadConfig(
    {},
    { server: { port: 0 }, db: { url: url.url, schema }, limits: { requestsPerMinute: 1_000_000, publicRequestsPerMinute: 1_000_000 } },
  );
  const gw = await createGateway(cfg, { log: silentLogger });
  const pool = gw.services.pool;
  const acc = await createAccount(pool, { name: 'bench', planId: 'pro' });
  const key = await createKey(pool, { accountId: acc.id, name: 'bench' });
  // The same handlers on node:http: authenticate, rate limit, the same query and card builder.
  const limiter = createRateLimiter({ redisUrl: null });
  const cards = createCardBuilder(loadCatalog(), cfg.pricing.videoPriceSet);
  const plain = createServer(async (req, res) => {
    try {
      if (req.url === '/v1/models') {
        const d = await limiter.take('ip:' + req.socket.remoteAddress, 1_000_000);
        if (!d.allowed) throw new Error('limited');
        res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-store' });
        res.end(JSON.stringify(cards.list(() => true)));
        return;
      }
      const auth = await authenticate(pool, req.headers.authorization);
      await limiter.take('key:' + auth.keyId, 1_000_000);
      const body = await readAccountObject(pool, auth.keyId);
      res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-store' });
      res.end(JSON.stringify(body));
    } catch (e) {
      res.writeHead(isApiError(e) ? e.status : 500).end();
    }
  });
  await new Promise<void>((r) => plain.listen(0, '127.0.0.1', () => r()));
  const plainPort = (plain.address() as { port: number }).port;
  process.send!({ gateway: gw.url, plain: `http://127.0.0.1:${plainPort}`, key: key.key, db: url.kind });
  process.on('message', async () => {
    plain.close();
    await pool.query(`DROP SCHEMA ${schema} CASCADE`).catch(() => undefined);
    await gw.close();
    await url.stop();
    process.exit(0);
  });
}

async function main(): Promise<void> {
  const child = fork(fileURLToPath(import.meta.url), ['--serve'], { execArgv: process.execArgv });
  const info = await new Promise<{ gateway: string; plain: string; key: string; db: string }>((r) => child.once('message', r as never));
  console.log(`# bench/server.ts: ${seconds}s per run, database ${info.db}, in-process limiter, Node ${process.version}`);
  const auth = { authorization: `Bearer ${info.key}` };
  const results: string[] = [];
  for (const [path, headers] of [
    ['/v1/me', auth],
    ['/v1/models', {}],
  ] as const) {
    for (const connections of [1, 50]) {
      const plain = await runLoad({ label: `node:http ${path} c=${connections}`, url: info.plain, path, headers, connections, durationMs: seconds * 1000 });
      const gw = await runLoad({ label: `inkgate ${path} c=${connections}`, url: info.gateway, path, headers, connections, durationMs: seconds * 1000 });
      results.push(row(gw, plain));
    }
  }
  console.log('| route | conns | inkgate req/s | node:http req/s | ratio | inkgate p50 / p99 ms | node:http p50 / p99 ms |');
  console.log('|---|---|---|---|---|---|---|');
  for (const r of results) console.log(r);
  child.send('stop');
}

function row(gw: LoadResult, plain: LoadResult): string {
  const [, path, c] = /inkgate (\S+) c=(\d+)/.exec(gw.label)!;
  const bad = gw.errors + plain.errors + Object.entries({ ...gw.statuses, ...plain.statuses }).filter(([s]) => s !== '200').length;
  return `| ${path} | ${c} | ${gw.rps.toFixed(0)} | ${plain.rps.toFixed(0)} | ${(gw.rps / plain.rps).toFixed(2)}x | ${gw.p50Ms.toFixed(3)} / ${gw.p99Ms.toFixed(3)} | ${plain.p50Ms.toFixed(3)} / ${plain.p99Ms.toFixed(3)} |${bad ? ' (non-200 seen)' : ''}`;
}

if (process.argv.includes('--serve')) void serve();
else void main();
export { table };
