// The Messages lane's request side: validates a client body against the v1 contract, resolves the
// product model, builds the vendor body once and bounds the prompt size for the Ink hold. Pure.
//
// Validation checks only what the contract's rules need (allow-listed fields, the model, the shape
// of turns and blocks, media and server tools refused) and passes everything else through as
// sent; sampling ranges and other per-model rules are the vendor's, whose refusal the lane turns
// into `upstream_rejected`. One walk over messages and blocks reads structure and string lengths
// only; the single JSON.stringify of the vendor body and one byte count over it are the only passes
// over the text itself.
//
// Decisions (documented in docs/api/messages.md):
// - `model` that is not a string answers `unknown_model` like an unknown name.
// - `null` for an optional top-level field answers `invalid_type` (no nulls there), not "absent".
// - `thinking.budget_tokens` not an integer answers `invalid_type`; on opus and sonnet, not below
//   `max_tokens` answers `too_large` (docs/api/messages.md's rule; the table's code for a number too big). The
//   protocol's own minimum (1,024) is the vendor's to enforce: its refusal is `upstream_rejected`.
// - `metadata` is always sent as `{ user_id }` (the key hash), whether or not the client sent one,
//   so every vendor request is attributable to a key.
// - A block refused by type (media, server-tool blocks, wrong role, unknown) names
//   `messages.N.content.M.type` (or `...content.M.content.K.type` inside a tool_result).
// - Top-level `cache_control` (the protocol's automatic caching) is not on the allow-list, so it
//   answers `unsupported_parameter`; block-level `cache_control` is passed through.
// - `POST /v1/messages/count_tokens` takes only the prompt's fields (COUNT_TOKENS_FIELDS) and
//   checks them with these same functions; with no `max_tokens` there, `thinking.budget_tokens` is
//   not compared with one.
import type { Catalog, TextModel } from '../../catalog/models.js';
import { ApiError, clipped } from '../../errors.js';
import { checkField, checkFieldItem, didYouMean } from '../../util/request-fields.js';
import { promptTokensLowerBound, promptTokensUpperBound } from './prompt-estimate.js';
import { COUNT_TOKENS_FIELDS, MESSAGES_FIELDS as F } from './request-fields.js';

export { promptTokensLowerBound } from './prompt-estimate.js';

export interface MessagesRequest {
  /** The resolved product model. */
  model: TextModel;
  stream: boolean;
  maxTokens: number;
  /** Upper bound on the vendor's prompt count (input + cache writes + cache reads); see prompt-estimate.ts. */
  promptTokensEstimate: number;
  /** Floor under the vendor's prompt count (assumption-based; see prompt-estimate.ts). */
  promptTokensLowerBound: number;
  /** JSON for the vendor: the client's fields with `model` and `metadata` replaced. */
  vendorBody: string;
}

