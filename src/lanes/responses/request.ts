// The Responses lane's request side: validates a client body for `POST /v1/responses` against the
// v1 contract, resolves the product model, counts the prompt with the vendor's tokenizer
// (o200k_base), checks the input envelope, sizes the Ink hold and builds the vendor body once. Pure.
//
// The request rules (fields accepted, refused or replaced, prompt size, hold sizing) are
// docs/api/responses.md, and the fields' table is request-fields.ts. Counting cost on one core of a
// two-core machine, exact count: English 1 MiB ~70 ms, 4 MiB ~275 ms; CJK 4 MiB ~320 ms, without
// punctuation ~0.9 s; 4 MiB of one repeated character ~1.6-2.1 s (gpt-tokenizer's own countTokens
// takes 39 s for 256 KiB of one character and its merge cache keeps request text: not used).
import { ApiError, type ErrorCode } from '../../errors.js';
import type { Catalog, TextModel } from '../../catalog/models.js';
import { responsesHoldInk } from '../../catalog/pricing.js';
import { clipped } from '../../errors.js';
import { checkField, checkFieldItem, didYouMean } from '../../util/request-fields.js';
import { RESPONSES_FIELDS as F } from './request-fields.js';
import { countTexts, type TextCounts } from './token-count.js';

export interface ResponsesRequest {
  /** The resolved product model. */
  model: TextModel;
  stream: boolean;
  /** The client's value or the model's default (32,768); at most the model's maximum (128,000). */
  maxOutputTokens: number;
  /**
   * Exact o200k_base count of the text the vendor reads verbatim: never above what the vendor
   * reports as input_tokens. The envelope check (413 above the model's max input) uses it.
   */
  promptTokens: number;
  /** promptTokens plus framing, schemas, reasoning items and the margin: what the hold assumes. */
  promptTokensForHold: number;
  /** `responsesHoldInk(promptTokensForHold, maxOutputTokens, model)`. */
  holdInk: number;
  /** JSON for the vendor: accepted fields only, vendor model id, explicit cap, store false, our safety_identifier. */
  vendorBody: string;
}

export interface ParseResponsesOptions {
  /** Sent as `safety_identifier` in place of anything the client sent (a hash of the account/key). */
  userHash: string;
}

export { RESPONSES_MIN_OUTPUT_TOKENS } from './request-fields.js';
/** Hold framing: per input item (role and turn markers), per tool, per request. */
export const HOLD_ITEM_OVERHEAD_TOKENS = 4;
export const HOLD_TOOL_OVERHEAD_TOKENS = 8;
export const HOLD_REQUEST_OVERHEAD_TOKENS = 32;
/** Hold margin over the count: +2% + 64 tokens. */
export const HOLD_MARGIN_PERCENT = 2;
export const HOLD_MARGIN_TOKENS = 64;
/** The hold assumes at least one token per this many characters of verbatim text. */
export const HOLD_CHARS_PER_TOKEN = 4;
/** Characters of a reasoning item's encrypted_content per token assumed for the hold. */
export const HOLD_ENCRYPTED_CHARS_PER_TOKEN = 4;
/** The one `include` value accepted; always sent (store is false). */
export const INCLUDE_ENCRYPTED_REASONING = 'reasoning.encrypted_content';

/** The allow-list: the table's fields (request-fields.ts). */
export const RESPONSES_ACCEPTED_FIELDS: readonly string[] = Object.freeze(Object.keys(F));

export const RESPONSES_REJECTED_FIELDS: Readonly<Record<string, string>> = Object.freeze({
  previous_response_id: 'needs conversation state kept by the vendor; the service keeps none (store is always false): send the whole transcript',
  conversation: 'needs conversation state kept by the vendor; the service keeps none: send the whole transcript',
  background: 'background responses are read back by id later; the service offers no retrieval',
  prompt: 'stored prompt templates live in the vendor account, not in yours',
  service_tier: 'tiers change the vendor price; Ink prices assume the default tier',
  top_logprobs: 'log-probabilities are not offered in v1',
});

/** Why parts of accepted fields are refused (messages of the `unsupported_parameter` answers). */
const WHY_TOOLS = 'send function tools, or namespaces of function tools';
/**
 * Tools the vendor runs itself. Named in the refusal: a coding agent's user must learn which of
 * its tools to turn off (the service runs and bills no server tools).
 */
