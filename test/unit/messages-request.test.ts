import t, { type Test } from 'tap';
import fc from 'fast-check';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { countTokens as countO200k } from 'gpt-tokenizer/encoding/o200k_base';
import { countTokens as countCl100k } from 'gpt-tokenizer/encoding/cl100k_base';
import { ApiError } from '../../src/errors.js';
import { loadCatalog } from '../../src/catalog/models.js';
import { messagesHoldInk } from '../../src/catalog/pricing.js';
import { countInput } from '../../simulators/anthropic/scenarios.js';
import {
  forwardedBetaHeader,
  parseMessagesRequest,
  promptTokensLowerBound,
  THINKING_MIN_BUDGET_TOKENS,
  type MessagesRequest,
} from '../../src/lanes/messages/request.js';
import { MAX_BYTES_PER_TOKEN, TOOL_USE_SYSTEM_PROMPT_TOKENS } from '../../src/lanes/messages/prompt-estimate.js';

type Obj = Record<string, any>;
const here = dirname(fileURLToPath(import.meta.url));
const corpus = (name: string): string => readFileSync(join(here, '..', 'fixtures', 'prompt-corpus', name), 'utf8');
const requestExample = JSON.parse(readFileSync(join(here, '..', 'fixtures', 'anthropic', 'request_example.json'), 'utf8')) as Obj;

const catalog = loadCatalog();
const USER_ID = 'keyhash_0123456789abcdef';
const opts = { keyUserId: USER_ID };

const base = (extra: Obj = {}): Obj => ({
  model: 'sonnet',
  max_tokens: 1024,
  messages: [{ role: 'user', content: 'Hello there' }],
  ...extra,
});
const parse = (body: Obj): MessagesRequest => parseMessagesRequest(body, catalog, opts);
const vendor = (body: Obj): Obj => JSON.parse(parse(body).vendorBody) as Obj;

/** Asserts parse throws an ApiError with this code and param. */
function rejects(tt: Test, body: Obj, code: string, param: string, name?: string): ApiError | undefined {
  try {
    parse(body);
  } catch (e) {
    tt.ok(e instanceof ApiError, `${name ?? code}: an ApiError`);
    const err = e as ApiError;
    tt.equal(err.code, code, `${name ?? param}: code`);
    tt.equal(err.param, param, `${name ?? param}: param`);
    return err;
  }
  tt.fail(`${name ?? param}: expected ${code}, but the body was accepted`);
  return undefined;
}

// ---------------------------------------------------------------------------------------------

t.test('the vendor example body passes and is forwarded unchanged except model and metadata', async (tt) => {
  const body: Obj = { ...structuredClone(requestExample), model: 'assistant-sonnet-5' };
  const r = parse(body);
  tt.equal(r.model.id, 'assistant-sonnet-5');
  tt.equal(r.stream, true);
  tt.equal(r.maxTokens, 4096);
  const v = JSON.parse(r.vendorBody) as Obj;
  tt.same(Object.keys(v).sort(), Object.keys(body).sort(), 'nothing added or dropped');
  tt.equal(v.model, 'claude-sonnet-5');
  tt.strictSame(v.metadata, { user_id: USER_ID });
  for (const k of Object.keys(body)) if (k !== 'model' && k !== 'metadata') tt.strictSame(v[k], body[k], `${k} passed through`);
  tt.equal(body.metadata.user_id, 'user-1234', 'the client object is not mutated');
});

t.test('aliases resolve through the catalogue to the vendor model', async (tt) => {
  const pairs: [string, string, string][] = [
    ['fable', 'assistant-fable-5-1', 'claude-fable-5-1'],
    ['assistant-fable-5-1', 'assistant-fable-5-1', 'claude-fable-5-1'],
    ['opus', 'assistant-opus-5', 'claude-opus-5'],
    ['assistant-opus-5', 'assistant-opus-5', 'claude-opus-5'],
    ['sonnet', 'assistant-sonnet-5', 'claude-sonnet-5'],
  ];
  for (const [name, id, vendorModel] of pairs) {
    const r = parse(base({ model: name }));
    tt.equal(r.model.id, id, name);
    tt.equal((JSON.parse(r.vendorBody) as Obj).model, vendorModel, `${name} on the wire`);
    tt.equal(r.stream, false, 'stream defaults to false');
  }
});

t.test('unknown, missing and non-string models answer unknown_model', async (tt) => {
  const m = base();
  delete m.model;
  rejects(tt, m, 'unknown_model', 'model', 'missing');
  for (const model of ['claude-sonnet-5', 'astra', 'text-6-astra', 'clip-2.5', '', 'SONNET', 42, null, ['sonnet'], { id: 'sonnet' }]) {
    rejects(tt, base({ model }), 'unknown_model', 'model', JSON.stringify(model));
  }
  tt.throws(
    () => parseMessagesRequest(base({ model: 42 }), catalog, opts),
    { message: /model id string; got number/ },
    'a non-string model is described as such',
  );
  tt.throws(() => parseMessagesRequest(base({ model: 'gpt-6' }), catalog, opts), { message: /Unknown model "gpt-6"/ });
});

