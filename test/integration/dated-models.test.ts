// Real vendors answer with a dated snapshot of the model asked for (asked for `gpt-5-mini`,
// OpenAI answers `gpt-5-mini-2025-08-07`; the vendor's recorded transcripts show it).
// Whatever the vendor calls it, every `model` the client sees is the product id: in bodies, in
// every streamed event, and in what the official SDKs assemble from the stream.
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import t, { type Test } from 'tap';
import { request } from 'undici';
import { setLane } from '../../src/deployment/state.js';
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { startOpenAISimulator } from '../../simulators/openai/simulator.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';
import { parseSse } from '../helpers/sse.js';

const SUFFIX = '20260901';

async function setup(t: Test) {
  const anthropic = await startAnthropicSimulator({ apiKey: 'sk-ant-v', modelSuffix: SUFFIX });
  const openai = await startOpenAISimulator({ apiKey: 'sk-oai-v', modelSuffix: SUFFIX });
  t.teardown(() => Promise.all([anthropic.close(), openai.close()]));
  const g = await startTestGateway(t, {
    vendors: { anthropic: { baseUrl: anthropic.url, apiKey: 'sk-ant-v' }, openai: { baseUrl: openai.url, apiKey: 'sk-oai-v' } },
  });
  await setLane(g.db.pool, 'messages', true);
  await setLane(g.db.pool, 'responses', true);
  await g.gw.services.state.refresh();
  const k = await g.newKey();
  await g.gw.services.ledger.topUp(k.accountId, 50_000, 'test');
  return { g, k };
}

/** Every `"model":"..."` value in a raw body or stream. */
const modelValues = (text: string): string[] => [...text.matchAll(/"model":"([^"\\]*)"/g)].map((m) => m[1]!);

async function raw(g: TestGateway, key: string, path: string, body: unknown): Promise<string> {
  const r = await request(g.url + path, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await r.body.text();
  if (r.statusCode !== 200) throw new Error(`${path}: ${r.statusCode} ${text.slice(0, 300)}`);
  return text;
}

t.test('Messages: a dated vendor model never reaches the client', async (t) => {
  const { g, k } = await setup(t);
  const vendorId = g.gw.services.catalog.text('sonnet')!.vendorModel;
  const client = new Anthropic({ baseURL: g.url, authToken: k.key, apiKey: null, maxRetries: 0 });
  const msg = await client.messages.create({ model: 'sonnet', max_tokens: 100, messages: [{ role: 'user', content: 'Hi' }] });
  t.equal(msg.model, 'assistant-sonnet-5');
  const final = await client.messages.stream({ model: 'sonnet', max_tokens: 100, messages: [{ role: 'user', content: 'Hi' }] }).finalMessage();
  t.equal(final.model, 'assistant-sonnet-5', 'messages.stream().finalMessage()');
  const text = await raw(g, k.key, '/v1/messages', { model: 'sonnet', max_tokens: 100, stream: true, messages: [{ role: 'user', content: 'Hi' }] });
  const events = parseSse(text);
  t.ok(
    events.some((e) => e.event === 'message_start'),
    'the stream has its message_start',
  );
  t.same([...new Set(modelValues(text))], ['assistant-sonnet-5'], 'every model field in the stream');
  t.notOk(text.includes(vendorId), `the vendor's name (${vendorId}-${SUFFIX}) appears nowhere`);
  await assertLedgerInvariant(t, g.db.pool);
});

t.test('Responses: a dated vendor model never reaches the client', async (t) => {
  const { g, k } = await setup(t);
  const vendorId = g.gw.services.catalog.text('astra')!.vendorModel;
  const client = new OpenAI({ baseURL: g.url + '/v1', apiKey: k.key, maxRetries: 0 });
  const resp = await client.responses.create({ model: 'astra', input: 'Hi', max_output_tokens: 100 });
  t.equal(resp.model, 'text-6-astra');
  const final = await client.responses.stream({ model: 'astra', input: 'Hi', max_output_tokens: 100 }).finalResponse();
  t.equal(final.model, 'text-6-astra', 'responses.stream().finalResponse()');
  const text = await raw(g, k.key, '/v1/responses', { model: 'astra', input: 'Hi', max_output_tokens: 100, stream: true });
  const events = parseSse(text);
  t.ok(events.filter((e) => e.event === 'response.created' || e.event === 'response.in_progress' || e.event === 'response.completed').length >= 3);
  t.same([...new Set(modelValues(text))], ['text-6-astra'], 'every model field in the stream');
  t.notOk(text.includes(vendorId), `the vendor's name (${vendorId}-${SUFFIX}) appears nowhere`);
  const body = await raw(g, k.key, '/v1/responses', { model: 'astra', input: 'Hi', max_output_tokens: 100 });
  t.same([...new Set(modelValues(body))], ['text-6-astra'], 'and in a non-streaming body');
  await assertLedgerInvariant(t, g.db.pool);
});

t.test('the stateless tool loop with reasoning: the reasoning item goes back as input', async (t) => {
  const { g, k } = await setup(t);
  const client = new OpenAI({ baseURL: g.url + '/v1', apiKey: k.key, maxRetries: 0 });
  const tools = [
    {
      type: 'function' as const,
      name: 'get_temp',
      description: 'Temperature',
      strict: false,
      parameters: { type: 'object', properties: { city: { type: 'string' } } },
    },
  ];
  const input: OpenAI.Responses.ResponseInput = [{ role: 'user', content: 'Please use the tool for Paris.' }];
  const r1 = await client.responses.create({ model: 'astra', input, tools, reasoning: { effort: 'low', summary: 'auto' }, max_output_tokens: 2000 });
  const reasoning = r1.output.find((o) => o.type === 'reasoning');
  const call = r1.output.find((o) => o.type === 'function_call');
  t.ok(reasoning, 'a reasoning item');
  t.type((reasoning as { encrypted_content?: unknown }).encrypted_content, 'string', 'with its encrypted content (inkgate always asks for it)');
  t.ok(call, 'a function call');
  const r2 = await client.responses.create({
    model: 'astra',
    input: [
      ...input,
      ...(r1.output as OpenAI.Responses.ResponseInputItem[]),
      { type: 'function_call_output', call_id: (call as { call_id: string }).call_id, output: '{"t":20}' },
    ],
    tools,
    reasoning: { effort: 'low', summary: 'auto' },
    max_output_tokens: 2000,
  });
  t.equal(r2.status, 'completed');
  t.ok(r2.output_text.length > 0, 'the second turn answers');
  await assertLedgerInvariant(t, g.db.pool);
});
