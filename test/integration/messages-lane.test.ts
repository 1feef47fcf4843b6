// POST /v1/messages end to end: the official Anthropic SDK -> inkgate -> the Anthropic simulator.
// Every test ends with the ledger invariant.
import Anthropic from '@anthropic-ai/sdk';
import t, { type Test } from 'tap';
import { request } from 'undici';
import { textChargeInk } from '../../src/catalog/pricing.js';
import { writtenRequest, type TestGateway } from '../helpers/gateway.js';
import { parseSse } from '../helpers/sse.js';
import { eachEngine } from '../helpers/engines.js';
import { ANTHROPIC_VENDOR_KEY, startMessagesStack } from '../helpers/messages-stack.js';
import type { EngineName } from '../../src/server/engine.js';

const VENDOR_KEY = ANTHROPIC_VENDOR_KEY;
const setup = (t: Test, opts: { enable?: boolean; engine?: EngineName } = {}) => startMessagesStack(t, opts);

const me = async (g: TestGateway, key: string) => (await g.call('GET', '/v1/me', { key })).json;
const post = (g: TestGateway, key: string, body: unknown, headers: Record<string, string> = {}) => g.call('POST', '/v1/messages', { key, body, headers });
const user = (text: string) => [{ role: 'user' as const, content: text }];

eachEngine('official SDK: messages.create through inkgate', async (t, engine) => {
  const { g, k, client, sim, invariant } = await setup(t, { engine });
  const { data: msg, response } = await client.messages
    .create({ model: 'sonnet', max_tokens: 200, messages: [{ role: 'user', content: 'Hello there' }] })
    .withResponse();
  t.equal(msg.type, 'message');
  t.equal(msg.role, 'assistant');
  t.equal(msg.model, 'assistant-sonnet-5', 'the product id, not the vendor id');
  t.match(msg.id, /^msg_/);
  t.ok(msg.content.length > 0);
  t.equal(msg.stop_reason, 'end_turn');
  const charged = Number(response.headers.get('x-service-ink-charged'));
  const expected = textChargeInk('assistant-sonnet-5', {
    inputTokens: msg.usage.input_tokens,
    outputTokens: msg.usage.output_tokens,
    cacheReadTokens: msg.usage.cache_read_input_tokens ?? 0,
    cacheWriteTokens: msg.usage.cache_creation_input_tokens ?? 0,
  });
  t.equal(charged, expected, `charged ${charged} Ink = usage at the model's rates, rounded up once`);
  t.match(response.headers.get('x-service-request-id'), /^req_/);
  t.equal(response.headers.get('x-service-request-id'), response.headers.get('x-request-id'));
  const m = await me(g, k.key);
  t.equal(m.key.ink_charged, charged);
  t.equal(m.key.ink_reserved, 0);
  t.equal(m.ink.balance, 10_000 - charged);
  t.equal(
    sim.requests.at(-1)!.body && (sim.requests.at(-1)!.body as any).model,
    g.gw.services.catalog.text('sonnet')!.vendorModel,
    'vendor model id on the wire',
  );
  await invariant();
});