t.test('top-level allow-list', async (tt) => {
  const refused = [
    'context_management',
    'service_tier',
    'mcp_servers',
    'container',
    'speed',
    'fallbacks',
    'fallback_credit_token',
    'inference_geo',
    'output_format',
    'betas',
    'cache_control',
    'anything_else',
    '__proto__',
  ];
  for (const field of refused) {
    const body = base();
    Object.defineProperty(body, field, { value: 'x', enumerable: true, configurable: true, writable: true });
    rejects(tt, body, 'unsupported_parameter', field, field);
  }
  const viaJson = JSON.parse('{"model":"sonnet","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"__proto__":{"x":1}}') as Obj;
  rejects(tt, viaJson, 'unsupported_parameter', '__proto__', '__proto__ from JSON.parse');
  // every allowed field at once
  const all = base({
    system: 'be brief',
    tools: [{ name: 't', input_schema: { type: 'object' } }],
    tool_choice: { type: 'auto' },
    thinking: { type: 'adaptive' },
    output_config: { effort: 'low' },
    temperature: 0.5,
    top_p: 0.9,
    top_k: 40,
    stop_sequences: ['END'],
    stream: false,
    metadata: { user_id: 'client' },
  });
  tt.doesNotThrow(() => parse(all), 'all allow-listed fields accepted');
});

t.test('messages: presence and turn shape', async (tt) => {
  const noMessages = base();
  delete noMessages.messages;
  rejects(tt, noMessages, 'missing_messages', 'messages', 'missing');
  rejects(tt, base({ messages: [] }), 'missing_messages', 'messages', 'empty');
  rejects(tt, base({ messages: 'hi' }), 'missing_messages', 'messages', 'string');
  rejects(tt, base({ messages: { role: 'user', content: 'hi' } }), 'missing_messages', 'messages', 'object');
  rejects(tt, base({ messages: null }), 'missing_messages', 'messages', 'null');

  const ok = { role: 'user', content: 'hi' };
  rejects(tt, base({ messages: [ok, 'hi'] }), 'invalid_message', 'messages.1', 'string item');
  rejects(tt, base({ messages: [ok, null] }), 'invalid_message', 'messages.1', 'null item');
  rejects(tt, base({ messages: [ok, [ok]] }), 'invalid_message', 'messages.1', 'array item');
  // A system turn is refused in the vendor's own words (clients key their retry on them).
  const sys = rejects(tt, base({ messages: [ok, { role: 'system', content: 'x' }, ok] }), 'invalid_message', 'messages[1].role', 'system role');
  tt.equal(sys?.message, 'Unexpected role "system". The Messages API accepts a top-level `system` parameter, not "system" as an input message role.');
  const tool = rejects(tt, base({ messages: [{ role: 'tool', content: 'x' }] }), 'invalid_message', 'messages.0.role', 'tool role');
  tt.match(tool?.message, /must be "user" or "assistant"/);
  rejects(tt, base({ messages: [{ content: 'x' }] }), 'invalid_message', 'messages.0.role', 'no role');
  rejects(tt, base({ messages: [ok, { role: 'assistant', content: '' }] }), 'invalid_message', 'messages.1.content', 'empty string');
  rejects(tt, base({ messages: [{ role: 'user', content: [] }] }), 'invalid_message', 'messages.0.content', 'empty array');
  rejects(tt, base({ messages: [{ role: 'user' }] }), 'invalid_message', 'messages.0.content', 'no content');
  rejects(tt, base({ messages: [{ role: 'user', content: 7 }] }), 'invalid_message', 'messages.0.content', 'number content');
  rejects(tt, base({ messages: [{ role: 'user', content: { type: 'text', text: 'x' } }] }), 'invalid_message', 'messages.0.content', 'object content');
});

