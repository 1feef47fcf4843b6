// POST /v1/messages/count_tokens end to end: the official Anthropic SDK -> inkgate -> the Anthropic
// simulator's count endpoint. The count is the vendor's, unchanged; nothing is billed; the route has
// its own per-key limit; its refusals are those /v1/messages gives for the same body.
import Anthropic from '@anthropic-ai/sdk';
import t, { type Test } from 'tap';
import { pauseModel, setLane } from '../../src/deployment/state.js';
import type { Config, DeepPartial } from '../../src/config/config.js';
import type { EngineName } from '../../src/server/engine.js';
import { eachEngine } from '../helpers/engines.js';
import { journalWritten, startTestGateway, testRedisUrl, type Reply, type TestGateway } from '../helpers/gateway.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';
import { ANTHROPIC_VENDOR_KEY, startMessagesStack } from '../helpers/messages-stack.js';

const VENDOR_KEY = ANTHROPIC_VENDOR_KEY;
const COUNT = '/v1/messages/count_tokens';

async function setup(t: Test, opts: { enable?: boolean; engine?: EngineName; config?: DeepPartial<Config> } = {}) {
  const { sim, g, k, client } = await startMessagesStack(t, opts);
  // The simulator asked directly, as the gateway asks it (our vendor key, the vendor's model ids).
  const direct = new Anthropic({ baseURL: sim.url, apiKey: VENDOR_KEY, maxRetries: 0 });
  return { sim, g, k, client, direct, invariant: () => assertLedgerInvariant(t, g.db.pool) };
}

const me = async (g: TestGateway, key: string) => (await g.call('GET', '/v1/me', { key })).json;
const user = (text: string) => [{ role: 'user' as const, content: text }];
const requestRows = async (g: TestGateway, keyId: string): Promise<number> => {
  await journalWritten(g);
  return (await g.db.pool.query('SELECT count(*)::int AS n FROM requests WHERE key_id = $1', [keyId])).rows[0].n;
};

const WEATHER = {
  name: 'get_weather',
  description: 'Weather for a city',
  input_schema: { type: 'object' as const, properties: { city: { type: 'string' } }, required: ['city'] },
};
/** A prompt with every part a count covers: system, tools, tool_choice, thinking, several turns. */
const PROMPT = {
  model: 'sonnet',
  system: 'You are a terse weather assistant. Answer in one line.',
  tools: [WEATHER],
  tool_choice: { type: 'auto' as const },
  thinking: { type: 'enabled' as const, budget_tokens: 1024 },
  messages: [
    { role: 'user' as const, content: 'Hello, how are you today?' },
    { role: 'assistant' as const, content: 'Fine, thank you. What do you need?' },
    { role: 'user' as const, content: [{ type: 'text' as const, text: 'What is the weather like in Lisbon this week, roughly?' }] },
  ],
};

eachEngine('the SDK counts through inkgate: the vendor count, equal to what /v1/messages reports, nothing billed', async (t, engine) => {
  const { g, k, sim, client, direct, invariant } = await setup(t, { engine });
  const before = await me(g, k.key);
  const { data: counted, response } = await client.messages.countTokens(PROMPT).withResponse();
  t.same(Object.keys(counted), ['input_tokens'], "the vendor's answer as it came");
  t.ok(counted.input_tokens > 20, `${counted.input_tokens} tokens`);
  t.match(response.headers.get('request-id'), /^req_/, 'our request id, where the Anthropic SDK reads it');

  const sent = sim.requests.at(-1)!;
  const vendorModel = g.gw.services.catalog.text('sonnet')!.vendorModel;
  t.equal(sent.path, COUNT, "the vendor's count endpoint");
  t.same(sent.body, { ...PROMPT, model: vendorModel }, 'the prompt as sent, with the vendor model id and nothing added');
  t.equal(sent.headers['x-api-key'], VENDOR_KEY, 'our vendor key');
  t.notOk(sent.headers.authorization, "the client's key never reaches the vendor");
  t.equal(sent.headers['anthropic-version'], '2023-06-01', 'our protocol version');

  const own = await direct.messages.countTokens({ ...PROMPT, model: vendorModel });
  t.equal(counted.input_tokens, own.input_tokens, "the simulator's own count of the same body");
  const msg = await client.messages.create({ ...PROMPT, max_tokens: 2000 });
  const reported = msg.usage.input_tokens + (msg.usage.cache_creation_input_tokens ?? 0) + (msg.usage.cache_read_input_tokens ?? 0);
  t.equal(counted.input_tokens, reported, 'what /v1/messages reports as the prompt for the same body');
  t.equal(await requestRows(g, k.keyId), 1, 'one request record: the message, none for the count');

  // Counting alone moves nothing.
  const mid = await me(g, k.key);
  for (let i = 0; i < 3; i++) t.equal((await client.messages.countTokens({ model: 'opus', messages: user(`count ${i}`) })).input_tokens > 0, true);
  const after = await me(g, k.key);
  t.equal(after.key.ink_charged, mid.key.ink_charged, 'nothing charged');
  t.equal(after.key.ink_reserved, 0, 'nothing held');
  t.equal(after.ink.balance, mid.ink.balance, 'wallet untouched');
  t.ok(mid.key.ink_charged > before.key.ink_charged, 'the message itself was charged (the figures are live)');
  t.equal(await requestRows(g, k.keyId), 1, 'still no record for a count');
  await invariant();
});

