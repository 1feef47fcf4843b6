// The Responses lane's request side: every accepted and rejected field, every error code with its
// param, the vendor body, the o200k token count against gpt-tokenizer, and the 922,000 envelope.
import t, { type Test } from 'tap';
import fc from 'fast-check';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { countTokens as libraryCount } from 'gpt-tokenizer/encoding/o200k_base';
import { ApiError } from '../../src/errors.js';
import { loadCatalog } from '../../src/catalog/models.js';
import { responsesHoldInk } from '../../src/catalog/pricing.js';
import {
  CLIENT_METADATA_LIMITS,
  parseResponsesRequest,
  RESPONSES_ACCEPTED_FIELDS,
  RESPONSES_MIN_OUTPUT_TOKENS,
  RESPONSES_REJECTED_FIELDS,
  type ResponsesRequest,
} from '../../src/lanes/responses/request.js';
import * as hold from '../../src/lanes/responses/request-count.js';
import { MAX_TOOL_DEFINITIONS } from '../../src/lanes/responses/request-tools.js';

const {
  HOLD_CHARS_PER_TOKEN,
  HOLD_ENCRYPTED_CHARS_PER_TOKEN,
  HOLD_ITEM_OVERHEAD_TOKENS,
  HOLD_MARGIN_PERCENT,
  HOLD_MARGIN_TOKENS,
  HOLD_REQUEST_OVERHEAD_TOKENS,
  HOLD_TOOL_OVERHEAD_TOKENS,
  INCLUDE_ENCRYPTED_REASONING,
} = hold;
import { countO200kTokens, O200K_MAX_TOKEN_BYTES } from '../../src/lanes/responses/token-count.js';

type Obj = Record<string, any>;
const here = dirname(fileURLToPath(import.meta.url));
const fixture = (name: string): Obj => JSON.parse(readFileSync(join(here, '..', 'fixtures', 'openai', name), 'utf8')) as Obj;

const catalog = loadCatalog();
const USER_HASH = 'uh_0123456789abcdef';
const opts = { userHash: USER_HASH };
/** The reference: gpt-tokenizer with special-token text read as ordinary text. */
const NO_SPECIALS = { disallowedSpecial: new Set<string>() };
const reference = (s: string): number => libraryCount(s, NO_SPECIALS);

const base = (extra: Obj = {}): Obj => ({ model: 'astra', input: 'Hello there', ...extra });
const parse = (body: Obj): ResponsesRequest => parseResponsesRequest(body, catalog, opts);
const vendor = (body: Obj): Obj => JSON.parse(parse(body).vendorBody) as Obj;
const holdFor = (raw: number): number => raw + Math.ceil((raw * HOLD_MARGIN_PERCENT) / 100) + HOLD_MARGIN_TOKENS;
/** What the hold budgets for a schema or summary text: its count, at least a token per 4 characters. */
const held = (text: string): number => Math.max(reference(text), Math.ceil(text.length / 4));

/** Asserts parse throws an ApiError with this code and param. */
function rejects(tt: Test, body: Obj, code: string, param: string, name?: string): ApiError | undefined {
  const label = name ?? `${code} ${param}`;
  try {
    parse(body);
  } catch (e) {
    tt.ok(e instanceof ApiError, `${label}: an ApiError`);
    tt.equal((e as ApiError).code, code, `${label}: code`);
    tt.equal((e as ApiError).param, param, `${label}: param`);
    return e as ApiError;
  }
  tt.fail(`${label}: expected ${code}, but the body was accepted`);
  return undefined;
}

// ---------------------------------------------------------------------------------------------
// Token count

t.test('countO200kTokens equals gpt-tokenizer on fixed texts', async (tt) => {
  const samples = [
    '',
    'Hello there',
    'What is the capital of France?',
    '<|endoftext|> and <|im_start|> are ordinary text here',
    "it's we'll THEY'RE don't I'M",
    '1234567890 3.14159 -42',
    'Ünïcödé façade naïve Ωμέγα Жизнь',
    '日本語のテキストです。中文文本，没有标点的很长的一段文字也要能数',
    'สวัสดีครับ ภาษาไทยไม่มีช่องว่างระหว่างคำ',
    '😀😀👍🏽 emoji 🇫🇷 flags',
    'line one\r\nline two\n\n\n  indented\ttab  \n',
    'a'.repeat(3000),
    ' '.repeat(700) + 'x',
    '-'.repeat(1500) + '\n\n\n/',
    'x'.repeat(O200K_MAX_TOKEN_BYTES + 1),
    JSON.stringify({ type: 'object', properties: { city: { type: 'string', description: 'City name' } }, required: ['city'] }),
    'e\u0301\u0301\u0301 combining marks',
    'ﾟ･✿ヾ╲(｡◕‿◕｡)╱✿･ﾟ',
  ];
  for (const s of samples) tt.equal(countO200kTokens(s), reference(s), JSON.stringify(s.slice(0, 40)));
});