t.test('messages: content blocks', async (tt) => {
  const user = (...content: unknown[]): Obj => ({ role: 'user', content });
  const asst = (...content: unknown[]): Obj => ({ role: 'assistant', content });
  const toolUse = { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { location: 'Paris' } };
  const toolResult = { type: 'tool_result', tool_use_id: 'toolu_1', content: '18C' };
  const thinking = { type: 'thinking', thinking: 'Let me think.', signature: 'EqQBsig==' };
  const redacted = { type: 'redacted_thinking', data: 'EmwKAhgBEgy3va3pzix/LafPsn4aDFIT' };

  // A valid tool-use round trip with every block kind.
  const good = base({
    messages: [
      user({ type: 'text', text: 'Weather in Paris?', cache_control: { type: 'ephemeral' } }),
      asst(thinking, redacted, { type: 'text', text: 'Checking.', citations: null }, toolUse),
      user({ ...toolResult, is_error: false }, { type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'text', text: 'sunny' }] }),
      user({ type: 'tool_result', tool_use_id: 'toolu_2' }),
    ],
  });
  const v = vendor(good);
  tt.strictSame(v.messages, good.messages, 'blocks (thinking, redacted_thinking, cache_control, citations) passed back unchanged');

  // Block shape
  rejects(tt, base({ messages: [user('x')] }), 'invalid_message', 'messages.0.content.0', 'string block');
  rejects(tt, base({ messages: [user({ text: 'x' })] }), 'invalid_message', 'messages.0.content.0.type', 'no type');
  rejects(tt, base({ messages: [user({ type: 'text' })] }), 'invalid_message', 'messages.0.content.0.text', 'text without text');
  rejects(tt, base({ messages: [user({ type: 'text', text: 5 })] }), 'invalid_message', 'messages.0.content.0.text', 'text not a string');
  rejects(tt, base({ messages: [user({ type: 'txet', text: 'x' })] }), 'invalid_message', 'messages.0.content.0.type', 'unknown type');

  // Roles
  rejects(tt, base({ messages: [user(toolUse)] }), 'invalid_message', 'messages.0.content.0.type', 'tool_use in a user turn');
  rejects(tt, base({ messages: [asst(toolResult)] }), 'invalid_message', 'messages.0.content.0.type', 'tool_result in an assistant turn');
  rejects(tt, base({ messages: [user(thinking)] }), 'invalid_message', 'messages.0.content.0.type', 'thinking in a user turn');
  rejects(tt, base({ messages: [user(redacted)] }), 'invalid_message', 'messages.0.content.0.type', 'redacted_thinking in a user turn');

  // Fields the rules need
  const a = (b: Obj): Obj => base({ messages: [user({ type: 'text', text: 'q' }), asst(b)] });
  rejects(tt, a({ ...toolUse, id: undefined }), 'invalid_message', 'messages.1.content.0.id', 'tool_use id');
  rejects(tt, a({ ...toolUse, name: '' }), 'invalid_message', 'messages.1.content.0.name', 'tool_use name');
  rejects(tt, a({ ...toolUse, input: '{"location":"Paris"}' }), 'invalid_message', 'messages.1.content.0.input', 'tool_use input string');
  rejects(tt, a({ ...toolUse, input: [] }), 'invalid_message', 'messages.1.content.0.input', 'tool_use input array');
  rejects(tt, a({ type: 'thinking', thinking: 'x' }), 'invalid_message', 'messages.1.content.0.signature', 'thinking without signature');
  rejects(tt, a({ type: 'thinking', signature: 'x' }), 'invalid_message', 'messages.1.content.0.thinking', 'thinking without text');
  rejects(tt, a({ type: 'redacted_thinking' }), 'invalid_message', 'messages.1.content.0.data', 'redacted_thinking without data');
  const u = (b: Obj): Obj => base({ messages: [user(b)] });
  rejects(tt, u({ type: 'tool_result', content: 'x' }), 'invalid_message', 'messages.0.content.0.tool_use_id', 'tool_result id');
  rejects(tt, u({ ...toolResult, is_error: 'yes' }), 'invalid_message', 'messages.0.content.0.is_error', 'tool_result is_error');
  rejects(tt, u({ ...toolResult, content: 5 }), 'invalid_message', 'messages.0.content.0.content', 'tool_result content number');
  rejects(tt, u({ ...toolResult, content: ['x'] }), 'invalid_message', 'messages.0.content.0.content.0', 'tool_result content string item');
  rejects(
    tt,
    u({ ...toolResult, content: [{ type: 'text' }] }),
    'invalid_message',
    'messages.0.content.0.content.0.text',
    'tool_result text block without text',
  );
  rejects(
    tt,
    u({ ...toolResult, content: [{ type: 'tool_use', id: 'a', name: 'b', input: {} }] }),
    'invalid_message',
    'messages.0.content.0.content.0.type',
    'tool_result holding a tool_use',
  );
});

t.test('media and server-tool blocks answer unsupported_parameter with the block path', async (tt) => {
  const media = [
    { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } },
    { type: 'image', source: { type: 'url', url: 'https://example.invalid/a.png' } },
    { type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'doc' } },
    { type: 'video', source: {} },
    { type: 'audio', source: {} },
    { type: 'search_result', source: 's', title: 't', content: [] },
    { type: 'container_upload', file_id: 'file_1' },
    { type: 'server_tool_use', id: 'srvtoolu_1', name: 'web_search', input: {} },
    { type: 'web_search_tool_result', tool_use_id: 'srvtoolu_1', content: [] },
  ];
  for (const block of media) {
    const err = rejects(
      tt,
      base({
        messages: [
          { role: 'user', content: 'a' },
          { role: 'assistant', content: 'b' },
          { role: 'user', content: [{ type: 'text', text: 'look' }, block] },
        ],
      }),
      'unsupported_parameter',
      'messages.2.content.1.type',
      block.type,
    );
    if (err) tt.match(err.message, block.type);
  }
  // Inside a tool_result
  rejects(
    tt,
    base({
      messages: [
        { role: 'user', content: 'q' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'shot', input: {} }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: [{ type: 'text', text: 'ok' }, media[0]] }] },
      ],
    }),
    'unsupported_parameter',
    'messages.2.content.0.content.1.type',
    'image inside tool_result',
  );
});

