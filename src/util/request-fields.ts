// The top-level fields of a request body as data, for every product: each body has one frozen table
// (src/lanes/messages/request-fields.ts, src/lanes/responses/request-fields.ts,
// src/generations/video/request-fields.ts, src/generations/images/request-fields.ts) with a row per
// field: its JSON types, enum, bounds, length caps, whether it is required, and the code and message
// a breach answers. The product's validator checks each field with checkField() and its row, in the
// product's own documented order, and the console's reference and /v1/openapi.json describe the body
// with fieldsSchema() of the same table, so the description and the validation cannot part ways.
// Nested shapes (turns, blocks, items, tools, the URLs of a list) and what depends on the chosen
// model (its output maximum, aspect ratios, durations, reference caps) stay with the validator.
import { ApiError, type ErrorCode } from '../errors.js';

export type JsonType = 'string' | 'integer' | 'number' | 'boolean' | 'object' | 'array';
export type JsonSchema = Record<string, unknown>;

/** An array's elements: checked by checkFieldItem (type) or the product's own walk (URLs); described as given. */
export interface ItemRule {
  readonly type: JsonType;
  readonly format?: 'uri';
  readonly maxLength?: number;
}

export interface FieldRule {
  /** The JSON types the field takes (null is none of them). */
  readonly types: readonly JsonType[];
  /** What the field must be, in words: the wrong-type message is "`field` must be <expect>.". */
  readonly expect: string;
  /** Must be present. checkField answers `missing` (or `code` and `message`) when it is not, unless the validator checks presence itself (unknown_model, missing_prompt). */
  readonly required?: boolean;
  /** A required string or array that is empty counts as missing. */
  readonly nonEmpty?: boolean;
  /** The answer when a required field is missing (else `code` and `message`). */
  readonly missing?: { readonly code: ErrorCode; readonly message: string };
  /** The code of every breach of the rule, when not the usual one (invalid_type, invalid_value, invalid_enum). */
  readonly code?: ErrorCode;
  /** The message of every breach of the rule, when not built from `expect`, the enum or the bounds. */
  readonly message?: string;
  /** An array's elements (a wrong type answers like the field's wrong type, `param` `field.N`). */
  readonly items?: ItemRule;
  /** The values a string may take (`invalid_enum` otherwise). */
  readonly enum?: readonly string[];
  /** String values refused as `unsupported_parameter` before the enum is checked, with why. */
  readonly refused?: Readonly<Record<string, string>>;
  /** Number bounds (`invalid_value` outside). */
  readonly minimum?: number;
  readonly maximum?: number;
  /** The upper bound is the model's output maximum (`too_large`, checked by the lane once the model is known). */
  readonly modelMaximum?: boolean;
  /** Characters (code points), as JSON Schema counts them; past it: too_long. */
  readonly maxLength?: number;
  /** A list's cap across models (a model may accept fewer; the list parser checks it): too_many. */
  readonly maxItems?: number;
  /** Size of the value written as JSON; past it: too_long. Not expressible in JSON Schema: described. */
  readonly maxJsonBytes?: number;
  /** For the reference: the string's format (the product's URL parser checks it). */
  readonly format?: 'uri';
  /** For the reference: a few words shown next to the field. */
  readonly description?: string;
  /** For the reference: the nested shape the lane's own walk checks, per JSON type (merged into that type's schema). */
  readonly nested?: Partial<Record<JsonType, JsonSchema>>;
}

export type FieldTable = Readonly<Record<string, FieldRule>>;

/**
 * Freezes a table, its rows and what they hold (enums, items, refusals), as fixed at start-up: it is
 * read by every request. `nested` is left as it is: it is handed to the reference as it stands.
 */
export function fieldTable<T extends Record<string, FieldRule>>(table: T): Readonly<T> {
  for (const rule of Object.values(table)) {
    for (const part of [rule.enum, rule.items, rule.refused, rule.missing]) if (part !== undefined) Object.freeze(part);
    Object.freeze(rule);
  }
  return Object.freeze(table);
}

export const bad = (code: ErrorCode, param: string, message: string): ApiError => new ApiError(code, { param, message });

/** Characters as the user sees them: code points, not UTF-16 units (counting stops past `stopAbove`). */
export function charCount(text: string, stopAbove: number): number {
  if (text.length <= stopAbove) return text.length; // code points <= UTF-16 units
  let n = 0;
  for (const _ of text) if (++n > stopAbove) return n;
  return n;
}