t.test('countO200kTokens equals gpt-tokenizer on random texts', async (tt) => {
  const pieces = [
    'a',
    'e',
    'th',
    ' ',
    '  ',
    '\n',
    '\r\n',
    '\t',
    '.',
    ',',
    '-',
    '/',
    "'s",
    "'LL",
    'A',
    'Z',
    '0',
    '42',
    'é',
    '日',
    '本',
    'の',
    'ア',
    '😀',
    '\u0301',
    'ก',
    'า',
    '<|endoftext|>',
    '"',
    '{',
    '}',
    'ß',
    'Ж',
    '—',
    'x',
  ];
  const piece = fc.oneof(
    fc.constantFrom(...pieces),
    fc.tuple(fc.constantFrom(...pieces), fc.integer({ min: 2, max: 40 })).map(([p, n]) => p.repeat(n)),
  );
  fc.assert(
    fc.property(fc.array(piece, { maxLength: 60 }), (parts) => {
      const s = parts.join('');
      return countO200kTokens(s) === reference(s);
    }),
    { numRuns: 1500, seed: 20260901 },
  );
  fc.assert(
    fc.property(fc.string({ unit: 'grapheme', maxLength: 200 }), (s) => countO200kTokens(s) === reference(s)),
    { numRuns: 500, seed: 7 },
  );
  tt.pass('property held');
});

t.test('a long single-chunk run is counted exactly without the quadratic blow-up', async (tt) => {
  // gpt-tokenizer's own countTokens needs ~2 s for 64 Ki of one letter and ~39 s for 256 Ki on this
  // machine; the same run here is O(n log n). The expected counts are gpt-tokenizer's, measured once
  // offline (it returned 8,192 and 32,768: the run merges into 8-letter tokens).
  tt.equal(countO200kTokens('a'.repeat(65536)), 8192);
  tt.equal(countO200kTokens('a'.repeat(262144)), 32768);
  // A 4,000-byte run is also checked against the reference, which is still fast at that size.
  const run = 'ab'.repeat(2000);
  tt.equal(countO200kTokens(run), reference(run));
});

// ---------------------------------------------------------------------------------------------
// Accepted fields and the vendor body

const everyField = (): Obj => ({
  model: 'astra',
  input: [
    { role: 'developer', content: 'Answer briefly.' },
    { role: 'system', content: [{ type: 'input_text', text: 'System text.' }] },
    { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'What is the weather in Paris?' }] },
    { type: 'reasoning', id: 'rs_1', summary: [{ type: 'summary_text', text: 'Need the weather tool.' }], encrypted_content: 'gAAAA'.repeat(40) },
    { type: 'function_call', id: 'fc_1', call_id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}', status: 'completed' },
    { type: 'function_call_output', call_id: 'call_1', output: '{"temp_c":21}' },
    { type: 'function_call_output', call_id: 'call_2', output: [{ type: 'input_text', text: 'sunny' }] },
    {
      type: 'message',
      id: 'msg_1',
      status: 'completed',
      role: 'assistant',
      content: [
        { type: 'output_text', text: 'It is 21 °C and sunny.', annotations: [], logprobs: [] },
        { type: 'refusal', refusal: 'I cannot share more.' },
      ],
    },
    { role: 'user', content: 'Thanks!' },
  ],
  instructions: 'You are a weather assistant.',
  max_output_tokens: 2048,
  stream: true,
  stream_options: { include_obfuscation: false },
  tools: [
    {
      type: 'function',
      name: 'get_weather',
      description: 'Current weather for a city.',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false },
      strict: true,
    },
  ],
  tool_choice: { type: 'function', name: 'get_weather' },
  parallel_tool_calls: false,
  max_tool_calls: 3,
  reasoning: { effort: 'low', summary: 'auto' },
  text: { format: { type: 'json_schema', name: 'answer', schema: { type: 'object', properties: { a: { type: 'string' } } }, strict: true }, verbosity: 'low' },
  temperature: 0.7,
  top_p: 0.9,
  truncation: 'auto',
  include: ['reasoning.encrypted_content'],
  prompt_cache_key: 'conv-42',
  prompt_cache_retention: 'in_memory',
  store: true,
  metadata: { trace: 'abc', team: 'blue' },
  client_metadata: { session_id: 'sess-1', 'x-codex-window-id': 'w-2' },
  user: 'end-user-7',
  safety_identifier: 'client-safety-id',
});

t.test('every accepted field: forwarded, replaced or dropped as documented', async (tt) => {
  const body = everyField();
  tt.same(Object.keys(body).sort(), [...RESPONSES_ACCEPTED_FIELDS].sort(), 'the sample uses every accepted field');
  const r = parse(body);
  tt.equal(r.model.id, 'text-6-astra');
  tt.equal(r.stream, true);
  tt.equal(r.maxOutputTokens, 2048);
  const v = JSON.parse(r.vendorBody) as Obj;
  tt.equal(v.model, r.model.vendorModel, 'model is the vendor id');
  tt.not(v.model, 'astra');
  for (const k of [
    'input',
    'instructions',
    'stream',
    'stream_options',
    'tools',
    'tool_choice',
    'parallel_tool_calls',
    'max_tool_calls',
    'reasoning',
    'text',
    'temperature',
    'top_p',
    'truncation',
    'prompt_cache_key',
    'prompt_cache_retention',
    'client_metadata',
  ]) {
    tt.same(v[k], body[k], `${k} forwarded as sent`);
  }
  tt.equal(v.max_output_tokens, 2048);
  tt.equal(v.store, false, 'store: true is sent as false');
  tt.same(v.include, [INCLUDE_ENCRYPTED_REASONING]);
  tt.equal(v.safety_identifier, USER_HASH, 'safety_identifier replaced');
  tt.notOk('user' in v, 'user not forwarded');
  tt.notOk('metadata' in v, 'metadata not forwarded');
  tt.notOk(
    r.vendorBody.includes('end-user-7') || r.vendorBody.includes('client-safety-id') || r.vendorBody.includes('"trace"'),
    'no client identifiers on the wire',
  );
  tt.same(
    Object.keys(v).sort(),
    [
      'client_metadata',
      'include',
      'input',
      'instructions',
      'max_output_tokens',
      'max_tool_calls',
      'model',
      'parallel_tool_calls',
      'prompt_cache_key',
      'prompt_cache_retention',
      'reasoning',
      'safety_identifier',
      'store',
      'stream',
      'stream_options',
      'text',
      'temperature',
      'tool_choice',
      'tools',
      'top_p',
      'truncation',
    ].sort(),
  );
});