const SERVER_TOOLS: ReadonlySet<string> = new Set([
  'web_search',
  'web_search_preview',
  'web_search_preview_2025_03_11',
  'web_search_2025_08_26',
  'file_search',
  'code_interpreter',
  'image_generation',
  'mcp',
  'computer',
  'computer_use',
  'computer_use_preview',
  'local_shell',
  'shell',
  'apply_patch',
  'tool_search',
]);
/** At most this many tool definitions per request, the tools inside namespaces counted. */
export const MAX_TOOL_DEFINITIONS = 512;
const WHY_ITEMS = 'text only; built-in tool call items and item references are not offered';

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const describe = (v: unknown): string => (v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v);

const ACCEPTED: ReadonlySet<string> = new Set(RESPONSES_ACCEPTED_FIELDS);
/** Rejected top-level fields and the value that means "not used" besides null (ignored, not forwarded). */
const REJECTED_INERT: ReadonlyMap<string, unknown> = new Map<string, unknown>([
  ['previous_response_id', null],
  ['conversation', null],
  ['background', false],
  ['prompt', null],
  ['service_tier', null],
  ['top_logprobs', 0],
]);

const ROLES: ReadonlySet<string> = new Set(['user', 'assistant', 'system', 'developer']);
/** Media content parts, in messages and in function outputs. */
const MEDIA_PARTS: ReadonlySet<string> = new Set(['input_image', 'input_file', 'input_audio', 'image_url', 'image', 'file', 'audio', 'input_video', 'video']);
/** Input items that belong to built-in or custom tools, or that need vendor-side state. */
const UNSUPPORTED_ITEMS: ReadonlySet<string> = new Set([
  'item_reference',
  'file_search_call',
  'web_search_call',
  'computer_call',
  'computer_call_output',
  'code_interpreter_call',
  'image_generation_call',
  'local_shell_call',
  'local_shell_call_output',
  'shell_call',
  'shell_call_output',
  'apply_patch_call',
  'apply_patch_call_output',
  'mcp_list_tools',
  'mcp_approval_request',
  'mcp_approval_response',
  'mcp_call',
  'custom_tool_call',
  'custom_tool_call_output',
  'compaction',
]);
const TOOL_CHOICE_MODES: ReadonlySet<string> = new Set(['auto', 'none', 'required']);
/** tool_choice object types that name a rejected tool kind. */
const TOOL_CHOICE_UNSUPPORTED: ReadonlySet<string> = new Set([
  'allowed_tools',
  'file_search',
  'web_search',
  'web_search_preview',
  'web_search_preview_2025_03_11',
  'computer_use_preview',
  'code_interpreter',
  'image_generation',
  'mcp',
  'custom',
  'local_shell',
  'shell',
  'apply_patch',
]);
const FORMAT_TYPES: ReadonlySet<string> = new Set(['text', 'json_schema', 'json_object']);
const VERBOSITIES: ReadonlySet<string> = new Set(['low', 'medium', 'high']);
const METADATA_MAX_KEYS = 16;
const METADATA_MAX_KEY_CHARS = 64;
const METADATA_MAX_VALUE_CHARS = 512;
/** client_metadata: forwarded, so bounded in count, length and total size. */
export const CLIENT_METADATA_LIMITS = Object.freeze({ keys: 16, keyChars: 64, valueChars: 2_048, jsonBytes: 8_192 });

/** Forwarded as sent (after validation), in this order, when present and not null. */
const FORWARDED: readonly string[] = [
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
];

function fail(code: ErrorCode, param: string, message: string): never {
  throw new ApiError(code, { param, message });
}

/** What the one walk over the body collects for counting: the counts themselves come after it. */
interface Count {
  /** Text the vendor reads verbatim: its exact tokens are the envelope count. */
  verbatimTexts: string[];
  /** UTF-16 code units of that verbatim text (for the hold's four-characters-per-token floor). */
  chars: number;
  /** Text the hold budgets in some form (schemas, summaries): see holdTokensOf. */
  holdTexts: string[];
  /** Extra tokens the hold assumes beyond the verbatim count, before the margin and holdTexts. */
  extra: number;
}

/** Counts text the vendor reads verbatim: its exact tokens and its length. */
function addVerbatim(count: Count, text: string): void {
  count.verbatimTexts.push(text);
  count.chars += text.length;
}

