// The Responses lane's request side: validates a client body for `POST /v1/responses` against the
// v1 contract, resolves the product model, counts the prompt with the vendor's tokenizer
// (o200k_base), checks the input envelope, sizes the Ink hold and builds the vendor body once. Pure.
//
// The request rules (fields accepted, refused or replaced, prompt size, hold sizing) are
// docs/api/responses.md, and the fields' table is request-fields.ts. Counting cost on one core of a
// two-core machine, exact count: English 1 MiB ~70 ms, 4 MiB ~275 ms; CJK 4 MiB ~320 ms, without
// punctuation ~0.9 s; 4 MiB of one repeated character ~1.6-2.1 s (gpt-tokenizer's own countTokens
// takes 39 s for 256 KiB of one character and its merge cache keeps request text: not used).
import type { Catalog, TextModel } from '../../catalog/models.js';
import { responsesHoldInk } from '../../catalog/pricing.js';
import { clipped } from '../../errors.js';
import { checkField, checkFieldItem, didYouMean } from '../../util/request-fields.js';
import { RESPONSES_FIELDS as F } from './request-fields.js';
import { countTexts, type TextCounts } from './token-count.js';
import {
  addVerbatim,
  type Count,
  fail,
  HOLD_CHARS_PER_TOKEN,
  HOLD_ITEM_OVERHEAD_TOKENS,
  HOLD_MARGIN_PERCENT,
  HOLD_MARGIN_TOKENS,
  HOLD_REQUEST_OVERHEAD_TOKENS,
  HOLD_TOOL_OVERHEAD_TOKENS,
  INCLUDE_ENCRYPTED_REASONING,
  type Obj,
  optional,
} from './request-count.js';
import { isObject } from './raw-json.js';
import { checkInput } from './request-input.js';
import { checkToolFields } from './request-tools.js';

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
  if (!isObject(body)) fail('invalid_body', 'body', 'The request body must be a JSON object.');
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
export function finishResponsesRequest(prepared: PreparedResponsesRequest, counts: TextCounts): ResponsesRequest {
  // Envelope: the verbatim count is exact and the vendor's count is at least it.
  const model = prepared.model;
  const promptTokens = counts.verbatim;
  if (promptTokens > model.constraints.maxInputTokens) {
    fail('payload_too_large', 'input', `The prompt is ${promptTokens} tokens, above the ${model.constraints.maxInputTokens}-token input limit of ${model.id}.`);
  }
  // The hold never assumes fewer tokens than one per HOLD_CHARS_PER_TOKEN characters: upstreams
  // that estimate rather than tokenize (OpenAI-compatible servers, simulators) commonly count
  // characters / 4, which for repetitive text is far above the exact o200k count (a run of one
  // letter is about one o200k token per 8 characters); a hold below the reported usage would cap
  // the charge at the hold and price a long-context prompt at the base tier.
  let extra = prepared.extra;
  for (let i = 0; i < prepared.holdTexts.length; i++) extra += holdTokensOf(prepared.holdTexts[i]!, counts.hold[i] ?? 0);
  const raw = Math.max(counts.verbatim, Math.ceil(prepared.chars / HOLD_CHARS_PER_TOKEN)) + extra;
  const promptTokensForHold = raw + Math.ceil((raw * HOLD_MARGIN_PERCENT) / 100) + HOLD_MARGIN_TOKENS;
  const holdInk = responsesHoldInk(promptTokensForHold, prepared.maxOutputTokens, model);

  return {
    model,
    stream: prepared.stream,
    maxOutputTokens: prepared.maxOutputTokens,
    promptTokens,
    promptTokensForHold,
    holdInk,
    vendorBody: prepared.vendorBody,
  };
}

function checkText(text: Obj, count: Count): void {
  const format = text.format;
  if (format !== undefined && format !== null) {
    if (!isObject(format)) fail('invalid_type', 'text.format', '`text.format` must be an object.');
    const type = format.type;
    if (typeof type !== 'string' || !FORMAT_TYPES.has(type))
      fail('invalid_enum', 'text.format.type', '`text.format.type` must be "text", "json_schema" or "json_object".');
    if (type === 'json_schema') {
      if (typeof format.name !== 'string' || format.name.length === 0)
        fail('invalid_type', 'text.format.name', '`text.format.name` must be a non-empty string.');
      if (!isObject(format.schema)) fail('invalid_type', 'text.format.schema', '`text.format.schema` must be a JSON Schema object.');
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
