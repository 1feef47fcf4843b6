// GET /v1/me: the account object of docs/api/me.md, and key lifecycle (revocation, expiry) on the very next request.
import { readFileSync } from 'node:fs';
import t from 'tap';
import { createAccount, createKey, revokeKey } from '../../src/accounts/accounts.js';
import { startTestGateway } from '../helpers/gateway.js';

t.test('/v1/me', async (t) => {
  const g = await startTestGateway(t);
  const k = await g.newKey({ inkLimit: 500, name: 'ci key' });
  const r = await g.call('GET', '/v1/me', { key: k.key });
  t.equal(r.status, 200);
  t.equal(r.json.object, 'account');
  t.equal(r.json.user_id, k.accountId);
  t.match(r.json.user_id, /^usr_/);
  t.same(r.json.key, { id: k.keyId, prefix: k.key.slice(0, 12), name: 'ci key', ink_limit: 500, ink_charged: 0, ink_reserved: 0 });
  t.match(r.json.key.id, /^key_/);
  t.same(r.json.ink, { balance: 0, period_grant_remaining: 0, payg_balance: 0, usd_payg_equivalent: 0 });
  const nolimit = await g.newKey();
  t.equal((await g.call('GET', '/v1/me', { key: nolimit.key })).json.key.ink_limit, null, 'no cap: null');
});

t.test('usd_payg_equivalent is the whole balance (grant and pay-as-you-go) at 100 Ink per USD', async (t) => {
  const g = await startTestGateway(t);
  const k = await g.newKey();
  // The demo account's wallet: a 1000 Ink grant beside 5000 Ink (50 USD) of pay-as-you-go.
  await g.gw.services.ledger.topUp(k.accountId, 5000, 'me test');
  await g.gw.services.ledger.grant(k.accountId, 1000);
  const { ink } = (await g.call('GET', '/v1/me', { key: k.key })).json;
  t.same(ink, { balance: 6000, period_grant_remaining: 1000, payg_balance: 5000, usd_payg_equivalent: 60 });
  t.equal(ink.usd_payg_equivalent, ink.balance / 100, 'balance / 100, as docs/api/me.md says');
  t.not(ink.usd_payg_equivalent, ink.payg_balance / 100, 'not the pay-as-you-go wallet alone');
  const doc = readFileSync(new URL('../../docs/api/me.md', import.meta.url), 'utf8');
  t.match(
    doc,
    /\| `ink\.usd_payg_equivalent` \| the whole `balance` \(grant included\), valued at the pay-as-you-go rate of 100 Ink per USD: `balance \/ 100`/,
  );
});

t.test('revocation and expiry take effect on the very next request', async (t) => {
  const g = await startTestGateway(t);
  const k = await g.newKey();
  t.equal((await g.call('GET', '/v1/me', { key: k.key })).status, 200);
  await revokeKey(g.db.pool, k.keyId);
  const r = await g.call('GET', '/v1/me', { key: k.key });
  t.equal(r.status, 401);
  t.equal(r.json.error.code, 'invalid_api_key');

  const acc = await createAccount(g.db.pool, { name: 'x', planId: 'pro' });
  const past = await createKey(g.db.pool, { accountId: acc.id, name: 'old', expiresAt: new Date(Date.now() - 1000) });
  t.equal((await g.call('GET', '/v1/me', { key: past.key })).status, 401, 'expired key');
});

t.test('keys are stored only as hash, prefix and last four', async (t) => {
  const g = await startTestGateway(t);
  const k = await g.newKey();
  t.match(k.key, /^svc_[A-Za-z0-9_-]{43}$/);
  const { rows } = await g.db.pool.query('SELECT * FROM api_keys WHERE id = $1', [k.keyId]);
  const stored = JSON.stringify(rows[0], (_k, v) => (v && v.type === 'Buffer' ? Buffer.from(v.data).toString('hex') : v));
  t.notOk(stored.includes(k.key), 'raw key not stored');
  t.notOk(stored.includes(k.key.slice(12, -4)), 'middle of the key not stored');
  t.equal(rows[0].prefix, k.key.slice(0, 12));
  t.equal(rows[0].last4, k.key.slice(-4));
});

t.test('creating a key needs a paid plan or a completed top-up', async (t) => {
  const g = await startTestGateway(t);
  const acc = await createAccount(g.db.pool, { name: 'free', planId: 'free' });
  await t.rejects(createKey(g.db.pool, { accountId: acc.id, name: 'k' }), /paid plan or at least one completed/);
});
