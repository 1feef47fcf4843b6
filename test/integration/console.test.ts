// The console over plain HTTP: sign-in links (single use, expiry), sessions (sign-out ends them),
// CSRF on every form, cross-account ids, escaping, the raw key shown once, the figures of
// GET /v1/me, the playground billed through the lanes, CSV export, the billing journal's balances.
import Anthropic from '@anthropic-ai/sdk';
import { createHash, randomBytes } from 'node:crypto';
import t from 'tap';
import { request } from 'undici';
import { createAccount, createKey } from '../../src/accounts/accounts.js';
import { runCli } from '../../src/admin/cli.js';
import { loadConfig } from '../../src/config/config.js';
import { CSP } from '../../src/console/html.js';
import { NONCES_PER_SESSION } from '../../src/console/form-nonces.js';
import { playgroundKey, PLAYGROUND_KEY_NAME } from '../../src/console/playground.js';
import { createSignInLink } from '../../src/console/sessions.js';
import { runToEnd, startImageHarness } from './image-harness.js';
import { createKeyHttp, getPage, keyFormNonce, postForm, signInHttp, startConsoleStack } from '../helpers/console-stack.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';

t.test('a sign-in link works once, and not after it expired', async (t) => {
  const s = await startConsoleStack(t);
  const base = s.g.url;
  const link = await s.link();
  const landing = await getPage(base, new URL(link).pathname + new URL(link).search);
  t.equal(landing.status, 200, 'the link opens a page with a button (a link preview does not use it up)');
  t.match(landing.headers['content-security-policy'], /default-src 'none'/);
  t.equal(landing.headers['content-security-policy'], CSP);
  t.equal(landing.headers['referrer-policy'], 'same-origin');
  const token = new URL(link).searchParams.get('token')!;
  const first = await postForm(base, '/console/signin', { token });
  t.equal(first.status, 303);
  const cookie = String(first.headers['set-cookie']);
  t.match(
    cookie,
    /^inkgate_console=[A-Za-z0-9_-]{43}; Path=\/console; Max-Age=\d+; HttpOnly; SameSite=Strict$/,
    'HttpOnly, SameSite=Strict, no Secure on plain http',
  );
  const { request } = await import('undici');
  const fresh = new URL(await s.link()).searchParams.get('token')!;
  for (const origin of ['https://evil.example', 'null']) {
    const r = await request(`${base}/console/signin`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', origin },
      body: `token=${fresh}`,
    });
    await r.body.text();
    t.equal(r.statusCode, 403, `a post from origin ${origin} is refused`);
  }
  const own = await request(`${base}/console/signin`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded', origin: base },
    body: `token=${fresh}`,
  });
  await own.body.text();
  t.equal(own.statusCode, 303, 'from its own origin the same link works (the refusals did not use it)');
  const again = await postForm(base, '/console/signin', { token });
  t.equal(again.status, 403, 'a used link is refused');
  t.notOk(again.headers['set-cookie']);

  const stale = await s.link();
  await s.g.db.pool.query("UPDATE console_links SET expires_at = now() - interval '1 second' WHERE used_at IS NULL");
  t.equal((await postForm(base, '/console/signin', { token: new URL(stale).searchParams.get('token')! })).status, 403, 'an expired link is refused');
  t.equal((await postForm(base, '/console/signin', { token: 'x'.repeat(43) })).status, 403, 'a made-up token is refused');
  const https = await (async () => {
    const l = await s.link();
    const { request } = await import('undici');
    const r = await request(`${base}/console/signin`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-forwarded-proto': 'https' },
      body: `token=${new URL(l).searchParams.get('token')}`,
    });
    await r.body.text();
    return String(r.headers['set-cookie']);
  })();
  t.match(https, /; Secure$/, 'Secure when served over https');
});