export interface ParseMessagesOptions {
  /** The `metadata.user_id` sent to the vendor (a hash of the key id). */
  keyUserId: string;
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The allow-lists: the tables' fields (request-fields.ts). */
const ALLOWED_FIELDS: ReadonlySet<string> = new Set(Object.keys(F));
const COUNT_TOKENS_ALLOWED_FIELDS: ReadonlySet<string> = new Set(Object.keys(COUNT_TOKENS_FIELDS));

/** Protocol blocks v1 does not carry: media and documents (text only) and server-tool traffic. */
const UNSUPPORTED_BLOCKS: ReadonlySet<string> = new Set([
  'image',
  'document',
  'video',
  'audio',
  'file',
  'search_result',
  'container_upload',
  'server_tool_use',
  'web_search_tool_result',
  'web_fetch_tool_result',
  'code_execution_tool_result',
  'bash_code_execution_tool_result',
  'text_editor_code_execution_tool_result',
  'tool_search_tool_result',
  'mcp_tool_use',
  'mcp_tool_result',
  'tool_reference',
  'browser_state',
]);

const TOOL_CHOICE_TYPES: ReadonlySet<string> = new Set(['auto', 'any', 'tool', 'none']);
const THINKING_TYPES: ReadonlySet<string> = new Set(['adaptive', 'enabled', 'disabled']);
const EFFORTS: ReadonlySet<string> = new Set(['low', 'medium', 'high', 'xhigh', 'max']);
/** The protocol's minimum `thinking.budget_tokens`. */
export const THINKING_MIN_BUDGET_TOKENS = 1_024;

/**
 * Per-model thinking rules the contract states. The fable model refuses `disabled` and is not
 * bound to `budget_tokens < max_tokens`; any other Messages model (opus, sonnet, future ones)
 * follows the protocol's general rules.
 */
const NO_DISABLED_THINKING: ReadonlySet<string> = new Set(['assistant-fable-5-1']);
const BUDGET_BELOW_MAX_TOKENS_EXEMPT: ReadonlySet<string> = new Set(['assistant-fable-5-1']);

const BETA_FORWARDED = 'prompt-caching-2024-07-31';

function fail(code: ConstructorParameters<typeof ApiError>[0], param: string, message: string): never {
  throw new ApiError(code, { param, message });
}

const describe = (v: unknown): string => (v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v);

/** Running totals of the one walk over the body. */
interface Walk {
  messages: number;
  blocks: number;
  /** UTF-16 units of text the vendor tokenizes verbatim (for the lower bound). */
  verbatimChars: number;
}

/** The client's fields in its order with the vendor's model (and our metadata); copied, not spread: on Node 20 a spread cost twice this. */
function vendorFields(body: Record<string, unknown>, vendorModel: string, metadata?: { user_id: string }): Record<string, unknown> {
  const fields = Object.assign({}, body);
  fields.model = vendorModel;
  if (metadata !== undefined) fields.metadata = metadata;
  return fields;
}

/**
 * Validates a parsed JSON body for `POST /v1/messages` and builds the vendor request.
 * Throws ApiError with the contract's code and `param` naming the field as a dotted path.
 */
export function parseMessagesRequest(body: Record<string, unknown>, catalog: Catalog, opts: ParseMessagesOptions): MessagesRequest {
  const model = checkTopLevel(body, ALLOWED_FIELDS, catalog, '/v1/messages');
  const maxTokens = readMaxTokens(body, model);
  const prompt = checkPrompt(body, model, maxTokens);
  checkSampling(body);
  const stream = body.stream;
  checkField('stream', F.stream, stream);
  checkField('metadata', F.metadata, body.metadata);
  const lowerBound = checkLowerBound(prompt.walk, model);

  const vendorBody = JSON.stringify(vendorFields(body, model.vendorModel, { user_id: opts.keyUserId }));
  const promptTokensEstimate = promptTokensUpperBound(
    {
      bodyBytes: Buffer.byteLength(vendorBody, 'utf8'),
      messages: prompt.walk.messages,
      blocks: prompt.walk.blocks,
      tools: prompt.tools,
      hasOutputFormat: prompt.hasOutputFormat,
    },
    model.constraints.maxInputTokens,
  );

  return { model, stream: stream === true, maxTokens, promptTokensEstimate, promptTokensLowerBound: lowerBound, vendorBody };
}

export interface CountTokensRequest {
  /** The resolved product model. */
  model: TextModel;
  /** JSON for the vendor's count endpoint: the client's fields with `model` replaced. */
  vendorBody: string;
}

/**
 * Validates a parsed JSON body for `POST /v1/messages/count_tokens` with the Messages rules where
 * the fields overlap (the same checks, in the same order, minus those of the reply's fields) and
 * builds the vendor's count request. Throws ApiError as parseMessagesRequest does.
 */
export function parseCountTokensRequest(body: Record<string, unknown>, catalog: Catalog): CountTokensRequest {
  const model = checkTopLevel(body, COUNT_TOKENS_ALLOWED_FIELDS, catalog, '/v1/messages/count_tokens');
  const prompt = checkPrompt(body, model, undefined);
  checkLowerBound(prompt.walk, model);
  return { model, vendorBody: JSON.stringify(vendorFields(body, model.vendorModel)) };
}

/** A JSON object whose fields are all on `allowed`, naming a model of the lane; returns the model. */
function checkTopLevel(body: Record<string, unknown>, allowed: ReadonlySet<string>, catalog: Catalog, route: string): TextModel {
  if (!isObj(body)) fail('invalid_body', 'body', 'The request body must be a JSON object.');
  for (const key of Object.keys(body)) {
    if (allowed.has(key)) continue;
    // The name is the client's: cut in the message as in `param` (ApiError cuts that), with a hint when it is close to a known one.
    const shown = clipped(key);
    const why = route === '/v1/messages' ? `\`${shown}\` is not supported in v1.` : `\`${shown}\` is not supported on ${route}.`;
    fail('unsupported_parameter', key, why + didYouMean(key, allowed));
  }
  return resolveModel(body, catalog, route);
}

/** What the prompt's walk found, for the bounds on its token count. */
interface PromptShape {
  walk: Walk;
  tools: number;
  hasOutputFormat: boolean;
}

/** The prompt's fields, in the documented order; `maxTokens` undefined when the request has none (a count). */
function checkPrompt(body: Obj, model: TextModel, maxTokens: number | undefined): PromptShape {
  const walk: Walk = { messages: 0, blocks: 0, verbatimChars: 0 };
  checkMessages(body.messages, walk);
  checkField('system', F.system, body.system);
  if (body.system !== undefined) checkSystem(body.system as string | unknown[], walk);
  let tools = 0;
  checkField('tools', F.tools, body.tools);
  if (body.tools !== undefined) tools = checkTools(body.tools as unknown[]);
  checkField('tool_choice', F.tool_choice, body.tool_choice);
  if (body.tool_choice !== undefined) checkToolChoice(body.tool_choice as Obj);
  checkField('thinking', F.thinking, body.thinking);
  if (body.thinking !== undefined) checkThinking(body.thinking as Obj, model, maxTokens);
  let hasOutputFormat = false;
  checkField('output_config', F.output_config, body.output_config);
  if (body.output_config !== undefined) hasOutputFormat = checkOutputConfig(body.output_config as Obj);
  return { walk, tools, hasOutputFormat };
}

/**
 * Refuses only what the vendor could never accept (see prompt-estimate.ts for why this floor is an
 * assumption and why it rarely fires); checked before building the body, which it saves.
 */
function checkLowerBound(walk: Walk, model: TextModel): number {
  const lowerBound = promptTokensLowerBound(walk.verbatimChars);
  if (lowerBound > model.constraints.maxInputTokens) {
    fail('payload_too_large', 'messages', `The prompt is above the ${model.constraints.maxInputTokens}-token context of ${model.id}.`);
  }
  return lowerBound;
}

function resolveModel(body: Obj, catalog: Catalog, route: string): TextModel {
  const modelName = body.model;
  if (modelName === undefined)
    fail('unknown_model', 'model', '`model` is required: one of assistant-fable-5-1, assistant-opus-5, assistant-sonnet-5 (or fable, opus, sonnet).');
  const model = typeof modelName === 'string' ? catalog.text(modelName, 'anthropic-messages') : undefined;
  if (model === undefined) {
    if (typeof modelName !== 'string') fail('unknown_model', 'model', `\`model\` must be a model id string; got ${describe(modelName)}.`);
    const elsewhere = catalog.text(modelName, 'openai-responses') === undefined ? '' : ': that model is served at /v1/responses';
    fail('unknown_model', 'model', `Unknown model ${JSON.stringify(modelName.slice(0, 100))} for ${route}${elsewhere}.`);
  }
  return model;
}

function readMaxTokens(body: Obj, model: TextModel): number {
  checkField('max_tokens', F.max_tokens, body.max_tokens);
  const maxTokens = body.max_tokens as number;
  if (maxTokens > model.constraints.maxOutputTokens) {
    fail('too_large', 'max_tokens', `\`max_tokens\` may be at most ${model.constraints.maxOutputTokens} for ${model.id}.`);
  }
  return maxTokens;
}

const SAMPLING = ['temperature', 'top_p', 'top_k'] as const;

/** temperature, top_p, top_k (types only; ranges and per-model support are the vendor's), stop_sequences. */
function checkSampling(body: Obj): void {
  for (const key of SAMPLING) checkField(key, F[key], body[key]);
  const s = body.stop_sequences;
  checkField('stop_sequences', F.stop_sequences, s);
  if (Array.isArray(s)) for (let i = 0; i < s.length; i++) checkFieldItem('stop_sequences', F.stop_sequences, s[i], i);
}

/**
 * The `anthropic-beta` value to forward: of the client's comma-separated values only
 * `prompt-caching-2024-07-31` survives; undefined when nothing does (send no header).
 */
export function forwardedBetaHeader(clientValue: string | undefined): string | undefined {
  if (clientValue === undefined || !clientValue.includes(BETA_FORWARDED)) return undefined;
  for (const part of clientValue.split(',')) {
    if (part.trim() === BETA_FORWARDED) return BETA_FORWARDED;
  }
  return undefined;
}

// ---------------------------------------------------------------------------------------------

function checkMessages(value: unknown, walk: Walk): void {
  checkField('messages', F.messages, value);
  const messages = value as unknown[];
  walk.messages = messages.length;
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i];
    const at = `messages.${i}`;
    if (!isObj(m)) fail('invalid_message', at, `\`${at}\` must be an object with \`role\` and \`content\`.`);
    const role = m.role;
    if (role !== 'user' && role !== 'assistant') refuseRole(role, i, at);
    const content = m.content;
    if (typeof content === 'string') {
      if (content.length === 0) fail('invalid_message', `${at}.content`, `\`${at}.content\` must not be empty.`);
      walk.verbatimChars += content.length;
      continue;
    }
    if (!Array.isArray(content) || content.length === 0) {
      fail('invalid_message', `${at}.content`, `\`${at}.content\` must be a non-empty string or a non-empty array of content blocks.`);
    }
    walk.blocks += content.length;
    for (let j = 0; j < content.length; j++) checkBlock(content[j], role, `${at}.content.${j}`, walk);
  }
}