/** Whether `value` is of the JSON type `jsonType` (number: finite; integer: without a fraction; object: not an array). */
export function isJsonType(value: unknown, jsonType: JsonType): boolean {
  switch (jsonType) {
    case 'string':
      return typeof value === 'string';
    case 'boolean':
      return typeof value === 'boolean';
    case 'number':
      return typeof value === 'number' && Number.isFinite(value);
    case 'integer':
      return typeof value === 'number' && Number.isInteger(value);
    case 'object':
      return typeof value === 'object' && value !== null && !Array.isArray(value);
    case 'array':
      return Array.isArray(value);
  }
}

function hasType(rule: FieldRule, value: unknown): boolean {
  for (const t of rule.types) if (isJsonType(value, t)) return true;
  return false;
}

const isEmpty = (v: unknown): boolean => v === '' || (Array.isArray(v) && v.length === 0);

/** A wrong JSON type: the product's `valueMessage` when the rule has its own code, else the rule's words. */
function typeMessage(key: string, rule: FieldRule, valueMessage: (() => string) | undefined): string {
  if (valueMessage !== undefined && rule.code !== undefined && rule.code !== 'invalid_type') return valueMessage();
  return rule.message ?? `\`${key}\` must be ${rule.expect}.`;
}

/** "a", "a" or "b", "a", "b" or "c" */
function enumWords(values: readonly string[]): string {
  const q = values.map((v) => JSON.stringify(v));
  return q.length === 1 ? q[0]! : `${q.slice(0, -1).join(', ')} or ${q.at(-1)}`;
}

function checkString(key: string, rule: FieldRule, value: string, valueMessage: (() => string) | undefined): void {
  const why = rule.refused?.[value];
  if (why !== undefined) throw bad('unsupported_parameter', key, `\`${key}\` ${JSON.stringify(value)} is not supported in v1: ${why}.`);
  if (rule.enum !== undefined && !rule.enum.includes(value)) {
    throw bad(rule.code ?? 'invalid_enum', key, valueMessage?.() ?? rule.message ?? `\`${key}\` must be ${enumWords(rule.enum)}.`);
  }
  if (rule.maxLength !== undefined && charCount(value, rule.maxLength) > rule.maxLength) {
    throw bad('too_long', key, `\`${key}\` is longer than ${rule.maxLength} characters.`);
  }
}

function checkNumber(key: string, rule: FieldRule, value: number, valueMessage: (() => string) | undefined): void {
  const { minimum: min, maximum: max } = rule;
  if ((min !== undefined && value < min) || (max !== undefined && value > max)) {
    const range = min !== undefined && max !== undefined ? `from ${min} to ${max}` : min !== undefined ? `at least ${min}` : `at most ${max}`;
    throw bad(rule.code ?? 'invalid_value', key, valueMessage?.() ?? rule.message ?? `\`${key}\` must be ${range}.`);
  }
}

/**
 * Checks one top-level field against its row: missing (undefined, or empty when `nonEmpty`), JSON
 * type, then a string's refused values, enum and length, or a number's bounds, then the size as
 * JSON. A breach answers the row's `code` (else the usual one) with the row's `message`, else
 * `valueMessage` when the product words it (often naming the model's own choices), else words built
 * from the row. Array items are the caller's (checkFieldItem, or a URL list's parser), in its own
 * walk, so the order errors are found in stays the product's.
 */
export function checkField(key: string, rule: FieldRule, value: unknown, valueMessage?: () => string): void {
  if (value === undefined || (rule.nonEmpty === true && isEmpty(value))) {
    if (rule.required) throw bad(rule.missing?.code ?? rule.code ?? 'invalid_type', key, rule.missing?.message ?? rule.message ?? `\`${key}\` is required.`);
    return;
  }
  if (!hasType(rule, value)) throw bad(rule.code ?? 'invalid_type', key, typeMessage(key, rule, valueMessage));
  if (typeof value === 'string') checkString(key, rule, value, valueMessage);
  else if (typeof value === 'number') checkNumber(key, rule, value, valueMessage);
  if (rule.maxJsonBytes !== undefined && Buffer.byteLength(JSON.stringify(value)) > rule.maxJsonBytes) {
    throw bad('too_long', key, `\`${key}\` is larger than ${rule.maxJsonBytes} bytes of JSON.`);
  }
}

/** Checks item `index` of an array field against the row's item type. */
export function checkFieldItem(key: string, rule: FieldRule, item: unknown, index: number): void {
  if (rule.items !== undefined && !isJsonType(item, rule.items.type))
    throw bad(rule.code ?? 'invalid_type', `${key}.${index}`, typeMessage(key, rule, undefined));
}