t.test('defaults: model, max_output_tokens, stream, store, include, safety_identifier', async (tt) => {
  const r = parseResponsesRequest({ model: 'astra', input: 'Hi' }, catalog, opts);
  tt.throws(
    () => parseResponsesRequest({ input: 'Hi' }, catalog, opts),
    { code: 'unknown_model', param: 'model', message: /`model` is required/ },
    'model is required',
  );
  tt.equal(r.maxOutputTokens, 32_768);
  tt.equal(r.stream, false);
  const v = JSON.parse(r.vendorBody) as Obj;
  tt.same(v, {
    model: r.model.vendorModel,
    input: 'Hi',
    max_output_tokens: 32_768,
    include: [INCLUDE_ENCRYPTED_REASONING],
    store: false,
    safety_identifier: USER_HASH,
  });
  tt.equal(parse(base({ model: 'text-6-astra' })).model.id, 'text-6-astra');
  tt.throws(() => parse(base({ model: null })), { code: 'unknown_model', param: 'model' });
});

t.test('null means absent for every optional field, and is not forwarded', async (tt) => {
  const nulls: Obj = {};
  for (const k of RESPONSES_ACCEPTED_FIELDS) if (k !== 'input' && k !== 'model') nulls[k] = null;
  const r = parse({ ...nulls, model: 'astra', input: 'Hi' });
  tt.equal(r.maxOutputTokens, 32_768);
  const v = JSON.parse(r.vendorBody) as Obj;
  tt.same(Object.keys(v).sort(), ['include', 'input', 'max_output_tokens', 'model', 'safety_identifier', 'store']);
});

t.test('the vendor example request (with our model) is accepted and its hold covers the recorded usage', async (tt) => {
  const example = fixture('request_example.json');
  const recorded = fixture('response_completed.json');
  const r = parse({ ...example, model: 'astra' });
  tt.equal(r.stream, true);
  tt.equal(r.maxOutputTokens, 1024);
  const v = JSON.parse(r.vendorBody) as Obj;
  tt.equal(v.store, false);
  tt.notOk('previous_response_id' in v, 'previous_response_id: null dropped');
  tt.same(v.tools, []);
  tt.ok(r.promptTokens <= recorded.usage.input_tokens, `verbatim count ${r.promptTokens} <= vendor's ${recorded.usage.input_tokens}`);
  tt.ok(r.promptTokensForHold >= recorded.usage.input_tokens, `hold count ${r.promptTokensForHold} >= vendor's ${recorded.usage.input_tokens}`);
});

// ---------------------------------------------------------------------------------------------
// Rejected fields

t.test('rejected top-level fields answer unsupported_parameter naming the field', async (tt) => {
  const samples: Obj = {
    previous_response_id: 'resp_123',
    conversation: 'conv_123',
    background: true,
    prompt: { id: 'pmpt_1' },
    service_tier: 'priority',
    top_logprobs: 5,
  };
  tt.same(Object.keys(samples).sort(), Object.keys(RESPONSES_REJECTED_FIELDS).sort(), 'every documented rejection is tested');
  for (const [k, v] of Object.entries(samples)) rejects(tt, base({ [k]: v }), 'unsupported_parameter', k);
  for (const k of ['frobnicate', 'messages', 'max_tokens', 'modalities', 'context_management']) rejects(tt, base({ [k]: 1 }), 'unsupported_parameter', k);
});

t.test('a rejected field sent as null or its inert default is ignored and not forwarded', async (tt) => {
  const v = vendor(base({ previous_response_id: null, conversation: null, background: false, prompt: null, service_tier: null, top_logprobs: 0 }));
  for (const k of Object.keys(RESPONSES_REJECTED_FIELDS)) tt.notOk(k in v, `${k} not forwarded`);
  rejects(tt, base({ background: 'false' }), 'unsupported_parameter', 'background', 'background "false" is not the inert default');
});

t.test('include: only reasoning.encrypted_content', async (tt) => {
  tt.same(vendor(base({ include: [] })).include, [INCLUDE_ENCRYPTED_REASONING], 'always requested');
  rejects(tt, base({ include: ['message.output_text.logprobs'] }), 'unsupported_parameter', 'include.0');
  rejects(tt, base({ include: ['reasoning.encrypted_content', 'web_search_call.action.sources'] }), 'unsupported_parameter', 'include.1');
  rejects(tt, base({ include: [5] }), 'invalid_type', 'include.0');
  rejects(tt, base({ include: 'reasoning.encrypted_content' }), 'invalid_type', 'include');
});