eachEngine('official SDK: streaming, raw events and messages.stream()', async (t, engine) => {
  const { g, k, client, invariant } = await setup(t, { engine });
  const stream = await client.messages.create({ model: 'opus', max_tokens: 300, stream: true, messages: user('Stream to me') });
  const types: string[] = [];
  let startModel = '';
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'message_start') startModel = ev.message.model;
  }
  t.equal(startModel, 'assistant-opus-5');
  // The SDK's raw iterator hands every event on, ours included, without failing on it.
  t.same(
    types.filter((x) => x !== 'content_block_delta' && x !== 'content_block_start' && x !== 'content_block_stop'),
    ['message_start', 'message_delta', 'message_stop', 'service.usage'],
  );

  const s = client.messages.stream({ model: 'fable', max_tokens: 300, messages: user('Tell me more') });
  const final = await s.finalMessage();
  t.equal(final.model, 'assistant-fable-5-1');
  t.ok(final.usage.output_tokens > 0);

  // The raw wire: the service frame follows message_stop and names the settled charge.
  const raw = await request(g.url + '/v1/messages', {
    method: 'POST',
    headers: { authorization: `Bearer ${k.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sonnet', max_tokens: 100, stream: true, messages: user('raw please') }),
  });
  t.equal(raw.statusCode, 200);
  t.match(raw.headers['content-type'], /^text\/event-stream/);
  t.equal(raw.headers['cache-control'], 'no-store');
  const events = parseSse(await raw.body.text());
  const names = events.map((e) => e.event);
  t.equal(names.at(-2), 'message_stop');
  t.equal(names.at(-1), 'service.usage');
  const frame = JSON.parse(events.at(-1)!.data);
  t.equal(frame.type, 'service.usage');
  t.match(frame.request_id, /^req_/);
  t.equal(frame.usd_payg_charged, frame.ink_charged / 100);
  const delta = JSON.parse(events.find((e) => e.event === 'message_delta')!.data);
  const start = JSON.parse(events[0]!.data);
  t.equal(start.message.model, 'assistant-sonnet-5');
  t.equal(
    frame.ink_charged,
    textChargeInk('assistant-sonnet-5', {
      inputTokens: start.message.usage.input_tokens,
      outputTokens: delta.usage.output_tokens,
      cacheReadTokens: start.message.usage.cache_read_input_tokens ?? 0,
      cacheWriteTokens: start.message.usage.cache_creation_input_tokens ?? 0,
    }),
  );
  const m = await me(g, k.key);
  t.equal(m.key.ink_reserved, 0, 'every hold settled');
  await invariant();
});

t.test('tool use round trip sends thinking blocks back unchanged', async (t) => {
  const { client, invariant } = await setup(t);
  const tools = [{ name: 'get_weather', description: 'Weather', input_schema: { type: 'object' as const, properties: { location: { type: 'string' } } } }];
  const first = await client.messages.create({
    model: 'opus',
    max_tokens: 2000,
    thinking: { type: 'enabled', budget_tokens: 1024 },
    tools,
    messages: [{ role: 'user', content: 'What is the weather in Paris? use the tool' }],
  });
  t.equal(first.stop_reason, 'tool_use');
  const toolUse = first.content.find((b) => b.type === 'tool_use')!;
  t.ok(toolUse);
  t.ok(first.content.some((b) => b.type === 'thinking'));
  const second = await client.messages.create({
    model: 'opus',
    max_tokens: 2000,
    thinking: { type: 'enabled', budget_tokens: 1024 },
    tools,
    messages: [
      { role: 'user', content: 'What is the weather in Paris? use the tool' },
      { role: 'assistant', content: first.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: (toolUse as any).id, content: '18C and sunny' }] },
    ],
  });
  t.equal(second.stop_reason, 'end_turn');
  await invariant();
});

t.test('validation answers with the documented codes, before any hold or vendor call', async (t) => {
  const { g, k, sim, invariant } = await setup(t);
  const before = sim.requestCount;
  const cases: Array<[unknown, number, string, string?]> = [
    [{ model: 'gpt-4', max_tokens: 10, messages: user('x') }, 400, 'unknown_model', 'model'],
    [{ model: 'sonnet', messages: user('x') }, 400, 'missing_max_tokens', 'max_tokens'],
    [{ model: 'sonnet', max_tokens: 64_001, messages: user('x') }, 400, 'too_large', 'max_tokens'],
    [{ model: 'sonnet', max_tokens: 10, messages: [] }, 400, 'missing_messages', 'messages'],
    [{ model: 'sonnet', max_tokens: 10, messages: user('x'), service_tier: 'auto' }, 400, 'unsupported_parameter', 'service_tier'],
    [{ model: 'sonnet', max_tokens: 10, messages: user('x'), frobnicate: 1 }, 400, 'unsupported_parameter', 'frobnicate'],
    [{ model: 'fable', max_tokens: 10, messages: user('x'), thinking: { type: 'disabled' } }, 400, 'unsupported_parameter', 'thinking'],
    [{ model: 'sonnet', max_tokens: 10, messages: user('x'), tools: [{ description: 'no name', input_schema: { type: 'object' } }] }, 400, 'invalid_tool'],
  ];
  for (const [body, status, code, param] of cases) {
    const r = await post(g, k.key, body);
    t.equal(r.status, status, code);
    t.equal(r.json.error.code, code);
    if (param) t.match(r.json.error.param, new RegExp('^' + param.replace('.', '\\.')));
  }
  t.equal(sim.requestCount, before, 'the vendor saw none of them');
  t.equal((await me(g, k.key)).ink.balance, 10_000, 'wallet untouched');
  await invariant();
});

t.test('402 when the wallet or the key cap cannot cover the hold; nothing sent', async (t) => {
  const { g, sim, invariant } = await setup(t);
  const poor = await g.newKey();
  await g.gw.services.ledger.topUp(poor.accountId, 1, 'tiny');
  const before = sim.requestCount;
  const r = await post(g, poor.key, { model: 'fable', max_tokens: 64_000, messages: user('x') });
  t.equal(r.status, 402);
  t.equal(r.json.error.code, 'insufficient_ink');
  t.match(r.json.error.message, /\d+ Ink/);
  const capped = await g.newKey({ inkLimit: 5 });
  await g.gw.services.ledger.topUp(capped.accountId, 10_000, 'rich');
  const c = await post(g, capped.key, { model: 'fable', max_tokens: 64_000, messages: user('x') });
  t.equal(c.status, 402);
  t.equal(c.json.error.code, 'key_ink_limit_reached');
  t.equal(sim.requestCount, before);
  await invariant();
});

t.test('a lane that is not enabled answers 503 and touches nothing', async (t) => {
  const { g, k, sim, invariant } = await setup(t, { enable: false });
  const r = await post(g, k.key, { model: 'sonnet', max_tokens: 10, messages: user('x') });
  t.equal(r.status, 503);
  t.equal(r.json.error.code, 'provider_unavailable');
  t.match(r.json.error.message, /inkgate lane enable messages.*npm run demo/, 'the message says what opens the lane');
  t.ok(Number(r.headers['retry-after']) >= 1);
  t.equal(sim.requestCount, 0);
  t.equal((await me(g, k.key)).ink.balance, 10_000);
  await invariant();
});

t.test('only allow-listed headers reach the vendor, with our key exactly once', async (t) => {
  const { g, k, sim, invariant } = await setup(t);
  const r = await post(
    g,
    k.key,
    { model: 'sonnet', max_tokens: 20, messages: user('hi'), metadata: { user_id: 'client-chosen' } },
    {
      'x-api-key': 'svc_client_should_not_pass',
      cookie: 'session=1',
      'anthropic-version': '1999-01-01',
      'anthropic-beta': 'output-128k-2025-02-19, prompt-caching-2024-07-31',
      'x-custom-header': 'nope',
    },
  );
  t.equal(r.status, 200);
  const h = sim.requests.at(-1)!.headers;
  t.equal(h['x-api-key'], VENDOR_KEY);
  t.notOk(h.authorization, 'no bearer toward the vendor');
  t.equal(h['anthropic-version'], '2023-06-01', 'our protocol version, not the client one');
  t.equal(h['anthropic-beta'], 'prompt-caching-2024-07-31');
  t.notOk(h.cookie);
  t.notOk(h['x-custom-header']);
  t.equal(h['accept-encoding'], 'identity', 'no compressed answers asked for');
  const md = (sim.requests.at(-1)!.body as any).metadata;
  t.match(md.user_id, /^[0-9a-f]{32}$/, 'metadata replaced by a hash of the key');
  t.notOk(JSON.stringify(sim.requests.at(-1)!.body).includes(k.key), 'the client key never reaches the vendor');
  t.equal(r.headers['request-id'], r.headers['x-request-id'], "vendor response headers are not passed on: request-id is ours, not the vendor's");
  await invariant();
});

t.test('vendor refusals: upstream_rejected / 413 release the hold; capacity is 503; a 5xx keeps the hold', async (t) => {
  const { g, k, sim, invariant } = await setup(t);
  const rej = await post(g, k.key, { model: 'sonnet', max_tokens: 20, messages: user('x [[sim:status=400]]') });
  t.equal(rej.status, 400);
  t.equal(rej.json.error.code, 'upstream_rejected');
  const big = await post(g, k.key, { model: 'sonnet', max_tokens: 20, messages: user('x [[sim:prompt-too-long]]') });
  t.equal(big.status, 413);
  t.equal(big.json.error.code, 'payload_too_large');
  t.equal(big.json.error.param, 'messages');
  // A prompt that is really beyond the 200,000-token context (3.6 MB, under the 4 MiB body cap, so
  // inkgate's own floor does not refuse it): the vendor refuses it, and that is our 413.
  const huge = await post(g, k.key, { model: 'sonnet', max_tokens: 20, messages: user('hello world '.repeat(300_000)) });
  t.equal(huge.status, 413);
  t.equal(huge.json.error.code, 'payload_too_large');
  t.equal(huge.json.error.param, 'messages');
  const gw413 = await post(g, k.key, { model: 'sonnet', max_tokens: 20, messages: user('x [[sim:status=413]]') });
  t.equal(gw413.status, 400, "the vendor gateway's own 413 is upstream_rejected (docs/api/messages.md)");
  t.equal(gw413.json.error.code, 'upstream_rejected');
  const billing = await post(g, k.key, { model: 'sonnet', max_tokens: 20, messages: user('x [[sim:status=402]]') });
  t.equal(billing.status, 502, "our vendor account's billing problem is not the client's");
  t.equal(billing.json.error.code, 'provider_error');
  t.equal((await me(g, k.key)).key.ink_reserved, 0, 'holds released');
  t.equal((await me(g, k.key)).ink.balance, 10_000);
  for (const s of [429, 529, 503]) {
    const r = await post(g, k.key, { model: 'sonnet', max_tokens: 20, messages: user(`x [[sim:status=${s}]] [[sim:retry-after=7]]`) });
    t.equal(r.status, 503, `vendor ${s}`);
    t.equal(r.json.error.code, 'provider_unavailable');
    t.ok(Number(r.headers['retry-after']) >= 1);
  }
  t.equal((await me(g, k.key)).key.ink_reserved, 0);
  const five = await post(g, k.key, { model: 'sonnet', max_tokens: 20, messages: user('x [[sim:status=500]]') });
  t.equal(five.status, 502);
  t.equal(five.json.error.code, 'provider_error');
  const m = await me(g, k.key);
  t.ok(m.key.ink_reserved > 0, 'a vendor 5xx keeps the hold until reconciled');
  t.equal(m.key.ink_charged, 0, 'never silently charged');
  const rec = await writtenRequest(g, five.json.error.request_id);
  t.equal(rec?.status, 'usage_unknown');
  t.equal(rec?.vendor_request_id, sim.requests.at(-1)!.requestId, "the vendor's request-id header is kept for reconciliation");
  await invariant();
});

t.test('stream failures: overloaded mid-stream keeps the hold; cut after the receipt charges it', async (t) => {
  const { g, k, client, invariant } = await setup(t);
  const streamRaw = async (text: string) => {
    const r = await request(g.url + '/v1/messages', {
      method: 'POST',
      headers: { authorization: `Bearer ${k.key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sonnet', max_tokens: 100, stream: true, messages: user(text) }),
    });
    return parseSse(await r.body.text());
  };
  const over = await streamRaw('hi [[sim:overloaded-midstream]]');
  const errs = over.filter((e) => e.event === 'error').map((e) => JSON.parse(e.data));
  t.equal(errs.length, 1, 'one final error event');
  t.equal(errs[0].error.type, 'overloaded_error', 'the vendor error is passed on');
  t.equal(errs[0].error.code, 'usage_unknown', 'with our code');
  t.equal(over.at(-1)!.event, 'error');
  // The official SDK raises it as a typed error.
  const sdkErr = await (async () => {
    try {
      for await (const _ of await client.messages.create({
        model: 'sonnet',
        max_tokens: 100,
        stream: true,
        messages: user('hi [[sim:overloaded-midstream]]'),
      })) {
        /* drain */
      }
    } catch (e) {
      return e as { error?: { error?: { type?: string; code?: string } } };
    }
    return undefined;
  })();
  t.equal(sdkErr?.error?.error?.type, 'overloaded_error');
  t.equal(sdkErr?.error?.error?.code, 'usage_unknown');
  let m = await me(g, k.key);
  t.ok(m.key.ink_reserved > 0, 'holds kept');
  const reservedAfterOverload = m.key.ink_reserved;

  const cut = await streamRaw('hi [[sim:cut-before-stop]]');
  const last = JSON.parse(cut.at(-1)!.data);
  t.equal(cut.at(-1)!.event, 'error');
  t.equal(last.error.code, 'incomplete_stream');
  m = await me(g, k.key);
  t.ok(m.key.ink_charged > 0, 'charged for what the vendor reported');
  t.equal(m.key.ink_reserved, reservedAfterOverload, 'that hold was settled');

  const early = await streamRaw('hi [[sim:cut-before-delta]]');
  t.equal(JSON.parse(early.at(-1)!.data).error.code, 'usage_unknown');

  const bytes = await streamRaw('hi [[sim:chunk=1]] [[sim:crlf]]');
  t.equal(bytes.at(-1)!.event, 'service.usage', 'one byte per chunk with CRLF still ends with the usage frame');
  t.equal(JSON.parse(bytes[0]!.data).message.model, 'assistant-sonnet-5', 'model rewritten across byte-sized chunks');

  const maxed = await streamRaw('hi [[sim:tokens=500]]');
  const d = JSON.parse(maxed.find((e) => e.event === 'message_delta')!.data);
  t.equal(d.delta.stop_reason, 'max_tokens');
  t.equal(maxed.at(-1)!.event, 'service.usage');
  await invariant();
});