t.test('no page without a session; a signed-out session is dead', async (t) => {
  const s = await startConsoleStack(t);
  const base = s.g.url;
  for (const p of ['/console', '/console/keys', '/console/usage', '/console/billing', '/console/playground', '/console/usage.csv']) {
    const r = await getPage(base, p);
    t.equal(r.status, 303, `${p} without a session`);
    t.equal(r.headers.location, '/console/signin');
  }
  const sess = await signInHttp(base, await s.link());
  t.equal((await getPage(base, '/console', sess.cookie)).status, 200);
  const lateNonce = await keyFormNonce(base, sess.cookie);
  t.equal((await postForm(base, '/console/signout', { csrf: 'wrong' }, sess.cookie)).status, 403, 'sign-out needs the CSRF token too');
  const out = await postForm(base, '/console/signout', { csrf: sess.csrf }, sess.cookie);
  t.equal(out.status, 303);
  t.match(String(out.headers['set-cookie']), /Max-Age=0/);
  t.equal(
    String(out.headers['set-cookie']),
    'inkgate_console=; Path=/console; Max-Age=0; HttpOnly; SameSite=Strict',
    'the session cookie cleared with its own attributes',
  );
  t.equal((await getPage(base, '/console', sess.cookie)).status, 303, 'the old cookie after sign-out: signed out');
  t.equal((await postForm(base, '/console/keys', { csrf: sess.csrf, name: 'late', nonce: lateNonce }, sess.cookie)).status, 401, 'and no form works with it');
  const keys = await s.g.db.pool.query('SELECT count(*)::int AS n FROM api_keys WHERE account_id = $1', [s.accountId]);
  t.equal(keys.rows[0].n, 0, 'no key was made');
  const later = await signInHttp(base, await s.link());
  await s.g.db.pool.query("UPDATE console_sessions SET expires_at = now() - interval '1 second' WHERE revoked_at IS NULL");
  t.equal((await getPage(base, '/console', later.cookie)).status, 303, 'an expired session is signed out');
});

t.test('keys: CSRF, the raw key once, escaping, revoke and limit, other accounts out of reach', async (t) => {
  const s = await startConsoleStack(t);
  const base = s.g.url;
  const sess = await signInHttp(base, await s.link());
  const hostile = '<script>alert(1)</script>"\'&';
  t.equal((await postForm(base, '/console/keys', { name: 'no csrf' }, sess.cookie)).status, 403, 'missing CSRF token');
  t.equal((await postForm(base, '/console/keys', { name: 'bad csrf', csrf: sess.csrf.slice(0, -2) + 'AA' }, sess.cookie)).status, 403, 'wrong CSRF token');
  const made = await createKeyHttp(base, sess, { name: hostile, ink_limit: '5000' });
  t.equal(made.status, 201);
  const raw = /value="(svc_[A-Za-z0-9_-]{43})"/.exec(made.text)?.[1];
  t.ok(raw, 'the raw key is on the creation page');
  t.notOk(made.text.includes('<script>alert(1)'), 'the name is escaped');
  t.ok(made.text.includes('&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#39;&amp;'));
  const me = await s.g.call('GET', '/v1/me', { key: raw! });
  t.equal(me.status, 200, 'the new key works');
  t.equal(me.json.key.ink_limit, 5000);
  for (const p of ['/console', '/console/keys', '/console/usage', '/console/billing']) {
    const page = await getPage(base, p, sess.cookie);
    t.notOk(page.text.includes(raw!), `${p} never shows the raw key again`);
    t.notOk(page.text.includes('<script>alert'), `${p} escapes the name`);
  }
  const keyId = me.json.key.id as string;
  const tomorrow = new Date(Date.now() + 86_400_000).toISOString().slice(0, 10);
  const dated = await createKeyHttp(base, sess, { name: 'dated', expires: tomorrow });
  t.equal(dated.status, 201);
  const datedKey = /value="(svc_[A-Za-z0-9_-]{43})"/.exec(dated.text)![1]!;
  t.equal((await s.g.call('GET', '/v1/me', { key: datedKey })).status, 200, 'a key with an expiry works until then');
  const exp = await s.g.db.pool.query("SELECT expires_at FROM api_keys WHERE name = 'dated' AND account_id = $1", [s.accountId]);
  t.equal(exp.rows[0].expires_at.toISOString(), `${tomorrow}T23:59:59.000Z`, 'it expires at the end of the chosen day (UTC)');
  const past = await createKeyHttp(base, sess, { name: 'past', expires: '2020-01-01' });
  t.equal(past.status, 400);
  t.match(past.text, /expiry must be a day in the future/);
  t.equal((await postForm(base, `/console/keys/${keyId}/limit`, { csrf: sess.csrf, ink_limit: '7000' }, sess.cookie)).status, 303);
  t.equal((await s.g.call('GET', '/v1/me', { key: raw! })).json.key.ink_limit, 7000, 'the cap edit applies');
  t.equal((await postForm(base, `/console/keys/${keyId}/limit`, { csrf: sess.csrf, ink_limit: '-1' }, sess.cookie)).status, 400);

  const other = await s.otherAccount();
  const theirs = await createKey(s.g.db.pool, { accountId: other, name: 'theirs' });
  const cross = await postForm(base, `/console/keys/${theirs.id}/revoke`, { csrf: sess.csrf }, sess.cookie);
  t.equal(cross.status, 404, "another account's key id answers as unknown");
  t.equal((await s.g.call('GET', '/v1/me', { key: theirs.key })).status, 200, 'and their key still works');
  t.equal((await postForm(base, `/console/keys/${theirs.id}/limit`, { csrf: sess.csrf, ink_limit: '1' }, sess.cookie)).status, 404);

  t.equal((await postForm(base, `/console/keys/${keyId}/revoke`, { csrf: sess.csrf }, sess.cookie)).status, 303);
  t.equal((await s.g.call('GET', '/v1/me', { key: raw! })).status, 401, 'a revoked key is refused');
  t.match((await getPage(base, '/console/keys', sess.cookie)).text, /revoked/);
});