t.test('prompt_cache_retention: in_memory only', async (tt) => {
  tt.equal(vendor(base({ prompt_cache_retention: 'in_memory' })).prompt_cache_retention, 'in_memory');
  rejects(tt, base({ prompt_cache_retention: '24h' }), 'unsupported_parameter', 'prompt_cache_retention');
  rejects(tt, base({ prompt_cache_retention: 'forever' }), 'invalid_enum', 'prompt_cache_retention');
  rejects(tt, base({ prompt_cache_retention: 1 }), 'invalid_type', 'prompt_cache_retention');
});

t.test('store: any boolean accepted, always false on the wire', async (tt) => {
  tt.equal(vendor(base({ store: true })).store, false);
  tt.equal(vendor(base({ store: false })).store, false);
  rejects(tt, base({ store: 'yes' }), 'invalid_type', 'store');
});

t.test('tools: function tools and namespaces of them; server tools refused by name', async (tt) => {
  for (const type of [
    'web_search',
    'web_search_preview',
    'file_search',
    'code_interpreter',
    'image_generation',
    'mcp',
    'computer_use_preview',
    'local_shell',
    'shell',
    'apply_patch',
  ]) {
    const e = rejects(tt, base({ tools: [{ type: 'function', name: 'ok' }, { type }] }), 'unsupported_parameter', 'tools.1.type', `tool ${type}`);
    tt.match(e?.message, `"${type}" tool is a server tool`, `${type}: the message names the tool`);
    tt.match(e?.message, 'runs and bills no server tools', `${type}: the message says why`);
  }
  const custom = rejects(tt, base({ tools: [{ type: 'custom', name: 'apply_patch' }] }), 'unsupported_parameter', 'tools.0.type', 'custom tool');
  tt.match(custom?.message, 'Tools of type "custom" are not supported');
  rejects(tt, base({ tools: [{ type: 'function', description: 'no name' }] }), 'invalid_tool', 'tools.0.name');
  rejects(tt, base({ tools: [{ type: 'function', name: '' }] }), 'invalid_tool', 'tools.0.name');
  rejects(tt, base({ tools: [{ name: 'untyped' }] }), 'invalid_tool', 'tools.0.type');
  rejects(tt, base({ tools: ['get_weather'] }), 'invalid_tool', 'tools.0');
  rejects(tt, base({ tools: { type: 'function', name: 'x' } }), 'invalid_type', 'tools');
  rejects(tt, base({ tools: [{ type: 'function', name: 'x', parameters: 'object' }] }), 'invalid_type', 'tools.0.parameters');
  rejects(tt, base({ tools: [{ type: 'function', name: 'x', description: 3 }] }), 'invalid_type', 'tools.0.description');
  rejects(tt, base({ tools: [{ type: 'function', name: 'x', strict: 'yes' }] }), 'invalid_type', 'tools.0.strict');
  const v = vendor(base({ tools: [{ type: 'function', name: 'x', description: null, parameters: null, strict: null }] }));
  tt.same(v.tools, [{ type: 'function', name: 'x', description: null, parameters: null, strict: null }], 'nulls inside a tool pass through');
});

t.test('namespace tools: accepted, forwarded as sent, counted in the hold, bounded', async (tt) => {
  const fn = (name: string) => ({
    type: 'function',
    name,
    description: `Runs ${name}.`,
    parameters: { type: 'object', properties: { path: { type: 'string' } } },
  });
  const ns = { type: 'namespace', name: 'files', description: 'File tools.', tools: [fn('read'), fn('list')] };
  const plain = parse(base({ tools: [fn('read'), fn('list')] }));
  const r = parse(base({ tools: [ns] }));
  tt.same((JSON.parse(r.vendorBody) as Obj).tools, [ns], 'forwarded as sent');
  tt.ok(r.promptTokensForHold > plain.promptTokensForHold, "the namespace's name and description are held for");
  // A call of a function inside a namespace, sent back as input, carries the namespace.
  const call = { type: 'function_call', call_id: 'c1', name: 'read', namespace: 'files', arguments: '{}' };
  tt.ok(parse(base({ tools: [ns], input: [{ role: 'user', content: 'x' }, call, { type: 'function_call_output', call_id: 'c1', output: 'ok' }] })));

  rejects(tt, base({ tools: [{ ...ns, tools: [fn('a'), { ...ns, name: 'inner' }] }] }), 'invalid_tool', 'tools.0.tools.1.type', 'nested namespace');
  rejects(tt, base({ tools: [{ ...ns, tools: [] }] }), 'invalid_tool', 'tools.0.tools', 'empty namespace');
  rejects(tt, base({ tools: [{ ...ns, tools: 'read' }] }), 'invalid_tool', 'tools.0.tools', 'namespace tools not an array');
  rejects(tt, base({ tools: [{ ...ns, name: '' }] }), 'invalid_tool', 'tools.0.name', 'namespace without a name');
  rejects(tt, base({ tools: [{ ...ns, description: 7 }] }), 'invalid_type', 'tools.0.description');
  rejects(tt, base({ tools: [{ ...ns, tools: [fn('a'), { type: 'function' }] }] }), 'invalid_tool', 'tools.0.tools.1.name', 'inner tool without a name');
  const inner = rejects(
    tt,
    base({ tools: [{ ...ns, tools: [{ type: 'web_search' }] }] }),
    'unsupported_parameter',
    'tools.0.tools.0.type',
    'server tool inside a namespace',
  );
  tt.match(inner?.message, '"web_search" tool is a server tool');
  const many = Array.from({ length: MAX_TOOL_DEFINITIONS }, (_, i) => fn(`f${i}`));
  tt.ok(parse(base({ tools: [{ ...ns, tools: many.slice(1) }] })), 'exactly the bound: accepted');
  rejects(tt, base({ tools: [{ ...ns, tools: many }] }), 'too_long', 'tools', 'one definition past the bound, inside a namespace');
});