/**
 * A turn whose role is neither user nor assistant. A `system` turn gets the vendor's own words:
 * coding agents (Claude Code) send one and drop it on retry only when the refusal reads like the
 * vendor's, and its `param` is in the index form those clients print (`messages[1].role`).
 */
function refuseRole(role: unknown, index: number, path: string): never {
  if (role === 'system') fail('invalid_message', `messages[${index}].role`, SYSTEM_ROLE_MESSAGE);
  fail('invalid_message', `${path}.role`, `\`${path}.role\` must be "user" or "assistant".`);
}

/** The vendor's message for a `system` turn inside `messages`, word for word. */
export const SYSTEM_ROLE_MESSAGE = 'Unexpected role "system". The Messages API accepts a top-level `system` parameter, not "system" as an input message role.';

function checkBlock(block: unknown, role: 'user' | 'assistant', path: string, walk: Walk): void {
  if (!isObj(block)) fail('invalid_message', path, `\`${path}\` must be a content block object.`);
  const type = block.type;
  if (typeof type !== 'string') fail('invalid_message', `${path}.type`, `\`${path}.type\` is required.`);
  switch (type) {
    case 'text':
      if (typeof block.text !== 'string') fail('invalid_message', `${path}.text`, `\`${path}.text\` must be a string.`);
      walk.verbatimChars += block.text.length;
      return;
    case 'tool_use':
      onlyIn(role, 'assistant', type, path);
      if (typeof block.id !== 'string' || block.id.length === 0) fail('invalid_message', `${path}.id`, `\`${path}.id\` must be a non-empty string.`);
      if (typeof block.name !== 'string' || block.name.length === 0) fail('invalid_message', `${path}.name`, `\`${path}.name\` must be a non-empty string.`);
      if (!isObj(block.input)) fail('invalid_message', `${path}.input`, `\`${path}.input\` must be an object.`);
      return;
    case 'tool_result':
      onlyIn(role, 'user', type, path);
      if (typeof block.tool_use_id !== 'string' || block.tool_use_id.length === 0) {
        fail('invalid_message', `${path}.tool_use_id`, `\`${path}.tool_use_id\` must be a non-empty string.`);
      }
      if (block.is_error !== undefined && typeof block.is_error !== 'boolean')
        fail('invalid_message', `${path}.is_error`, `\`${path}.is_error\` must be a boolean.`);
      checkToolResultContent(block.content, `${path}.content`, walk);
      return;
    case 'thinking':
      onlyIn(role, 'assistant', type, path);
      if (typeof block.thinking !== 'string') fail('invalid_message', `${path}.thinking`, `\`${path}.thinking\` must be a string.`);
      if (typeof block.signature !== 'string') fail('invalid_message', `${path}.signature`, `\`${path}.signature\` must be a string.`);
      return;
    case 'redacted_thinking':
      onlyIn(role, 'assistant', type, path);
      if (typeof block.data !== 'string') fail('invalid_message', `${path}.data`, `\`${path}.data\` must be a string.`);
      return;
    default:
      if (UNSUPPORTED_BLOCKS.has(type))
        fail('unsupported_parameter', `${path}.type`, `\`${type}\` blocks are not supported in v1 (text only, no server tools).`);
      fail('invalid_message', `${path}.type`, `Unknown content block type ${JSON.stringify(type.slice(0, 100))}.`);
  }
}

