// Hostile input, auth: keys in query strings are ignored on every route; a key revoked
// with the operator's CLI is refused on the very next request (billed routes included, nothing
// held, nothing sent to a vendor); and no full key ever lands in the logs or the database. For
// the last, a gateway runs with a capturing debug logger through successes and every kind of
// error (bad keys, revoked key, validation, vendor failures, a broken stream, jobs), then the log
// text and every column of every table in the test's schema are searched for each raw key, and
// the log text for prompts, completions and the vendors' keys.
import type { QueryConfig } from 'pg';
import t, { type Test } from 'tap';
import { loadConfig } from '../../src/config/config.js';
import { setLane } from '../../src/deployment/state.js';
import { createLogger } from '../../src/util/log.js';
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { startArkSimulator } from '../../simulators/ark/simulator.js';
import { startOpenAISimulator } from '../../simulators/openai/simulator.js';
import { startTestGateway, type Reply } from '../helpers/gateway.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';
import { operatorCli } from '../helpers/operator-cli.js';

const ANTHROPIC_KEY = 'sk-ant-auth-leaks';
const OPENAI_KEY = 'sk-openai-auth-leaks';
const PROMPT_CANARY = 'prompt-canary-7f3a9c';

const logLines: string[] = [];
const log = createLogger('debug', (line) => {
  if (logLines.length < 100_000) logLines.push(line);
});
const anthropic = await startAnthropicSimulator({ apiKey: ANTHROPIC_KEY });
t.teardown(() => anthropic.close());
const openai = await startOpenAISimulator({ apiKey: OPENAI_KEY });
t.teardown(() => openai.close());
// The video vendor is here so that its refusals reach the log (the text lanes log only ledger trouble).
const ark = await startArkSimulator();
t.teardown(() => ark.close());
const g = await startTestGateway(
  t,
  {
    vendors: {
      anthropic: { baseUrl: anthropic.url, apiKey: ANTHROPIC_KEY },
      openai: { baseUrl: openai.url, apiKey: OPENAI_KEY },
      ark: { baseUrl: ark.url, apiKey: ark.apiKey },
    },
  },
  { log, jobs: { runner: { timers: false } } },
);
for (const lane of ['messages', 'responses', 'video', 'images'] as const) await setLane(g.db.pool, lane, true);
await g.gw.services.state.refresh();
const cliConfig = loadConfig({}, { db: { url: g.db.url, schema: g.db.schema } });
/** Every raw key this file ever made: none may be found in logs or tables. */
const rawKeys: string[] = [];

const { cli, operatorKey } = operatorCli(cliConfig);

/** An account and key made with the CLI, topped up. */
async function cliKey(name: string): Promise<{ accountId: string; keyId: string; key: string }> {
  const k = await operatorKey(name, 50);
  rawKeys.push(k.key);
  return k;
}

function assert401(t: Test, r: Reply, what: string) {
  t.equal(r.status, 401, `${what}: 401`);
  t.equal(r.json?.error?.code, 'invalid_api_key', `${what}: invalid_api_key`);
  t.equal(r.headers['www-authenticate'], 'Bearer', `${what}: WWW-Authenticate: Bearer`);
}

const msgBody = (text = 'hi') => ({ model: 'sonnet', max_tokens: 20, messages: [{ role: 'user', content: text }] });