/**
 * Budgets text the hold assumes the vendor reads in some form (schemas, summaries): its o200k
 * count, never below one token per HOLD_CHARS_PER_TOKEN characters (the verbatim floor's rule).
 */
export function holdTokensOf(text: string, tokens: number): number {
  return Math.max(tokens, Math.ceil(text.length / HOLD_CHARS_PER_TOKEN));
}

/** A request validated but not yet counted (parseResponsesRequest = prepare, count, finish). */
export interface PreparedResponsesRequest {
  readonly model: TextModel;
  readonly stream: boolean;
  readonly maxOutputTokens: number;
  readonly vendorBody: string;
  readonly verbatimTexts: readonly string[];
  readonly holdTexts: readonly string[];
  /** UTF-16 code units of every text to count (verbatim and hold): what counting costs. */
  readonly countChars: number;
  readonly chars: number;
  readonly extra: number;
}

/**
 * Validates a parsed JSON body for `POST /v1/responses` and builds the vendor request.
 * Throws ApiError with the code and a `param` naming the field as a dotted path.
 */
export function parseResponsesRequest(body: Record<string, unknown>, catalog: Catalog, opts: ParseResponsesOptions): ResponsesRequest {
  const p = prepareResponsesRequest(body, catalog, opts);
  return finishResponsesRequest(p, countTexts(p.verbatimTexts, p.holdTexts));
}

/** Validates the body and builds the vendor request; the counting is left to the caller. */
export function prepareResponsesRequest(body: Record<string, unknown>, catalog: Catalog, opts: ParseResponsesOptions): PreparedResponsesRequest {
  if (!isObj(body)) fail('invalid_body', 'body', 'The request body must be a JSON object.');
  checkTopLevelKeys(body);
  const model = resolveModel(body, catalog);
  const maxOutputTokens = readMaxOutputTokens(body, model);
  const stream = checkStream(body, model);

  const count: Count = { verbatimTexts: [], chars: 0, holdTexts: [], extra: HOLD_REQUEST_OVERHEAD_TOKENS };
  checkInput(body.input, count);
  const instructions = optional(body, 'instructions');
  if (instructions !== undefined) {
    checkField('instructions', F.instructions, instructions);
    addVerbatim(count, instructions as string);
    count.extra += HOLD_ITEM_OVERHEAD_TOKENS;
  }
  checkToolFields(body, count);
  checkReasoning(body);
  const text = optional(body, 'text');
  checkField('text', F.text, text);
  if (text !== undefined) checkText(text as Obj, count);
  checkSampling(body);
  checkInclude(body);
  checkCaching(body);
  checkClientMetadata(body);
  checkUnforwarded(body);

  const vendorBody = buildVendorBody(body, model, maxOutputTokens, opts);
  let countChars = count.chars;
  for (const t of count.holdTexts) countChars += t.length;
  return {
    model,
    stream: stream === true,
    maxOutputTokens,
    vendorBody,
    verbatimTexts: count.verbatimTexts,
    holdTexts: count.holdTexts,
    countChars,
    chars: count.chars,
    extra: count.extra,
  };
}

/** Every top-level key is accepted, or a rejected one sent as null or its inert default. */
function checkTopLevelKeys(body: Obj): void {
  for (const key of Object.keys(body)) {
    if (ACCEPTED.has(key)) continue;
    const inert = REJECTED_INERT.get(key);
    if (REJECTED_INERT.has(key)) {
      const v = body[key];
      if (v === null || v === inert) continue;
      fail('unsupported_parameter', key, `\`${key}\` is not supported in v1: ${RESPONSES_REJECTED_FIELDS[key]}.`);
    }
    // The name is the client's: cut in the message as in `param` (ApiError cuts that), with a hint when it is close to a known one.
    fail('unsupported_parameter', key, `\`${clipped(key)}\` is not supported in v1.${didYouMean(key, ACCEPTED)}`);
  }
}

