// The admin listener of a real gateway: /metrics scraped and parsed after real traffic (the
// official Anthropic SDK through the messages lane, a 404, a 429), /healthz, and /readyz flipping
// on a drain and while Postgres is frozen (through a TCP proxy: the shared server is never signalled).
import Anthropic from '@anthropic-ai/sdk';
import { join, resolve } from 'node:path';
import t from 'tap';
import { request } from 'undici';
import { createAccount, createKey } from '../../src/accounts/accounts.js';
import { loadConfig } from '../../src/config/config.js';
import { setLane } from '../../src/deployment/state.js';
import { createGateway } from '../../src/gateway.js';
import { serveAdmin } from '../../src/ops/serve.js';
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { silentLogger } from '../../src/util/log.js';
import { testDb } from '../helpers/db.js';
import { startTestGateway } from '../helpers/gateway.js';
import { parseExposition } from '../helpers/prometheus.js';
import { startTcpProxy } from '../helpers/tcp-proxy.js';

const VENDOR_KEY = 'sk-ant-ops';

async function get(url: string): Promise<{ status: number; text: string; type: string }> {
  const r = await request(url);
  return { status: r.statusCode, text: await r.body.text(), type: String(r.headers['content-type']) };
}

t.test('metrics after real traffic, scraped and parsed', async (t) => {
  const sim = await startAnthropicSimulator({ apiKey: VENDOR_KEY });
  t.teardown(() => sim.close());
  const g = await startTestGateway(t, { vendors: { anthropic: { baseUrl: sim.url, apiKey: VENDOR_KEY } }, limits: { requestsPerMinute: 5 } });
  const admin = await serveAdmin(g.gw, loadConfig({}, { admin: { port: 0 } }), silentLogger);
  t.teardown(() => admin.close());
  t.not(admin.port, new URL(g.url).port, 'the admin listener is not the public port');
  t.equal((await get(g.url + '/metrics')).status, 404, '/metrics is not served on the public port');
  await setLane(g.db.pool, 'messages', true);
  await g.gw.services.state.refresh();
  const k = await g.newKey();
  await g.gw.services.ledger.topUp(k.accountId, 10_000, 'test');

  for (let i = 0; i < 3; i++) t.equal((await g.call('GET', '/v1/models')).status, 200);
  t.equal((await g.call('GET', '/v1/nowhere')).status, 404);
  const client = new Anthropic({ baseURL: g.url, authToken: k.key, apiKey: null, maxRetries: 0 });
  const stream = client.messages.stream({ model: 'sonnet', max_tokens: 100, messages: [{ role: 'user', content: 'count to five' }] });
  await stream.finalMessage();
  const plain = await g.call('POST', '/v1/messages', { key: k.key, body: { model: 'sonnet', max_tokens: 50, messages: [{ role: 'user', content: 'hi' }] } });
  t.equal(plain.status, 200);
  const charged = Number(plain.headers['x-service-ink-charged']);
  // The key's limit is 5 a minute: the stream, the plain call, then three more pass and the rest are refused.
  const statuses: number[] = [];
  for (let i = 0; i < 5; i++) statuses.push((await g.call('GET', '/v1/me', { key: k.key })).status);
  t.same(statuses, [200, 200, 200, 429, 429]);

  const scraped = await get(admin.url + '/metrics');
  t.equal(scraped.status, 200);
  t.match(scraped.type, /^text\/plain; version=0\.0\.4/);
  const m = parseExposition(scraped.text);
  t.equal(
    m.value('inkgate_http_requests_total', { route: '/v1/models', method: 'GET', status_class: '2xx' }),
    3,
    'requests by route template and status class',
  );
  t.equal(
    m.value('inkgate_http_requests_total', { route: 'unmatched', status_class: '4xx' }),
    2,
    'paths no route took (/metrics on the public port, /v1/nowhere)',
  );
  t.equal(m.value('inkgate_http_requests_total', { route: '/v1/me', status_class: '4xx' }), 2, 'the 429s');
  t.equal(m.value('inkgate_http_requests_total', { route: '/v1/messages', method: 'POST', status_class: '2xx' }), 2);
  t.equal(m.value('inkgate_http_request_duration_seconds_count', { route: '/v1/models', status_class: '2xx' }), 3);
  t.equal(m.value('inkgate_http_request_duration_seconds_bucket', { route: '/v1/models', status_class: '2xx', le: '+Inf' }), 3);
  t.ok(m.value('inkgate_http_request_duration_seconds_sum', { route: '/v1/models', status_class: '2xx' }) > 0);
  t.equal(m.types.get('inkgate_http_request_duration_seconds'), 'histogram');
  t.equal(m.value('inkgate_rate_limit_refusals_total', { scope: 'key' }), 2, 'refusals by scope');
  t.equal(m.value('inkgate_time_to_first_token_seconds_count', { lane: 'messages' }), 1, 'one stream, one first token');
  t.ok(m.sum('inkgate_ink_charged_total', { product: 'messages' }) >= charged && charged > 0, 'Ink charged counted');
  t.ok(
    m.sum('inkgate_ink_held_total', { product: 'messages' }) >= m.sum('inkgate_ink_charged_total', { product: 'messages' }),
    'held at least what was charged',
  );
  t.ok(m.value('inkgate_ledger_flushes_total') >= 1, 'journal flushes');
  t.ok(m.value('inkgate_ledger_flush_duration_seconds_count') >= 1, 'flush durations');
  t.type(m.value('inkgate_ledger_journal_queue_depth'), 'number');
  t.type(m.value('inkgate_ledger_open_leases'), 'number');
  t.equal(m.value('inkgate_store_scrape_ok'), 1, 'store-wide figures read');
  t.equal(m.value('inkgate_open_holds', { status: 'usage_unknown' }), 0);
  t.ok(
    m.samples.some((s) => s.name === 'nodejs_eventloop_lag_p99_seconds'),
    'event-loop delay',
  );
  t.ok(
    m.samples.some((s) => s.name === 'process_resident_memory_bytes'),
    'process metrics',
  );
  // Labels stay bounded and secret-free: no key, account or request id anywhere in the exposition.
  for (const needle of [k.key, k.keyId, k.accountId, 'req_']) t.notOk(scraped.text.includes(needle), `no ${needle.slice(0, 8)}... in /metrics`);
});