t.test('max_tokens', async (tt) => {
  const noMax = base();
  delete noMax.max_tokens;
  rejects(tt, noMax, 'missing_max_tokens', 'max_tokens', 'missing');
  for (const v of [0, -1, 1.5, '100', null, true, Number.NaN, [1]]) rejects(tt, base({ max_tokens: v }), 'missing_max_tokens', 'max_tokens', JSON.stringify(v));
  tt.equal(parse(base({ max_tokens: 1 })).maxTokens, 1);
  tt.equal(parse(base({ max_tokens: 64_000 })).maxTokens, 64_000);
  for (const model of ['fable', 'opus', 'sonnet']) {
    const err = rejects(tt, base({ model, max_tokens: 64_001 }), 'too_large', 'max_tokens', `${model} 64001`);
    if (err) tt.match(err.message, '64000');
  }
  rejects(tt, base({ max_tokens: 1e9 }), 'too_large', 'max_tokens', '1e9');
});

t.test('system', async (tt) => {
  tt.equal(vendor(base({ system: 'be brief' })).system, 'be brief');
  const blocks = [
    { type: 'text', text: 'You are a weather assistant.', cache_control: { type: 'ephemeral', ttl: '1h' } },
    { type: 'text', text: '' },
  ];
  tt.strictSame(vendor(base({ system: blocks })).system, blocks);
  rejects(tt, base({ system: 5 }), 'invalid_type', 'system', 'number');
  rejects(tt, base({ system: null }), 'invalid_type', 'system', 'null');
  rejects(tt, base({ system: { type: 'text', text: 'x' } }), 'invalid_type', 'system', 'object');
  rejects(tt, base({ system: ['x'] }), 'invalid_type', 'system.0', 'string item');
  rejects(tt, base({ system: [{ type: 'image', source: {} }] }), 'invalid_type', 'system.0.type', 'image block');
  rejects(tt, base({ system: [{ type: 'text' }] }), 'invalid_type', 'system.0.text', 'no text');
});

t.test('tools', async (tt) => {
  const tool = { name: 'get_weather', description: 'Weather', input_schema: { type: 'object', properties: {} }, cache_control: { type: 'ephemeral' } };
  tt.strictSame(vendor(base({ tools: [tool, { ...tool, name: 'b', type: 'custom', strict: true }] })).tools, [
    tool,
    { ...tool, name: 'b', type: 'custom', strict: true },
  ]);
  tt.doesNotThrow(() => parse(base({ tools: [] })), "empty tools list is the vendor's business");
  rejects(tt, base({ tools: tool }), 'invalid_type', 'tools', 'not an array');
  rejects(tt, base({ tools: ['get_weather'] }), 'invalid_tool', 'tools.0', 'string item');
  rejects(tt, base({ tools: [tool, { ...tool, name: undefined }] }), 'invalid_tool', 'tools.1.name', 'no name');
  rejects(tt, base({ tools: [{ ...tool, name: '' }] }), 'invalid_tool', 'tools.0.name', 'empty name');
  rejects(tt, base({ tools: [{ ...tool, name: 7 }] }), 'invalid_tool', 'tools.0.name', 'numeric name');
  rejects(tt, base({ tools: [{ name: 'x' }] }), 'invalid_tool', 'tools.0.input_schema', 'no input_schema');
  rejects(tt, base({ tools: [{ name: 'x', input_schema: [] }] }), 'invalid_tool', 'tools.0.input_schema', 'array input_schema');
  rejects(tt, base({ tools: [{ name: 'x', input_schema: '{}' }] }), 'invalid_tool', 'tools.0.input_schema', 'string input_schema');
  rejects(tt, base({ tools: [{ ...tool, description: 5 }] }), 'invalid_tool', 'tools.0.description', 'numeric description');
  const server = [
    { type: 'web_search_20250305', name: 'web_search', max_uses: 5 },
    { type: 'web_fetch_20250910', name: 'web_fetch' },
    { type: 'bash_20250124', name: 'bash' },
    { type: 'code_execution_20250825', name: 'code_execution' },
    { type: 'text_editor_20250728', name: 'str_replace_based_edit_tool' },
    { type: 'computer_20250124', name: 'computer', display_width_px: 1024, display_height_px: 768 },
    { type: 'memory_20250818', name: 'memory' },
    { ...tool, type: 'function' },
  ];
  for (const s of server) rejects(tt, base({ tools: [tool, s] }), 'unsupported_parameter', 'tools.1.type', s.type);
});

