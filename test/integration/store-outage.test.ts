// Postgres frozen or gone under a running gateway (through a TCP proxy, so the shared server is
// never signalled): keyed requests answer 503 within about a second, never hang, and recover.
import t from 'tap';
import { loadConfig } from '../../src/config/config.js';
import { createGateway } from '../../src/gateway.js';
import { silentLogger } from '../../src/util/log.js';
import { call } from '../helpers/gateway.js';
import { testDb } from '../helpers/db.js';
import { startTcpProxy } from '../helpers/tcp-proxy.js';
import { createAccount, createKey } from '../../src/accounts/accounts.js';

t.test('a frozen Postgres answers 503 within the configured timeout', async (t) => {
  const db = await testDb(t);
  const target = new URL(db.url);
  const proxy = await startTcpProxy(target.hostname, Number(target.port || 5432));
  t.teardown(() => proxy.close());
  const viaProxy = `postgres://${target.username}@127.0.0.1:${proxy.port}${target.pathname}`;
  const cfg = loadConfig({}, { server: { port: 0 }, db: { url: viaProxy, schema: db.schema } });
  const gw = await createGateway(cfg, { log: silentLogger, skipMigrate: true });
  t.teardown(() => gw.close());
  const acc = await createAccount(db.pool, { name: 'o', planId: 'pro' });
  const { key } = await createKey(db.pool, { accountId: acc.id, name: 'k' });
  t.equal((await call(gw.url, 'GET', '/v1/me', { key })).status, 200);

  proxy.freeze();
  const t0 = performance.now();
  const r = await call(gw.url, 'GET', '/v1/me', { key });
  const ms = performance.now() - t0;
  t.equal(r.status, 503);
  t.equal(r.json.error.code, 'provider_unavailable');
  t.ok(Number(r.headers['retry-after']) >= 1, 'Retry-After');
  // Time is the behaviour: the pool's query timeout (900 ms) answers a frozen store, which would
  // otherwise never answer; the bound stays below the 5 s statement timeout.
  t.ok(ms < 1500, `answered in ${ms.toFixed(0)} ms (query timeout ${cfg.db.queryTimeoutMs} ms)`);
  t.equal((await call(gw.url, 'GET', '/v1/models')).status, 200, 'the public catalogue needs no database');

  proxy.cut();
  proxy.thaw();
  let ok = false;
  const until = Date.now() + 5000;
  while (!ok && Date.now() < until) {
    ok = (await call(gw.url, 'GET', '/v1/me', { key })).status === 200;
    if (!ok) await new Promise((res) => setTimeout(res, 50)); // polling a reconnecting pool, bounded
  }
  t.ok(ok, 'recovers once Postgres answers again');

  proxy.refuse(true);
  proxy.cut();
  const refused = await call(gw.url, 'GET', '/v1/me', { key });
  t.equal(refused.status, 503, 'a refused connection is a 503 too');
  proxy.refuse(false);
});
