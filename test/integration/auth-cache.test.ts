// The text lanes' key cache (src/auth/authenticate.ts + 003_reserve_live_key.sql): a remembered key
// saves the lookup, and still a revoked or expired key is refused on the very next request, with
// no hold taken and nothing sent to the vendor. Other routes never use the cache.
import t, { type Test } from 'tap';
import { revokeKey } from '../../src/accounts/accounts.js';
import { setLane } from '../../src/deployment/state.js';
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { startOpenAISimulator } from '../../simulators/openai/simulator.js';
import { journalWritten, startTestGateway } from '../helpers/gateway.js';
import { assertLedgerInvariant, keyOf } from '../helpers/ledger-invariant.js';

async function setup(t: Test, keyCacheMs = 60_000) {
  const a = await startAnthropicSimulator({ apiKey: 'sk-ant-cache' });
  const o = await startOpenAISimulator({ apiKey: 'sk-oai-cache' });
  t.teardown(() => Promise.all([a.close(), o.close()]));
  const g = await startTestGateway(t, {
    // The negative cache is off here: these tests count the lookups the positive cache saves or forces.
    auth: { keyCacheMs, keyCacheEntries: 2, unknownKeyMs: 0 },
    vendors: { anthropic: { baseUrl: a.url, apiKey: 'sk-ant-cache' }, openai: { baseUrl: o.url, apiKey: 'sk-oai-cache' } },
  });
  await setLane(g.db.pool, 'messages', true);
  await setLane(g.db.pool, 'responses', true);
  await g.gw.services.state.refresh();
  // Count key lookups (a pass-through spy on the gateway's pool): the authenticator's statements
  // are named find_live_key / find_live_keys.
  let lookups = 0;
  const pool = g.gw.services.pool as unknown as { query: (...a: unknown[]) => unknown };
  const poolQuery = pool.query.bind(pool);
  pool.query = (...args: unknown[]) => {
    const c = args[0] as { name?: string } | string;
    if (typeof c === 'object' && c !== null && /^find_live_key/.test(c.name ?? '')) lookups++;
    return poolQuery(...args);
  };
  return { a, o, g, lookups: () => lookups };
}

const message = { model: 'sonnet', max_tokens: 50, messages: [{ role: 'user', content: 'hi' }] };
const response = { model: 'astra', input: 'hi', max_output_tokens: 50 };

t.test('a remembered key skips the lookup; revocation still refuses the very next request', async (t) => {
  const { a, o, g, lookups } = await setup(t);
  const k = await g.newKey();
  await g.gw.services.ledger.topUp(k.accountId, 100_000, 'test');

  t.equal((await g.call('POST', '/v1/messages', { key: k.key, body: message })).status, 200);
  const afterFirst = lookups();
  t.equal(afterFirst, 1, 'the first request looks the key up');
  for (let i = 0; i < 5; i++) t.equal((await g.call('POST', '/v1/messages', { key: k.key, body: message })).status, 200);
  t.equal((await g.call('POST', '/v1/responses', { key: k.key, body: response })).status, 200);
  t.equal(lookups(), afterFirst, 'later text requests take the key from the cache');

  // The revocation reaches the gateway as a Postgres notification sent when it commits (every
  // instance, within one heartbeat at worst): wait for this one to have heard it.
  const heard = g.gw.services.escrow.nextKeyChange(k.keyId);
  await revokeKey(g.db.pool, k.keyId);
  await heard;
  await journalWritten(g);
  await g.gw.services.escrow.beatNow();
  const vendorCallsBefore = a.requests.length + o.requests.length;
  const before = await keyOf(g.db.pool, k.keyId);
  for (const [path, body] of [
    ['/v1/messages', message],
    ['/v1/responses', response],
  ] as const) {
    const r = await g.call('POST', path, { key: k.key, body });
    t.equal(r.status, 401, `${path}: the revoked key is refused on the next request`);
    t.equal(r.json.error.code, 'invalid_api_key');
  }
  t.equal(a.requests.length + o.requests.length, vendorCallsBefore, 'nothing reached a vendor');
  t.same(await keyOf(g.db.pool, k.keyId), before, 'no hold taken, nothing charged');
  const open = await g.db.pool.query(`SELECT count(*)::int AS n FROM requests WHERE key_id = $1 AND hold_state = 'open'`, [k.keyId]);
  t.equal(open.rows[0].n, 0);
  // The refusal dropped the key from the cache: the next request looks it up (and is refused there).
  const lookupsBefore = lookups();
  t.equal((await g.call('POST', '/v1/messages', { key: k.key, body: message })).status, 401);
  t.equal(lookups(), lookupsBefore + 1, 'a refused key is forgotten');
  // Routes without a reserve never use the cache.
  t.equal((await g.call('GET', '/v1/me', { key: k.key })).status, 401);
  await assertLedgerInvariant(t, g.db.pool);
});