t.test('tool_choice', async (tt) => {
  for (const choice of [{ type: 'auto' }, { type: 'any', disable_parallel_tool_use: true }, { type: 'none' }, { type: 'tool', name: 'get_weather' }]) {
    tt.strictSame(vendor(base({ tool_choice: choice })).tool_choice, choice, choice.type);
  }
  rejects(tt, base({ tool_choice: 'auto' }), 'invalid_type', 'tool_choice', 'string');
  rejects(tt, base({ tool_choice: null }), 'invalid_type', 'tool_choice', 'null');
  rejects(tt, base({ tool_choice: {} }), 'invalid_enum', 'tool_choice.type', 'no type');
  rejects(tt, base({ tool_choice: { type: 'required' } }), 'invalid_enum', 'tool_choice.type', 'required');
  rejects(tt, base({ tool_choice: { type: 'tool' } }), 'invalid_type', 'tool_choice.name', 'tool without name');
  rejects(tt, base({ tool_choice: { type: 'tool', name: '' } }), 'invalid_type', 'tool_choice.name', 'tool with empty name');
});

t.test('thinking', async (tt) => {
  for (const model of ['fable', 'opus', 'sonnet']) {
    const adaptive = { type: 'adaptive', display: 'summarized' };
    tt.strictSame(vendor(base({ model, thinking: adaptive })).thinking, adaptive, `${model} adaptive passed as sent`);
    const enabled = { type: 'enabled', budget_tokens: 2048 };
    tt.strictSame(vendor(base({ model, max_tokens: 4096, thinking: enabled })).thinking, enabled, `${model} enabled`);
    rejects(tt, base({ model, thinking: 'adaptive' }), 'invalid_type', 'thinking', `${model} string`);
    rejects(tt, base({ model, thinking: { type: 'between_tools' } }), 'invalid_enum', 'thinking.type', `${model} between_tools`);
    rejects(tt, base({ model, thinking: {} }), 'invalid_enum', 'thinking.type', `${model} no type`);
    rejects(tt, base({ model, max_tokens: 4096, thinking: { type: 'enabled' } }), 'invalid_type', 'thinking.budget_tokens', `${model} no budget`);
    rejects(
      tt,
      base({ model, max_tokens: 4096, thinking: { type: 'enabled', budget_tokens: '2048' } }),
      'invalid_type',
      'thinking.budget_tokens',
      `${model} string budget`,
    );
    tt.doesNotThrow(
      () => parse(base({ model, max_tokens: 4096, thinking: { type: 'enabled', budget_tokens: THINKING_MIN_BUDGET_TOKENS - 1 } })),
      `${model} budget 1023 is the vendor's to refuse`,
    );
    tt.doesNotThrow(
      () => parse(base({ model, max_tokens: 4096, thinking: { type: 'enabled', budget_tokens: THINKING_MIN_BUDGET_TOKENS } })),
      `${model} budget 1024`,
    );
  }
  for (const model of ['opus', 'sonnet']) {
    tt.strictSame(vendor(base({ model, thinking: { type: 'disabled' } })).thinking, { type: 'disabled' }, `${model} disabled`);
    rejects(
      tt,
      base({ model, max_tokens: 2048, thinking: { type: 'enabled', budget_tokens: 2048 } }),
      'too_large',
      'thinking.budget_tokens',
      `${model} budget == max_tokens`,
    );
    rejects(
      tt,
      base({ model, max_tokens: 2048, thinking: { type: 'enabled', budget_tokens: 4096 } }),
      'too_large',
      'thinking.budget_tokens',
      `${model} budget > max_tokens`,
    );
    tt.doesNotThrow(() => parse(base({ model, max_tokens: 2049, thinking: { type: 'enabled', budget_tokens: 2048 } })), `${model} budget just below`);
  }
  const err = rejects(tt, base({ model: 'fable', thinking: { type: 'disabled' } }), 'unsupported_parameter', 'thinking.type', 'fable disabled');
  if (err) {
    tt.match(err.message, '"adaptive"', 'hints adaptive');
    tt.match(err.message, 'output_config.effort', 'hints effort');
  }
  tt.doesNotThrow(
    () => parse(base({ model: 'fable', max_tokens: 2048, thinking: { type: 'enabled', budget_tokens: 4096 } })),
    'fable is not bound to budget < max_tokens',
  );
});

