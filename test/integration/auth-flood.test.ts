// A flood of bad keys from one address on a real gateway (docs/api/rate-limits.md#failed-authentication-per-client-address,
// docs/api/authentication.md#bad-keys): after the address's failure budget every request from it is
// answered 429 before any key lookup, a good key from another address is still served, and the
// same bad key repeated is refused from the negative cache. With Redis, two instances share the budget.
import { randomBytes } from 'node:crypto';
import t, { type Test } from 'tap';
import { createAccount, createKeyIn } from '../../src/accounts/accounts.js';
import { keyFromRaw } from '../../src/accounts/api-key.js';
import { KeyAuthenticator } from '../../src/auth/authenticate.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { eachEngine } from '../helpers/engines.js';
import { testRedisUrl } from '../helpers/env.js';
import { parseExposition } from '../helpers/prometheus.js';
import { watchQueries } from '../helpers/query-watch.js';

const BUDGET = 5;
const madeUp = (): string => 'svc_' + randomBytes(32).toString('base64url');
/** Key lookups the authenticator sends (its statements are named find_live_key / find_live_keys). */
const lookups = (t: Test, g: TestGateway) => watchQueries(t, g.gw.services.pool, (q) => /^find_live_key/.test(q.name ?? ''));
/** The gateway sits behind a trusted proxy (127.0.0.1): each test client is its X-Forwarded-For. */
const from = (address: string) => ({ 'X-Forwarded-For': address });

async function refusals(g: TestGateway, reason: string): Promise<number> {
  const name = 'inkgate_auth_refusals_total';
  return parseExposition(await g.gw.ops.metrics.registry.getSingleMetricAsString(name)).value(name, { reason });
}

eachEngine('a flood of bad keys from one address: 429 after the budget, no lookup after that; another address is served', async (t, engine) => {
  const g = await startTestGateway(t, { limits: { authFailuresPerMinute: BUDGET }, server: { engine, trustedProxies: ['127.0.0.1'] } });
  const good = await g.newKey();
  const seen = lookups(t, g);
  const flooder = from('203.0.113.7');
  for (let i = 0; i < BUDGET; i++) {
    const r = await g.call('GET', '/v1/me', { key: madeUp(), headers: flooder });
    t.equal(r.status, 401, `made-up key ${i + 1}: 401`);
  }
  const over = await g.call('GET', '/v1/me', { key: madeUp(), headers: flooder });
  t.equal(over.status, 429, 'the failure past the budget is refused');
  t.equal(over.json.error.code, 'rate_limit_exceeded');
  t.match(over.json.error.message, /failed authentications/);
  const retryAfter = Number(over.headers['retry-after']);
  t.ok(retryAfter >= 1 && retryAfter <= 60, `Retry-After ${retryAfter}`);
  t.equal(seen.seen.length, BUDGET + 1, 'one lookup per failure up to here');

  const paths = ['/v1/me', '/v1/video/generations/vgen_x', '/v1/images/generations/igen_x'];
  for (let i = 0; i < 30; i++) {
    const r = await g.call('GET', paths[i % paths.length]!, { key: madeUp(), headers: flooder });
    t.equal(r.status, 429, `flood request ${i + 1}: 429`);
  }
  t.equal(seen.seen.length, BUDGET + 1, 'the database saw no lookup after the budget was spent');
  t.equal((await g.call('GET', '/v1/me', { key: good.key, headers: flooder })).status, 429, 'the address is refused, whatever key it sends');

  const served = await g.call('GET', '/v1/me', { key: good.key, headers: from('198.51.100.1') });
  t.equal(served.status, 200, 'a good key from another address is served');
  t.equal(served.json.user_id, good.accountId);
  t.equal((await g.call('GET', '/v1/me', { key: madeUp(), headers: from('198.51.100.2') })).status, 401, 'another address has its own budget');
  t.equal(await refusals(g, 'over_budget'), 32, 'every 429 counted by the metrics');
});

