// The Anthropic simulator must be accepted by the official SDK pointed straight at it, and its
// failure modes must look to the SDK like the real API's. Each test states what the SDK does.
import { connect } from 'node:net';
import t from 'tap';
import Anthropic from '@anthropic-ai/sdk';
import { startAnthropicSimulator, type AnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { thinkingSignature } from '../../simulators/anthropic/scenarios.js';
import { SseFramer, forEachEvent } from '../../src/lanes/sse-framer.js';
import { MessagesUsageTally, tallyMessageBody } from '../../src/lanes/messages/usage-tally.js';

const KEY = 'sk-ant-test-key';
const MODEL = 'claude-sonnet-5';

let sim: AnthropicSimulator;
let client: Anthropic;

t.before(async () => {
  sim = await startAnthropicSimulator({ apiKey: KEY });
  client = new Anthropic({ apiKey: KEY, baseURL: sim.url, maxRetries: 0 });
});
t.teardown(async () => {
  await sim.close();
});

const WEATHER_TOOL = {
  name: 'get_weather',
  description: 'Get the current weather in a given location',
  input_schema: {
    type: 'object' as const,
    properties: { location: { type: 'string', description: 'City and country' }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
    required: ['location'],
  },
};

async function raw(body: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${sim.url}/v1/messages`, {
    method: 'POST',
    headers: { 'x-api-key': KEY, 'anthropic-version': '2023-06-01', 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

t.test('messages.create (non-stream): message shape, usage formula, recorded request', async (t) => {
  const before = sim.requestCount;
  const msg = await client.messages.create({ model: MODEL, max_tokens: 100, messages: [{ role: 'user', content: 'Hello' }] });
  t.equal(msg.type, 'message');
  t.equal(msg.role, 'assistant');
  t.equal(msg.model, MODEL, 'model echoed');
  t.match(msg.id, /^msg_01Sim/);
  t.equal(msg.content.length, 1);
  const block = msg.content[0]!;
  t.equal(block.type, 'text');
  if (block.type === 'text') t.equal(block.text, 'Echo: Hello lorem ipsum dolor sit amet consectetur adipiscing elit sed do', '12 pieces by default');
  t.equal(msg.stop_reason, 'end_turn');
  t.equal(msg.stop_sequence, null);
  // 4 per request + 3 per message + ceil(5 bytes / 4)
  t.same(msg.usage, {
    input_tokens: 9,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: 0,
    cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 },
    output_tokens: 12,
    service_tier: 'standard',
  });
  t.match(msg._request_id, /^req_011CSim/, 'SDK reads the request-id header');
  t.equal(sim.requestCount, before + 1);
  const rec = sim.requests.at(-1)!;
  t.equal(rec.method, 'POST');
  t.equal(rec.path, '/v1/messages');
  t.equal(rec.headers.authorization, `Bearer ${KEY}`, 'SDK 1.x sends apiKey as a bearer token');
  t.equal(rec.headers['x-api-key'], undefined);
  t.equal(rec.headers['anthropic-version'], '2026-10-21', 'SDK 1.x sends the 2026-10-21 version');
  t.same(rec.body, { model: MODEL, max_tokens: 100, messages: [{ role: 'user', content: 'Hello' }] });
  t.equal(rec.end, 'complete');
  const tally = tallyMessageBody(msg);
  t.same(tally.usage, { inputTokens: 9, outputTokens: 12, cacheReadTokens: 0, cacheWriteTokens: 0 });
});

t.test('input tokens grow with the prompt (monotone) and count_tokens agrees', async (t) => {
  const count = async (content: string): Promise<number> =>
    (await client.messages.countTokens({ model: MODEL, messages: [{ role: 'user', content }] })).input_tokens;
  const a = await count('Hello');
  const b = await count('Hello there, a longer prompt with more words');
  const c = await count('Hello there, a longer prompt with more words'.repeat(10));
  t.equal(a, 9);
  t.ok(a < b && b < c, `${a} < ${b} < ${c}`);
  t.equal(sim.requests.at(-1)!.path, '/v1/messages/count_tokens');
  const msg = await client.messages.create({
    model: MODEL,
    max_tokens: 10,
    messages: [{ role: 'user', content: 'Hello there, a longer prompt with more words' }],
  });
  t.equal(msg.usage.input_tokens, b, 'count_tokens equals the usage of the same prompt');
});

t.test('count_tokens: the whole prompt, the vendor refusals of a count, no cache touched', async (t) => {
  sim.clearCache();
  const cached = [{ type: 'text' as const, text: 'You are a careful assistant. '.repeat(30), cache_control: { type: 'ephemeral' as const } }];
  const prompt = {
    model: MODEL,
    system: cached,
    tools: [WEATHER_TOOL],
    tool_choice: { type: 'auto' as const },
    thinking: { type: 'enabled' as const, budget_tokens: 1024 },
    output_config: { effort: 'low' as const },
    messages: [{ role: 'user' as const, content: 'Weather in Oslo?' }],
  };
  const { data: counted, response } = await client.messages.countTokens(prompt).withResponse();
  t.same(Object.keys(counted), ['input_tokens']);
  t.match(response.headers.get('request-id'), /^req_011CSim/);
  const msg = await client.messages.create({ ...prompt, max_tokens: 2000 });
  t.ok(msg.usage.cache_creation_input_tokens! > 0, 'the count wrote no cache entry: the message is the first to write the prefix');
  t.equal(
    msg.usage.input_tokens + msg.usage.cache_creation_input_tokens! + msg.usage.cache_read_input_tokens!,
    counted.input_tokens,
    'uncached + cache writes + cache reads = the count',
  );
  t.equal((await client.messages.countTokens(prompt)).input_tokens, counted.input_tokens, 'a cached prefix counts the same');

  // The count takes no reply fields: the vendor's "Extra inputs are not permitted".
  for (const extra of [{ max_tokens: 10 }, { stream: false }, { metadata: { user_id: 'u' } }, { temperature: 0.5 }]) {
    const err = await client.messages.countTokens({ ...prompt, ...extra } as never).catch((e: unknown) => e);
    t.ok(err instanceof Anthropic.BadRequestError, `${Object.keys(extra)[0]} refused`);
    t.equal((err as InstanceType<typeof Anthropic.APIError>).apiMessage, `${Object.keys(extra)[0]}: Extra inputs are not permitted`);
  }
  const noModel = await client.messages.countTokens({ messages: prompt.messages } as never).catch((e: unknown) => e);
  t.ok(noModel instanceof Anthropic.BadRequestError, 'model required');
  // Directives a count can meet: an error status (with retry-after), a stall; others are ignored.
  const busy = await client.messages
    .countTokens({ model: MODEL, messages: [{ role: 'user', content: 'x [[sim:status=529]] [[sim:retry-after=9]]' }] })
    .catch((e: unknown) => e);
  t.ok(busy instanceof Anthropic.OverloadedError);
  t.equal((busy as InstanceType<typeof Anthropic.APIError>).headers?.get('retry-after'), '9');
  t.ok(
    (await client.messages.countTokens({ model: MODEL, messages: [{ role: 'user', content: 'x [[sim:tokens=3]] [[sim:crlf]]' }] })).input_tokens > 0,
    'reply shaping is ignored',
  );
  const typo = await client.messages.countTokens({ model: MODEL, messages: [{ role: 'user', content: 'x [[sim:stauts=500]]' }] }).catch((e: unknown) => e);
  t.ok(typo instanceof Anthropic.BadRequestError, 'an unknown directive is refused');
  const ac = new AbortController();
  const stalled = client.messages
    .countTokens({ model: MODEL, messages: [{ role: 'user', content: 'x [[sim:stall-before-headers]]' }] }, { signal: ac.signal })
    .catch((e: unknown) => e);
  await sim.waitForRequests(sim.requestCount + 1);
  t.equal(sim.requests.at(-1)!.end, 'stalled', 'held without an answer');
  ac.abort();
  t.ok((await stalled) instanceof Anthropic.APIUserAbortError);
});

t.test('messages.create({stream: true}): the SDK yields every event but ping', async (t) => {
  const stream = await client.messages.create({
    model: MODEL,
    max_tokens: 100,
    stream: true,
    messages: [{ role: 'user', content: 'Say hi [[sim:tokens=3]]' }],
  });
  const types: string[] = [];
  let text = '';
  let usageOut: number | undefined;
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') text += ev.delta.text;
    if (ev.type === 'message_delta') usageOut = ev.usage.output_tokens;
    if (ev.type === 'message_start') t.equal(ev.message.model, MODEL);
  }
  t.same(types, [
    'message_start',
    'content_block_start',
    'content_block_delta',
    'content_block_delta',
    'content_block_delta',
    'content_block_stop',
    'message_delta',
    'message_stop',
  ]);
  t.equal(text, 'Echo: Say hi');
  t.equal(usageOut, 3);
});

t.test('messages.stream() + finalMessage(), and the raw bytes through SseFramer + tally', async (t) => {
  const s = client.messages.stream({ model: MODEL, max_tokens: 100, messages: [{ role: 'user', content: 'Stream me please' }] });
  let streamed = '';
  s.on('text', (d) => (streamed += d));
  const final = await s.finalMessage();
  t.equal(final.stop_reason, 'end_turn');
  t.equal(final.usage.output_tokens, 12);
  t.equal(final.content[0]?.type === 'text' ? final.content[0].text : '', streamed);

  const res = await raw({ model: MODEL, max_tokens: 100, stream: true, messages: [{ role: 'user', content: 'Stream me please' }] });
  t.equal(res.headers.get('content-type'), 'text/event-stream; charset=utf-8');
  t.match(res.headers.get('request-id'), /^req_/);
  const bytes = Buffer.from(await res.arrayBuffer());
  t.ok(bytes.toString().startsWith('event: message_start\ndata: {"type":"message_start","message":{"id":"msg_'), 'compact JSON frames');
  t.ok(bytes.includes('event: ping\ndata: {"type": "ping"}\n\n'), 'a ping like the real API');
  const framer = new SseFramer(1 << 16);
  const tally = new MessagesUsageTally();
  const names: string[] = [];
  for (let i = 0; i < bytes.length; i++) {
    const out = framer.push(bytes.subarray(i, i + 1));
    if (out) {
      tally.push(out);
      forEachEvent(out, (ev) => names.push(/^event: (\S+)/.exec(ev.toString())![1]!));
    }
  }
  t.equal(framer.end(), null, 'stream ends on an event boundary');
  tally.end();
  t.equal(tally.outcome(), 'complete');
  t.same(tally.usage(), { inputTokens: final.usage.input_tokens, outputTokens: 12, cacheReadTokens: 0, cacheWriteTokens: 0 });
  t.equal(names.filter((n) => n === 'content_block_delta').length, 12);
  t.equal(names.at(-1), 'message_stop');
});

t.test('tool use round trip with thinking blocks sent back unchanged', async (t) => {
  const first = await client.messages
    .stream({
      model: MODEL,
      max_tokens: 4096,
      thinking: { type: 'enabled', budget_tokens: 2048 },
      tools: [WEATHER_TOOL],
      messages: [{ role: 'user', content: "What's the weather in Paris? Please use the tool." }],
    })
    .finalMessage();
  t.same(
    first.content.map((b) => b.type),
    ['thinking', 'text', 'tool_use'],
  );
  t.equal(first.stop_reason, 'tool_use');
  const thinking = first.content[0]!;
  const toolUse = first.content[2]!;
  if (thinking.type !== 'thinking' || toolUse.type !== 'tool_use') throw new Error('unexpected blocks');
  t.equal(thinking.signature, thinkingSignature(thinking.thinking), 'signature_delta assembled by the SDK');
  t.equal(toolUse.name, 'get_weather');
  t.same(toolUse.input, { location: 'location value' }, 'input_json_delta pieces parsed by the SDK (the required properties only)');
  // output = 6 thinking + 5 text ("I'll use the get_weather tool.") + JSON pieces of 10 chars
  const jsonPieces = Math.ceil(JSON.stringify(toolUse.input).length / 10);
  t.equal(first.usage.output_tokens, 6 + 5 + jsonPieces);

  const history: Anthropic.MessageParam[] = [
    { role: 'user', content: "What's the weather in Paris? Please use the tool." },
    { role: 'assistant', content: first.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: toolUse.id, content: '18C and sunny' }] },
  ];
  const second = await client.messages.create({
    model: MODEL,
    max_tokens: 4096,
    thinking: { type: 'enabled', budget_tokens: 2048 },
    tools: [WEATHER_TOOL],
    messages: history,
  });
  t.same(
    second.content.map((b) => b.type),
    ['thinking', 'text'],
  );
  t.equal(second.stop_reason, 'end_turn');
  const text = second.content[1]!;
  t.ok(text.type === 'text' && text.text.startsWith('The tool returned: 18C and sunny'), 'text reply to the tool result');
  const sent = sim.requests.at(-1)!.body as { messages: { content: unknown }[] };
  t.same(
    (sent.messages[1]!.content as unknown[])[0],
    { type: 'thinking', thinking: thinking.thinking, signature: thinking.signature },
    'thinking block arrived unchanged',
  );

  const tampered = structuredClone(history);
  ((tampered[1]!.content as Anthropic.ContentBlockParam[])[0] as Anthropic.ThinkingBlockParam).signature = 'AAAA';
  const err1 = await client.messages
    .create({ model: MODEL, max_tokens: 4096, thinking: { type: 'enabled', budget_tokens: 2048 }, tools: [WEATHER_TOOL], messages: tampered })
    .catch((e: unknown) => e);
  t.ok(err1 instanceof Anthropic.BadRequestError, 'a changed signature is refused');
  t.match((err1 as InstanceType<typeof Anthropic.APIError>).apiMessage, /Invalid `signature`/);

  const dropped = structuredClone(history);
  dropped[1]!.content = (dropped[1]!.content as Anthropic.ContentBlockParam[]).slice(1);
  const err2 = await client.messages
    .create({ model: MODEL, max_tokens: 4096, thinking: { type: 'enabled', budget_tokens: 2048 }, tools: [WEATHER_TOOL], messages: dropped })
    .catch((e: unknown) => e);
  t.ok(err2 instanceof Anthropic.BadRequestError, 'dropping the thinking block is refused with thinking on');
  t.match((err2 as InstanceType<typeof Anthropic.APIError>).apiMessage, /must start with a thinking block/);

  const orphan = await client.messages
    .create({ model: MODEL, max_tokens: 100, messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_nope', content: 'x' }] }] })
    .catch((e: unknown) => e);
  t.ok(orphan instanceof Anthropic.BadRequestError, 'a tool_result without its tool_use is refused');
});

t.test('tool_choice forces a tool; adaptive thinking', async (t) => {
  const msg = await client.messages.create({
    model: MODEL,
    max_tokens: 500,
    thinking: { type: 'adaptive' } as never,
    tools: [WEATHER_TOOL],
    tool_choice: { type: 'tool', name: 'get_weather' },
    messages: [{ role: 'user', content: 'Paris' }],
  });
  t.same(
    msg.content.map((b) => b.type),
    ['thinking', 'text', 'tool_use'],
  );
  t.equal(msg.stop_reason, 'tool_use');
  const none = await client.messages.create({
    model: MODEL,
    max_tokens: 500,
    tools: [WEATHER_TOOL],
    tool_choice: { type: 'none' },
    messages: [{ role: 'user', content: 'please use the tool' }],
  });
  t.equal(none.stop_reason, 'end_turn', 'tool_choice none: no tool');
});

t.test('max_tokens stops the reply, streaming and not', async (t) => {
  const msg = await client.messages.create({ model: MODEL, max_tokens: 5, messages: [{ role: 'user', content: 'Tell me a long story' }] });
  t.equal(msg.stop_reason, 'max_tokens');
  t.equal(msg.usage.output_tokens, 5);
  t.equal(msg.content[0]?.type === 'text' ? msg.content[0].text : '', 'Echo: Tell me a long');
  const streamed = await client.messages.stream({ model: MODEL, max_tokens: 5, messages: [{ role: 'user', content: 'Tell me a long story' }] }).finalMessage();
  t.equal(streamed.stop_reason, 'max_tokens');
  t.equal(streamed.usage.output_tokens, 5);
  const tool = await client.messages.create({ model: MODEL, max_tokens: 7, tools: [WEATHER_TOOL], messages: [{ role: 'user', content: 'use the tool' }] });
  t.equal(tool.stop_reason, 'max_tokens', 'a tool call that does not fit is left out');
  t.same(
    tool.content.map((b) => b.type),
    ['text'],
  );
  t.equal(tool.usage.output_tokens, 5);
  const stop = await client.messages.create({ model: MODEL, max_tokens: 50, stop_sequences: ['ipsum'], messages: [{ role: 'user', content: 'hi' }] });
  t.equal(stop.stop_reason, 'stop_sequence');
  t.equal(stop.stop_sequence, 'ipsum');
  t.equal(stop.content[0]?.type === 'text' ? stop.content[0].text : '', 'Echo: hi lorem ');
  t.equal(stop.usage.output_tokens, 4);
});

t.test('error statuses raise the SDK typed errors (maxRetries 0: one request each)', async (t) => {
  const cases: [string, new (...a: never[]) => InstanceType<typeof Anthropic.APIError>, number, string][] = [
    ['[[sim:status=400]]', Anthropic.BadRequestError, 400, 'invalid_request_error'],
    ['[[sim:status=404]]', Anthropic.NotFoundError, 404, 'not_found_error'],
    ['[[sim:status=413]]', Anthropic.ContentTooLargeError, 413, 'request_too_large'],
    ['[[sim:status=422]]', Anthropic.UnprocessableEntityError, 422, 'invalid_request_error'],
    ['[[sim:status=429]]', Anthropic.RateLimitError, 429, 'rate_limit_error'],
    ['[[sim:status=500]]', Anthropic.InternalServerError, 500, 'api_error'],
    ['[[sim:status=529]]', Anthropic.OverloadedError, 529, 'overloaded_error'],
    ['[[sim:prompt-too-long]]', Anthropic.BadRequestError, 400, 'invalid_request_error'],
    ['[[sim:no-such-thing]]', Anthropic.BadRequestError, 400, 'invalid_request_error'],
  ];
  for (const [directive, cls, status, type] of cases) {
    const before = sim.requestCount;
    const err = await client.messages
      .create({ model: MODEL, max_tokens: 10, messages: [{ role: 'user', content: `hi ${directive}` }] })
      .catch((e: unknown) => e);
    t.ok(err instanceof cls, `${directive} -> ${cls.name}`);
    const e = err as InstanceType<typeof Anthropic.APIError>;
    t.equal(e.status, status);
    t.equal(e.type, type);
    t.equal(sim.requestCount, before + 1, 'no retry');
    if (status === 413) t.equal(e.requestID, sim.requests.at(-1)!.requestId, 'request-id header even when the 413 body has none');
    else t.equal((e.error as { request_id?: string }).request_id, e.requestID, 'body request_id equals the header');
  }
  const rate = await client.messages
    .create({ model: MODEL, max_tokens: 10, messages: [{ role: 'user', content: '[[sim:status=429]][[sim:retry-after=7]]' }] })
    .catch((e: unknown) => e);
  t.equal((rate as InstanceType<typeof Anthropic.APIError>).headers?.get('retry-after'), '7');
  const long = await client.messages
    .create({ model: MODEL, max_tokens: 10, messages: [{ role: 'user', content: '[[sim:prompt-too-long]]' }] })
    .catch((e: unknown) => e);
  t.match((long as InstanceType<typeof Anthropic.APIError>).apiMessage, /^prompt is too long: \d+ tokens > 200000 maximum$/);

  const wrongKey = new Anthropic({ apiKey: 'nope', baseURL: sim.url, maxRetries: 0 });
  const auth = await wrongKey.messages.create({ model: MODEL, max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] }).catch((e: unknown) => e);
  t.ok(auth instanceof Anthropic.AuthenticationError);
  t.equal((auth as InstanceType<typeof Anthropic.APIError>).type, 'authentication_error');
});

t.test('the SDK retries 529 by default (one retry here, honouring retry-after)', async (t) => {
  const retrying = new Anthropic({ apiKey: KEY, baseURL: sim.url, maxRetries: 1 });
  const before = sim.requestCount;
  const err = await retrying.messages
    .create({ model: MODEL, max_tokens: 10, messages: [{ role: 'user', content: '[[sim:status=529]][[sim:retry-after=0]]' }] })
    .catch((e: unknown) => e);
  t.ok(err instanceof Anthropic.OverloadedError);
  t.equal(sim.requestCount, before + 2, 'initial + 1 retry');
});

t.test('mid-stream overloaded_error: the SDK throws an APIError without a status', async (t) => {
  const stream = await client.messages.create({
    model: MODEL,
    max_tokens: 100,
    stream: true,
    messages: [{ role: 'user', content: 'hi [[sim:overloaded-midstream]]' }],
  });
  const seen: string[] = [];
  const err = await (async () => {
    for await (const ev of stream) seen.push(ev.type);
  })().catch((e: unknown) => e);
  t.ok(err instanceof Anthropic.APIError, 'iteration throws');
  t.equal((err as InstanceType<typeof Anthropic.APIError>).status, undefined);
  t.equal((err as InstanceType<typeof Anthropic.APIError>).type, 'overloaded_error');
  t.equal(seen[0], 'message_start');
  t.ok(seen.includes('content_block_delta') && !seen.includes('message_delta'), 'some deltas, no message_delta');
  const viaHelper = await client.messages
    .stream({ model: MODEL, max_tokens: 100, messages: [{ role: 'user', content: 'hi [[sim:overloaded-midstream]]' }] })
    .finalMessage()
    .catch((e: unknown) => e);
  t.ok(viaHelper instanceof Anthropic.APIError, 'finalMessage() rejects too');
  const nonStream = await client.messages
    .create({ model: MODEL, max_tokens: 100, messages: [{ role: 'user', content: 'hi [[sim:overloaded-midstream]]' }] })
    .catch((e: unknown) => e);
  t.ok(nonStream instanceof Anthropic.OverloadedError, 'non-stream: 529');
});

t.test('cut streams: what the SDK notices', async (t) => {
  const body = (d: string): Anthropic.MessageCreateParamsNonStreaming => ({ model: MODEL, max_tokens: 100, messages: [{ role: 'user', content: `hi ${d}` }] });
  // Raw iteration does not notice a clean end before message_stop: it just stops.
  const types: string[] = [];
  for await (const ev of await client.messages.create({ ...body('[[sim:cut-before-stop]]'), stream: true })) types.push(ev.type);
  t.equal(types.at(-1), 'message_delta', 'raw iteration ends quietly after message_delta');
  // The helper does: no message_stop means no final message.
  const e1 = await client.messages
    .stream(body('[[sim:cut-before-delta]]'))
    .finalMessage()
    .catch((e: unknown) => e);
  t.ok(e1 instanceof Anthropic.AnthropicError);
  t.match((e1 as Error).message, /stream ended without producing a Message/);
  // A dropped connection (no chunked terminator) is an error for both.
  const e2 = await (async () => {
    for await (const _ of await client.messages.create({ ...body('[[sim:reset-before-stop]]'), stream: true })) void _;
  })().catch((e: unknown) => e);
  t.ok(e2 instanceof Error, `reset raises: ${(e2 as Error)?.message}`);
  t.equal(sim.requests.at(-1)!.end, 'reset');
  // The tally on the raw bytes of each cut.
  for (const [d, outcome] of [
    ['[[sim:cut-before-delta]]', 'usage_unknown'],
    ['[[sim:cut-before-stop]]', 'incomplete_stream'],
    ['[[sim:overloaded-midstream]]', 'usage_unknown'],
  ] as const) {
    const res = await raw({ ...body(d), stream: true });
    const tally = new MessagesUsageTally();
    tally.push(Buffer.from(await res.arrayBuffer()));
    tally.end();
    t.equal(tally.outcome(), outcome, `${d}: ${outcome}`);
  }
});

t.test('stop after N frames, and a stall in the middle of a stream', async (t) => {
  const cut = await raw({ model: MODEL, max_tokens: 50, stream: true, messages: [{ role: 'user', content: 'x [[sim:cut=1]]' }] });
  const text = await cut.text();
  t.ok(text.startsWith('event: message_start\n') && text.endsWith('\n\n'));
  t.equal(text.split('\n\n').length, 2, 'exactly one frame');
  t.equal(sim.requests.at(-1)!.end, 'cut');

  const stalled = await raw({ model: MODEL, max_tokens: 50, stream: true, messages: [{ role: 'user', content: 'x [[sim:stall-before-stop]]' }] });
  const rec = sim.requests.at(-1)!;
  const reader = stalled.body!.getReader();
  let got = '';
  while (!got.includes('event: message_delta')) {
    const { value, done } = await reader.read();
    if (done) break;
    got += Buffer.from(value).toString();
  }
  t.ok(got.includes('event: message_delta') && !got.includes('message_stop'), 'everything up to message_delta arrived');
  t.equal(rec.end, 'stalled', 'and the simulator holds the rest');
  const ended = new Promise<void>((resolve) => sim.events.on('response-end', (r) => r === rec && resolve()));
  await reader.cancel();
  await ended;
});

t.test('line endings and chunking: the SDK assembles the same message', async (t) => {
  t.teardown(() => sim.setScenario(null));
  const ask = () =>
    client.messages
      .stream({
        model: MODEL,
        max_tokens: 2000,
        thinking: { type: 'enabled', budget_tokens: 1024 },
        tools: [WEATHER_TOOL],
        messages: [{ role: 'user', content: 'please use the tool' }],
      })
      .finalMessage();
  const strip = (m: Anthropic.Message): unknown => ({
    content: m.content.map((b) => (b.type === 'tool_use' ? { ...b, id: '' } : b)),
    usage: m.usage,
    stop: m.stop_reason,
  });
  sim.setScenario(null);
  const base = strip(await ask());
  t.equal((base as { stop: string }).stop, 'tool_use');
  for (const d of [
    '[[sim:crlf]]',
    '[[sim:cr]]',
    '[[sim:chunking=byte]]',
    '[[sim:split]][[sim:crlf]]',
    '[[sim:chunk=7]][[sim:cr]]',
    '[[sim:pace=1]][[sim:split]]',
  ]) {
    sim.setScenario(d);
    t.same(strip(await ask()), base, `${d}: same message`);
  }
  sim.setScenario(null);
  const res = await raw({ model: MODEL, max_tokens: 50, stream: true, messages: [{ role: 'user', content: 'x [[sim:crlf]]' }] });
  const text = await res.text();
  t.ok(text.includes('\r\n\r\n') && !/[^\r]\n/.test(text), 'every LF is part of a CRLF');
});

t.test('prompt caching: first request writes, the same prefix later reads', async (t) => {
  sim.clearCache();
  const req = (ttl?: '1h') => ({
    model: MODEL,
    max_tokens: 10,
    system: [
      { type: 'text' as const, text: 'You are a weather assistant. '.repeat(20), cache_control: { type: 'ephemeral' as const, ...(ttl ? { ttl } : {}) } },
    ],
    messages: [{ role: 'user' as const, content: 'Weather?' }],
  });
  const a = await client.messages.create(req());
  const b = await client.messages.create(req());
  const total = (await client.messages.countTokens({ model: MODEL, system: req().system, messages: req().messages })).input_tokens;
  t.ok(a.usage.cache_creation_input_tokens! > 0);
  t.equal(a.usage.cache_read_input_tokens, 0);
  t.equal(a.usage.cache_creation?.ephemeral_5m_input_tokens, a.usage.cache_creation_input_tokens);
  t.equal(b.usage.cache_read_input_tokens, a.usage.cache_creation_input_tokens);
  t.equal(b.usage.cache_creation_input_tokens, 0);
  t.equal(a.usage.input_tokens, b.usage.input_tokens);
  t.equal(a.usage.input_tokens + a.usage.cache_creation_input_tokens!, total, 'uncached + cached = whole prompt');
  const c = await client.messages.create({ ...req('1h'), messages: [{ role: 'user', content: 'Other [[sim:cache=write]]' }] });
  t.equal(c.usage.cache_creation?.ephemeral_1h_input_tokens, c.usage.cache_creation_input_tokens, '1h ttl bucket');
  const s = await client.messages.stream({ ...req(), messages: [{ role: 'user', content: 'Weather? [[sim:delta-usage=output]]' }] }).finalMessage();
  t.equal(s.usage.cache_read_input_tokens, a.usage.cache_creation_input_tokens, 'message_start cache usage kept when message_delta only has output_tokens');
  t.equal(s.usage.output_tokens, 10);
});

t.test('pace: deltas are spaced', async (t) => {
  const started = process.hrtime.bigint();
  const m = await client.messages
    .stream({ model: MODEL, max_tokens: 100, messages: [{ role: 'user', content: 'x [[sim:pace=15]][[sim:tokens=5]]' }] })
    .finalMessage();
  const elapsedMs = Number(process.hrtime.bigint() - started) / 1e6;
  t.equal(m.usage.output_tokens, 5);
  // Time is the behaviour: the simulator spaces its deltas. A lower bound only (a slow machine
  // only adds to it).
  t.ok(elapsedMs >= 4 * 15 - 2, `4 gaps of 15 ms took ${elapsedMs.toFixed(1)} ms`);
});

t.test('stalls hold the connection until the client leaves; close() does not hang on them', async (t) => {
  const res = await raw({ model: MODEL, max_tokens: 10, stream: true, messages: [{ role: 'user', content: '[[sim:stall-after-headers]]' }] }, {});
  t.equal(res.status, 200, 'headers arrive');
  const rec = sim.requests.at(-1)!;
  const ended = new Promise<void>((resolve) => sim.events.on('response-end', (r) => r === rec && resolve()));
  await res.body!.cancel();
  await ended;
  t.equal(rec.end, 'stalled');

  const ctl = new AbortController();
  let headersArrived = false;
  const n = sim.requestCount;
  const pending = fetch(`${sim.url}/v1/messages`, {
    method: 'POST',
    signal: ctl.signal,
    headers: { 'x-api-key': KEY, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, max_tokens: 10, messages: [{ role: 'user', content: '[[sim:stall-before-headers]]' }] }),
  }).then(() => (headersArrived = true));
  await sim.waitForRequests(n + 1);
  ctl.abort();
  await t.rejects(pending, 'no headers before the abort');
  t.equal(headersArrived, false);

  const other = await startAnthropicSimulator({ apiKey: KEY });
  const hung = fetch(`${other.url}/v1/messages`, {
    method: 'POST',
    headers: { 'x-api-key': KEY, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, max_tokens: 10, messages: [{ role: 'user', content: '[[sim:stall-before-headers]]' }] }),
  });
  await other.waitForRequests(1);
  await other.close();
  await t.rejects(hung, 'close() drops the stalled connection');
});

t.test('protocol checks: version header, JSON, required fields, routes, models, body cap', async (t) => {
  const noVersion = await fetch(`${sim.url}/v1/messages`, { method: 'POST', headers: { 'x-api-key': KEY, 'content-type': 'application/json' }, body: '{}' });
  t.equal(noVersion.status, 400);
  t.same(await noVersion.json(), {
    type: 'error',
    error: { type: 'invalid_request_error', message: 'anthropic-version: header is required' },
    request_id: noVersion.headers.get('request-id'),
  });
  t.equal((await raw('{not json')).status, 400);
  const noMax = await raw({ model: MODEL, messages: [{ role: 'user', content: 'x' }] });
  t.equal(noMax.status, 400);
  t.match(((await noMax.json()) as { error: { message: string } }).error.message, /max_tokens/);
  const budget = await raw({ model: MODEL, max_tokens: 1024, thinking: { type: 'enabled', budget_tokens: 1024 }, messages: [{ role: 'user', content: 'x' }] });
  t.equal(budget.status, 400, 'budget_tokens must be below max_tokens');
  const fableBudget = await raw({
    model: 'claude-fable-5-1',
    max_tokens: 1024,
    thinking: { type: 'enabled', budget_tokens: 2048 },
    messages: [{ role: 'user', content: 'x' }],
  });
  t.equal(fableBudget.status, 200, 'fable is exempt from the budget rule (docs/api/messages.md: opus and sonnet)');
  await fableBudget.arrayBuffer();
  for (const [field, value] of [
    ['temperature', 1.01],
    ['temperature', -0.1],
    ['top_p', 3],
    ['top_k', -3],
    ['top_k', 1.5],
    ['temperature', 'hot'],
  ] as const) {
    const r = await raw({ model: MODEL, max_tokens: 10, [field]: value, messages: [{ role: 'user', content: 'x' }] });
    t.equal(r.status, 400, `${field} ${value} refused`);
    t.match(((await r.json()) as { error: { message: string } }).error.message, new RegExp(field));
  }
  const inRange = await raw({ model: MODEL, max_tokens: 10, temperature: 1, top_p: 0.5, top_k: 0, messages: [{ role: 'user', content: 'x' }] });
  t.equal(inRange.status, 200, 'values inside the ranges pass');
  await inRange.arrayBuffer();
  const emptyText = await raw({ model: MODEL, max_tokens: 10, messages: [{ role: 'user', content: [{ type: 'text', text: '' }] }] });
  t.equal(emptyText.status, 400, 'an empty text block is refused');
  await emptyText.arrayBuffer();
  // A prompt beyond the 200,000-token context is refused by the vendor itself, with its own words.
  const long = await raw({ model: MODEL, max_tokens: 10, messages: [{ role: 'user', content: 'hello world '.repeat(300_000) }] });
  t.equal(long.status, 400);
  t.match(((await long.json()) as { error: { message: string } }).error.message, /^prompt is too long: \d+ tokens > 200000 maximum$/);
  const notFound = await fetch(`${sim.url}/v1/complete`, { method: 'POST', headers: { 'x-api-key': KEY } });
  t.equal(notFound.status, 404);
  t.equal(((await notFound.json()) as { error: { type: string } }).error.type, 'not_found_error');

  const strict = await startAnthropicSimulator({ apiKey: KEY, models: [MODEL], maxBodyBytes: 2048, maxRecordedRequests: 2 });
  t.teardown(() => strict.close());
  const c = new Anthropic({ apiKey: KEY, baseURL: strict.url, maxRetries: 0 });
  const unknown = await c.messages.create({ model: 'claude-nope', max_tokens: 10, messages: [{ role: 'user', content: 'x' }] }).catch((e: unknown) => e);
  t.ok(unknown instanceof Anthropic.NotFoundError);
  t.equal((unknown as InstanceType<typeof Anthropic.APIError>).apiMessage, 'model: claude-nope');
  const big = await c.messages.create({ model: MODEL, max_tokens: 10, messages: [{ role: 'user', content: 'x'.repeat(5000) }] }).catch((e: unknown) => e);
  t.ok(big instanceof Anthropic.ContentTooLargeError);
  t.same((big as InstanceType<typeof Anthropic.APIError>).error, {
    type: 'error',
    error: { type: 'request_too_large', message: 'Request exceeds the maximum allowed number of bytes.' },
  });
  await c.messages.create({ model: MODEL, max_tokens: 10, messages: [{ role: 'user', content: 'x' }] });
  t.equal(strict.requests.length, 2, 'recording is bounded');
  t.equal(strict.requestCount, 3);
});

t.test('setScenario applies directives to every request', async (t) => {
  sim.setScenario('[[sim:tokens=2]]');
  t.teardown(() => sim.setScenario(null));
  const m = await client.messages.create({ model: MODEL, max_tokens: 10, messages: [{ role: 'user', content: 'hello world' }] });
  t.equal(m.usage.output_tokens, 2);
  const override = await client.messages.create({ model: MODEL, max_tokens: 10, messages: [{ role: 'user', content: 'hello [[sim:tokens=3]]' }] });
  t.equal(override.usage.output_tokens, 3, 'the message directive wins');
});

/** The sizes of the HTTP chunks of a chunked response body, read off the wire. */
async function chunkSizes(url: string, path: string, headers: Record<string, string>, body: string): Promise<number[]> {
  const u = new URL(url);
  const socket = connect(Number(u.port), u.hostname);
  const head = [`POST ${path} HTTP/1.1`, `host: ${u.host}`, 'connection: close', `content-length: ${Buffer.byteLength(body)}`];
  for (const [k, v] of Object.entries(headers)) head.push(`${k}: ${v}`);
  // Written, not ended: a client that half-closes may be cut off by the server before the whole answer.
  socket.write(`${head.join('\r\n')}\r\n\r\n${body}`);
  const parts: Buffer[] = [];
  for await (const c of socket) parts.push(c as Buffer);
  const raw = Buffer.concat(parts);
  let at = raw.indexOf('\r\n\r\n') + 4;
  const sizes: number[] = [];
  for (;;) {
    const eol = raw.indexOf('\r\n', at);
    const size = Number.parseInt(raw.subarray(at, eol).toString('latin1'), 16);
    sizes.push(size);
    if (size === 0 || Number.isNaN(size)) return sizes;
    at = eol + 2 + size + 2;
  }
}

t.test('byte chunking from the options: one byte per HTTP chunk on the wire, and the stream still frames whole', async (t) => {
  const s = await startAnthropicSimulator({ apiKey: KEY, chunking: 'byte', lineEnding: 'crlf' });
  t.teardown(() => s.close());
  const headers = { 'x-api-key': KEY, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' };
  const body = JSON.stringify({ model: MODEL, max_tokens: 10, stream: true, messages: [{ role: 'user', content: 'hi' }] });
  // On the wire (how many reads a client makes of them depends on its timing, not on the simulator).
  const sizes = await chunkSizes(s.url, '/v1/messages', headers, body);
  t.equal(sizes.at(-1), 0, 'the body ends with the last chunk');
  t.ok(sizes.length > 100, `${sizes.length - 1} chunks`);
  t.same([...new Set(sizes.slice(0, -1))], [1], 'every chunk is one byte');
  const res = await fetch(`${s.url}/v1/messages`, { method: 'POST', headers, body });
  const parts: Buffer[] = [];
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) parts.push(Buffer.from(chunk));
  const all = Buffer.concat(parts);
  const framer = new SseFramer(4096);
  const tally = new MessagesUsageTally();
  for (const p of parts) {
    const out = framer.push(p);
    if (out) tally.push(out);
  }
  t.equal(framer.end(), null);
  tally.end();
  t.equal(tally.outcome(), 'complete');
  t.ok(all.includes('\r\n\r\n'));
});