t.test('client_metadata: an object of short strings, forwarded as sent', async (tt) => {
  const cm = { 'x-codex-installation-id': 'inst-1', session_id: 's', thread_id: 't', 'x-codex-turn-metadata': '{"cwd":"/tmp"}' };
  tt.same(vendor(base({ client_metadata: cm })).client_metadata, cm);
  tt.notOk('client_metadata' in vendor(base({ client_metadata: null })), 'null: absent');
  const L = CLIENT_METADATA_LIMITS;
  rejects(tt, base({ client_metadata: 'x' }), 'invalid_type', 'client_metadata');
  rejects(tt, base({ client_metadata: ['x'] }), 'invalid_type', 'client_metadata');
  rejects(tt, base({ client_metadata: { n: 1 } }), 'invalid_type', 'client_metadata.n');
  rejects(tt, base({ client_metadata: { n: { deep: 'x' } } }), 'invalid_type', 'client_metadata.n');
  rejects(
    tt,
    base({ client_metadata: Object.fromEntries(Array.from({ length: L.keys + 1 }, (_, i) => [`k${i}`, 'v'])) }),
    'invalid_value',
    'client_metadata',
    'too many keys',
  );
  rejects(tt, base({ client_metadata: { ['k'.repeat(L.keyChars + 1)]: 'v' } }), 'too_long', 'client_metadata', 'long key');
  rejects(tt, base({ client_metadata: { k: 'v'.repeat(L.valueChars + 1) } }), 'too_long', 'client_metadata.k', 'long value');
  tt.ok(parse(base({ client_metadata: { k: 'v'.repeat(L.valueChars) } })), 'a value at the bound');
  const big = Object.fromEntries(Array.from({ length: L.keys }, (_, i) => [`k${i}`, 'v'.repeat(L.valueChars)]));
  rejects(tt, base({ client_metadata: big }), 'too_long', 'client_metadata', 'above the total size');
});

t.test('tool_choice', async (tt) => {
  for (const c of ['auto', 'none', 'required']) tt.equal(vendor(base({ tool_choice: c })).tool_choice, c);
  tt.same(vendor(base({ tool_choice: { type: 'function', name: 'f' } })).tool_choice, { type: 'function', name: 'f' });
  rejects(tt, base({ tool_choice: 'any' }), 'invalid_enum', 'tool_choice');
  rejects(tt, base({ tool_choice: 5 }), 'invalid_type', 'tool_choice');
  rejects(tt, base({ tool_choice: { type: 'function' } }), 'invalid_type', 'tool_choice.name');
  rejects(tt, base({ tool_choice: { type: 'web_search_preview' } }), 'unsupported_parameter', 'tool_choice.type');
  rejects(tt, base({ tool_choice: { type: 'allowed_tools', mode: 'auto', tools: [] } }), 'unsupported_parameter', 'tool_choice.type');
  rejects(tt, base({ tool_choice: { type: 'tool', name: 'f' } }), 'invalid_enum', 'tool_choice.type');
});

// ---------------------------------------------------------------------------------------------
// model, max_output_tokens, input

t.test('model: text-6-astra or astra, anything else unknown_model', async (tt) => {
  tt.equal(parse(base({ model: 'astra' })).model.id, 'text-6-astra');
  for (const m of ['fable', 'assistant-sonnet-5', 'gpt-6', 'clip-2.5', 'ASTRA', '']) rejects(tt, base({ model: m }), 'unknown_model', 'model', `model ${m}`);
  rejects(tt, base({ model: 7 }), 'unknown_model', 'model', 'model 7');
  tt.throws(() => parse(base({ model: 7 })), { message: /model id string; got number/ }, 'the message says what was wrong');
});

t.test('max_output_tokens: 16 to 128,000, default 32,768, always sent', async (tt) => {
  tt.equal(parse(base({ max_output_tokens: RESPONSES_MIN_OUTPUT_TOKENS })).maxOutputTokens, 16);
  tt.equal(vendor(base({ max_output_tokens: 128_000 })).max_output_tokens, 128_000);
  tt.equal(vendor(base({ max_output_tokens: null })).max_output_tokens, 32_768);
  rejects(tt, base({ max_output_tokens: 15 }), 'invalid_value', 'max_output_tokens');
  rejects(tt, base({ max_output_tokens: 0 }), 'invalid_value', 'max_output_tokens');
  rejects(tt, base({ max_output_tokens: -5 }), 'invalid_value', 'max_output_tokens');
  rejects(tt, base({ max_output_tokens: 128_001 }), 'too_large', 'max_output_tokens');
  rejects(tt, base({ max_output_tokens: 100.5 }), 'invalid_type', 'max_output_tokens');
  rejects(tt, base({ max_output_tokens: '1000' }), 'invalid_type', 'max_output_tokens');
});