function onlyIn(role: 'user' | 'assistant', allowed: 'user' | 'assistant', type: string, path: string): void {
  if (role !== allowed) fail('invalid_message', `${path}.type`, `\`${type}\` blocks belong in ${allowed} turns.`);
}

function checkToolResultContent(content: unknown, path: string, walk: Walk): void {
  if (content === undefined || content === null) return; // optional in the protocol
  if (typeof content === 'string') {
    walk.verbatimChars += content.length;
    return;
  }
  if (!Array.isArray(content)) fail('invalid_message', path, `\`${path}\` must be a string or an array of text blocks.`);
  for (let k = 0; k < content.length; k++) {
    const c = content[k];
    const cat = `${path}.${k}`;
    if (!isObj(c)) fail('invalid_message', cat, `\`${cat}\` must be a content block object.`);
    const type = c.type;
    if (type === 'text') {
      if (typeof c.text !== 'string') fail('invalid_message', `${cat}.text`, `\`${cat}.text\` must be a string.`);
      walk.verbatimChars += c.text.length;
      continue;
    }
    if (typeof type === 'string' && UNSUPPORTED_BLOCKS.has(type)) {
      fail('unsupported_parameter', `${cat}.type`, `\`${type}\` blocks are not supported in v1 (text only).`);
    }
    fail(
      'invalid_message',
      `${cat}.type`,
      `A tool_result may hold only text blocks; got ${JSON.stringify(typeof type === 'string' ? type.slice(0, 100) : describe(type))}.`,
    );
  }
}

