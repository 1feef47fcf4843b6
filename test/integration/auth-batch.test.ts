// Concurrent requests are authenticated together (one key lookup per batch, src/auth/authenticate.ts):
// every request still gets its own key's answer, and a revocation holds from the very next request.
import t from 'tap';
import { revokeKey } from '../../src/accounts/accounts.js';
import { KeyAuthenticator } from '../../src/auth/authenticate.js';
import { isApiError } from '../../src/errors.js';
import { startTestGateway } from '../helpers/gateway.js';

t.test('a burst of mixed keys: each request gets its own answer', async (t) => {
  const g = await startTestGateway(t);
  const a = await g.newKey({ name: 'a' });
  const b = await g.newKey({ name: 'b' });
  const gone = await g.newKey({ name: 'gone' });
  await revokeKey(g.db.pool, gone.keyId);
  const unknown = 'svc_' + 'A'.repeat(43);
  const keys = Array.from({ length: 60 }, (_, i) => [a.key, b.key, gone.key, unknown][i % 4]!);
  const replies = await Promise.all(keys.map((key) => g.call('GET', '/v1/me', { key })));
  for (let i = 0; i < keys.length; i++) {
    const r = replies[i]!;
    if (keys[i] === a.key || keys[i] === b.key) {
      t.equal(r.status, 200, `request ${i} answered`);
      t.equal(r.json.key.id, keys[i] === a.key ? a.keyId : b.keyId, `request ${i} saw its own key`);
    } else {
      t.equal(r.status, 401, `request ${i} refused`);
      t.equal(r.json.error.code, 'invalid_api_key');
    }
  }
});

t.test('batched lookups: shared statements, revocation on the next lookup', async (t) => {
  const g = await startTestGateway(t);
  const a = await g.newKey();
  const b = await g.newKey();
  let statements = 0;
  const counting = { query: (config: { text: string; values: unknown[] }) => (statements++, g.db.pool.query(config)) };
  const auth = new KeyAuthenticator(counting as never, undefined, { maxItems: 128, maxInFlight: 1, maxQueued: 1000 });
  t.teardown(() => auth.close());
  const bearer = (k: string) => `Bearer ${k}`;
  // Submitted in one tick: one statement for all 40, the same key looked up once.
  const infos = await Promise.all(Array.from({ length: 40 }, (_, i) => auth.authenticate(bearer(i % 2 ? a.key : b.key))));
  t.equal(statements, 1, 'one statement for the burst');
  t.same(new Set(infos.map((x) => x.keyId)), new Set([a.keyId, b.keyId]));
  for (let i = 0; i < infos.length; i++) t.equal(infos[i]!.keyId, i % 2 ? a.keyId : b.keyId);

  await revokeKey(g.db.pool, a.keyId);
  const after = await Promise.allSettled([auth.authenticate(bearer(a.key)), auth.authenticate(bearer(b.key))]);
  t.equal(after[0].status, 'rejected', 'revoked key refused on the next lookup');
  t.ok(after[0].status === 'rejected' && isApiError(after[0].reason) && after[0].reason.code === 'invalid_api_key');
  t.equal(after[1].status === 'fulfilled' && after[1].value.keyId, b.keyId, 'its neighbour in the batch still answered');
  await t.rejects(auth.authenticate('Bearer nope'), { code: 'invalid_api_key' }, 'malformed keys never reach the store');
});