t.test('output_config', async (tt) => {
  for (const effort of ['low', 'medium', 'high', 'xhigh', 'max', null]) {
    tt.doesNotThrow(() => parse(base({ output_config: { effort } })), `effort ${effort}`);
  }
  const cfg = { effort: 'high', format: { type: 'json_schema', schema: { type: 'object', properties: { a: { type: 'string' } } } } };
  tt.strictSame(vendor(base({ output_config: cfg })).output_config, cfg, 'passed through');
  rejects(tt, base({ output_config: 'high' }), 'invalid_type', 'output_config', 'string');
  rejects(tt, base({ output_config: null }), 'invalid_type', 'output_config', 'null');
  rejects(tt, base({ output_config: { effort: 'extreme' } }), 'invalid_enum', 'output_config.effort', 'unknown effort');
  rejects(tt, base({ output_config: { effort: 3 } }), 'invalid_enum', 'output_config.effort', 'numeric effort');
  rejects(tt, base({ output_config: { format: 'json' } }), 'invalid_type', 'output_config.format', 'string format');
});

t.test('sampling, stop_sequences, stream, metadata', async (tt) => {
  // Ranges are the vendor's: out-of-range numbers pass.
  const v = vendor(base({ temperature: 7, top_p: -1, top_k: 0.5 }));
  tt.equal(v.temperature, 7);
  tt.equal(v.top_p, -1);
  tt.equal(v.top_k, 0.5);
  for (const key of ['temperature', 'top_p', 'top_k']) {
    rejects(tt, base({ [key]: '0.5' }), 'invalid_type', key, `${key} string`);
    rejects(tt, base({ [key]: null }), 'invalid_type', key, `${key} null`);
  }
  tt.strictSame(vendor(base({ stop_sequences: ['\n\nHuman:', 'END'] })).stop_sequences, ['\n\nHuman:', 'END']);
  rejects(tt, base({ stop_sequences: 'END' }), 'invalid_type', 'stop_sequences', 'string');
  rejects(tt, base({ stop_sequences: ['END', 5] }), 'invalid_type', 'stop_sequences.1', 'number item');

  tt.equal(parse(base({ stream: true })).stream, true);
  tt.equal(parse(base({ stream: false })).stream, false);
  tt.equal(vendor(base({ stream: true })).stream, true, 'stream forwarded as sent');
  tt.notOk('stream' in vendor(base()), 'stream not added when absent');
  rejects(tt, base({ stream: 'true' }), 'invalid_type', 'stream', 'string');
  rejects(tt, base({ stream: 1 }), 'invalid_type', 'stream', 'number');

  tt.strictSame(vendor(base()).metadata, { user_id: USER_ID }, 'metadata sent even when the client sent none');
  tt.strictSame(vendor(base({ metadata: { user_id: 'me', extra: 1 } })).metadata, { user_id: USER_ID }, 'client metadata replaced');
  tt.strictSame(vendor(base({ metadata: {} })).metadata, { user_id: USER_ID });
  rejects(tt, base({ metadata: 'me' }), 'invalid_type', 'metadata', 'string');
  rejects(tt, base({ metadata: ['me'] }), 'invalid_type', 'metadata', 'array');
  rejects(tt, base({ metadata: null }), 'invalid_type', 'metadata', 'null');
});

t.test('forwardedBetaHeader', async (tt) => {
  tt.equal(forwardedBetaHeader(undefined), undefined);
  tt.equal(forwardedBetaHeader(''), undefined);
  tt.equal(forwardedBetaHeader('prompt-caching-2024-07-31'), 'prompt-caching-2024-07-31');
  tt.equal(forwardedBetaHeader('interleaved-thinking-2025-05-14, prompt-caching-2024-07-31 ,context-1m-2025-08-07'), 'prompt-caching-2024-07-31');
  tt.equal(forwardedBetaHeader('prompt-caching-2024-07-31,prompt-caching-2024-07-31'), 'prompt-caching-2024-07-31', 'once');
  tt.equal(forwardedBetaHeader('interleaved-thinking-2025-05-14,context-1m-2025-08-07'), undefined, 'others dropped');
  tt.equal(forwardedBetaHeader('prompt-caching-2024-07-31-extended'), undefined, 'no prefix match');
  tt.equal(forwardedBetaHeader('xprompt-caching-2024-07-31'), undefined, 'no suffix match');
});

t.test('validation errors are 400 invalid_request_error and leave the input untouched', async (tt) => {
  const body = base({ messages: [{ role: 'user', content: [{ type: 'image', source: {} }] }], metadata: { user_id: 'x' } });
  const before = JSON.stringify(body);
  const err = rejects(tt, body, 'unsupported_parameter', 'messages.0.content.0.type');
  tt.equal(err?.status, 400);
  tt.equal(err?.type, 'invalid_request_error');
  tt.equal(JSON.stringify(body), before);
});

// ---------------------------------------------------------------------------------------------
// Prompt estimate

/** Tool-use system prompt the vendor documents (~346 tokens); the stand-in adds it like the vendor does. */
const DOCUMENTED_TOOL_PROMPT_TOKENS = 346;

/**
 * A stand-in for the vendor's view of the prompt: a plausible rendering (turn markers, tools and
 * tool inputs as pretty-printed JSON, thinking text and signatures) counted by a public tokenizer.
 */