/** `system` once the table (F.system) has checked its type. */
function checkSystem(system: string | unknown[], walk: Walk): void {
  if (typeof system === 'string') {
    walk.verbatimChars += system.length;
    return;
  }
  for (let i = 0; i < system.length; i++) {
    const b = system[i];
    const at = `system.${i}`;
    if (!isObj(b)) fail('invalid_type', at, `\`${at}\` must be a text block.`);
    if (b.type !== 'text') fail('invalid_type', `${at}.type`, `\`${at}.type\` must be "text".`);
    if (typeof b.text !== 'string') fail('invalid_type', `${at}.text`, `\`${at}.text\` must be a string.`);
    walk.verbatimChars += b.text.length;
  }
}

/** Returns the number of tools (an array: the table checked the type). */
function checkTools(tools: unknown[]): number {
  for (let i = 0; i < tools.length; i++) {
    const t = tools[i];
    const at = `tools.${i}`;
    if (!isObj(t)) fail('invalid_tool', at, `\`${at}\` must be an object.`);
    // Server tools first: they have no input_schema, and their answer is "not in v1", not "invalid".
    if (t.type !== undefined && t.type !== null && t.type !== 'custom') {
      fail(
        'unsupported_parameter',
        `${at}.type`,
        `Server tools (${JSON.stringify(typeof t.type === 'string' ? t.type.slice(0, 100) : describe(t.type))}) are not supported in v1; declare client tools with \`name\` and \`input_schema\`.`,
      );
    }
    if (typeof t.name !== 'string' || t.name.length === 0) fail('invalid_tool', `${at}.name`, `\`${at}.name\` must be a non-empty string.`);
    if (t.description !== undefined && typeof t.description !== 'string') fail('invalid_tool', `${at}.description`, `\`${at}.description\` must be a string.`);
    if (!isObj(t.input_schema)) fail('invalid_tool', `${at}.input_schema`, `\`${at}.input_schema\` must be a JSON Schema object.`);
  }
  return tools.length;
}

