// The text lanes' key cache while Postgres cannot answer (src/auth/authenticate.ts): a key remembered
// until recently is still taken for one more keyCacheMs, so a key that holds an Ink lease keeps
// being served through a store pause; an unknown key, or one remembered too long ago, gets the 503.
import t from 'tap';
import { createAccount, createKey } from '../../src/accounts/accounts.js';
import { KeyAuthenticator } from '../../src/auth/authenticate.js';
import { isApiError } from '../../src/errors.js';
import { createPool } from '../../src/store/pool.js';
import { testDb } from '../helpers/db.js';
import { startTcpProxy } from '../helpers/tcp-proxy.js';

const code = (e: unknown): string => (isApiError(e) ? e.code : String(e));

t.test('a recently remembered key survives a store pause for one more keyCacheMs; others get 503', async (t) => {
  const db = await testDb(t);
  const target = new URL(db.url);
  const proxy = await startTcpProxy(target.hostname, Number(target.port || 5432));
  t.teardown(() => proxy.close());
  const viaProxy = `postgres://${target.username}@127.0.0.1:${proxy.port}${target.pathname}`;
  // Seconds, not the product's sub-second figures: a fresh backend on a busy machine can take most
  // of a second to start, and how long a frozen store takes to fail is not what this test checks.
  const pool = createPool({ ...db.dbConfig, url: viaProxy, connectionTimeoutMs: 2_000, queryTimeoutMs: 2_000 });
  t.teardown(() => pool.end());
  const keyCacheMs = 200;
  // The cache's clock is the test's: the lifetimes are stepped past, not waited out.
  let clockMs = 1_000_000;
  const auth = new KeyAuthenticator(pool, { keyCacheMs, keyCacheEntries: 10, nowMs: () => clockMs });
  t.teardown(() => auth.close());
  const acc = await createAccount(db.pool, { name: 'outage', planId: 'pro' });
  const a = await createKey(db.pool, { accountId: acc.id, name: 'remembered' });
  const b = await createKey(db.pool, { accountId: acc.id, name: 'never seen' });

  const first = await auth.authenticateCached(`Bearer ${a.key}`);
  t.equal(first.keyId, a.id);
  proxy.freeze();
  // Past the cache entry's life (keyCacheMs), still within one more keyCacheMs of it.
  clockMs += keyCacheMs + 20;
  const stale = await auth.authenticateCached(`Bearer ${a.key}`);
  t.equal(stale.keyId, a.id, 'the remembered key is taken while the store does not answer');
  t.equal(code(await auth.authenticateCached(`Bearer ${b.key}`).catch((e) => e)), 'provider_unavailable', 'a key never seen gets 503');
  clockMs += keyCacheMs; // past the grace too
  t.equal(code(await auth.authenticateCached(`Bearer ${a.key}`).catch((e) => e)), 'provider_unavailable', 'and a key remembered too long ago too');
  proxy.thaw();
  t.equal((await auth.authenticateCached(`Bearer ${b.key}`)).keyId, b.id, 'the store answers again');
});