function standIn(body: Obj, count: (s: string) => number): number {
  const parts: string[] = [];
  for (const tool of body.tools ?? []) parts.push(`<tool>\n${JSON.stringify(tool, null, 2)}\n</tool>\n`);
  if (typeof body.system === 'string') parts.push(body.system);
  else for (const b of body.system ?? []) parts.push(b.text);
  for (const m of body.messages) {
    parts.push(m.role === 'user' ? '\n\nHuman: ' : '\n\nAssistant: ');
    if (typeof m.content === 'string') {
      parts.push(m.content);
      continue;
    }
    for (const b of m.content) {
      if (b.type === 'text') parts.push(b.text);
      else if (b.type === 'thinking') parts.push(`<thinking>${b.thinking}</thinking>${b.signature}`);
      else if (b.type === 'redacted_thinking') parts.push(b.data);
      else if (b.type === 'tool_use') parts.push(`<invoke name="${b.name}" id="${b.id}">\n${JSON.stringify(b.input, null, 2)}\n</invoke>`);
      else if (b.type === 'tool_result') {
        parts.push(`<result id="${b.tool_use_id}">`);
        if (typeof b.content === 'string') parts.push(b.content);
        else for (const c of b.content ?? []) parts.push(c.text);
        parts.push('</result>');
      }
    }
  }
  return count(parts.join('')) + (body.tools?.length ? DOCUMENTED_TOOL_PROMPT_TOKENS : 0);
}

/** Asserts the estimate covers every stand-in count, the simulator's formula included, and the floor is below them. */
function checkBounds(tt: Test, body: Obj, label: string): MessagesRequest {
  const r = parse(body);
  const sent = JSON.parse(r.vendorBody) as Obj;
  const o200k = standIn(sent, countO200k);
  const cl100k = standIn(sent, countCl100k);
  const sim = countInput(sent).total;
  tt.ok(r.promptTokensEstimate >= o200k, `${label}: estimate ${r.promptTokensEstimate} >= o200k ${o200k}`);
  tt.ok(r.promptTokensEstimate >= cl100k, `${label}: estimate ${r.promptTokensEstimate} >= cl100k ${cl100k}`);
  tt.ok(r.promptTokensEstimate >= sim, `${label}: estimate ${r.promptTokensEstimate} >= simulator ${sim}`);
  tt.ok(r.promptTokensLowerBound <= Math.min(o200k, cl100k, sim), `${label}: floor ${r.promptTokensLowerBound} <= every count`);
  tt.ok(r.promptTokensEstimate <= r.model.constraints.maxInputTokens, `${label}: capped`);
  return r;
}

t.test('corpus: the estimate is never below the stand-in tokenizers or the simulator', async (tt) => {
  const texts = ['english.txt', 'code.ts.txt', 'cjk.txt', 'emoji.txt', 'tool-result.csv'].map((f) => [f, corpus(f)] as const);
  for (const [name, text] of texts) {
    checkBounds(tt, base({ messages: [{ role: 'user', content: text }] }), `${name} as string content`);
    checkBounds(tt, base({ system: [{ type: 'text', text, cache_control: { type: 'ephemeral' } }] }), `${name} as system`);
  }
  const tool = JSON.parse(corpus('tool-schema.json')) as Obj;
  const conversation = base({
    model: 'opus',
    max_tokens: 8192,
    system: corpus('english.txt'),
    tools: [tool, { name: 'noop', input_schema: { type: 'object' } }],
    thinking: { type: 'enabled', budget_tokens: 4096 },
    messages: [
      { role: 'user', content: [{ type: 'text', text: corpus('cjk.txt') }] },
      {
        role: 'assistant',
        content: [
          { type: 'thinking', thinking: corpus('code.ts.txt'), signature: Buffer.from(corpus('emoji.txt')).toString('base64') },
          { type: 'text', text: corpus('emoji.txt') },
          {
            type: 'tool_use',
            id: 'toolu_01',
            name: 'search_flights',
            input: { origin: 'FRA', destination: 'NRT', depart_date: '2026-10-02', passengers: { adults: 2 }, note: corpus('cjk.txt') },
          },
        ],
      },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_01', content: [{ type: 'text', text: corpus('tool-result.csv') }] }] },
      { role: 'assistant', content: corpus('code.ts.txt') },
      { role: 'user', content: corpus('english.txt') },
    ],
  });
  const r = checkBounds(tt, conversation, 'full conversation');
  tt.ok(r.promptTokensEstimate >= TOOL_USE_SYSTEM_PROMPT_TOKENS + Buffer.byteLength(r.vendorBody), 'tools add their hidden-prompt budget on top of the body');
  tt.ok(messagesHoldInk(r.model, r.promptTokensEstimate, r.maxTokens) > 0, 'the estimate prices');
});