t.test('a client that disconnects mid-stream is still charged for what the vendor produced', async (t) => {
  const { g, k, sim, invariant } = await setup(t);
  // Listen before sending: the vendor's response may end before the client's abort is processed.
  const vendorDone = new Promise<void>((res) => sim.events.once('response-end', () => res()));
  const ac = new AbortController();
  const r = await request(g.url + '/v1/messages', {
    method: 'POST',
    headers: { authorization: `Bearer ${k.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sonnet', max_tokens: 100, stream: true, messages: user('slow [[sim:pace=20]] [[sim:tokens=20]]') }),
    signal: ac.signal,
  });
  for await (const _ of r.body) {
    ac.abort();
    break;
  }
  await vendorDone; // the gateway read the vendor to its receipt
  t.equal(sim.requests.at(-1)!.end, 'complete', 'the vendor was not aborted');
  // The settle follows the vendor's last byte: poll the ledger, bounded in time.
  let m = await me(g, k.key);
  const deadline = Date.now() + 5000;
  while (m.key.ink_reserved > 0 && Date.now() < deadline) {
    await new Promise((res) => setTimeout(res, 10));
    m = await me(g, k.key);
  }
  t.equal(m.key.ink_reserved, 0, 'hold settled');
  t.ok(m.key.ink_charged > 0, 'charged');
  await invariant();
});

t.test("the Anthropic SDK's request id is ours: `request-id` on every Messages answer", async (t) => {
  const { g, k, client, invariant } = await setup(t);
  const msg = await client.messages.create({ model: 'sonnet', max_tokens: 50, messages: user('Hi') });
  t.match(msg._request_id, /^req_/);
  const rec = (await g.call('GET', '/v1/me', { key: k.key })).json;
  t.equal(rec.key.ink_reserved, 0);
  const { rows } = await g.db.pool.query('SELECT id FROM requests WHERE id = $1', [msg._request_id]);
  t.equal(rows.length, 1, 'the request record the charge is on');
  const err = await client.messages.create({ model: 'nope', max_tokens: 50, messages: user('Hi') }).catch((e: unknown) => e);
  t.ok(err instanceof Anthropic.BadRequestError);
  const e = err as InstanceType<typeof Anthropic.BadRequestError>;
  t.match(e.requestID, /^req_/, 'errors too');
  t.equal(e.requestID, (e.error as { error?: { request_id?: string } }).error?.request_id, 'the id in the error body');
  const stream = await request(g.url + '/v1/messages', {
    method: 'POST',
    headers: { authorization: `Bearer ${k.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sonnet', max_tokens: 50, stream: true, messages: user('Hi') }),
  });
  await stream.body.text();
  t.equal(stream.headers['request-id'], stream.headers['x-request-id'], 'streams too');
  const other = await g.call('GET', '/v1/me', { key: k.key });
  t.equal(other.headers['request-id'], undefined, 'only on the Messages route');
  await invariant();
});
