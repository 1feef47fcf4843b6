// Three gateway processes on one Postgres and one Redis behind a round-robin TCP balancer (PROXY
// protocol v2 on, as HAProxy's send-proxy-v2), one shared media directory. What the operator of
// several instances relies on:
//   - the per-key rate limit is exact over the three through the one address;
//   - operator switches (a lane, a model pause, the API closed) reach every process within one
//     second (a NOTIFY in the switch's own statement; the 1 s refresh is only the fallback);
//   - an image generation submitted on one process is polled and downloaded through the others;
//   - every process scrapes its own metrics, is ready, and on SIGTERM fails /readyz while its
//     public port still admits;
//   - the ledger invariant holds at the end.
import { mkdtempSync, rmSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { request } from 'undici';
import { loadConfig, type Config, type DeepPartial } from '../../src/config/config.js';
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { startGeminiSimulator } from '../../simulators/gemini/simulator.js';
import { testDb } from '../helpers/db.js';
import { msUntilEachSees } from '../helpers/each-sees.js';
import { testRedisUrl } from '../helpers/env.js';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';
import { operatorCli } from '../helpers/operator-cli.js';
import { parseExposition } from '../helpers/prometheus.js';
import { sharedRedisUrl } from '../helpers/redis-server.js';
import { startBalancer } from '../helpers/round-robin-balancer.js';

const ANTHROPIC_KEY = 'sk-ant-balanced';
const RATE_PER_MINUTE = 60;
// Time is the behaviour: docs/reliability.md promises every process sees a switch within one second
// (measured 7-180 ms, the switch's NOTIFY); the documented second is kept as the bound.
const SWITCH_WITHIN_MS = 1000;

const db = await testDb(t);
const redisUrl = await sharedRedisUrl(t, testRedisUrl, 'three gateways need a shared Redis');
const anthropic = await startAnthropicSimulator({ apiKey: ANTHROPIC_KEY, maxRecordedRequests: 0 });
t.teardown(() => anthropic.close());
const gemini = await startGeminiSimulator();
t.teardown(() => gemini.close());
const dataDir = mkdtempSync(join(tmpdir(), 'inkgate-balanced-'));
t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
const balancer = await startBalancer({ proxyV2: true });
t.teardown(() => balancer.close());

const shared = (instanceId: string): DeepPartial<Config> => ({
  dataDir,
  // Signed links name the one public address, so any instance may serve the download.
  mediaUrl: balancer.url,
  server: { host: '127.0.0.1', port: 0, proxyProtocol: true },
  // Seconds for the store too, for the same reason (three cold pools connecting at once for a burst).
  db: { url: db.url, schema: db.schema, connectionTimeoutMs: 5_000, queryTimeoutMs: 5_000 },
  // Seconds, not the default 200 ms: what is under test is that the count is exact across three
  // processes, and on a busy two-core machine a burst of 80 requests stalls a process's loop long
  // enough for a 200 ms timer to fire before the reply already in its socket is read (a 503).
  redis: { url: redisUrl, commandTimeoutMs: 2_000 },
  limits: { requestsPerMinute: RATE_PER_MINUTE },
  vendors: { anthropic: { baseUrl: anthropic.url, apiKey: ANTHROPIC_KEY }, gemini: { baseUrl: gemini.url, apiKey: gemini.apiKey } },
  jobs: { tickMs: 100 },
  ledger: { instanceId },
});
const { cli, operatorKey } = operatorCli(loadConfig({}, { db: { url: db.url, schema: db.schema } }));
await cli('lane', 'enable', 'messages');
await cli('lane', 'enable', 'images');
const gateways: GatewayProcess[] = await Promise.all(['bal-a', 'bal-b', 'bal-c'].map((id) => startGatewayProcess(t, shared(id))));
balancer.setBackends(gateways.map((g) => Number(new URL(g.url).port)));

interface Answer {
  status: number;
  json: any;
  body: Buffer;
}

/** One request on a connection of its own (so the balancer deals it to the next process). */
function fresh(base: string, method: string, path: string, key?: string, body?: unknown): Promise<Answer> {
  const u = new URL(path, base);
  const payload = body === undefined ? undefined : JSON.stringify(body);
  return new Promise((resolveA, reject) => {
    const req = httpRequest(
      u,
      { method, agent: false, headers: { ...(key ? { authorization: `Bearer ${key}` } : {}), ...(payload ? { 'content-type': 'application/json' } : {}) } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const buf = Buffer.concat(chunks);
          let json: any;
          try {
            json = JSON.parse(buf.toString('utf8'));
          } catch {
            json = undefined;
          }
          resolveA({ status: res.statusCode ?? 0, json, body: buf });
        });
      },
    );
    req.setTimeout(20_000, () => req.destroy(new Error('no answer')));
    req.on('error', reject);
    req.end(payload);
  });
}