t.test('a key with an empty wallet may count; anthropic-beta is filtered as on /v1/messages', async (t) => {
  const { g, sim, invariant } = await setup(t);
  const poor = await g.newKey();
  const client = new Anthropic({ baseURL: g.url, authToken: poor.key, apiKey: null, maxRetries: 0 });
  t.ok((await client.messages.countTokens({ model: 'fable', messages: user('hi') })).input_tokens > 0, 'counted without Ink');
  const refused = await g.call('POST', '/v1/messages', { key: poor.key, body: { model: 'fable', max_tokens: 10, messages: user('hi') } });
  t.equal(refused.json.error.code, 'insufficient_ink', 'while a message needs Ink');

  const withBeta = await g.call('POST', COUNT, {
    key: poor.key,
    body: { model: 'fable', messages: user('hi') },
    headers: { 'anthropic-beta': 'context-management-2025-06-27, prompt-caching-2024-07-31' },
  });
  t.equal(withBeta.status, 200);
  t.equal(sim.requests.at(-1)!.headers['anthropic-beta'], 'prompt-caching-2024-07-31', 'only the allowed beta value is forwarded');
  await g.call('POST', COUNT, {
    key: poor.key,
    body: { model: 'fable', messages: user('hi') },
    headers: { 'anthropic-beta': 'context-management-2025-06-27' },
  });
  t.equal(sim.requests.at(-1)!.headers['anthropic-beta'], undefined, 'none when nothing is allowed');
  t.equal(await requestRows(g, poor.keyId), 0);
  await invariant();
});

t.test(
  `counting has its own per-key bucket: exhausted, it answers 429 while /v1/messages still works (${testRedisUrl ? 'Redis' : 'in-process'} limiter)`,
  async (t) => {
    const { g, k, sim, client, invariant } = await setup(t, {
      config: { limits: { countTokensPerMinute: 3, requestsPerMinute: 3 }, redis: { url: testRedisUrl, keyPrefix: `t${process.pid}:${Date.now()}:count:` } },
    });
    t.equal(g.gw.services.limiter.kind, testRedisUrl ? 'redis' : 'memory');
    for (let i = 0; i < 3; i++) t.equal((await g.call('POST', COUNT, { key: k.key, body: { model: 'sonnet', messages: user(`n ${i}`) } })).status, 200);
    const vendorCalls = sim.requestCount;
    const over = await g.call('POST', COUNT, { key: k.key, body: { model: 'sonnet', messages: user('one more') } });
    t.equal(over.status, 429);
    t.equal(over.json.error.code, 'rate_limit_exceeded');
    t.equal(over.json.error.type, 'rate_limit_error');
    const ra = Number(over.headers['retry-after']);
    t.ok(Number.isInteger(ra) && ra >= 1 && ra <= 60, `Retry-After ${ra}`);
    t.match(over.json.error.message, /3 token counts per minute.*count_tokens/, 'the message names the count bucket');
    t.equal(sim.requestCount, vendorCalls, 'the refused count never reached the vendor');
    const sdkOver = await client.messages.countTokens({ model: 'sonnet', messages: user('sdk') }).catch((e: unknown) => e);
    t.ok(sdkOver instanceof Anthropic.RateLimitError, 'the SDK sees a rate limit');

    // The key's own 3 per minute are all there: three counts took none of them.
    for (let i = 0; i < 3; i++) {
      const r = await g.call('POST', '/v1/messages', { key: k.key, body: { model: 'sonnet', max_tokens: 10, messages: user(`m ${i}`) } });
      t.equal(r.status, 200, `message ${i} on the same key`);
    }
    const mainOver = await g.call('GET', '/v1/me', { key: k.key });
    t.equal(mainOver.status, 429, 'the main bucket is now spent');
    t.notMatch(mainOver.json.error.message, /count/, "the main bucket's own message");

    // The other way round: a key whose main bucket is spent can still count.
    const other = await g.newKey();
    for (let i = 0; i < 3; i++) await g.call('GET', '/v1/me', { key: other.key });
    t.equal((await g.call('GET', '/v1/me', { key: other.key })).status, 429);
    t.equal((await g.call('POST', COUNT, { key: other.key, body: { model: 'sonnet', messages: user('still') } })).status, 200);
    await invariant();
  },
);