t.test('input: required', async (tt) => {
  for (const [name, input] of [
    ['absent', undefined],
    ['null', null],
    ['empty string', ''],
    ['empty array', []],
  ] as const) {
    const body = base({ input });
    if (input === undefined) delete body.input;
    rejects(tt, body, 'missing_input', 'input', `input ${name}`);
  }
  rejects(tt, base({ input: 42 }), 'invalid_type', 'input');
  rejects(tt, base({ input: { role: 'user', content: 'hi' } }), 'invalid_type', 'input');
});

t.test('input items: malformed answers invalid_input with the path', async (tt) => {
  const ok = { role: 'user', content: 'fine' };
  rejects(tt, base({ input: [ok, 'hello'] }), 'invalid_input', 'input.1');
  rejects(tt, base({ input: [{ role: 'tool', content: 'x' }] }), 'invalid_input', 'input.0.role');
  rejects(tt, base({ input: [{ content: 'no role' }] }), 'invalid_input', 'input.0.role');
  rejects(tt, base({ input: [{ role: 'user', content: 5 }] }), 'invalid_input', 'input.0.content');
  rejects(tt, base({ input: [{ role: 'user' }] }), 'invalid_input', 'input.0.content');
  rejects(tt, base({ input: [{ role: 'user', content: ['text'] }] }), 'invalid_input', 'input.0.content.0');
  rejects(
    tt,
    base({
      input: [
        {
          role: 'user',
          content: [
            { type: 'input_text', text: 'a' },
            { type: 'markdown', text: 'b' },
          ],
        },
      ],
    }),
    'invalid_input',
    'input.0.content.1.type',
  );
  rejects(tt, base({ input: [{ role: 'user', content: [{ type: 'input_text' }] }] }), 'invalid_input', 'input.0.content.0.text');
  rejects(tt, base({ input: [{ role: 'assistant', content: [{ type: 'refusal', text: 'no' }] }] }), 'invalid_input', 'input.0.content.0.refusal');
  rejects(tt, base({ input: [ok, { type: 'function_call', call_id: 'c', name: 'f' }] }), 'invalid_input', 'input.1.arguments');
  rejects(tt, base({ input: [{ type: 'function_call', name: 'f', arguments: '{}' }] }), 'invalid_input', 'input.0.call_id');
  rejects(tt, base({ input: [{ type: 'function_call_output', call_id: 'c' }] }), 'invalid_input', 'input.0.output');
  rejects(
    tt,
    base({ input: [{ type: 'function_call_output', call_id: 'c', output: [{ type: 'output_text', text: 'x' }] }] }),
    'invalid_input',
    'input.0.output.0.type',
  );
  rejects(
    tt,
    base({ input: [{ type: 'reasoning', id: 'rs_1', summary: [] }] }),
    'invalid_input',
    'input.0.encrypted_content',
    'reasoning without encrypted_content',
  );
  rejects(tt, base({ input: [{ type: 'reasoning', encrypted_content: 'abc', summary: 'x' }] }), 'invalid_input', 'input.0.summary');
  rejects(tt, base({ input: [{ type: 'reasoning', encrypted_content: 'abc', summary: [{ type: 'summary_text' }] }] }), 'invalid_input', 'input.0.summary.0');
  rejects(tt, base({ input: [{ type: 'telepathy' }] }), 'invalid_input', 'input.0.type');
  rejects(tt, base({ input: [{ type: 3 }] }), 'invalid_input', 'input.0.type');
});

t.test('input: image, file and audio anywhere, tool items and item references are unsupported', async (tt) => {
  for (const type of ['input_image', 'input_file', 'input_audio', 'image_url']) {
    rejects(
      tt,
      base({
        input: [
          {
            role: 'user',
            content: [
              { type: 'input_text', text: 'look' },
              { type, image_url: 'https://example.com/a.png' },
            ],
          },
        ],
      }),
      'unsupported_parameter',
      'input.0.content.1.type',
      `message part ${type}`,
    );
    rejects(
      tt,
      base({
        input: [
          { role: 'user', content: 'x' },
          { type: 'function_call_output', call_id: 'c', output: [{ type }] },
        ],
      }),
      'unsupported_parameter',
      'input.1.output.0.type',
      `output part ${type}`,
    );
  }
  for (const type of [
    'item_reference',
    'web_search_call',
    'file_search_call',
    'computer_call',
    'code_interpreter_call',
    'image_generation_call',
    'local_shell_call',
    'mcp_call',
    'custom_tool_call',
  ]) {
    rejects(
      tt,
      base({
        input: [
          { role: 'user', content: 'x' },
          { type, id: 'x_1' },
        ],
      }),
      'unsupported_parameter',
      'input.1.type',
      `item ${type}`,
    );
  }
});

// ---------------------------------------------------------------------------------------------
// The other accepted fields' validation

t.test('stream, stream_options, parallel_tool_calls, max_tool_calls', async (tt) => {
  rejects(tt, base({ stream: 'true' }), 'invalid_type', 'stream');
  rejects(tt, base({ stream_options: true }), 'invalid_type', 'stream_options');
  rejects(tt, base({ stream_options: { include_obfuscation: 'no' } }), 'invalid_type', 'stream_options.include_obfuscation');
  rejects(tt, base({ parallel_tool_calls: 'yes' }), 'invalid_type', 'parallel_tool_calls');
  rejects(tt, base({ max_tool_calls: 0 }), 'invalid_value', 'max_tool_calls');
  rejects(tt, base({ max_tool_calls: 1.5 }), 'invalid_type', 'max_tool_calls');
  tt.equal(vendor(base({ max_tool_calls: 1 })).max_tool_calls, 1);
});