const message = { model: 'sonnet', max_tokens: 50, messages: [{ role: 'user', content: 'hello' }] };

t.test('the balancer deals connections round robin over the three', async (t) => {
  const before = [...balancer.handed];
  for (let i = 0; i < 6; i++) t.equal((await fresh(balancer.url, 'GET', '/v1/models')).status, 200);
  t.same(
    balancer.handed.map((n, i) => n - before[i]!),
    [2, 2, 2],
  );
});

t.test('the per-key rate limit is exact over three processes behind one address', async (t) => {
  const k = await operatorKey('balanced rate', 100);
  const answers = await Promise.all(Array.from({ length: RATE_PER_MINUTE + 20 }, () => fresh(balancer.url, 'GET', '/v1/me', k.key)));
  // Every other answer is named by status and code, so a failure says what else came back.
  const tally: Record<string, number> = {};
  for (const a of answers) {
    const k = a.status === 200 ? 'ok' : a.status === 429 ? 'limited' : `${a.status} ${a.json?.error?.code ?? a.json?.error?.type ?? ''}`;
    tally[k] = (tally[k] ?? 0) + 1;
  }
  t.same(tally, { ok: RATE_PER_MINUTE, limited: 20 }, `exactly ${RATE_PER_MINUTE} a minute over the three, the rest 429`);
});

/** Sends `probe` to every process until `done` says it sees the switch; the ms each took. */
function untilEverySees(probe: (g: GatewayProcess) => Promise<Answer>, done: (a: Answer) => boolean, since: number): Promise<number[]> {
  return msUntilEachSees(gateways, async (g) => done(await probe(g)), since, 5 * SWITCH_WITHIN_MS);
}

t.test('operator switches reach every process within one second', async (t) => {
  const k = await operatorKey('balanced switches', 100);
  const post = (g: GatewayProcess) => fresh(g.url, 'POST', '/v1/messages', k.key, message);
  for (const g of gateways) t.equal((await post(g)).status, 200, 'served before');

  const check = (what: string, ms: number[]) => {
    t.comment(`${what}: seen after ${ms.map((x) => x.toFixed(1)).join(', ')} ms`);
    for (const [i, x] of ms.entries()) t.ok(x <= SWITCH_WITHIN_MS, `${what}: process ${i} within ${SWITCH_WITHIN_MS} ms (${x.toFixed(1)})`);
  };
  // Timed from the moment the CLI returns: the switch is committed then.
  await cli('lane', 'disable', 'messages');
  let at = performance.now();
  check('lane disabled', await untilEverySees(post, (a) => a.status === 503 && a.json?.error?.code === 'provider_unavailable', at));
  await cli('lane', 'enable', 'messages');
  at = performance.now();
  check('lane enabled', await untilEverySees(post, (a) => a.status === 200, at));
  await cli('model', 'pause', 'sonnet', '--retry-after', '120');
  at = performance.now();
  check('model paused', await untilEverySees(post, (a) => a.status === 503, at));
  await cli('model', 'resume', 'sonnet');
  at = performance.now();
  check('model resumed', await untilEverySees(post, (a) => a.status === 200, at));
  await cli('api', 'close');
  at = performance.now();
  check(
    'API closed',
    await untilEverySees(
      (g) => fresh(g.url, 'GET', '/v1/models'),
      (a) => a.json?.error?.code === 'external_api_disabled',
      at,
    ),
  );
  await cli('api', 'open');
  at = performance.now();
  check(
    'API opened',
    await untilEverySees(
      (g) => fresh(g.url, 'GET', '/v1/models'),
      (a) => a.status === 200,
      at,
    ),
  );
});