function checkToolChoice(choice: Obj): void {
  if (typeof choice.type !== 'string' || !TOOL_CHOICE_TYPES.has(choice.type)) {
    fail('invalid_enum', 'tool_choice.type', '`tool_choice.type` must be one of auto, any, tool, none.');
  }
  if (choice.type === 'tool' && (typeof choice.name !== 'string' || choice.name.length === 0)) {
    fail('invalid_type', 'tool_choice.name', '`tool_choice.name` must name a tool when `tool_choice.type` is "tool".');
  }
}

/** `maxTokens` undefined: a count, which has no reply for the budget to stay below. */
function checkThinking(thinking: Obj, model: TextModel, maxTokens: number | undefined): void {
  const type = thinking.type;
  if (typeof type !== 'string' || !THINKING_TYPES.has(type)) {
    fail('invalid_enum', 'thinking.type', '`thinking.type` must be one of adaptive, enabled, disabled.');
  }
  if (type === 'disabled' && NO_DISABLED_THINKING.has(model.id)) {
    fail(
      'unsupported_parameter',
      'thinking.type',
      `${model.id} does not accept thinking {"type":"disabled"}; send {"type":"adaptive"} and set \`output_config.effort\` (for example "low") to limit thinking.`,
    );
  }
  if (type === 'enabled') {
    const budget = thinking.budget_tokens;
    if (typeof budget !== 'number' || !Number.isInteger(budget)) fail('invalid_type', 'thinking.budget_tokens', '`thinking.budget_tokens` must be an integer.');
    if (maxTokens !== undefined && budget >= maxTokens && !BUDGET_BELOW_MAX_TOKENS_EXEMPT.has(model.id)) {
      fail('too_large', 'thinking.budget_tokens', `\`thinking.budget_tokens\` must be below \`max_tokens\` (${maxTokens}) on ${model.id}.`);
    }
  }
}

/** Returns whether a structured-output format is set. */
function checkOutputConfig(config: Obj): boolean {
  const effort = config.effort;
  if (effort !== undefined && effort !== null && (typeof effort !== 'string' || !EFFORTS.has(effort))) {
    fail('invalid_enum', 'output_config.effort', '`output_config.effort` must be one of low, medium, high, xhigh, max.');
  }
  const format = config.format;
  if (format !== undefined && format !== null && !isObj(format)) fail('invalid_type', 'output_config.format', '`output_config.format` must be an object.');
  return isObj(format);
}