t.test('property: random text anywhere in the prompt stays under the estimate', async (tt) => {
  const text = fc.oneof(fc.string({ unit: 'binary', maxLength: 400 }), fc.string({ unit: 'grapheme', maxLength: 200 }), fc.string({ maxLength: 400 }));
  const nonEmpty = text.filter((s) => s.length > 0);
  const arb = fc.record({
    system: fc.option(text, { nil: undefined }),
    user: nonEmpty,
    asst: nonEmpty,
    toolInput: fc.dictionary(fc.string({ maxLength: 10 }), text, { maxKeys: 4 }),
    result: text,
    withTools: fc.boolean(),
  });
  fc.assert(
    fc.property(arb, (a) => {
      const body = base({
        ...(a.system === undefined ? {} : { system: a.system }),
        ...(a.withTools ? { tools: [{ name: 'f', description: a.result, input_schema: { type: 'object' } }] } : {}),
        messages: [
          { role: 'user', content: a.user },
          {
            role: 'assistant',
            content: [
              { type: 'text', text: a.asst },
              { type: 'tool_use', id: 'toolu_1', name: 'f', input: a.toolInput },
            ],
          },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: a.result }] },
        ],
      });
      const r = parse(body);
      const sent = JSON.parse(r.vendorBody) as Obj;
      return (
        r.promptTokensEstimate >= standIn(sent, countO200k) &&
        r.promptTokensEstimate >= standIn(sent, countCl100k) &&
        r.promptTokensEstimate >= countInput(sent).total &&
        r.promptTokensLowerBound <= standIn(sent, countO200k)
      );
    }),
    { numRuns: 300, seed: 20260901 },
  );
  tt.pass('300 random prompts bounded');
});

t.test('estimate is capped at the context; nothing the vendor could accept is refused', async (tt) => {
  // ~3.9 MB of dense text: far above 200k by the byte bound, but a vendor might still count it
  // below 200k, so it is accepted with the hold capped at the context.
  const big = corpus('tool-result.csv').repeat(250);
  const r = parse(base({ messages: [{ role: 'user', content: big }] }));
  tt.equal(r.promptTokensEstimate, 200_000, 'capped at maxInputTokens');
  tt.ok(r.promptTokensLowerBound <= 200_000);
  // 4 MiB of spaces (the body limit): a single token can cover 128 spaces in public vocabularies.
  tt.doesNotThrow(() => parse(base({ messages: [{ role: 'user', content: ' '.repeat(4 * 1024 * 1024) }] })), 'whitespace body not refused');
});

t.test('payload_too_large only when even the floor is above the context', async (tt) => {
  const limit = catalog.text('sonnet')!.constraints.maxInputTokens;
  const atFloor = limit * MAX_BYTES_PER_TOKEN; // floor == limit: still accepted
  tt.equal(promptTokensLowerBound(atFloor), limit);
  tt.equal(promptTokensLowerBound(atFloor + 1), limit + 1);
  tt.equal(promptTokensLowerBound(0), 0);
  const half = 'x'.repeat(atFloor / 2);
  tt.doesNotThrow(
    () =>
      parse(
        base({
          messages: [
            { role: 'user', content: half },
            { role: 'assistant', content: half },
          ],
        }),
      ),
    'floor at the limit accepted',
  );
  rejects(
    tt,
    base({
      messages: [
        { role: 'user', content: half },
        { role: 'assistant', content: half },
        { role: 'user', content: 'x' },
      ],
    }),
    'payload_too_large',
    'messages',
    'floor above the limit',
  );
  // Thinking text does not count toward the floor (the vendor drops earlier turns' thinking).
  tt.doesNotThrow(
    () =>
      parse(
        base({
          messages: [
            { role: 'user', content: half },
            {
              role: 'assistant',
              content: [
                { type: 'thinking', thinking: half, signature: 's' },
                { type: 'text', text: 'x' },
              ],
            },
            { role: 'user', content: 'x' },
          ],
        }),
      ),
    'thinking excluded from the floor',
  );
});

t.test('one request of ~2.7 MB in 2,000 turns parses quickly', async (tt) => {
  const chunk = corpus('english.txt');
  const messages: Obj[] = [];
  for (let i = 0; i < 2_000; i++) {
    messages.push(
      i % 2 === 0
        ? {
            role: 'user',
            content: [
              { type: 'text', text: chunk },
              { type: 'text', text: String(i) },
            ],
          }
        : { role: 'assistant', content: chunk },
    );
  }
  const body = base({ messages });
  const start = process.hrtime.bigint();
  const r = parse(body);
  const ms = Number(process.hrtime.bigint() - start) / 1e6;
  tt.ok(r.vendorBody.length > 2_500_000, `body of ${r.vendorBody.length} chars`);
  // Time is the behaviour: the parse stays linear in the body. A parse that went quadratic in its
  // 2,000 turns would take minutes; the bound is far above a loaded two-core machine's figure.
  tt.ok(ms < 10_000, `parsed in ${ms.toFixed(1)} ms`);
});