t.test('keys in the query string are ignored on every route', async (t) => {
  const k = await cliKey('query');
  const enc = encodeURIComponent(k.key);
  const queries = [
    `key=${enc}`,
    `api_key=${enc}`,
    `apiKey=${enc}`,
    `access_token=${enc}`,
    `token=${enc}`,
    `authorization=${encodeURIComponent('Bearer ' + k.key)}`,
    `key=${enc}&api_key=${enc}`,
  ];
  const routes: Array<[string, string, unknown]> = [
    ['GET', '/v1/me', undefined],
    ['POST', '/v1/messages', msgBody()],
    ['POST', '/v1/messages/count_tokens', { model: 'sonnet', messages: [{ role: 'user', content: 'hi' }] }],
    ['POST', '/v1/responses', { model: 'astra', input: 'hi', max_output_tokens: 16 }],
    ['POST', '/v1/video/generations', { model: 'clip-2.0-fast', prompt: 'x' }],
    ['GET', '/v1/video/generations/vgen_abc', undefined],
    ['POST', '/v1/images/generations', { model: 'image-1', prompt: 'x' }],
    ['GET', '/v1/images/generations/igen_abc/content', undefined],
  ];
  const vendorCalls = anthropic.requestCount;
  for (const [method, path, body] of routes) {
    for (const q of queries) assert401(t, await g.call(method, `${path}?${q}`, { body }), `${method} ${path}?${q.split('=')[0]}=`);
    // The query key beside a header the gateway does not read either.
    assert401(t, await g.call(method, `${path}?api_key=${enc}`, { body, headers: { 'x-api-key': k.key } }), `${method} ${path} with x-api-key`);
  }
  t.equal(anthropic.requestCount, vendorCalls, 'no vendor call');
  const me = (await g.call('GET', '/v1/me', { key: k.key })).json;
  t.same([me.key.ink_reserved, me.key.ink_charged, me.ink.balance], [0, 0, 5_000], 'nothing held or charged');
  // And a query key never replaces the bearer: a valid bearer with someone else's key in the query is the bearer's.
  const other = await cliKey('query-other');
  const mine = await g.call('GET', `/v1/me?api_key=${encodeURIComponent(other.key)}`, { key: k.key });
  t.equal(mine.status, 200);
  t.equal(mine.json.user_id, k.accountId, "the bearer's account, not the query's");
});

t.test('a key revoked with the CLI is refused on the very next request, billed routes included', async (t) => {
  const k = await cliKey('revoked');
  const ok = await g.call('POST', '/v1/messages', { key: k.key, body: msgBody() });
  t.equal(ok.status, 200, 'works before');
  const charged = Number(ok.headers['x-service-ink-charged']);
  await cli('key', 'revoke', k.keyId);
  const vendorCalls = anthropic.requestCount;
  // The very next request, on a billed route, then every other route.
  assert401(t, await g.call('POST', '/v1/messages', { key: k.key, body: msgBody() }), 'messages right after the revoke');
  assert401(t, await g.call('POST', '/v1/messages', { key: k.key, body: { ...msgBody(), stream: true } }), 'a stream');
  assert401(t, await g.call('POST', '/v1/responses', { key: k.key, body: { model: 'astra', input: 'hi' } }), 'responses');
  assert401(t, await g.call('POST', '/v1/video/generations', { key: k.key, body: { model: 'clip-2.0-fast', prompt: 'x' } }), 'video');
  assert401(t, await g.call('POST', '/v1/images/generations', { key: k.key, body: { model: 'image-1', prompt: 'x' } }), 'images');
  assert401(t, await g.call('GET', '/v1/me', { key: k.key }), '/v1/me');
  t.equal(anthropic.requestCount, vendorCalls, 'no vendor call after the revoke');
  const w = (await g.db.pool.query('SELECT held_grant_ink + held_payg_ink AS held, charged_ink FROM wallets WHERE account_id = $1', [k.accountId])).rows[0];
  t.same([Number(w.held), Number(w.charged_ink)], [0, charged], 'nothing held, nothing charged after the revoke');
  const listed = await cli('key', 'list', '--account', k.accountId);
  t.ok(listed[0].revoked_at ?? listed[0].revoked ?? listed[0].status, 'the key list shows it revoked');
  await assertLedgerInvariant(t, g.db.pool);
});