t.test('/healthz, and /readyz failing first on a drain', async (t) => {
  const g = await startTestGateway(t);
  const admin = await serveAdmin(g.gw, loadConfig({}, { admin: { port: 0 } }), silentLogger);
  t.teardown(() => admin.close());
  t.same(JSON.parse((await get(admin.url + '/healthz')).text), { status: 'ok' });
  const ready = await get(admin.url + '/readyz');
  t.equal(ready.status, 200, ready.text);
  t.match(JSON.parse(ready.text), { ready: true, draining: false, postgres: 'ok', migrations: 'ok' });
  // The file store (the default) is named with its directory, and checked: results can be written there.
  t.match(JSON.parse(ready.text), { mediaStore: 'ok', mediaStoreIn: { kind: 'files', dir: join(resolve(g.gw.services.config.dataDir), 'media') } });
  g.gw.ops.readiness.drain();
  const drained = await get(admin.url + '/readyz');
  t.equal(drained.status, 503);
  t.match(JSON.parse(drained.text), { ready: false, draining: true, postgres: 'ok' });
  t.equal((await g.call('GET', '/v1/models')).status, 200, 'the public port still admits while the balancer notices');
  t.equal((await get(admin.url + '/healthz')).status, 200, 'alive while draining');
});

t.test('/readyz fails within its bound while Postgres is frozen, and recovers', async (t) => {
  const db = await testDb(t);
  const target = new URL(db.url);
  const proxy = await startTcpProxy(target.hostname, Number(target.port || 5432));
  t.teardown(() => proxy.close());
  const viaProxy = `postgres://${target.username}@127.0.0.1:${proxy.port}${target.pathname}`;
  const cfg = loadConfig({}, { server: { port: 0 }, db: { url: viaProxy, schema: db.schema }, admin: { port: 0, readyTimeoutMs: 300 } });
  const gw = await createGateway(cfg, { log: silentLogger, skipMigrate: true });
  t.teardown(() => gw.close());
  const admin = await serveAdmin(gw, cfg, silentLogger);
  t.teardown(() => admin.close());
  const acc = await createAccount(db.pool, { name: 'r', planId: 'pro' });
  await createKey(db.pool, { accountId: acc.id, name: 'k' });
  t.equal((await get(admin.url + '/readyz')).status, 200);

  proxy.freeze();
  const t0 = performance.now();
  const frozen = await get(admin.url + '/readyz');
  const ms = performance.now() - t0;
  t.equal(frozen.status, 503);
  t.match(JSON.parse(frozen.text), { ready: false, postgres: 'timeout' });
  // Time is the behaviour: readiness answers within its own timeout while the store hangs (a
  // frozen proxy answers nothing, ever). Generous for a loaded machine.
  t.ok(ms < 4 * cfg.admin.readyTimeoutMs, `answered in ${ms.toFixed(0)} ms (bound ${cfg.admin.readyTimeoutMs} ms)`);
  t.equal((await get(admin.url + '/healthz')).status, 200, 'alive while the store is away');

  proxy.cut();
  proxy.thaw();
  let status = 0;
  const until = Date.now() + 5000;
  while (status !== 200 && Date.now() < until) {
    status = (await get(admin.url + '/readyz')).status;
    if (status !== 200) await new Promise((res) => setTimeout(res, 50)); // polling a reconnecting pool, bounded
  }
  t.equal(status, 200, 'ready again once Postgres answers');
});