/** What a table cannot know, from the catalogue. */
export interface SchemaContext {
  /** The `model` field's enum: the catalogue's ids and aliases for the product. */
  readonly modelIds: readonly string[];
  /** The largest output maximum of the lane's models (the schema's bound of a `modelMaximum` field). */
  readonly maxOutputTokens?: number;
}

function typeSchema(rule: FieldRule, jsonType: JsonType, ctx: SchemaContext, key: string): JsonSchema {
  const s: JsonSchema = { type: jsonType };
  if (jsonType === 'string') {
    const values = key === 'model' ? ctx.modelIds : rule.enum;
    if (values !== undefined) s.enum = [...values];
    if (rule.nonEmpty) s.minLength = 1;
    if (rule.maxLength !== undefined) s.maxLength = rule.maxLength;
    if (rule.format !== undefined) s.format = rule.format;
  } else if (jsonType === 'integer' || jsonType === 'number') {
    if (rule.minimum !== undefined) s.minimum = rule.minimum;
    const max = rule.modelMaximum ? ctx.maxOutputTokens : rule.maximum;
    if (max !== undefined) s.maximum = max;
  } else if (jsonType === 'array') {
    if (rule.nonEmpty) s.minItems = 1;
    if (rule.maxItems !== undefined) s.maxItems = rule.maxItems;
    s.items = rule.items !== undefined ? { ...rule.items } : { type: 'object', additionalProperties: true };
  } else if (jsonType === 'object') {
    s.additionalProperties = true;
  }
  return s;
}

/**
 * The JSON Schema (2020-12) of a request body whose top level is `table`, in table order; no other
 * field is accepted (additionalProperties: false). A field of several types is a oneOf.
 */
export function fieldsSchema(table: FieldTable, ctx: SchemaContext): JsonSchema {
  const properties: Record<string, JsonSchema> = {};
  const required: string[] = [];
  for (const [key, rule] of Object.entries(table)) {
    const parts = rule.types.map((t) => ({ ...typeSchema(rule, t, ctx, key), ...rule.nested?.[t] }));
    const s: JsonSchema = parts.length === 1 ? parts[0]! : { oneOf: parts };
    const size = rule.maxJsonBytes === undefined ? undefined : `at most ${rule.maxJsonBytes} bytes of JSON`;
    const description = [rule.description, size].filter((x) => x !== undefined).join('; ');
    if (description !== '') s.description = description;
    properties[key] = s;
    if (rule.required) required.push(key);
  }
  return { type: 'object', properties, ...(required.length ? { required } : {}), additionalProperties: false };
}

/** Names longer than this get no suggestion: the comparison's cost stays bounded whatever a client sends. */
const SUGGEST_MAX_CHARS = 64;

/** Edit distance of `source` and `target` (insertions, deletions, substitutions), or `limit + 1` once it is above `limit`. */
function editDistance(source: string, target: string, limit: number): number {
  if (Math.abs(source.length - target.length) > limit) return limit + 1;
  let prev = Array.from({ length: target.length + 1 }, (_, j) => j);
  for (let i = 1; i <= source.length; i++) {
    const row = [i];
    let best = i;
    for (let j = 1; j <= target.length; j++) {
      row[j] = Math.min(prev[j]! + 1, row[j - 1]! + 1, prev[j - 1]! + (source[i - 1] === target[j - 1] ? 0 : 1));
      best = Math.min(best, row[j]!);
    }
    if (best > limit) return limit + 1;
    prev = row;
  }
  return prev[target.length]!;
}

/**
 * The known field an unknown top-level name most likely meant: one at most two edits away, or one
 * the name begins (or that begins the name), four characters at least (`max_token`, `max_tokens_to_sample`
 * for `max_tokens`). Undefined for none, and for names above SUGGEST_MAX_CHARS.
 */
export function closestField(name: string, known: Iterable<string>): string | undefined {
  if (name.length > SUGGEST_MAX_CHARS) return undefined;
  let best: string | undefined;
  let bestScore = 3;
  for (const k of known) {
    const d = editDistance(name, k, 2);
    const prefix = Math.min(name.length, k.length) >= 4 && (k.startsWith(name) || name.startsWith(k));
    const score = d <= 2 ? d : prefix ? 2.5 : 3;
    if (score < bestScore) {
      best = k;
      bestScore = score;
    }
  }
  return best;
}

/** " Did you mean `max_tokens`?" for a close known field, else "". */
export function didYouMean(name: string, known: Iterable<string>): string {
  const k = closestField(name, known);
  return k === undefined ? '' : ` Did you mean \`${k}\`?`;
}