function resolveModel(body: Obj, catalog: Catalog): TextModel {
  const modelName = body.model;
  // Required, as on every other endpoint: a request never bills a model it did not name.
  const model = typeof modelName === 'string' ? catalog.text(modelName, 'openai-responses') : undefined;
  if (model === undefined) {
    if (modelName === undefined) fail('unknown_model', 'model', '`model` is required: text-6-astra (or astra).');
    if (typeof modelName !== 'string') fail('unknown_model', 'model', `\`model\` must be a model id string; got ${describe(modelName)}.`);
    const elsewhere = catalog.text(modelName, 'anthropic-messages') === undefined ? '' : ': that model is served at /v1/messages';
    fail('unknown_model', 'model', `Unknown model ${JSON.stringify(modelName.slice(0, 100))} for /v1/responses${elsewhere}; use text-6-astra (or astra).`);
  }
  return model;
}

/** The client's `max_output_tokens` or the model's default. */
function readMaxOutputTokens(body: Obj, model: TextModel): number {
  const mot = body.max_output_tokens;
  if (mot === undefined || mot === null) return model.constraints.defaultMaxOutputTokens ?? model.constraints.maxOutputTokens;
  checkField('max_output_tokens', F.max_output_tokens, mot);
  if ((mot as number) > model.constraints.maxOutputTokens) {
    fail('too_large', 'max_output_tokens', `\`max_output_tokens\` may be at most ${model.constraints.maxOutputTokens} for ${model.id}.`);
  }
  return mot as number;
}

/** `stream` and `stream_options`; returns `stream` (undefined when absent). */
function checkStream(body: Obj, model: TextModel): unknown {
  const stream = optional(body, 'stream');
  checkField('stream', F.stream, stream);
  if (stream === true && !model.constraints.streaming) fail('unsupported_parameter', 'stream', `${model.id} does not stream.`);
  const so = optional(body, 'stream_options');
  if (so !== undefined) {
    checkField('stream_options', F.stream_options, so);
    if ((so as Obj).include_obfuscation !== undefined && typeof (so as Obj).include_obfuscation !== 'boolean') {
      fail('invalid_type', 'stream_options.include_obfuscation', '`stream_options.include_obfuscation` must be a boolean.');
    }
  }
  return stream;
}

/** tools, tool_choice, parallel_tool_calls, max_tool_calls. */
function checkToolFields(body: Obj, count: Count): void {
  const tools = optional(body, 'tools');
  checkField('tools', F.tools, tools);
  if (tools !== undefined) checkTools(tools as unknown[], count);
  const toolChoice = optional(body, 'tool_choice');
  checkField('tool_choice', F.tool_choice, toolChoice);
  if (toolChoice !== undefined) checkToolChoice(toolChoice);
  checkField('parallel_tool_calls', F.parallel_tool_calls, optional(body, 'parallel_tool_calls'));
  checkField('max_tool_calls', F.max_tool_calls, optional(body, 'max_tool_calls'));
}

/** reasoning: shapes only; which efforts and summaries a model takes is the vendor's to say. */
function checkReasoning(body: Obj): void {
  const reasoning = optional(body, 'reasoning');
  if (reasoning === undefined) return;
  checkField('reasoning', F.reasoning, reasoning);
  for (const k of ['effort', 'summary'] as const) {
    const v = (reasoning as Obj)[k];
    if (v !== undefined && v !== null && typeof v !== 'string') fail('invalid_type', `reasoning.${k}`, `\`reasoning.${k}\` must be a string.`);
  }
}

/** temperature, top_p, truncation. */
function checkSampling(body: Obj): void {
  checkField('temperature', F.temperature, optional(body, 'temperature'));
  checkField('top_p', F.top_p, optional(body, 'top_p'));
  checkField('truncation', F.truncation, optional(body, 'truncation'));
}

function checkInclude(body: Obj): void {
  const include = optional(body, 'include');
  if (include === undefined) return;
  checkField('include', F.include, include);
  const values = include as unknown[];
  for (let i = 0; i < values.length; i++) {
    const v: unknown = values[i];
    checkFieldItem('include', F.include, v, i);
    if (v !== INCLUDE_ENCRYPTED_REASONING)
      fail(
        'unsupported_parameter',
        `include.${i}`,
        `\`include\` value ${JSON.stringify(String(v).slice(0, 100))} is not supported in v1; only "${INCLUDE_ENCRYPTED_REASONING}".`,
      );
  }
}