t.test('/readyz fails while Redis does not answer, and recovers', async (t) => {
  const { testRedisUrl } = await import('../helpers/env.js');
  if (testRedisUrl === null) {
    t.comment('no shared Redis answered: the Redis readiness check is covered where one runs');
    return;
  }
  const target = new URL(testRedisUrl);
  const proxy = await startTcpProxy(target.hostname, Number(target.port || 6379));
  t.teardown(() => proxy.close());
  const db = await testDb(t);
  const cfg = loadConfig(
    {},
    {
      server: { port: 0 },
      db: { url: db.url, schema: db.schema },
      redis: { url: `redis://127.0.0.1:${proxy.port}`, keyPrefix: `inkgate:${db.schema}:` },
      admin: { port: 0, readyTimeoutMs: 2_000 },
    },
  );
  const gw = await createGateway(cfg, { log: silentLogger, skipMigrate: true });
  t.teardown(() => gw.close());
  const admin = await serveAdmin(gw, cfg, silentLogger);
  t.teardown(() => admin.close());
  const ok = await get(admin.url + '/readyz');
  t.equal(ok.status, 200, ok.text);
  t.match(JSON.parse(ok.text), { redis: 'ok' });

  proxy.freeze();
  const frozen = await get(admin.url + '/readyz');
  t.equal(frozen.status, 503);
  t.match(JSON.parse(frozen.text), { ready: false, postgres: 'ok', redis: /^(timeout|failed)$/ });

  proxy.cut();
  proxy.thaw();
  let status = 0;
  const until = Date.now() + 10_000;
  while (status !== 200 && Date.now() < until) {
    status = (await get(admin.url + '/readyz')).status;
    if (status !== 200) await new Promise((res) => setTimeout(res, 50)); // polling a reconnecting client, bounded
  }
  t.equal(status, 200, 'ready again once Redis answers');
});