eachEngine('the same bad key repeated: one lookup, then 401 from the negative cache, not counted against the address', async (t, engine) => {
  const g = await startTestGateway(t, { limits: { authFailuresPerMinute: BUDGET }, server: { engine, trustedProxies: ['127.0.0.1'] } });
  const seen = lookups(t, g);
  const bad = madeUp();
  for (let i = 0; i < BUDGET * 3; i++) {
    const r = await g.call('POST', '/v1/messages', { key: bad, headers: from('203.0.113.8'), body: { model: 'sonnet', max_tokens: 5, messages: [] } });
    t.equal(r.status, 401, `repeat ${i + 1}: 401`);
    t.equal(r.json.error.code, 'invalid_api_key');
    t.equal(r.headers['www-authenticate'], 'Bearer');
  }
  t.equal(seen.seen.length, 1, 'looked up once');
  t.equal(await refusals(g, 'negative_cache'), BUDGET * 3 - 1, 'the others refused from memory');
  t.equal(await refusals(g, 'over_budget'), 0, 'only a lookup counts against the budget');
  // A revoked key (known prefix, found not live) is remembered too.
  const k = await g.newKey();
  t.equal((await g.call('GET', '/v1/me', { key: k.key })).status, 200);
  await g.db.pool.query('UPDATE api_keys SET revoked_at = now() WHERE id = $1', [k.keyId]);
  t.same([(await g.call('GET', '/v1/me', { key: k.key })).status, (await g.call('GET', '/v1/me', { key: k.key })).status], [401, 401]);
  t.equal(seen.seen.length, 3, 'the revoked key was looked up once after its revocation');
  // A fresh key is not refused: the cache holds hashes of keys that missed, never a prefix.
  const fresh = await g.newKey();
  t.equal((await g.call('GET', '/v1/me', { key: fresh.key })).status, 200);
});

t.test('a key made after its exact hash was refused is refused for at most unknownKeyMs', async (t) => {
  const g = await startTestGateway(t);
  const clock = { ms: 0 };
  const keys = new KeyAuthenticator(g.db.pool, { keyCacheMs: 0, keyCacheEntries: 1, unknownKeyMs: 30_000, unknownKeyEntries: 10, nowMs: () => clock.ms });
  t.teardown(() => keys.close());
  const raw = madeUp();
  const bearer = `Bearer ${raw}`;
  await t.rejects(keys.authenticate(bearer), { code: 'invalid_api_key' }, 'unknown: refused');
  // Only someone who had the raw key before it existed can do this (keys are 32 random bytes):
  // the key is made with the very material that was just refused.
  const acc = await createAccount(g.db.pool, { name: 'late', planId: 'pro' });
  await createKeyIn(g.db.pool, { accountId: acc.id, name: 'late' }, () => keyFromRaw(raw));
  clock.ms += 29_999;
  await t.rejects(keys.authenticate(bearer), { code: 'invalid_api_key' }, 'still remembered as unknown within unknownKeyMs');
  clock.ms += 1;
  t.equal((await keys.authenticate(bearer)).accountId, acc.id, 'accepted once the entry has lived its unknownKeyMs');
});

const noRedis = testRedisUrl === null ? 'no Redis here (TEST_REDIS_URL is empty): the shared budget is tested where one runs' : false;

t.test('two instances share the budget through Redis', { skip: noRedis }, async (t) => {
  const redis = { url: testRedisUrl!, keyPrefix: `t${process.pid}:${Date.now()}:af:` };
  const settings = { limits: { authFailuresPerMinute: 4 }, redis, server: { trustedProxies: ['127.0.0.1'] } };
  const a = await startTestGateway(t, settings);
  const b = await startTestGateway(t, settings);
  t.equal(a.gw.services.limiter.kind, 'redis');
  const seenB = lookups(t, b);
  const flooder = from('203.0.113.9');
  const status = async (g: TestGateway) => (await g.call('GET', '/v1/me', { key: madeUp(), headers: flooder })).status;
  t.same([await status(a), await status(b), await status(a), await status(b)], [401, 401, 401, 401], 'four failures over two instances');
  t.equal(await status(a), 429, 'the fifth, on the first instance, is over the shared budget');
  t.equal(await status(b), 429, 'and so is the next on the second (after its one lookup)');
  const afterLearnt = seenB.seen.length;
  t.same([await status(b), await status(b)], [429, 429]);
  t.equal(seenB.seen.length, afterLearnt, 'the second instance now refuses without a lookup');
  const good = await b.newKey();
  t.equal((await b.call('GET', '/v1/me', { key: good.key, headers: from('198.51.100.3') })).status, 200, 'another address is served');
});