/** prompt_cache_key, prompt_cache_retention. */
function checkCaching(body: Obj): void {
  checkField('prompt_cache_key', F.prompt_cache_key, optional(body, 'prompt_cache_key'));
  checkField('prompt_cache_retention', F.prompt_cache_retention, optional(body, 'prompt_cache_retention'));
}

/** store (accepted, always false on the wire), metadata, user, safety_identifier: validated, never forwarded. */
function checkUnforwarded(body: Obj): void {
  checkField('store', F.store, optional(body, 'store'));
  const metadata = optional(body, 'metadata');
  checkField('metadata', F.metadata, metadata);
  if (metadata !== undefined) checkMetadata(metadata as Obj);
  for (const k of ['user', 'safety_identifier'] as const) checkField(k, F[k], optional(body, k));
}

/** The vendor's JSON: forwarded fields as sent, our model id, the explicit cap, store false, our safety_identifier. */
function buildVendorBody(body: Obj, model: TextModel, maxOutputTokens: number, opts: ParseResponsesOptions): string {
  const out: Obj = { model: model.vendorModel };
  for (const k of FORWARDED) {
    const v = body[k];
    if (v !== undefined && v !== null) out[k] = v;
  }
  out.max_output_tokens = maxOutputTokens;
  out.include = [INCLUDE_ENCRYPTED_REASONING];
  out.store = false;
  out.safety_identifier = opts.userHash;
  return JSON.stringify(out);
}

/** The envelope check (413) and the hold, once the texts are counted. */
export function finishResponsesRequest(p: PreparedResponsesRequest, counts: TextCounts): ResponsesRequest {
  // Envelope: the verbatim count is exact and the vendor's count is at least it.
  const model = p.model;
  const promptTokens = counts.verbatim;
  if (promptTokens > model.constraints.maxInputTokens) {
    fail('payload_too_large', 'input', `The prompt is ${promptTokens} tokens, above the ${model.constraints.maxInputTokens}-token input limit of ${model.id}.`);
  }
  // The hold never assumes fewer tokens than one per HOLD_CHARS_PER_TOKEN characters: upstreams
  // that estimate rather than tokenize (OpenAI-compatible servers, simulators) commonly count
  // characters / 4, which for repetitive text is far above the exact o200k count (a run of one
  // letter is about one o200k token per 8 characters); a hold below the reported usage would cap
  // the charge at the hold and price a long-context prompt at the base tier.
  let extra = p.extra;
  for (let i = 0; i < p.holdTexts.length; i++) extra += holdTokensOf(p.holdTexts[i]!, counts.hold[i] ?? 0);
  const raw = Math.max(counts.verbatim, Math.ceil(p.chars / HOLD_CHARS_PER_TOKEN)) + extra;
  const promptTokensForHold = raw + Math.ceil((raw * HOLD_MARGIN_PERCENT) / 100) + HOLD_MARGIN_TOKENS;
  const holdInk = responsesHoldInk(promptTokensForHold, p.maxOutputTokens, model);

  return { model, stream: p.stream, maxOutputTokens: p.maxOutputTokens, promptTokens, promptTokensForHold, holdInk, vendorBody: p.vendorBody };
}

/** The field's value, with null read as absent. */
function optional(body: Obj, key: string): unknown {
  const v = body[key];
  return v === null ? undefined : v;
}

// ---------------------------------------------------------------------------------------------
// input

function checkInput(input: unknown, count: Count): void {
  checkField('input', F.input, input === null ? undefined : input);
  if (typeof input === 'string') {
    addVerbatim(count, input);
    count.extra += HOLD_ITEM_OVERHEAD_TOKENS;
    return;
  }
  // A non-empty array: the table (F.input) checked the type.
  const items = input as unknown[];
  for (let i = 0; i < items.length; i++) {
    checkItem(items[i], `input.${i}`, count);
    count.extra += HOLD_ITEM_OVERHEAD_TOKENS;
  }
}

function badInput(param: string, message: string): never {
  fail('invalid_input', param, message);
}

function requireString(item: Obj, key: string, path: string): string {
  const v = item[key];
  if (typeof v !== 'string') badInput(`${path}.${key}`, `\`${path}.${key}\` must be a string.`);
  return v;
}