t.test('an image submitted on one process is polled and downloaded through the others', async (t) => {
  const k = await operatorKey('balanced image', 100);
  const submitted = await fresh(gateways[0]!.url, 'POST', '/v1/images/generations', k.key, { model: 'image-1', prompt: 'a lighthouse at dusk' });
  t.equal(submitted.status, 202, JSON.stringify(submitted.json));
  const id = submitted.json.id as string;
  let gen: any = submitted.json;
  const seenOn = new Set<number>();
  const until = performance.now() + 30_000;
  for (let i = 1; (gen.status === 'queued' || gen.status === 'running') && performance.now() < until; i++) {
    const g = gateways[i % 3]!;
    const polled = await fresh(g.url, 'GET', `/v1/images/generations/${id}`, k.key);
    t.equal(polled.status, 200);
    gen = polled.json;
    seenOn.add(i % 3);
    if (gen.status === 'queued' || gen.status === 'running') await new Promise((r) => setTimeout(r, 100)); // a client's poll interval, bounded above
  }
  t.equal(gen.status, 'succeeded', JSON.stringify(gen));
  t.ok(seenOn.size >= 1, `polled through ${seenOn.size} processes`);
  // However quickly it finished, every process (not only those the loop reached) sees the same end.
  for (const [i, g] of gateways.entries()) {
    const polled = await fresh(g.url, 'GET', `/v1/images/generations/${id}`, k.key);
    t.same([polled.status, polled.json?.status], [200, 'succeeded'], `process ${i} sees it succeeded`);
  }
  const link = new URL(gen.image.url);
  t.equal(link.origin, balancer.url, 'the signed link names the balancer');
  const sizes: number[] = [];
  for (const g of gateways) {
    const got = await fresh(g.url, 'GET', link.pathname + link.search);
    t.equal(got.status, 200, `downloaded from ${g.url}`);
    sizes.push(got.body.length);
  }
  t.same(new Set(sizes).size, 1, 'every process serves the same bytes');
  t.equal(sizes[0], gen.image.size_bytes);
  const content = await fresh(gateways[2]!.url, 'GET', `/v1/images/generations/${id}/content`, k.key);
  t.ok(content.status === 200 || content.status === 302, `content through a third process: ${content.status}`);
});

t.test('every process: its own metrics, ready; on SIGTERM readiness fails while the port still admits', async (t) => {
  for (const g of gateways) {
    const m = await request(g.adminUrl + '/metrics');
    t.equal(m.statusCode, 200);
    const parsed = parseExposition(await m.body.text());
    t.ok(parsed.sum('inkgate_http_requests_total') > 0, `${g.adminUrl}: requests counted`);
    const r = await request(g.adminUrl + '/readyz');
    t.equal(r.statusCode, 200, await r.body.text());
  }
  await assertLedgerInvariant(t, db.pool);

  // A fourth process with a drain delay, so the order can be seen: readiness first, the port after.
  const extra = await startGatewayProcess(t, { ...shared('bal-d'), admin: { drainDelayMs: 1500 } });
  t.equal((await request(extra.adminUrl + '/readyz')).statusCode, 200);
  const stopped = extra.stop();
  let readyz = 200;
  const until = performance.now() + 1200;
  while (readyz === 200 && performance.now() < until) {
    const r = await request(extra.adminUrl + '/readyz');
    await r.body.dump();
    readyz = r.statusCode;
  }
  t.equal(readyz, 503, 'readiness fails once SIGTERM arrived');
  t.equal((await fresh(extra.url, 'GET', '/v1/models')).status, 200, 'the public port still admits during the drain delay');
  t.equal(await stopped, 0, 'then it drains and exits cleanly');
  await assertLedgerInvariant(t, db.pool);
});