t.test('reasoning and text', async (tt) => {
  tt.same(
    vendor(base({ reasoning: { effort: 'xhigh', summary: 'detailed' } })).reasoning,
    { effort: 'xhigh', summary: 'detailed' },
    'effort values are the vendor’s to judge',
  );
  rejects(tt, base({ reasoning: 'high' }), 'invalid_type', 'reasoning');
  rejects(tt, base({ reasoning: { effort: 5 } }), 'invalid_type', 'reasoning.effort');
  rejects(tt, base({ reasoning: { summary: true } }), 'invalid_type', 'reasoning.summary');
  for (const type of ['text', 'json_object']) tt.same(vendor(base({ text: { format: { type } } })).text, { format: { type } });
  rejects(tt, base({ text: 'json' }), 'invalid_type', 'text');
  rejects(tt, base({ text: { format: 'json' } }), 'invalid_type', 'text.format');
  rejects(tt, base({ text: { format: { type: 'xml' } } }), 'invalid_enum', 'text.format.type');
  rejects(tt, base({ text: { format: { type: 'json_schema', schema: {} } } }), 'invalid_type', 'text.format.name');
  rejects(tt, base({ text: { format: { type: 'json_schema', name: 'a' } } }), 'invalid_type', 'text.format.schema');
  rejects(tt, base({ text: { format: { type: 'json_schema', name: 'a', schema: {}, description: 1 } } }), 'invalid_type', 'text.format.description');
  rejects(tt, base({ text: { verbosity: 'loud' } }), 'invalid_enum', 'text.verbosity');
});

t.test('temperature, top_p, truncation, prompt_cache_key', async (tt) => {
  tt.equal(vendor(base({ temperature: 0 })).temperature, 0);
  tt.equal(vendor(base({ temperature: 2 })).temperature, 2);
  rejects(tt, base({ temperature: 2.5 }), 'invalid_value', 'temperature');
  rejects(tt, base({ temperature: -0.1 }), 'invalid_value', 'temperature');
  rejects(tt, base({ temperature: 'hot' }), 'invalid_type', 'temperature');
  rejects(tt, base({ top_p: 1.01 }), 'invalid_value', 'top_p');
  rejects(tt, base({ top_p: [] }), 'invalid_type', 'top_p');
  tt.equal(vendor(base({ truncation: 'disabled' })).truncation, 'disabled');
  rejects(tt, base({ truncation: 'middle' }), 'invalid_enum', 'truncation');
  rejects(tt, base({ truncation: 1 }), 'invalid_type', 'truncation');
  rejects(tt, base({ prompt_cache_key: 9 }), 'invalid_type', 'prompt_cache_key');
});

t.test('metadata, user, safety_identifier: validated, never forwarded', async (tt) => {
  const sixteen = Object.fromEntries(Array.from({ length: 16 }, (_, i) => [`k${i}`, 'v']));
  tt.notOk('metadata' in vendor(base({ metadata: sixteen })));
  rejects(tt, base({ metadata: { ...sixteen, k16: 'v' } }), 'invalid_value', 'metadata');
  rejects(tt, base({ metadata: 'tag' }), 'invalid_type', 'metadata');
  rejects(tt, base({ metadata: { n: 1 } }), 'invalid_type', 'metadata.n');
  rejects(tt, base({ metadata: { long: 'x'.repeat(513) } }), 'too_long', 'metadata.long');
  rejects(tt, base({ metadata: { ['k'.repeat(65)]: 'v' } }), 'too_long', 'metadata');
  rejects(tt, base({ user: 12 }), 'invalid_type', 'user');
  rejects(tt, base({ safety_identifier: {} }), 'invalid_type', 'safety_identifier');
  tt.equal(vendor(base({ user: 'u' })).safety_identifier, USER_HASH);
});

t.test('a body that is not an object answers invalid_body', async (tt) => {
  for (const b of [[], 'text', null, 5]) {
    try {
      parseResponsesRequest(b as unknown as Obj, catalog, opts);
      tt.fail('accepted');
    } catch (e) {
      tt.equal((e as ApiError).code, 'invalid_body');
      tt.equal((e as ApiError).param, 'body');
    }
  }
});

// ---------------------------------------------------------------------------------------------
// Prompt counts, hold and envelope

t.test('promptTokens is the exact count of verbatim text; the hold adds framing, schemas and the margin', async (tt) => {
  const body = everyField();
  const r = parse(body);
  const texts = [
    'Answer briefly.',
    'System text.',
    'What is the weather in Paris?',
    'get_weather',
    '{"city":"Paris"}',
    '{"temp_c":21}',
    'sunny',
    'It is 21 °C and sunny.',
    'I cannot share more.',
    'Thanks!',
    'You are a weather assistant.',
    'get_weather',
    'Current weather for a city.',
  ];
  const verbatim = texts.reduce((n, s) => n + reference(s), 0);
  tt.equal(r.promptTokens, verbatim);
  const format = body.text.format;
  const extra =
    HOLD_REQUEST_OVERHEAD_TOKENS +
    HOLD_ITEM_OVERHEAD_TOKENS * (body.input.length + 1) +
    Math.ceil(body.input[3].encrypted_content.length / HOLD_ENCRYPTED_CHARS_PER_TOKEN) +
    held('Need the weather tool.') +
    held(JSON.stringify(body.tools[0].parameters)) +
    HOLD_TOOL_OVERHEAD_TOKENS +
    held(format.name) +
    held(JSON.stringify(format.schema)) +
    HOLD_TOOL_OVERHEAD_TOKENS;
  tt.equal(r.promptTokensForHold, holdFor(verbatim + extra));
  tt.equal(r.holdInk, responsesHoldInk(r.promptTokensForHold, 2048, r.model));
  tt.ok(r.holdInk >= responsesHoldInk(0, 32_768, r.model), 'output part of the hold is floored at 32,768');
});