t.test('a remembered key revoked since gets 401, not the error its request would have had', async (t) => {
  const { a, o, g, lookups } = await setup(t);
  const k = await g.newKey();
  await g.gw.services.ledger.topUp(k.accountId, 100_000, 'test');
  t.equal((await g.call('POST', '/v1/messages', { key: k.key, body: message })).status, 200);
  t.equal((await g.call('POST', '/v1/responses', { key: k.key, body: response })).status, 200);

  // While the key is live, a bad request keeps its own error (one fresh lookup on that error path).
  const live = await g.call('POST', '/v1/messages', { key: k.key, body: { model: 'sonnet' } });
  t.equal(live.status, 400);
  t.equal(live.json.error.code, 'missing_max_tokens');
  // A client error after the hold (the vendor's 400) costs no lookup: the hold re-checked the key.
  const lookupsBeforeVendor = lookups();
  const refused = await g.call('POST', '/v1/messages', {
    key: k.key,
    body: { ...message, messages: [{ role: 'user', content: 'x [[sim:status=400]]' }] },
  });
  t.equal(refused.status, 400, "the vendor's refusal");
  t.equal(lookups(), lookupsBeforeVendor, 'no fresh lookup after the hold');

  await revokeKey(g.db.pool, k.keyId);
  const vendorCallsBefore = a.requests.length + o.requests.length;
  const cases: Array<[string, string, unknown, Record<string, string>?]> = [
    ['missing max_tokens', '/v1/messages', { model: 'sonnet' }],
    ['unknown model', '/v1/messages', { ...message, model: 'nope' }],
    ['not JSON', '/v1/responses', '{', {}],
    ['text/plain', '/v1/messages', JSON.stringify(message), { 'content-type': 'text/plain' }],
    ['unsupported field', '/v1/responses', { ...response, background: true }],
  ];
  for (const [what, path, body, headers] of cases) {
    const lookupsBefore = lookups();
    const r = await g.call('POST', path, { key: k.key, body, headers });
    t.equal(r.status, 401, `${what}: 401`);
    t.equal(r.json.error.code, 'invalid_api_key', what);
    t.ok(lookups() > lookupsBefore, `${what}: looked up afresh`);
  }
  t.equal(a.requests.length + o.requests.length, vendorCallsBefore, 'nothing reached a vendor');
  await assertLedgerInvariant(t, g.db.pool);
});

t.test('an expired key is refused even while remembered, also when its expiry was set behind the gateway', async (t) => {
  const { g } = await setup(t);
  const k = await g.newKey();
  await g.gw.services.ledger.topUp(k.accountId, 100_000, 'test');
  t.equal((await g.call('POST', '/v1/messages', { key: k.key, body: message })).status, 200);
  // Written straight to the table (no notification): the gateway's next heartbeat finds the key dead.
  await g.db.pool.query(`UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = $1`, [k.keyId]);
  await g.gw.services.escrow.beatNow();
  const r = await g.call('POST', '/v1/messages', { key: k.key, body: message });
  t.equal(r.status, 401);
  t.equal(r.json.error.code, 'invalid_api_key');
  t.equal((await keyOf(g.db.pool, k.keyId)).ink_reserved, 0);
  await assertLedgerInvariant(t, g.db.pool);
});

t.test('the cache is bounded and keyCacheMs 0 turns it off', async (t) => {
  const { g, lookups } = await setup(t);
  const keys = await Promise.all([g.newKey(), g.newKey(), g.newKey()]);
  for (const k of keys) await g.gw.services.ledger.topUp(k.accountId, 100_000, 'test');
  for (const k of keys) t.equal((await g.call('POST', '/v1/messages', { key: k.key, body: message })).status, 200);
  t.equal(lookups(), 3);
  // keyCacheEntries is 2: the first key was pushed out, the last two are remembered.
  t.equal((await g.call('POST', '/v1/messages', { key: keys[2]!.key, body: message })).status, 200);
  t.equal(lookups(), 3, 'the newest key is still remembered');
  t.equal((await g.call('POST', '/v1/messages', { key: keys[0]!.key, body: message })).status, 200);
  t.equal(lookups(), 4, 'the oldest key was evicted and is looked up again');

  const off = await setup(t, 0);
  const k = await off.g.newKey();
  await off.g.gw.services.ledger.topUp(k.accountId, 100_000, 'test');
  for (let i = 0; i < 3; i++) t.equal((await off.g.call('POST', '/v1/messages', { key: k.key, body: message })).status, 200);
  t.equal(off.lookups(), 3, 'keyCacheMs 0: one lookup per request');
});

t.test('a batch reserve refuses only the items whose key is dead', async (t) => {
  const { g } = await setup(t);
  const live = await g.newKey();
  const dead = await g.newKey();
  for (const k of [live, dead]) await g.gw.services.ledger.topUp(k.accountId, 100_000, 'test');
  await revokeKey(g.db.pool, dead.keyId);
  const ledger = g.gw.services.ledger;
  // Submitted in one tick, the group commit sends them as one ledger_reserve batch.
  const ids = Array.from({ length: 6 }, (_, i) => `req_batchlive${i}${Date.now()}`);
  const outcomes = await Promise.allSettled(
    ids.map((requestId, i) => {
      const k = i % 2 === 0 ? live : dead;
      return ledger.reserve({ requestId, accountId: k.accountId, keyId: k.keyId, product: 'messages', model: 'assistant-sonnet-5', holdInk: 10 + i });
    }),
  );
  outcomes.forEach((o, i) => {
    if (i % 2 === 0) t.equal(o.status, 'fulfilled', `item ${i} (live key) reserved`);
    else t.match(o, { status: 'rejected', reason: { code: 'invalid_api_key' } }, `item ${i} (revoked key) refused`);
  });
  t.equal((await keyOf(g.db.pool, live.keyId)).ink_reserved, 10 + 12 + 14, 'the live items hold exactly their own amounts');
  t.equal((await keyOf(g.db.pool, dead.keyId)).ink_reserved, 0);
  for (let i = 0; i < ids.length; i += 2) await ledger.release(ids[i]!, 'test');
  await assertLedgerInvariant(t, g.db.pool);
});