function checkItem(item: unknown, path: string, count: Count): void {
  if (!isObj(item)) badInput(path, `\`${path}\` must be an object (an input item).`);
  const type = item.type;
  if (type === undefined || type === 'message') {
    checkMessage(item, path, count);
    return;
  }
  if (typeof type !== 'string') badInput(`${path}.type`, `\`${path}.type\` must be a string.`);
  switch (type) {
    case 'reasoning': {
      // With store false the vendor cannot look a reasoning item up by id: it must come back whole.
      const enc = item.encrypted_content;
      if (typeof enc !== 'string' || enc.length === 0) {
        badInput(
          `${path}.encrypted_content`,
          `\`${path}\` is a reasoning item without \`encrypted_content\`; the service keeps no state, so reasoning items must be sent back as returned (the service always requests ${INCLUDE_ENCRYPTED_REASONING}), or left out.`,
        );
      }
      count.extra += Math.ceil(enc.length / HOLD_ENCRYPTED_CHARS_PER_TOKEN);
      const summary = item.summary;
      if (summary !== undefined) {
        if (!Array.isArray(summary)) badInput(`${path}.summary`, `\`${path}.summary\` must be an array.`);
        for (let k = 0; k < summary.length; k++) {
          const s: unknown = summary[k];
          if (!isObj(s) || typeof s.text !== 'string')
            badInput(`${path}.summary.${k}`, `\`${path}.summary.${k}\` must be a summary_text part with a string \`text\`.`);
          count.holdTexts.push(s.text);
        }
      }
      return;
    }
    case 'function_call': {
      requireString(item, 'call_id', path);
      const name = requireString(item, 'name', path);
      const args = requireString(item, 'arguments', path);
      // A call of a function inside a namespace names the namespace too (echoed back as returned).
      if (typeof item.namespace === 'string') addVerbatim(count, item.namespace);
      addVerbatim(count, name);
      addVerbatim(count, args);
      return;
    }
    case 'function_call_output': {
      requireString(item, 'call_id', path);
      const output = item.output;
      if (typeof output === 'string') {
        addVerbatim(count, output);
        return;
      }
      if (!Array.isArray(output)) badInput(`${path}.output`, `\`${path}.output\` must be a string or an array of input_text parts.`);
      for (let k = 0; k < output.length; k++) countTextPart(output[k], `${path}.output.${k}`, count, false);
      return;
    }
    default:
      if (UNSUPPORTED_ITEMS.has(type)) {
        fail('unsupported_parameter', `${path}.type`, `Input items of type "${type}" are not supported in v1: ${WHY_ITEMS}.`);
      }
      if (MEDIA_PARTS.has(type)) fail('unsupported_parameter', `${path}.type`, `"${type}" input is not supported in v1: text only.`);
      badInput(`${path}.type`, `Unknown input item type ${JSON.stringify(type.slice(0, 100))}.`);
  }
}

function checkMessage(item: Obj, path: string, count: Count): void {
  const role = item.role;
  if (typeof role !== 'string' || !ROLES.has(role)) badInput(`${path}.role`, `\`${path}.role\` must be one of user, assistant, system, developer.`);
  const content = item.content;
  if (typeof content === 'string') {
    addVerbatim(count, content);
    return;
  }
  if (!Array.isArray(content)) badInput(`${path}.content`, `\`${path}.content\` must be a string or an array of content parts.`);
  for (let k = 0; k < content.length; k++) countTextPart(content[k], `${path}.content.${k}`, count, true);
}

/** A text content part: input_text everywhere; output_text and refusal in messages only. */
function countTextPart(part: unknown, path: string, count: Count, inMessage: boolean): void {
  if (!isObj(part)) badInput(path, `\`${path}\` must be a content part object.`);
  const type = part.type;
  if (typeof type !== 'string') badInput(`${path}.type`, `\`${path}.type\` must be a string.`);
  if (type === 'input_text' || (inMessage && type === 'output_text')) {
    addVerbatim(count, requireString(part, 'text', path));
    return;
  }
  if (inMessage && type === 'refusal') {
    addVerbatim(count, requireString(part, 'refusal', path));
    return;
  }
  if (MEDIA_PARTS.has(type)) fail('unsupported_parameter', `${path}.type`, `"${type}" content is not supported in v1: text only.`);
  badInput(`${path}.type`, `Unknown content part type ${JSON.stringify(type.slice(0, 100))}.`);
}

// ---------------------------------------------------------------------------------------------
// tools, tool_choice, text, metadata