/** The same body (plus max_tokens on /v1/messages) to both routes. */
async function both(g: TestGateway, key: string | undefined, body: unknown, headers: Record<string, string> = {}): Promise<{ msg: Reply; count: Reply }> {
  const withMax = typeof body === 'object' && body !== null ? { ...body, max_tokens: 50 } : body;
  return {
    msg: await g.call('POST', '/v1/messages', { key, body: withMax, headers }),
    count: await g.call('POST', COUNT, { key, body, headers }),
  };
}

t.test('bad input: the same status, code and param as /v1/messages, before any vendor call', async (t) => {
  const { g, k, sim, invariant } = await setup(t);
  const cases: Array<[string, unknown, string, string | undefined]> = [
    ['unknown model', { model: 'gpt-4', messages: user('x') }, 'unknown_model', 'model'],
    ['model missing', { messages: user('x') }, 'unknown_model', 'model'],
    ['missing messages', { model: 'sonnet' }, 'missing_messages', 'messages'],
    ['empty messages', { model: 'sonnet', messages: [] }, 'missing_messages', 'messages'],
    [
      'a system turn inside messages',
      { model: 'sonnet', messages: [{ role: 'system', content: 'Be brief.' }, ...user('x')] },
      'invalid_message',
      'messages[0].role',
    ],
    ['an unsupported parameter', { model: 'sonnet', messages: user('x'), service_tier: 'auto' }, 'unsupported_parameter', 'service_tier'],
    ['top-level cache_control', { model: 'sonnet', messages: user('x'), cache_control: { type: 'ephemeral' } }, 'unsupported_parameter', 'cache_control'],
    [
      'an image block',
      { model: 'sonnet', messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AA==' } }] }] },
      'unsupported_parameter',
      'messages.0.content.0.type',
    ],
    [
      'a server tool',
      { model: 'sonnet', messages: user('x'), tools: [{ type: 'web_search_20250305', name: 'web_search' }] },
      'unsupported_parameter',
      'tools.0.type',
    ],
    ['a tool without a name', { model: 'sonnet', messages: user('x'), tools: [{ input_schema: { type: 'object' } }] }, 'invalid_tool', 'tools.0.name'],
    ['thinking disabled on fable', { model: 'fable', messages: user('x'), thinking: { type: 'disabled' } }, 'unsupported_parameter', 'thinking.type'],
    ['a bad tool_choice', { model: 'sonnet', messages: user('x'), tool_choice: { type: 'sometimes' } }, 'invalid_enum', 'tool_choice.type'],
  ];
  for (const [what, body, code, param] of cases) {
    const { msg, count } = await both(g, k.key, body);
    t.equal(count.status, 400, `${what}: 400`);
    t.equal(count.json?.error?.code, code, `${what}: ${code}`);
    t.equal(count.json?.error?.param, param, `${what}: param ${param}`);
    t.same(
      [count.status, count.json?.error?.code, count.json?.error?.param],
      [msg.status, msg.json?.error?.code, msg.json?.error?.param],
      `${what}: as /v1/messages answers`,
    );
  }
  const notJson = await both(g, k.key, '{"model": "sonnet", "messages": [');
  t.same([notJson.count.status, notJson.count.json.error.code], [400, 'invalid_json'], 'a body that is not JSON');
  t.same([notJson.count.status, notJson.count.json.error.code], [notJson.msg.status, notJson.msg.json.error.code]);
  const array = await both(g, k.key, '[1, 2]');
  t.same([array.count.status, array.count.json.error.code], [array.msg.status, array.msg.json.error.code], 'a JSON body that is not an object');
  const form = await both(g, k.key, 'model=sonnet', { 'content-type': 'application/x-www-form-urlencoded' });
  t.same([form.count.status, form.count.json.error.code], [415, 'unsupported_media_type']);

  const noKey = await both(g, undefined, { model: 'sonnet', messages: user('x') });
  t.equal(noKey.count.status, 401, 'no key: 401');
  t.equal(noKey.count.json.error.code, 'invalid_api_key');
  t.equal(noKey.count.json.error.code, noKey.msg.json.error.code);
  const badKey = await g.call('POST', COUNT, { key: 'svc_' + 'A'.repeat(43), body: { model: 'sonnet', messages: user('x') } });
  t.equal(badKey.status, 401, 'an unknown key: 401');

  t.equal(sim.requestCount, 0, 'the vendor saw none of them');
  t.equal(await requestRows(g, k.keyId), 0);
  await invariant();
});

t.test('a closed lane and a paused model answer the count as they answer /v1/messages', async (t) => {
  const { g, k, sim, invariant } = await setup(t, { enable: false });
  const closed = await both(g, k.key, { model: 'sonnet', messages: user('x') });
  t.equal(closed.count.status, 503);
  t.equal(closed.count.json.error.code, 'provider_unavailable');
  t.equal(closed.count.json.error.message, closed.msg.json.error.message, 'the same words: what opens the lane');
  t.match(closed.count.json.error.message, /inkgate lane enable messages/);
  t.equal(closed.count.headers['retry-after'], closed.msg.headers['retry-after']);

  await setLane(g.db.pool, 'messages', true);
  await pauseModel(g.db.pool, 'assistant-opus-5', 42);
  await g.gw.services.state.refresh();
  const paused = await both(g, k.key, { model: 'opus', messages: user('x') });
  t.same([paused.count.status, paused.count.json.error.code, paused.count.headers['retry-after']], [503, 'provider_unavailable', '42'], 'a paused model');
  t.same([paused.count.status, paused.count.json.error.message], [paused.msg.status, paused.msg.json.error.message]);
  t.equal((await g.call('POST', COUNT, { key: k.key, body: { model: 'sonnet', messages: user('x') } })).status, 200, 'other models still count');
  t.equal(sim.requestCount, 1, 'only that last count reached the vendor');
  await invariant();
});

t.test('a lane with no vendor configured: the same 503 as /v1/messages', async (t) => {
  const g = await startTestGateway(t);
  await setLane(g.db.pool, 'messages', true);
  await g.gw.services.state.refresh();
  const k = await g.newKey();
  const r = await both(g, k.key, { model: 'sonnet', messages: user('x') });
  t.same([r.count.status, r.count.json.error.code], [503, 'provider_unavailable']);
  t.equal(r.count.json.error.message, r.msg.json.error.message);
  t.match(r.count.json.error.message, /no vendor configured/);
});

t.test('vendor refusals are mapped as the lane maps them; nothing is held', async (t) => {
  const { g, k, sim, invariant } = await setup(t);
  for (const [directive, status, code] of [
    ['[[sim:status=400]]', 400, 'upstream_rejected'],
    ['[[sim:status=404]]', 400, 'upstream_rejected'],
    ['[[sim:status=429]] [[sim:retry-after=7]]', 503, 'provider_unavailable'],
    ['[[sim:status=529]] [[sim:retry-after=7]]', 503, 'provider_unavailable'],
    ['[[sim:status=401]]', 502, 'provider_error'],
    ['[[sim:status=500]]', 502, 'provider_error'],
  ] as const) {
    const r = await both(g, k.key, { model: 'sonnet', messages: user(`x ${directive}`) });
    t.same([r.count.status, r.count.json.error.code], [status, code], `vendor ${directive}: ${status} ${code}`);
    t.same([r.count.status, r.count.json.error.code], [r.msg.status, r.msg.json.error.code], `${directive}: as /v1/messages`);
    if (status === 503) t.equal(r.count.headers['retry-after'], '7', "the vendor's Retry-After");
  }
  t.equal(sim.requests.filter((x) => x.path === COUNT).length, 6, 'each count reached the vendor once');
  const m = await me(g, k.key);
  t.equal(m.key.ink_reserved > 0, true, "the message lane's 5xx keeps its own hold (the count has none)");
  t.equal(await requestRows(g, k.keyId), 6, 'a record for each message, none for the counts');
  await invariant();
});

t.test('a vendor that does not answer the count is cut off by the upstream timeout', async (t) => {
  const { g, k, invariant } = await setup(t, { config: { upstream: { countTokensTimeoutMs: 300 } } });
  const r = await g.call('POST', COUNT, { key: k.key, body: { model: 'sonnet', messages: user('x [[sim:stall-before-headers]]') } });
  t.equal(r.status, 502);
  t.equal(r.json.error.code, 'provider_error');
  t.match(r.json.error.message, /nothing was charged/);
  t.equal((await g.call('POST', COUNT, { key: k.key, body: { model: 'sonnet', messages: user('x') } })).status, 200, 'the next count is answered');
  await invariant();
});