t.test('a string input: one item of framing', async (tt) => {
  const r = parse({ model: 'astra', input: 'Hello there', instructions: 'Be brief.' });
  const verbatim = reference('Hello there') + reference('Be brief.');
  tt.equal(r.promptTokens, verbatim);
  tt.equal(r.promptTokensForHold, holdFor(verbatim + HOLD_REQUEST_OVERHEAD_TOKENS + 2 * HOLD_ITEM_OVERHEAD_TOKENS));
});

t.test('the hold assumes at least one token per four characters of verbatim text', async (tt) => {
  // A run of one letter is a handful of o200k tokens; an upstream that counts characters / 4
  // reports a quarter of its length. The hold takes the larger, so the charge is never capped below
  // what such an upstream reports (and a long prompt is held at the long-context tier).
  const filler = 'a'.repeat(1_087_988);
  const r = parse({ model: 'astra', input: filler, max_output_tokens: 1000 });
  // (The exact count of such a run is checked against the library on shorter runs elsewhere: its
  // own counter is quadratic on one long run.)
  tt.ok(r.promptTokens > 0 && r.promptTokens < 200_000, `exact count ${r.promptTokens} is far below characters / 4`);
  const quarter = Math.ceil(filler.length / HOLD_CHARS_PER_TOKEN);
  tt.equal(r.promptTokensForHold, holdFor(quarter + HOLD_REQUEST_OVERHEAD_TOKENS + HOLD_ITEM_OVERHEAD_TOKENS));
  tt.ok(r.promptTokensForHold > 272_000, 'held at the long-context tier');
  tt.equal(r.holdInk, responsesHoldInk(r.promptTokensForHold, 1000, r.model));
  // Any text: the larger of the two decides.
  for (const text of ['The quick brown fox jumps over the lazy dog. '.repeat(50), '東京は日本の首都です。'.repeat(40), '🙂'.repeat(300)]) {
    const p = parse({ model: 'astra', input: text });
    const base = Math.max(reference(text), Math.ceil(text.length / HOLD_CHARS_PER_TOKEN));
    tt.equal(p.promptTokensForHold, holdFor(base + HOLD_REQUEST_OVERHEAD_TOKENS + HOLD_ITEM_OVERHEAD_TOKENS), text.slice(0, 12));
  }
  // The envelope (413) is still the exact count: 4 MB of one letter (about 500,000 o200k tokens)
  // is accepted.
  const huge = parse({ model: 'astra', input: 'a'.repeat(4_000_000) });
  tt.ok(huge.promptTokens < 922_000);
  tt.ok(huge.promptTokensForHold > 922_000, 'while its hold assumes a million tokens');
});

t.test('tool schemas and summaries are held at one token per four characters at least', async (tt) => {
  const filler = 'a'.repeat(40_000);
  const r = parse({ model: 'astra', input: 'hi', tools: [{ type: 'function', name: 'f', parameters: { type: 'object', description: filler } }] });
  const schema = JSON.stringify({ type: 'object', description: filler });
  tt.ok(reference('a'.repeat(4000)) * 10 < schema.length / 4, 'o200k counts such a run far below characters / 4');
  tt.ok(r.promptTokensForHold >= Math.ceil(schema.length / 4), `hold count ${r.promptTokensForHold} covers ${Math.ceil(schema.length / 4)}`);
});

t.test('the 922,000-token envelope, at the boundary', async (tt) => {
  // " a" is one token and a pre-tokenizer chunk of its own: n repetitions are exactly n tokens.
  const unit = ' a';
  tt.equal(reference(unit.repeat(1000)), 1000);
  const limit = catalog.text('astra', 'openai-responses')!.constraints.maxInputTokens;
  tt.equal(limit, 922_000);
  const atLimit = unit.repeat(limit - 1);
  tt.equal(reference(atLimit), limit - 1, 'the reference agrees on the synthetic input');

  const ok = parse({ model: 'astra', instructions: 'x', input: atLimit });
  tt.equal(ok.promptTokens, limit, 'instructions (1) + input (921,999) = 922,000 is accepted');
  tt.ok(ok.promptTokensForHold > limit);
  rejects(tt, { model: 'astra', instructions: 'xy z', input: atLimit }, 'payload_too_large', 'input', 'one token over');
  rejects(
    tt,
    {
      model: 'astra',
      input: [
        { role: 'user', content: atLimit },
        { role: 'user', content: [{ type: 'input_text', text: ' a a' }] },
      ],
    },
    'payload_too_large',
    'input',
    'over across items',
  );
  const err = (() => {
    try {
      parse({ model: 'astra', input: unit.repeat(limit + 1) });
    } catch (e) {
      return e as ApiError;
    }
    return undefined;
  })();
  tt.equal(err?.status, 413);
  tt.match(err?.message ?? '', /922001 tokens/);
});