function checkTools(tools: unknown[], count: Count): void {
  const seen = { definitions: 0 };
  for (let i = 0; i < tools.length; i++) checkTool(tools[i], `tools.${i}`, count, seen, false);
}

/** One tool definition: a function tool, or (at the top level only) a namespace of them. */
function checkTool(t: unknown, path: string, count: Count, seen: { definitions: number }, inNamespace: boolean): void {
  if (++seen.definitions > MAX_TOOL_DEFINITIONS)
    fail('too_long', 'tools', `\`tools\` may hold at most ${MAX_TOOL_DEFINITIONS} tool definitions, those inside namespaces counted.`);
  if (!isObj(t)) fail('invalid_tool', path, `\`${path}\` must be a tool object.`);
  const type = t.type;
  if (type === 'namespace' && !inNamespace) {
    checkNamespace(t, path, count, seen);
    return;
  }
  if (type !== 'function') refuseToolType(type, path, inNamespace);
  const name = t.name;
  if (typeof name !== 'string' || name.length === 0) fail('invalid_tool', `${path}.name`, `\`${path}.name\` must be a non-empty string.`);
  addVerbatim(count, name);
  addDescription(t, path, count);
  const parameters = t.parameters;
  if (parameters !== undefined && parameters !== null) {
    if (!isObj(parameters)) fail('invalid_type', `${path}.parameters`, `\`${path}.parameters\` must be a JSON Schema object.`);
    count.holdTexts.push(JSON.stringify(parameters));
  }
  const strict = t.strict;
  if (strict !== undefined && strict !== null && typeof strict !== 'boolean') fail('invalid_type', `${path}.strict`, `\`${path}.strict\` must be a boolean.`);
  count.extra += HOLD_TOOL_OVERHEAD_TOKENS;
}

/** `{type: "namespace", name, description?, tools}`: client function tools grouped under a name. */
function checkNamespace(t: Obj, path: string, count: Count, seen: { definitions: number }): void {
  const name = t.name;
  if (typeof name !== 'string' || name.length === 0) fail('invalid_tool', `${path}.name`, `\`${path}.name\` must be a non-empty string.`);
  addVerbatim(count, name);
  addDescription(t, path, count);
  const inner = t.tools;
  if (!Array.isArray(inner) || inner.length === 0) fail('invalid_tool', `${path}.tools`, `\`${path}.tools\` must be a non-empty array of function tools.`);
  for (let k = 0; k < inner.length; k++) checkTool(inner[k], `${path}.tools.${k}`, count, seen, true);
  count.extra += HOLD_TOOL_OVERHEAD_TOKENS;
}

function addDescription(t: Obj, path: string, count: Count): void {
  const description = t.description;
  if (description === undefined || description === null) return;
  if (typeof description !== 'string') fail('invalid_type', `${path}.description`, `\`${path}.description\` must be a string.`);
  addVerbatim(count, description);
}

/** A tool type other than function (or namespace at the top level): why it is refused. */
function refuseToolType(type: unknown, path: string, inNamespace: boolean): never {
  if (typeof type !== 'string') fail('invalid_tool', `${path}.type`, `\`${path}.type\` must be "function"${inNamespace ? '' : ' or "namespace"'}.`);
  const shown = JSON.stringify(type.slice(0, 100));
  if (type === 'namespace') fail('invalid_tool', `${path}.type`, `\`${path}\` is a namespace inside a namespace; namespaces do not nest.`);
  if (SERVER_TOOLS.has(type)) {
    fail(
      'unsupported_parameter',
      `${path}.type`,
      `The ${shown} tool is a server tool, run by the vendor; this service runs and bills no server tools. Remove ${shown} from \`tools\` (turn it off in your client) and ${WHY_TOOLS}.`,
    );
  }
  fail('unsupported_parameter', `${path}.type`, `Tools of type ${shown} are not supported in v1: ${WHY_TOOLS}.`);
}