t.test('keys: the usage frame shown per key, chosen at creation and edited in place; the playground unaffected', async (t) => {
  const s = await startConsoleStack(t);
  const base = s.g.url;
  const sess = await signInHttp(base, await s.link());
  const frameOf = async (id: string) => (await s.g.db.pool.query('SELECT usage_frame FROM api_keys WHERE id = $1', [id])).rows[0].usage_frame as string;
  const streamed = async (key: string) => {
    const r = await request(`${base}/v1/messages`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sonnet', max_tokens: 50, stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    });
    return r.body.text();
  };
  const page = await getPage(base, '/console/keys', sess.cookie);
  t.match(
    page.text,
    /<label>Usage frame <select name="usage_frame"><option value="event" selected>event<\/option><option value="comment">comment<\/option><option value="none">none<\/option><\/select><\/label>/,
    'the creation form offers the three, event first',
  );
  t.match(page.text, /X-Service-Usage-Frame/, 'the page says a request can override it');

  const made = await createKeyHttp(base, sess, { name: 'agent', usage_frame: 'comment' });
  t.equal(made.status, 201);
  const raw = /value="(svc_[A-Za-z0-9_-]{43})"/.exec(made.text)![1]!;
  const keyId = (await s.g.call('GET', '/v1/me', { key: raw })).json.key.id as string;
  t.equal(await frameOf(keyId), 'comment', 'created with the chosen frame');
  t.match(made.text, new RegExp(`action="/console/keys/${keyId}/usage-frame"[^]*?<option value="comment" selected>`), "the key's row shows it");
  t.match(await streamed(raw), /\n: service\.usage \{[^\n]+\}\n\n$/, 'and its streams carry the comment');
  const plain = await createKeyHttp(base, sess, { name: 'plain' });
  const plainId = (await s.g.call('GET', '/v1/me', { key: /value="(svc_[A-Za-z0-9_-]{43})"/.exec(plain.text)![1]! })).json.key.id as string;
  t.equal(await frameOf(plainId), 'event', 'a form without the field (no script, an old page) gets event');

  // Edited in place, with the session's CSRF token like the limit.
  const edit = (id: string, fields: Record<string, string>, cookie = sess.cookie) => postForm(base, `/console/keys/${id}/usage-frame`, fields, cookie);
  t.equal((await edit(keyId, { usage_frame: 'none' })).status, 403, 'missing CSRF token');
  t.equal((await edit(keyId, { csrf: sess.csrf, usage_frame: 'none' })).status, 303);
  t.equal(await frameOf(keyId), 'none');
  t.notMatch(await streamed(raw), /service\.usage/, 'the edit applies to the next stream');
  const bad = await edit(keyId, { csrf: sess.csrf, usage_frame: 'loud' });
  t.equal(bad.status, 400);
  t.match(bad.text, /The usage frame must be one of event, comment, none\./);
  t.equal((await edit(keyId, { csrf: sess.csrf })).status, 400, 'a post without a value is refused too');
  const badCreate = await createKeyHttp(base, sess, { name: 'loud', usage_frame: 'loud' });
  t.equal(badCreate.status, 400, 'and at creation');
  t.equal((await s.g.db.pool.query("SELECT count(*)::int AS n FROM api_keys WHERE name = 'loud'")).rows[0].n, 0, 'no key made');
  t.equal(await frameOf(keyId), 'none', 'nothing changed by the refusals');
  const other = await s.otherAccount();
  const theirs = await createKey(s.g.db.pool, { accountId: other, name: 'theirs' });
  t.equal((await edit(theirs.id, { csrf: sess.csrf, usage_frame: 'none' })).status, 404, "another account's key answers as unknown");
  t.equal(await frameOf(theirs.id), 'event');

  // The playground asks for the named event itself: its key's setting does not hide the charge.
  const pg = await playgroundKey(s.g.db.pool, s.accountId);
  const pgId = (await s.g.call('GET', '/v1/me', { key: pg })).json.key.id as string;
  t.equal((await edit(pgId, { csrf: sess.csrf, usage_frame: 'none' })).status, 303);
  const r = await request(`${base}/console/playground/stream`, {
    method: 'POST',
    headers: { cookie: sess.cookie, 'content-type': 'application/json', 'x-csrf-token': sess.csrf },
    body: JSON.stringify({ model: 'messages:assistant-sonnet-5', prompt: 'Hello', max_tokens: '64' }),
  });
  t.equal(r.statusCode, 200);
  t.match(await r.body.text(), /event: service\.usage\ndata: \{"type":"service\.usage","ink_charged":\d+/, 'the playground stream still ends with the charge');
  await assertLedgerInvariant(t, s.g.db.pool);
});

t.test('a free account without a top-up cannot create a key here either', async (t) => {
  const s = await startConsoleStack(t);
  const free = await createAccount(s.g.db.pool, { name: 'Free', planId: 'free' });
  const sess = await signInHttp(s.g.url, await s.link(free.id));
  const nonce = await keyFormNonce(s.g.url, sess.cookie);
  const r = await postForm(s.g.url, '/console/keys', { name: 'k', csrf: sess.csrf, nonce }, sess.cookie);
  t.equal(r.status, 400);
  t.match(r.text, /paid plan or at least one completed/);
  // The refusal rolled back the nonce's claim: after a top-up the same form creates the key.
  await s.g.gw.services.ledger.topUp(free.id, 1_000, 'first top-up');
  const again = await postForm(s.g.url, '/console/keys', { name: 'k', csrf: sess.csrf, nonce }, sess.cookie);
  t.equal(again.status, 201, 'the refused post did not use the nonce up');
});

t.test('the key form is one-time: a re-post creates nothing and never shows the key again', async (t) => {
  const s = await startConsoleStack(t);
  const base = s.g.url;
  const sess = await signInHttp(base, await s.link());
  const countKeys = async () => (await s.g.db.pool.query('SELECT count(*)::int AS n FROM api_keys WHERE account_id = $1', [s.accountId])).rows[0].n as number;
  const nonce = await keyFormNonce(base, sess.cookie);
  const form = { name: 'reloaded', csrf: sess.csrf, nonce };
  const first = await postForm(base, '/console/keys', form, sess.cookie);
  t.equal(first.status, 201);
  const raw = /value="(svc_[A-Za-z0-9_-]{43})"/.exec(first.text)![1]!;
  const again = await postForm(base, '/console/keys', form, sess.cookie);
  t.equal(again.status, 409, 'the same form posted again (a reload) is answered, not obeyed');
  t.match(again.text, /already created/);
  t.match(again.text, /<strong>reloaded<\/strong>/, 'naming the key the first post made');
  t.match(again.text, /href="\/console\/keys"/, 'with a link to the key list');
  t.notOk(again.text.includes(raw), 'the raw key is not shown again');
  t.notMatch(again.text, /svc_[A-Za-z0-9_-]{43}/, 'nor any raw key');
  t.equal(await countKeys(), 1, 'exactly one key in the database');
  const made = await s.g.db.pool.query('SELECT k.id FROM api_keys k JOIN console_form_nonces n ON n.key_id = k.id WHERE k.account_id = $1', [s.accountId]);
  t.equal(made.rowCount, 1, 'the used nonce remembers the key it created');

  // Two posts of one form at the same moment (a double click): one key.
  const twin = { name: 'twin', csrf: sess.csrf, nonce: await keyFormNonce(base, sess.cookie) };
  const both = await Promise.all([postForm(base, '/console/keys', twin, sess.cookie), postForm(base, '/console/keys', twin, sess.cookie)]);
  t.same(both.map((r) => r.status).sort(), [201, 409], 'one creates, the other is told it was already created');
  t.equal(await countKeys(), 2);

  // Another session's nonce, a made-up one, a missing one: refused, nothing created.
  const other = await signInHttp(base, await s.link());
  const theirs = await keyFormNonce(base, other.cookie);
  const cross = await postForm(base, '/console/keys', { name: 'cross', csrf: sess.csrf, nonce: theirs }, sess.cookie);
  t.equal(cross.status, 403, 'a nonce of another session is refused');
  t.match(cross.text, /no longer valid/);
  t.equal(
    (await postForm(base, '/console/keys', { name: 'made-up', csrf: sess.csrf, nonce: 'A'.repeat(43) }, sess.cookie)).status,
    403,
    'an unknown nonce is refused',
  );
  t.equal((await postForm(base, '/console/keys', { name: 'none', csrf: sess.csrf }, sess.cookie)).status, 403, 'a form without a nonce is refused');
  t.equal(await countKeys(), 2, 'none of them created a key');
  t.equal(
    (await postForm(base, '/console/keys', { name: 'theirs', csrf: other.csrf, nonce: theirs }, other.cookie)).status,
    201,
    'in its own session that nonce still works (the refusal did not use it)',
  );

  // A nonce lives no longer than its session, and a session holds a bounded number of them.
  const stale = await keyFormNonce(base, sess.cookie);
  await s.g.db.pool.query("UPDATE console_form_nonces SET expires_at = now() - interval '1 second' WHERE used_at IS NULL");
  t.equal((await postForm(base, '/console/keys', { name: 'stale', csrf: sess.csrf, nonce: stale }, sess.cookie)).status, 403, 'an expired nonce is refused');
  for (let i = 0; i < NONCES_PER_SESSION + 5; i++) await keyFormNonce(base, sess.cookie);
  const sessionHash = createHash('sha256').update(sess.cookie.split('=')[1]!).digest();
  const held = await s.g.db.pool.query('SELECT count(*)::int AS n FROM console_form_nonces WHERE session_hash = $1', [sessionHash]);
  t.equal(held.rows[0].n, NONCES_PER_SESSION, 'a session holds at most NONCES_PER_SESSION nonces');
});

t.test('overview, usage, CSV, request pages and billing agree with the ledger', async (t) => {
  const s = await startConsoleStack(t);
  const base = s.g.url;
  // A period roll-over first, while no lease holds any of the grant.
  const rolled = await s.g.gw.services.ledger.rollPeriod(s.accountId);
  t.ok(rolled.expiredInk > 0, 'the roll-over lapsed the unused grant');
  const k = await createKey(s.g.db.pool, { accountId: s.accountId, name: 'sdk' });
  const client = new Anthropic({ baseURL: base, authToken: k.key, apiKey: null, maxRetries: 0 });
  const { response } = await client.messages.create({ model: 'sonnet', max_tokens: 100, messages: [{ role: 'user', content: 'Hi' }] }).withResponse();
  const rid = response.headers.get('x-service-request-id')!;
  const charged = Number(response.headers.get('x-service-ink-charged'));
  t.ok(charged > 0);
  const sess = await signInHttp(base, await s.link());

  const me = (await s.g.call('GET', '/v1/me', { key: k.key })).json;
  const overview = await getPage(base, '/console', sess.cookie);
  const fig = (name: string) => Number(new RegExp(`data-figure="${name}">([0-9,]+)`).exec(overview.text)?.[1]?.replace(/,/g, ''));
  t.equal(fig('balance'), me.ink.balance, 'balance as /v1/me');
  t.equal(fig('grant'), me.ink.period_grant_remaining);
  t.equal(fig('payg'), me.ink.payg_balance);
  t.equal(fig('charged'), me.key.ink_charged);

  const usage = await getPage(base, '/console/usage', sess.cookie);
  t.ok(usage.text.includes(rid), 'the request id the SDK saw is listed');
  t.match(usage.text, /<svg role="img"/, 'the chart is inline SVG');
  const csv = await getPage(base, `/console/usage.csv?key=${k.id}`, sess.cookie);
  t.equal(csv.headers['content-type'], 'text/csv; charset=utf-8');
  const line = csv.text.split('\n').find((l) => l.startsWith(rid + ','));
  t.ok(line, 'the CSV has the request');
  t.equal(Number(line!.split(',')[9]), charged, 'with its charge');
  t.equal(
    (await getPage(base, '/console/usage.csv?model=nothing-like-this', sess.cookie)).text.split('\n').filter(Boolean).length,
    1,
    'a filter that matches nothing: header only',
  );
  const detail = await getPage(base, `/console/requests/${rid}`, sess.cookie);
  t.equal(detail.status, 200);

  const other = await s.otherAccount();
  const sessOther = await signInHttp(base, await s.link(other));
  t.equal((await getPage(base, `/console/requests/${rid}`, sessOther.cookie)).status, 404, "another account's request id answers as unknown");
  t.notOk((await getPage(base, '/console/usage', sessOther.cookie)).text.includes(rid));
  t.notOk((await getPage(base, `/console/usage.csv?key=${k.id}`, sessOther.cookie)).text.includes(rid), 'not even through a filter on the key id');

  const billing = await getPage(base, '/console/billing?holds=1', sess.cookie);
  t.match(billing.text, /Period roll-over/);
  t.match(billing.text, new RegExp(`−${rolled.expiredInk.toLocaleString('en-US')} expired`));
  const balances = [...billing.text.matchAll(/data-balance>([0-9,]+)/g)].map((m) => Number(m[1]!.replace(/,/g, '')));
  const w = (await s.g.db.pool.query('SELECT credited_ink - charged_ink - expired_ink AS unspent FROM wallets WHERE account_id = $1', [s.accountId])).rows[0];
  t.equal(balances[0], Number(w.unspent), 'the newest running balance is the wallet');
  t.equal(balances[0], Number(/data-figure="unspent">([0-9,]+)/.exec(billing.text)![1]!.replace(/,/g, '')), 'and the page says so');
  const j = (
    await s.g.db.pool.query('SELECT sum(credited_ink - charged_ink - expired_ink)::bigint AS s FROM ledger_journal WHERE account_id = $1', [s.accountId])
  ).rows[0];
  t.equal(balances[0], Number(j.s), 'the sum of every journal movement');
  t.equal(balances.at(-1), 50_000, 'the oldest (the top-up) is the top-up');
  t.match(billing.text, /Top-up/);
  t.match(billing.text, /Period grant/);
  t.match(billing.text, /Charge for a request|Requests charged from set-aside Ink/, 'the charge, per request or in a lease batch');
  t.match(billing.text, new RegExp(`−${charged} charged`));
  // A page past the oldest entry: no entries, the unspent figure still the wallet's.
  const past = await getPage(base, '/console/billing?before=1', sess.cookie);
  t.equal(past.status, 200);
  t.notMatch(past.text, /data-balance>/, 'no entries past the oldest');
  t.equal(Number(/data-figure="unspent">([0-9,]+)/.exec(past.text)![1]!.replace(/,/g, '')), Number(w.unspent), 'the unspent figure is the wallet');
  await assertLedgerInvariant(t, s.g.db.pool);
});

t.test("the overview's figures are GET /v1/me's: the account's Ink and each key's spend", async (t) => {
  const s = await startConsoleStack(t);
  const base = s.g.url;
  const capped = await createKey(s.g.db.pool, { accountId: s.accountId, name: 'capped', inkLimit: 40_000 });
  const open = await createKey(s.g.db.pool, { accountId: s.accountId, name: 'open' });
  for (const [k, calls] of [
    [capped, 2],
    [open, 1],
  ] as const) {
    const client = new Anthropic({ baseURL: base, authToken: k.key, apiKey: null, maxRetries: 0 });
    for (let i = 0; i < calls; i++) await client.messages.create({ model: 'sonnet', max_tokens: 100, messages: [{ role: 'user', content: `Hi ${i}` }] });
  }
  const meCapped = (await s.g.call('GET', '/v1/me', { key: capped.key })).json;
  const meOpen = (await s.g.call('GET', '/v1/me', { key: open.key })).json;
  t.ok(meCapped.key.ink_charged > 0 && meOpen.key.ink_charged > 0, 'both keys were billed');
  t.not(meCapped.key.ink_charged, meOpen.key.ink_charged, 'and by different amounts, so a row cannot show the other key');
  t.same(meOpen.ink, meCapped.ink, 'one account, one balance');

  const sess = await signInHttp(base, await s.link());
  const overview = await getPage(base, '/console', sess.cookie);
  const num = (v: string | undefined) => Number(v?.replace(/,/g, ''));
  const fig = (name: string) => num(new RegExp(`data-figure="${name}">([0-9,]+)`).exec(overview.text)?.[1]);
  t.equal(fig('balance'), meCapped.ink.balance, 'balance');
  t.equal(fig('grant'), meCapped.ink.period_grant_remaining, 'period grant remaining');
  t.equal(fig('payg'), meCapped.ink.payg_balance, 'pay-as-you-go');
  t.match(overview.text, `(${(meCapped.ink.payg_balance / 100).toFixed(2)} USD)`, 'in USD at 1 Ink = 0.01 USD');
  t.match(
    overview.text,
    `data-figure="usd-payg-equivalent">(${meCapped.ink.usd_payg_equivalent.toFixed(2)} USD at the pay-as-you-go rate)`,
    "/v1/me's usd_payg_equivalent beside the whole balance, said to be the balance at the pay-as-you-go rate",
  );
  t.equal(fig('charged'), meCapped.key.ink_charged + meOpen.key.ink_charged, "charged: the account's keys together");
  t.equal(fig('reserved'), meCapped.key.ink_reserved + meOpen.key.ink_reserved, 'reserved: the same');
  for (const me of [meCapped, meOpen]) {
    const row = new RegExp(`<tr><td>${me.key.name}</td><td><code>[^<]*</code></td><td>([0-9,]+)</td><td>([0-9,]+)</td><td>([^<]+)</td>`).exec(overview.text);
    t.ok(row, `a spend row for ${me.key.name}`);
    t.equal(num(row?.[1]), me.key.ink_charged, `${me.key.name}: charged`);
    t.equal(num(row?.[2]), me.key.ink_reserved, `${me.key.name}: reserved`);
    t.equal(row?.[3], me.key.ink_limit === null ? 'none' : me.key.ink_limit.toLocaleString('en-US'), `${me.key.name}: limit`);
  }
  await assertLedgerInvariant(t, s.g.db.pool);
});

t.test('playground key: concurrent first calls make one key, stored as the hash of the value sent', async (t) => {
  const s = await startConsoleStack(t);
  const acc = s.accountId;
  const raws = await Promise.all([1, 2, 3, 4].map(() => playgroundKey(s.g.db.pool, acc)));
  t.equal(new Set(raws).size, 1, 'every caller got the same key');
  const made = await s.g.db.pool.query('SELECT key_hash FROM api_keys WHERE account_id = $1 AND name = $2', [acc, PLAYGROUND_KEY_NAME]);
  t.equal(made.rowCount, 1, 'one playground key on the account');
  t.same(made.rows[0].key_hash, createHash('sha256').update(raws[0]!).digest(), 'stored as the hash of the value the playground sends');
});

t.test('playground: billed through the lane with the account playground key, no key in the page', async (t) => {
  const s = await startConsoleStack(t);
  const base = s.g.url;
  const sess = await signInHttp(base, await s.link());
  const page = await getPage(base, '/console/playground', sess.cookie);
  t.equal(page.status, 200);
  t.notMatch(page.text, /svc_[A-Za-z0-9_-]{43}/, 'no key in the page');
  t.equal(
    (await postForm(base, '/console/playground', { model: 'messages:assistant-sonnet-5', prompt: 'Hello', max_tokens: '64' }, sess.cookie)).status,
    403,
    'CSRF',
  );
  const r = await postForm(
    base,
    '/console/playground',
    { csrf: sess.csrf, model: 'messages:assistant-sonnet-5', prompt: 'Hello', max_tokens: '64' },
    sess.cookie,
  );
  t.equal(r.status, 200);
  t.notMatch(r.text, /svc_[A-Za-z0-9_-]{43}/, 'no key in the answer');
  const rid = /\/console\/requests\/(req_[0-9a-f]{32})/.exec(r.text)?.[1];
  t.ok(rid, 'the request id is shown');
  const charged = Number(/id="charged">([0-9,]+) Ink/.exec(r.text)?.[1]?.replace(/,/g, ''));
  t.ok(charged > 0, 'and the charge');
  await s.g.gw.services.escrow.beforeView();
  const rec = await s.g.gw.services.ledger.getRequest(rid!);
  t.equal(Number(rec!.charged_ink), charged, 'the ledger charged what the page says');
  const pk = await s.g.db.pool.query('SELECT k.name, k.account_id FROM console_playground_keys p JOIN api_keys k ON k.id = p.key_id WHERE p.account_id = $1', [
    s.accountId,
  ]);
  t.equal(pk.rows[0].name, 'Console playground', 'made with a key of the account');
  t.equal(rec!.key_id, (await s.g.db.pool.query('SELECT key_id FROM console_playground_keys WHERE account_id = $1', [s.accountId])).rows[0].key_id);

  // Revoked in the console: the next call makes a new playground key.
  const old = rec!.key_id as string;
  t.equal((await postForm(base, `/console/keys/${old}/revoke`, { csrf: sess.csrf }, sess.cookie)).status, 303);
  const again = await postForm(base, '/console/playground', { csrf: sess.csrf, model: 'responses:text-6-astra', prompt: 'Hi', max_tokens: '64' }, sess.cookie);
  t.equal(again.status, 200);
  t.match(again.text, /id="status">200</);
  const now = (await s.g.db.pool.query('SELECT key_id FROM console_playground_keys WHERE account_id = $1', [s.accountId])).rows[0].key_id;
  t.not(now, old, 'a new playground key after the old one was revoked');
  await assertLedgerInvariant(t, s.g.db.pool);
});

t.test('reference pages and static files are public; unknown console paths are 404', async (t) => {
  const s = await startConsoleStack(t);
  const idx = await getPage(s.g.url, '/console/reference');
  t.equal(idx.status, 200);
  t.match(idx.text, /\/console\/reference\/messages/);
  const m = await getPage(s.g.url, '/console/reference/messages');
  t.match(m.text, /max_tokens/);
  t.match(m.text, /insufficient_ink/);
  t.match(m.text, /assistant-sonnet-5/, 'model enum from the catalogue');
  t.equal((await getPage(s.g.url, '/console/reference/nope')).status, 404);
  t.equal((await getPage(s.g.url, '/console/nothing-here')).status, 404);
  const css = await getPage(s.g.url, '/console/static/console.css');
  t.equal(css.status, 200);
  t.equal(css.headers['content-type'], 'text/css; charset=utf-8');
  t.equal((await getPage(s.g.url, '/console/static/../../package.json')).status, 404);
});

t.test('generations: listed with their state, downloaded through a fresh signed link, not by another account', async (t) => {
  const h = await startImageHarness(t);
  const k = await h.funded(1_000);
  const sub = await h.submit(k.key, { model: 'image-1', prompt: 'an ink drop' });
  t.equal(sub.status, 202);
  const done = await runToEnd(h, k.key, sub.json.id);
  t.equal(done.status, 'succeeded');
  const base = h.tg.url;
  const link = async (acc: string) => `${base}/console/signin?token=${(await createSignInLink(h.services.pool, acc, 900_000)).token}`;
  const sess = await signInHttp(base, await link(k.accountId));
  const usage = await getPage(base, '/console/usage', sess.cookie);
  t.ok(usage.text.includes(sub.json.id), 'the generation is listed');
  t.match(usage.text, /succeeded/);
  const dl = await getPage(base, `/console/generations/${sub.json.id}`, sess.cookie);
  t.equal(dl.status, 303);
  const loc = String(dl.headers.location);
  t.match(loc, /^\/media\/.+\?exp=\d+&n=[^&]+&sig=/, 'a signed media link on this origin');
  const media = await getPage(base, loc);
  t.equal(media.status, 200, 'the link downloads the result');
  t.match(String(media.headers['content-type']), /^image\//);

  const other = await h.funded(100);
  const sessOther = await signInHttp(base, await link(other.accountId));
  t.equal((await getPage(base, `/console/generations/${sub.json.id}`, sessOther.cookie)).status, 404, "another account's generation answers as unknown");
  t.notOk((await getPage(base, '/console/usage', sessOther.cookie)).text.includes(sub.json.id));
});

t.test('inkgate console link prints a link that signs in once; an unknown account is an error', async (t) => {
  const s = await startConsoleStack(t);
  const cfg = loadConfig({}, { db: { url: s.g.db.url, schema: s.g.db.schema }, console: { url: s.g.url } });
  const run = async (...argv: string[]) => {
    let out = '';
    let err = '';
    const code = await runCli(
      [...argv, '--json'],
      (x) => void (out += x),
      (x) => void (err += x),
      cfg,
    );
    return { code, out, err };
  };
  // Links and sessions a day past their end are cleared when a link is made; newer ones stay.
  const db = s.g.db.pool;
  const stale = [randomBytes(32), randomBytes(32)];
  await db.query(
    "INSERT INTO console_links (token_hash, account_id, expires_at) VALUES ($1, $3, now() - interval '2 days'), ($2, $3, now() - interval '1 hour')",
    [...stale, s.accountId],
  );
  await db.query(
    "INSERT INTO console_sessions (id_hash, account_id, expires_at) VALUES ($1, $3, now() - interval '2 days'), ($2, $3, now() - interval '1 hour')",
    [...stale, s.accountId],
  );
  const before = Date.now();
  const ok = await run('console', 'link', '--account', s.accountId);
  const after = Date.now();
  t.equal(ok.code, 0);
  t.same(
    (await db.query('SELECT count(*)::int AS n FROM console_links WHERE token_hash = ANY($1)', [stale])).rows[0].n,
    1,
    'the link two days past its end is gone',
  );
  t.same(
    (await db.query('SELECT count(*)::int AS n FROM console_sessions WHERE id_hash = ANY($1)', [stale])).rows[0].n,
    1,
    'the session two days past its end is gone',
  );
  const printed = JSON.parse(ok.out);
  t.match(printed.url, new RegExp(`^${s.g.url}/console/signin\\?token=[A-Za-z0-9_-]{43}$`));
  // The link is made while the command runs, so its end lies 15 minutes after a moment between
  // `before` and `after` (1 ms either side for rounding), however long the command took.
  const expiresMs = Date.parse(printed.expires_at);
  t.ok(expiresMs >= before + 900_000 - 1 && expiresMs <= after + 900_000 + 1, `valid for 15 minutes (${printed.expires_at})`);
  const sess = await signInHttp(s.g.url, printed.url);
  t.equal((await getPage(s.g.url, '/console', sess.cookie)).status, 200);
  const twice = await postForm(s.g.url, '/console/signin', { token: new URL(printed.url).searchParams.get('token')! });
  t.equal(twice.status, 403);
  const bad = await run('console', 'link', '--account', 'usr_nobody');
  t.equal(bad.code, 1);
  t.match(JSON.parse(bad.out).error.message, /unknown account usr_nobody/, 'with --json the error is the JSON document on stdout');
  t.equal((await run('console', 'link')).code, 2, '--account is required: a usage error');
});
