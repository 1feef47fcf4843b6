import t from 'tap';
import OpenAI from 'openai';
import { request } from 'undici';
import { startOpenAISimulator, simulatedInputTokens, DEFAULT_REPLY_TOKENS, type OpenAISimulator } from '../../simulators/openai/simulator.js';
import { ResponsesUsageTally } from '../../src/lanes/responses/usage-tally.js';

const API_KEY = 'sk-test-openai-sim';
const MODEL = 'text-6-astra';
const DEFAULT_TEXT = 'This is a simulated reply from the vendor.';

let sim: OpenAISimulator;
let client: OpenAI;

t.before(async () => {
  sim = await startOpenAISimulator({ apiKey: API_KEY });
  client = new OpenAI({ apiKey: API_KEY, baseURL: sim.url, maxRetries: 0 });
});
t.teardown(() => sim.close());

interface RawReply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  reads: number;
  error: Error | undefined;
}

/** POSTs to the simulator with undici and reads the raw body (keeps whatever came before an error). */
async function raw(body: unknown, opts: { path?: string; auth?: string; method?: 'POST' | 'GET'; target?: OpenAISimulator } = {}): Promise<RawReply> {
  const target = opts.target ?? sim;
  const res = await request(`${target.origin}${opts.path ?? '/v1/responses'}`, {
    method: opts.method ?? 'POST',
    headers: { authorization: opts.auth ?? `Bearer ${target.apiKey}`, 'content-type': 'application/json' },
    body: opts.method === 'GET' ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  let text = '';
  let reads = 0;
  let error: Error | undefined;
  try {
    for await (const chunk of res.body) {
      reads++;
      text += (chunk as Buffer).toString('utf8');
    }
  } catch (e) {
    error = e as Error;
  }
  return { status: res.statusCode, headers: res.headers, text, reads, error };
}

interface Frame {
  event: string;
  data: any;
}

/** Strict parse of the simulator's SSE form: `event: <type>\ndata: <json>\n\n`, nothing else. */
function frames(text: string, eol = '\n'): Frame[] {
  const out: Frame[] = [];
  const sep = eol + eol;
  t.ok(text.endsWith(sep) || text === '', 'body ends on a frame boundary');
  for (const block of text.split(sep)) {
    if (block === '') continue;
    const lines = block.split(eol);
    if (lines[0]!.startsWith(': ')) {
      out.push({ event: ':comment', data: lines[0]!.slice(2) });
      continue;
    }
    if (lines.length === 1 && lines[0] === 'data: [DONE]') {
      out.push({ event: '[DONE]', data: null });
      continue;
    }
    if (lines.length !== 2 || !lines[0]!.startsWith('event: ') || !lines[1]!.startsWith('data: ')) {
      throw new Error(`unexpected frame: ${JSON.stringify(block.slice(0, 200))}`);
    }
    out.push({ event: lines[0]!.slice(7), data: JSON.parse(lines[1]!.slice(6)) });
  }
  return out;
}

function tallyOf(text: string): ReturnType<ResponsesUsageTally['result']> {
  const tally = new ResponsesUsageTally();
  tally.feed(Buffer.from(text, 'utf8'));
  tally.end();
  return tally.result();
}

t.test('non-stream create: output_text, usage, model echo, request record, x-request-id', async (t) => {
  const { data, response, request_id } = await client.responses.create({ model: MODEL, input: 'Say hello' }).withResponse();
  t.equal(data.output_text, DEFAULT_TEXT);
  t.equal(data.status, 'completed');
  t.equal(data.model, MODEL);
  t.match(data.id, /^resp_[0-9a-f]{50}$/);
  // input_tokens = ceil(9 chars / 4) + 4 per item = 3 + 4
  t.same(data.usage, {
    input_tokens: 7,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: DEFAULT_REPLY_TOKENS,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: 7 + DEFAULT_REPLY_TOKENS,
  });
  t.match(response.headers.get('x-request-id'), /^req_[0-9a-f]{32}$/);
  t.equal(request_id, response.headers.get('x-request-id'));
  t.equal(response.headers.get('content-type'), 'application/json');
  const again = await client.responses.create({ model: MODEL, input: 'Say hello' }).withResponse();
  t.not(again.request_id, request_id, 'request ids are unique');
  t.not(again.data.id, data.id, 'response ids are unique');
  const rec = sim.requests.at(-2)!;
  t.equal(rec.method, 'POST');
  t.equal(rec.path, '/v1/responses');
  t.equal(rec.headers.authorization, `Bearer ${API_KEY}`);
  t.same(rec.body, { model: MODEL, input: 'Say hello' });
});

t.test('input token formula: instructions, items, tools; cached with prompt_cache_key', async (t) => {
  const res = await client.responses.create({
    model: MODEL,
    instructions: 'Be brief.', // 9 chars
    input: [{ role: 'user', content: [{ type: 'input_text', text: 'Hello there' }] }], // 11 chars
    prompt_cache_key: 'conv-1',
  });
  // ceil(20 / 4) + 4 * 1 item + 4 for instructions = 13; cached = floor(13 / 2) = 6
  t.equal(res.usage?.input_tokens, 13);
  t.equal(res.usage?.input_tokens_details.cached_tokens, 6);
  t.equal(res.instructions, 'Be brief.');
  t.equal(res.prompt_cache_key, 'conv-1');

  const base = { model: MODEL, input: 'abc' };
  const withTools = {
    ...base,
    tools: [{ type: 'function', name: 'f', parameters: { type: 'object', properties: {} } }],
  };
  const toolChars = JSON.stringify(withTools.tools).length;
  t.equal(simulatedInputTokens(base), 1 + 4);
  t.equal(simulatedInputTokens(withTools), Math.ceil((3 + toolChars) / 4) + 4);
  // Monotone: more text or more items never lowers the count.
  let prev = 0;
  for (let n = 0; n < 40; n++) {
    const v = simulatedInputTokens({ model: MODEL, input: [{ role: 'user', content: 'x'.repeat(n) }, ...Array(n % 3).fill({ role: 'user', content: '' })] });
    t.ok(v >= (n % 3 === 0 ? prev - 8 : 0), 'sane');
    prev = v;
  }
  const sizes = [0, 1, 4, 5, 100, 1000].map((n) => simulatedInputTokens({ model: MODEL, input: 'y'.repeat(n) }));
  t.same(
    sizes,
    [...sizes].sort((a, b) => a - b),
    'monotone in text length',
  );

  const cached = await client.responses.create({ model: MODEL, input: 'Hello [[sim:cached=3]] [[sim:cache-write=2]]' });
  t.equal(cached.usage?.input_tokens_details.cached_tokens, 3);
  t.equal((cached.usage!.input_tokens_details as unknown as Record<string, unknown>).cache_write_tokens, 2);
});

t.test('stream: true iterated with the SDK', async (t) => {
  const stream = await client.responses.create({ model: MODEL, input: 'Tell me [[sim:tokens=12]]', stream: true });
  const events: OpenAI.Responses.ResponseStreamEvent[] = [];
  for await (const ev of stream) events.push(ev);
  t.same(
    events.map((e) => e.sequence_number),
    events.map((_, i) => i),
    'sequence_number 0,1,2,… without gaps',
  );
  t.equal(events[0]!.type, 'response.created');
  t.equal(events[1]!.type, 'response.in_progress');
  const last = events.at(-1)!;
  t.equal(last.type, 'response.completed');
  const deltas = events.filter((e): e is OpenAI.Responses.ResponseTextDeltaEvent => e.type === 'response.output_text.delta');
  t.equal(deltas.length, 12);
  const text = deltas.map((d) => d.delta).join('');
  t.match(text, /^This is a simulated reply from the vendor\. It streams one piece$/);
  if (last.type === 'response.completed') {
    t.equal(last.response.usage?.output_tokens, 12);
    t.equal(last.response.model, MODEL);
    t.equal(last.response.output_text ?? text, text);
  }
  for (const e of events) {
    if ('response' in e) t.equal(e.response.model, MODEL, `${e.type} echoes the model`);
  }
});

t.test('responses.stream() + finalResponse() with reasoning and a summary', async (t) => {
  const seen: string[] = [];
  let snapshot = '';
  const runner = client.responses
    .stream({ model: MODEL, input: 'Think first', reasoning: { effort: 'low', summary: 'auto' } })
    .on('event', (e) => seen.push(e.type))
    .on('response.output_text.delta', (e) => {
      snapshot = e.snapshot;
    });
  const final = await runner.finalResponse();
  t.equal(final.status, 'completed');
  t.equal(final.output_text, DEFAULT_TEXT);
  t.equal(snapshot, DEFAULT_TEXT, 'delta snapshots accumulate to the text');
  t.equal(final.output[0]?.type, 'reasoning');
  const rs = final.output[0] as OpenAI.Responses.ResponseReasoningItem;
  t.match(rs.summary[0]?.text, /Planning the reply/);
  t.equal(final.output[1]?.type, 'message');
  t.equal(final.usage?.output_tokens_details.reasoning_tokens, 8, 'effort low = 8 reasoning tokens');
  t.equal(final.usage?.output_tokens, 8 + DEFAULT_REPLY_TOKENS);
  t.same(seen.slice(0, 4), ['response.created', 'response.in_progress', 'response.output_item.added', 'response.reasoning_summary_part.added']);
  t.ok(seen.includes('response.reasoning_summary_text.delta'));
  t.equal(seen.at(-1), 'response.completed');
});

t.test('function call turn, then a function_call_output turn', async (t) => {
  const tools: OpenAI.Responses.Tool[] = [
    {
      type: 'function',
      name: 'get_weather',
      description: 'Weather for a city',
      parameters: {
        type: 'object',
        properties: { city: { type: 'string' }, days: { type: 'integer' } },
        required: ['city', 'days'],
        additionalProperties: false,
      },
      strict: true,
    },
  ];
  const argDeltas: string[] = [];
  const first = await client.responses
    .stream({ model: MODEL, input: [{ role: 'user', content: 'Please use the tool for Paris' }], tools })
    .on('response.function_call_arguments.delta', (e) => argDeltas.push(e.delta))
    .finalResponse();
  t.equal(first.status, 'completed');
  const call = first.output.find((o) => o.type === 'function_call') as OpenAI.Responses.ResponseFunctionToolCall | undefined;
  t.ok(call, 'a function_call item');
  t.equal(call?.name, 'get_weather');
  t.equal(call?.arguments, '{"city":"sim","days":1}');
  t.same(JSON.parse(call!.arguments), { city: 'sim', days: 1 });
  t.match(call?.call_id, /^call_/);
  t.equal(argDeltas.join(''), call?.arguments);
  t.equal(first.usage?.output_tokens, argDeltas.length, 'one output token per argument delta');
  t.equal(first.output_text, '');

  const second = await client.responses.create({
    model: MODEL,
    tools,
    input: [
      { role: 'user', content: 'Please use the tool for Paris' },
      call as OpenAI.Responses.ResponseInputItem,
      { type: 'function_call_output', call_id: call!.call_id, output: '{"temp_c":21}' },
    ],
  });
  t.equal(second.output_text, 'Tool result: {"temp_c":21}');
  t.equal(second.output[0]?.type, 'message');
  t.equal(second.usage?.output_tokens, 3, 'three word pieces');

  const none = await client.responses.create({ model: MODEL, tools, input: 'Hello, no tools needed' });
  t.equal(none.output[0]?.type, 'message', 'no trigger phrase, plain text');
  const forced = await client.responses.create({ model: MODEL, tools, tool_choice: 'required', input: 'Hello' });
  t.equal(forced.output[0]?.type, 'function_call', 'tool_choice required forces the call');
  t.not((forced.output[0] as OpenAI.Responses.ResponseFunctionToolCall).call_id, call!.call_id, 'call ids are unique');
});

t.test('max_output_tokens: incomplete with reason, stream and non-stream', async (t) => {
  const res = await client.responses.create({ model: MODEL, input: 'Long one [[sim:tokens=40]]', max_output_tokens: 16 });
  t.equal(res.status, 'incomplete');
  t.same(res.incomplete_details, { reason: 'max_output_tokens' });
  t.equal(res.usage?.output_tokens, 16);
  t.equal(res.max_output_tokens, 16);
  const msg = res.output[0] as OpenAI.Responses.ResponseOutputMessage;
  t.equal(msg.status, 'incomplete');
  t.equal(res.output_text.split(' ').length, 16, '16 pieces of text');

  const events: string[] = [];
  const final = await client.responses
    .stream({ model: MODEL, input: 'Think a lot', reasoning: { effort: 'high' }, max_output_tokens: 16 })
    .on('event', (e) => events.push(e.type))
    .finalResponse();
  t.equal(events.at(-1), 'response.incomplete');
  t.equal(final.status, 'incomplete');
  t.equal(final.output.length, 1, 'reasoning spent the whole budget: reasoning item only');
  t.equal(final.output[0]?.type, 'reasoning');
  t.equal(final.usage?.output_tokens, 16);
  t.equal(final.usage?.output_tokens_details.reasoning_tokens, 16);
  t.equal(final.output_text, '');

  const err = await client.responses.create({ model: MODEL, input: 'x', max_output_tokens: 5 }).catch((e) => e);
  t.type(err, OpenAI.BadRequestError);
  t.equal(err.code, 'integer_below_min_value');
  t.equal(err.param, 'max_output_tokens');
});

t.test('error statuses raise the typed SDK errors (maxRetries: 0)', async (t) => {
  const cases: Array<[number, new (...a: any[]) => Error, string | null, string]> = [
    [400, OpenAI.BadRequestError, 'invalid_value', 'invalid_request_error'],
    [404, OpenAI.NotFoundError, 'model_not_found', 'invalid_request_error'],
    [413, OpenAI.APIError, 'request_too_large', 'invalid_request_error'],
    [422, OpenAI.UnprocessableEntityError, 'unprocessable_entity', 'invalid_request_error'],
    [429, OpenAI.RateLimitError, 'rate_limit_exceeded', 'requests'],
    [500, OpenAI.InternalServerError, null, 'server_error'],
    [503, OpenAI.InternalServerError, null, 'server_error'],
  ];
  for (const [status, cls, code, type] of cases) {
    const before = sim.requests.length;
    const err = await client.responses
      .create({ model: MODEL, input: `fail please [[sim:status=${status}]] [[sim:retry-after=2]]`, stream: status === 500 })
      .catch((e) => e);
    t.type(err, cls, `${status} class`);
    t.equal(err.status, status);
    t.equal(err.code, code, `${status} code`);
    t.equal(err.type, type, `${status} type`);
    t.match(err.requestID, /^req_/);
    t.equal(sim.requests.length, before + 1, 'no retry');
    if (status === 429 || status === 503) t.equal(err.headers.get('retry-after'), '2');
  }
  const nf = await client.responses.create({ model: 'nope-1', input: '[[sim:status=404]]' }).catch((e) => e);
  t.match(nf.message, /The model `nope-1` does not exist/);

  const bad = new OpenAI({ apiKey: 'sk-wrong', baseURL: sim.url, maxRetries: 0 });
  const auth = await bad.responses.create({ model: MODEL, input: 'hi' }).catch((e) => e);
  t.type(auth, OpenAI.AuthenticationError);
  t.equal(auth.code, 'invalid_api_key');

  const missing = await raw({ input: 'no model' });
  t.equal(missing.status, 400);
  t.same(JSON.parse(missing.text), {
    error: { message: "Missing required parameter: 'model'.", type: 'invalid_request_error', param: 'model', code: 'missing_required_parameter' },
  });
  const notJson = await raw('{nope');
  t.equal(notJson.status, 400);
  t.equal(JSON.parse(notJson.text).error.type, 'invalid_request_error');
  const route = await raw(undefined, { path: '/v1/chat/completions' });
  t.equal(route.status, 404);
  t.equal(JSON.parse(route.text).error.message, 'Invalid URL (POST /v1/chat/completions)');
});

t.test('response.failed: the SDK throws on the error event, in both shapes', async (t) => {
  const seen: string[] = [];
  const stream = await client.responses.create({ model: MODEL, input: 'go [[sim:failed]]', stream: true });
  const err = await (async () => {
    for await (const ev of stream) seen.push(ev.type);
  })().catch((e) => e);
  t.type(err, OpenAI.APIError, 'SDK throws on `data.error` of the first-party error event');
  t.match(err.message, /simulated/);
  t.equal(err.code, 'server_error');
  t.same(seen, ['response.created', 'response.in_progress']);

  const rawFailed = await raw({ model: MODEL, input: 'go [[sim:failed]]', stream: true });
  const fr = frames(rawFailed.text);
  t.same(
    fr.map((f) => f.event),
    ['response.created', 'response.in_progress', 'error', 'response.failed'],
  );
  t.same(Object.keys(fr[2]!.data), ['type', 'sequence_number', 'error'], 'same shape as the recorded stream');
  t.equal(fr[3]!.data.response.status, 'failed');
  t.equal(fr[3]!.data.response.usage, null);
  t.equal(tallyOf(rawFailed.text).outcome, 'usage_unknown');

  // Flat SDK shape: ResponseStream (SDK 7) raises it as an APIError read from the flat fields,
  // before any listener sees it as an event.
  const flatSeen: string[] = [];
  const flatErr = await client.responses
    .stream({ model: MODEL, input: 'go [[sim:failed]] [[sim:error-flat]]' })
    .on('event', (e) => flatSeen.push(e.type))
    .on('error', () => undefined)
    .finalResponse()
    .catch((e) => e);
  t.same(flatSeen, ['response.created', 'response.in_progress']);
  t.type(flatErr, OpenAI.APIError, 'an APIError');
  t.match(flatErr, { code: 'server_error', message: /simulated/ });
  // Plain iteration of a flat-shape stream throws at the error event too (SDK 7).
  const flatIter = await client.responses.create({ model: MODEL, input: 'go [[sim:failed]] [[sim:error-flat]]', stream: true });
  const flatTypes: string[] = [];
  const iterErr = await (async () => {
    for await (const ev of flatIter) flatTypes.push(ev.type);
  })().catch((e) => e);
  t.same(flatTypes, ['response.created', 'response.in_progress']);
  t.type(iterErr, OpenAI.APIError, 'an APIError from the flat fields');
  t.equal(iterErr.code, 'server_error');

  const nonStream = await client.responses.create({ model: MODEL, input: 'go [[sim:failed]]' });
  t.equal(nonStream.status, 'failed');
  t.equal(nonStream.usage, null);
});

t.test('SDK and the usage frame: SSE comment ignored; unknown named event', async (t) => {
  // Comment line after the terminal event: responses.stream() ignores it.
  const commentRaw = await raw({ model: MODEL, input: 'hi [[sim:trailer-comment]]', stream: true });
  t.match(commentRaw.text, /event: response\.completed\n[^\n]+\n\n: service\.usage \{[^\n]+\}\n\n$/, 'comment really sent after the terminal event');
  const events: string[] = [];
  const final = await client.responses
    .stream({ model: MODEL, input: 'hi [[sim:trailer-comment]]' })
    .on('event', (e) => events.push(e.type))
    .finalResponse();
  t.equal(final.output_text, DEFAULT_TEXT);
  t.equal(final.usage?.output_tokens, DEFAULT_REPLY_TOKENS);
  t.equal(events.at(-1), 'response.completed', 'no event for the comment');

  // Unknown named event after the terminal event: responses.stream() throws.
  const err = await client.responses
    .stream({ model: MODEL, input: 'hi [[sim:trailer-event]]' })
    .finalResponse()
    .catch((e) => e);
  t.type(err, OpenAI.OpenAIError);
  t.match(err.message, /Unhandled response stream event/);

  // …while plain iteration of responses.create({stream:true}) yields it as an ordinary event.
  const it = await client.responses.create({ model: MODEL, input: 'hi [[sim:trailer-event]]', stream: true });
  const types: string[] = [];
  for await (const ev of it) types.push((ev as { type: string }).type);
  t.same(types.slice(-2), ['response.completed', 'service.usage']);

  // A trailing data: [DONE] is accepted by responses.stream().
  const done = await client.responses.stream({ model: MODEL, input: 'hi [[sim:done]]' }).finalResponse();
  t.equal(done.status, 'completed');
});

t.test('raw stream form: frames, headers, sequence numbers, snapshots, tally agreement', async (t) => {
  const body = { model: MODEL, instructions: 'Short.', input: 'Hello [[sim:tokens=20]]', stream: true, reasoning: { effort: 'minimal' } };
  const r = await raw(body);
  t.equal(r.status, 200);
  t.equal(r.headers['content-type'], 'text/event-stream; charset=utf-8');
  t.match(r.headers['x-request-id'], /^req_/);
  const fr = frames(r.text);
  fr.forEach((f, i) => {
    t.equal(f.data.type, f.event, `frame ${i} type = event name`);
    t.equal(f.data.sequence_number, i, `frame ${i} sequence`);
  });
  t.same(
    fr.slice(0, 3).map((f) => f.event),
    ['response.created', 'response.in_progress', 'response.output_item.added'],
  );
  t.equal(fr[0]!.data.response.usage, null);
  t.equal(fr[0]!.data.response.status, 'in_progress');
  t.same(fr[0]!.data.response.output, []);
  const last = fr.at(-1)!;
  t.equal(last.event, 'response.completed');
  const u = last.data.response.usage;
  t.equal(u.input_tokens, simulatedInputTokens(body));
  t.equal(u.output_tokens, 4 + 20, 'minimal effort = 4 reasoning tokens + 20 pieces');
  t.equal(u.total_tokens, u.input_tokens + u.output_tokens);
  t.ok(
    fr.every((f) => !('response' in f.data) || f.data.response.model === MODEL),
    'model echoed',
  );
  t.ok(
    fr.every((f) => !('response' in f.data) || f.data.response.id === fr[0]!.data.response.id),
    'one response id',
  );
  t.notOk(r.text.includes('[DONE]'), 'no [DONE], like the real API');
  // Compact JSON: no spaces after separators outside strings in the envelope.
  t.match(r.text.split('\n')[1], /^data: \{"type":"response\.created","sequence_number":0,"response":\{"id":"resp_/);

  const tally = tallyOf(r.text);
  t.equal(tally.outcome, 'complete');
  t.equal(tally.usage.inputTokens, u.input_tokens);
  t.equal(tally.usage.outputTokens, 24);
  t.equal(tally.usage.reasoningTokens, 4);
  t.equal(tally.maxSequenceNumber, fr.length - 1);
  const text = fr
    .filter((f) => f.event === 'response.output_text.delta')
    .map((f) => f.data.delta)
    .join('');
  t.equal(tally.visibleTextChars, text.length);

  // Obfuscation is on by default and off with stream_options.include_obfuscation false.
  t.ok(fr.find((f) => f.event === 'response.output_text.delta')!.data.obfuscation);
  const plain = frames((await raw({ ...body, stream_options: { include_obfuscation: false } })).text);
  t.equal(plain.find((f) => f.event === 'response.output_text.delta')!.data.obfuscation, undefined);
});

t.test('failure modes on the wire', async (t) => {
  const plain = frames((await raw({ model: MODEL, input: 'hi', stream: true })).text);
  const terminalIndex = plain.length - 1;

  const crlf = await raw({ model: MODEL, input: 'hi [[sim:crlf]]', stream: true });
  t.notOk(/[^\r]\n/.test(crlf.text), 'every LF is preceded by CR');
  t.equal(frames(crlf.text, '\r\n').length, plain.length);
  t.equal(tallyOf(crlf.text).outcome, 'complete');

  const cut = await raw({ model: MODEL, input: 'hi [[sim:cut]]', stream: true });
  t.equal(cut.error, undefined, 'clean end');
  t.equal(frames(cut.text).length, terminalIndex, 'every frame but the terminal one');
  t.equal(tallyOf(cut.text).outcome, 'incomplete_stream');
  const cut3 = await raw({ model: MODEL, input: 'hi [[sim:cut=3]]', stream: true });
  t.equal(frames(cut3.text).length, 3);

  const reset = await raw({ model: MODEL, input: 'hi [[sim:reset]]', stream: true });
  t.ok(reset.error, `socket destroyed mid-body: ${reset.error?.message}`);
  t.equal(tallyOf(reset.text).outcome, 'incomplete_stream');

  const noUsage = await raw({ model: MODEL, input: 'hi [[sim:no-usage]]', stream: true });
  const nf = frames(noUsage.text);
  t.equal(nf.at(-1)!.event, 'response.completed');
  t.equal(nf.at(-1)!.data.response.usage, null);
  t.equal(tallyOf(noUsage.text).outcome, 'usage_unknown');

  const chunked = await raw({ model: MODEL, input: 'hi [[sim:chunk=1]]', stream: true });
  t.equal(frames(chunked.text).length, plain.length, 'same frames byte by byte');
  t.ok(chunked.reads > 100, `arrived in ${chunked.reads} reads`);
  const tally = new ResponsesUsageTally();
  const bytes = Buffer.from(chunked.text);
  for (let i = 0; i < bytes.length; i++) tally.feed(bytes.subarray(i, i + 1));
  tally.end();
  t.equal(tally.outcome(), 'complete');

  const started = Date.now();
  const paced = await raw({ model: MODEL, input: 'hi [[sim:pace=15]] [[sim:tokens=6]]', stream: true });
  // Time is the behaviour: the simulator spaces its tokens. A lower bound only (a slow machine
  // only adds to it).
  t.ok(Date.now() - started >= 6 * 15 - 5, `6 paced tokens took ${Date.now() - started} ms`);
  t.equal(tallyOf(paced.text).usage.outputTokens, 6);

  const nsCut = await raw({ model: MODEL, input: 'hi [[sim:cut]]' });
  t.equal(nsCut.status, 200);
  t.throws(() => JSON.parse(nsCut.text), 'non-stream cut leaves half a JSON body');
  const nsNoUsage = await raw({ model: MODEL, input: 'hi [[sim:no-usage]]' });
  t.equal(JSON.parse(nsNoUsage.text).usage, null);
});

t.test('stalls: mid-stream and before headers are released by close()', async (t) => {
  const sim2 = await startOpenAISimulator({ apiKey: API_KEY });
  const res = await request(`${sim2.url}/responses`, {
    method: 'POST',
    headers: { authorization: `Bearer ${API_KEY}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, input: 'hi [[sim:stall]]', stream: true }),
  });
  t.equal(res.statusCode, 200);
  let text = '';
  let closed: Promise<void> | undefined;
  const endErr = await (async () => {
    for await (const chunk of res.body) {
      text += (chunk as Buffer).toString('utf8');
      if (!closed && text.includes('event: response.output_text.delta')) closed = sim2.close();
    }
  })().catch((e) => e);
  await closed;
  t.ok(endErr, 'body ends with an error once the simulator closes');
  const fr = frames(text);
  t.equal(fr.at(-1)!.event, 'response.output_text.delta', 'stalled right after the first delta');
  t.equal(fr.filter((f) => f.event === 'response.output_text.delta').length, 1);

  const sim3 = await startOpenAISimulator({ apiKey: API_KEY });
  const slow = new OpenAI({ apiKey: API_KEY, baseURL: sim3.url, maxRetries: 0, timeout: 300 });
  const err = await slow.responses.create({ model: MODEL, input: 'hi [[sim:stall-headers]]' }).catch((e) => e);
  t.type(err, OpenAI.APIConnectionTimeoutError);
  t.equal(sim3.requests.length, 1, 'the request arrived and was held');
  await sim3.close();
});

t.test('body cap and request recording limit', async (t) => {
  const small = await startOpenAISimulator({ apiKey: API_KEY, maxBodyBytes: 1024, maxRecordedRequests: 2 });
  t.teardown(() => small.close());
  const big = await raw({ model: MODEL, input: 'x'.repeat(256 * 1024) }, { target: small }).catch((e) => ({ status: -1, text: String(e) }));
  // The server answers 413 and closes; the client may see the answer or the closed socket.
  if (big.status !== -1) {
    t.equal(big.status, 413);
    t.equal(JSON.parse(big.text).error.code, 'request_too_large');
  } else {
    t.pass(`connection closed while uploading: ${big.text}`);
  }
  for (let i = 0; i < 3; i++) await raw({ model: MODEL, input: `n${i}` }, { target: small });
  t.equal(small.requests.length, 2);
  t.same(
    small.requests.map((r) => (r.body as { input: string }).input),
    ['n1', 'n2'],
  );
});