function checkToolChoice(tc: unknown): void {
  if (typeof tc === 'string') {
    if (!TOOL_CHOICE_MODES.has(tc)) fail('invalid_enum', 'tool_choice', '`tool_choice` must be "auto", "none", "required" or {type: "function", name}.');
    return;
  }
  if (!isObj(tc)) fail('invalid_type', 'tool_choice', '`tool_choice` must be a string or an object.');
  const type = tc.type;
  if (type === 'function') {
    if (typeof tc.name !== 'string' || tc.name.length === 0) fail('invalid_type', 'tool_choice.name', '`tool_choice.name` must be a non-empty string.');
    return;
  }
  if (typeof type === 'string' && TOOL_CHOICE_UNSUPPORTED.has(type)) {
    fail('unsupported_parameter', 'tool_choice.type', `\`tool_choice\` of type "${type}" is not supported in v1: only function tools.`);
  }
  fail('invalid_enum', 'tool_choice.type', '`tool_choice.type` must be "function".');
}

function checkText(text: Obj, count: Count): void {
  const format = text.format;
  if (format !== undefined && format !== null) {
    if (!isObj(format)) fail('invalid_type', 'text.format', '`text.format` must be an object.');
    const type = format.type;
    if (typeof type !== 'string' || !FORMAT_TYPES.has(type))
      fail('invalid_enum', 'text.format.type', '`text.format.type` must be "text", "json_schema" or "json_object".');
    if (type === 'json_schema') {
      if (typeof format.name !== 'string' || format.name.length === 0)
        fail('invalid_type', 'text.format.name', '`text.format.name` must be a non-empty string.');
      if (!isObj(format.schema)) fail('invalid_type', 'text.format.schema', '`text.format.schema` must be a JSON Schema object.');
      const description = format.description;
      if (description !== undefined && description !== null && typeof description !== 'string') {
        fail('invalid_type', 'text.format.description', '`text.format.description` must be a string.');
      }
      // The vendor renders the schema into the prompt in its own form: the hold budgets its JSON.
      count.holdTexts.push(format.name, JSON.stringify(format.schema));
      if (typeof description === 'string') count.holdTexts.push(description);
      count.extra += HOLD_TOOL_OVERHEAD_TOKENS;
    }
  }
  const verbosity = text.verbosity;
  if (verbosity !== undefined && verbosity !== null && (typeof verbosity !== 'string' || !VERBOSITIES.has(verbosity))) {
    fail('invalid_enum', 'text.verbosity', '`text.verbosity` must be "low", "medium" or "high".');
  }
}

function checkMetadata(metadata: Obj): void {
  const keys = Object.keys(metadata);
  if (keys.length > METADATA_MAX_KEYS) fail('invalid_value', 'metadata', `\`metadata\` may have at most ${METADATA_MAX_KEYS} keys.`);
  for (const k of keys) {
    if (k.length > METADATA_MAX_KEY_CHARS) fail('too_long', 'metadata', `\`metadata\` keys may be at most ${METADATA_MAX_KEY_CHARS} characters.`);
    const v = metadata[k];
    if (typeof v !== 'string') fail('invalid_type', `metadata.${k}`, '`metadata` values must be strings.');
    if (v.length > METADATA_MAX_VALUE_CHARS) fail('too_long', `metadata.${k}`, `\`metadata\` values may be at most ${METADATA_MAX_VALUE_CHARS} characters.`);
  }
}

/** client_metadata: forwarded as sent, so an object of a few short strings. */
function checkClientMetadata(body: Obj): void {
  const cm = optional(body, 'client_metadata');
  checkField('client_metadata', F.client_metadata, cm);
  if (cm === undefined) return;
  const L = CLIENT_METADATA_LIMITS;
  const keys = Object.keys(cm as Obj);
  if (keys.length > L.keys) fail('invalid_value', 'client_metadata', `\`client_metadata\` may have at most ${L.keys} keys.`);
  for (const k of keys) {
    if (k.length > L.keyChars) fail('too_long', 'client_metadata', `\`client_metadata\` keys may be at most ${L.keyChars} characters.`);
    const v = (cm as Obj)[k];
    if (typeof v !== 'string') fail('invalid_type', `client_metadata.${k}`, '`client_metadata` values must be strings.');
    if (v.length > L.valueChars) fail('too_long', `client_metadata.${k}`, `\`client_metadata\` values may be at most ${L.valueChars} characters.`);
  }
  if (Buffer.byteLength(JSON.stringify(cm)) > L.jsonBytes)
    fail('too_long', 'client_metadata', `\`client_metadata\` may be at most ${L.jsonBytes} bytes as JSON.`);
}