t.test('no full key in the logs or the database after successes and every kind of error', async (t) => {
  const a = await cliKey('leaks-a');
  const b = await cliKey('leaks-b');
  const calls: Array<Promise<Reply>> = [];
  const key = a.key;
  // Successes: account, both text lanes, non-stream and stream.
  calls.push(g.call('GET', '/v1/me', { key }));
  calls.push(g.call('POST', '/v1/messages', { key, body: msgBody() }));
  calls.push(g.call('POST', '/v1/messages', { key, body: { ...msgBody(), stream: true } }));
  calls.push(g.call('POST', '/v1/responses', { key, body: { model: 'astra', input: 'hi', max_output_tokens: 16 } }));
  calls.push(g.call('POST', '/v1/responses', { key, body: { model: 'astra', input: 'hi', max_output_tokens: 16, stream: true } }));
  // Keys that are almost right, in the wrong place, or in the wrong scheme.
  const flipped = key.slice(0, -1) + (key.endsWith('A') ? 'B' : 'A');
  calls.push(g.call('GET', '/v1/me', { headers: { authorization: `Bearer ${flipped}` } }));
  calls.push(g.call('GET', '/v1/me', { headers: { authorization: `Basic ${key}` } }));
  calls.push(g.call('GET', '/v1/me', { headers: { authorization: `Bearer ${key}x` } }));
  calls.push(g.call('GET', '/v1/me', { headers: { 'x-api-key': key } }));
  calls.push(g.call('GET', `/v1/me?api_key=${encodeURIComponent(key)}`));
  calls.push(g.call('GET', `/v1/nope/${encodeURIComponent(key)}`, { key }));
  // Validation errors, vendor refusals and failures, a broken stream, a capped key.
  calls.push(g.call('POST', '/v1/messages', { key, body: '{"model":' }));
  calls.push(g.call('POST', '/v1/messages', { key, body: { model: 'sonnet' } }));
  calls.push(g.call('POST', '/v1/messages', { key, body: msgBody('x [[sim:status=400]]') }));
  calls.push(g.call('POST', '/v1/messages', { key, body: msgBody('x [[sim:status=401]]') }));
  calls.push(g.call('POST', '/v1/messages', { key, body: msgBody('x [[sim:status=500]]') }));
  calls.push(g.call('POST', '/v1/messages', { key, body: msgBody('x [[sim:status=529]]') }));
  calls.push(g.call('POST', '/v1/messages', { key, body: { ...msgBody('x [[sim:reset-before-delta]]'), stream: true } }));
  calls.push(g.call('POST', '/v1/messages', { key, body: { ...msgBody('x [[sim:overloaded-midstream]]'), stream: true } }));
  calls.push(g.call('POST', '/v1/responses', { key, body: { model: 'astra', input: 'x [[sim:status=500]]' } }));
  calls.push(g.call('POST', '/v1/responses', { key, body: { model: 'astra', input: 'x [[sim:cut=3]]', stream: true } }));
  // Jobs: the video vendor refuses and is unavailable (both logged), the image vendor is not
  // configured (503); bad bodies, ids and idempotency keys.
  calls.push(
    g.call('POST', '/v1/video/generations', { key, body: { model: 'clip-2.0-fast', prompt: 'x [[sim:refuse]]' }, headers: { 'idempotency-key': 'leak-1' } }),
  );
  calls.push(g.call('POST', '/v1/video/generations', { key: b.key, body: { model: 'clip-2.0-fast', prompt: 'x [[sim:unavailable]]' } }));
  calls.push(g.call('POST', '/v1/video/generations', { key, body: { model: 'clip-2.0-fast', prompt: 'x' }, headers: { 'idempotency-key': 'bad key!' } }));
  calls.push(g.call('POST', '/v1/images/generations', { key, body: { model: 'image-1', prompt: 'x', n: 2 } }));
  calls.push(g.call('GET', '/v1/video/generations/vgen_doesnotexist', { key }));
  // Prompts with a canary, through successes and failures of every lane: no log line may carry one.
  calls.push(g.call('POST', '/v1/messages', { key, body: msgBody(`${PROMPT_CANARY} hello`) }));
  calls.push(
    g.call('POST', '/v1/messages/count_tokens', { key, body: { model: 'sonnet', messages: [{ role: 'user', content: `${PROMPT_CANARY} count me` }] } }),
  );
  calls.push(
    g.call('POST', '/v1/messages/count_tokens', {
      key,
      body: { model: 'sonnet', messages: [{ role: 'user', content: `${PROMPT_CANARY} [[sim:status=500]]` }] },
    }),
  );
  calls.push(g.call('POST', '/v1/messages', { key, body: msgBody(`${PROMPT_CANARY} [[sim:status=500]]`) }));
  calls.push(g.call('POST', '/v1/messages', { key, body: { ...msgBody(`${PROMPT_CANARY} [[sim:overloaded-midstream]]`), stream: true } }));
  calls.push(g.call('POST', '/v1/responses', { key, body: { model: 'astra', input: `${PROMPT_CANARY} [[sim:status=500]]` } }));
  calls.push(g.call('POST', '/v1/responses', { key, body: { model: 'astra', input: `${PROMPT_CANARY} hello`, max_output_tokens: 16 } }));
  calls.push(g.call('POST', '/v1/video/generations', { key: b.key, body: { model: 'clip-2.0-fast', prompt: `${PROMPT_CANARY} [[sim:refuse]]` } }));
  const replies = await Promise.all(calls);
  const statuses = replies.map((r) => r.status);
  t.ok(
    statuses.includes(200) && statuses.includes(401) && statuses.includes(400) && statuses.includes(502) && statuses.includes(503),
    `a mix of answers: ${[...new Set(statuses)].sort().join(', ')}`,
  );
  // (The 404 for an unknown path names the path the client sent, key and all: its own input, to itself.)
  for (const r of replies.filter((x) => x.status !== 404)) t.notOk(r.text.includes(key.slice(12)), 'no answer echoes the secret part of the key');
  // A revoked key used after the revoke, and a capped key refused.
  await cli('key', 'revoke', b.keyId);
  t.equal((await g.call('POST', '/v1/messages', { key: b.key, body: msgBody() })).status, 401);
  const capped = await cli('key', 'create', '--account', a.accountId, '--name', 'capped', '--ink-limit', '1');
  rawKeys.push(capped.key);
  t.equal((await g.call('POST', '/v1/responses', { key: capped.key, body: { model: 'astra', input: 'hi' } })).status, 402);

  // Search the log text and every column of every table.
  const logText = logLines.join('\n');
  t.ok(logLines.length > 0, `the logger captured ${logLines.length} lines`);
  // No prompt, no completion, no vendor key in any line.
  t.notOk(logText.includes(PROMPT_CANARY), 'no prompt in the logs');
  for (const secret of [ANTHROPIC_KEY, OPENAI_KEY, ark.apiKey]) t.notOk(logText.includes(secret), `no vendor key ${secret.slice(0, 6)}... in the logs`);
  const completions = replies
    .filter((r) => r.status === 200 && r.json)
    .flatMap((r) => [...JSON.stringify(r.json).matchAll(/"text":"([^"]{12,})"/g)].map((m) => m[1]!));
  t.ok(completions.length > 0, `${completions.length} completion texts to look for`);
  for (const c of completions) t.notOk(logText.includes(c), 'no completion text in the logs');
  // The dump is a test's bulk read, not a hot-path query: it gets its own timeout, because under
  // the whole suite's load (a soak beside it) the pool's 900 ms was not always enough.
  const slow = (text: string, values?: unknown[]) => g.db.pool.query({ text, values, query_timeout: 30_000 } as QueryConfig);
  const tables = (
    await slow(
      `SELECT c.relname AS table_name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') ORDER BY 1`,
      [g.db.schema],
    )
  ).rows.map((r) => r.table_name as string);
  t.ok(
    tables.includes('api_keys') && tables.includes('requests') && tables.includes('ledger_journal'),
    `searched ${tables.length} tables: ${tables.join(', ')}`,
  );
  let dump = '';
  let rows = 0;
  for (const name of tables) {
    const r = await slow(`SELECT x::text AS row FROM ${g.db.schema}."${name}" x`);
    rows += r.rows.length;
    dump += r.rows.map((x) => x.row).join('\n') + '\n';
  }
  t.ok(rows > 20, `${rows} rows dumped`);
  t.ok(rawKeys.length >= 4, `${rawKeys.length} raw keys to look for`);
  for (const k of rawKeys) {
    // What is stored by design: the 12-character prefix and the last four. Anything longer is a leak.
    const secret = k.slice(12, -4);
    for (const [where, text] of [
      ['log', logText],
      ['database', dump],
    ] as const) {
      t.notOk(text.includes(k), `${where}: no full key ${k.slice(0, 12)}...`);
      t.notOk(text.includes(secret), `${where}: not its secret middle either`);
      t.notOk(text.includes(Buffer.from(k).toString('hex')), `${where}: nor its bytes in hex`);
      t.notOk(text.includes(Buffer.from(k).toString('base64')), `${where}: nor in base64`);
    }
  }
  await assertLedgerInvariant(t, g.db.pool);
});
