// The text lanes' top-level request field rules as data: which fields a body may carry, their JSON
// types, enums, bounds and required-ness. Each lane's table (messages/request-fields.ts,
// responses/request-fields.ts) is what its validator checks those rules with, and what the console's
// reference and /v1/openapi.json describe the body with (fieldsJsonSchema), so the two cannot drift.
// Nested shapes (turns, blocks, items, tools) are the lanes' own walks; the table holds the top level.
import { ApiError, type ErrorCode } from '../errors.js';

export type JsonType = 'string' | 'integer' | 'number' | 'boolean' | 'object' | 'array';
export type JsonSchema = Record<string, unknown>;

export interface FieldRule {
  /** The JSON types the field takes (null is none of them). */
  readonly types: readonly JsonType[];
  /** What the field must be, in words: the wrong-type message is "`field` must be <expect>.". */
  readonly expect: string;
  readonly required?: boolean;
  /** A required string or array that is empty counts as missing. */
  readonly nonEmpty?: boolean;
  /** The answer when a required field is missing (else `code` and `message`). */
  readonly missing?: { readonly code: ErrorCode; readonly message: string };
  /** The code of every breach of the rule, when not the usual one (invalid_type, invalid_value, invalid_enum). */
  readonly code?: ErrorCode;
  /** The message of every breach of the rule, when not built from `expect`, the enum or the bounds. */
  readonly message?: string;
  /** The JSON type of an array's items: a wrong item answers like a wrong type, `param` `field.N`. */
  readonly items?: JsonType;
  /** The values a string may take (`invalid_enum` otherwise). */
  readonly enum?: readonly string[];
  /** String values refused as `unsupported_parameter` before the enum is checked, with why. */
  readonly refused?: Readonly<Record<string, string>>;
  /** Number bounds (`invalid_value` outside). */
  readonly minimum?: number;
  readonly maximum?: number;
  /** The upper bound is the model's output maximum (`too_large`, checked by the lane once the model is known). */
  readonly modelMaximum?: boolean;
  /** For the reference: a few words shown next to the field. */
  readonly description?: string;
  /** For the reference: the nested shape the lane's own walk checks, per JSON type (merged into that type's schema). */
  readonly nested?: Partial<Record<JsonType, JsonSchema>>;
}

export type FieldTable = Readonly<Record<string, FieldRule>>;

/** Freezes a table and its rules: the lane's rules are fixed at start-up. */
export function fieldTable<T extends Record<string, FieldRule>>(table: T): Readonly<T> {
  for (const rule of Object.values(table)) Object.freeze(rule);
  return Object.freeze(table);
}

function fail(code: ErrorCode, param: string, message: string): never {
  throw new ApiError(code, { param, message });
}

export function isJsonType(v: unknown, t: JsonType): boolean {
  switch (t) {
    case 'string':
      return typeof v === 'string';
    case 'boolean':
      return typeof v === 'boolean';
    case 'number':
      return typeof v === 'number' && Number.isFinite(v);
    case 'integer':
      return typeof v === 'number' && Number.isInteger(v);
    case 'object':
      return typeof v === 'object' && v !== null && !Array.isArray(v);
    case 'array':
      return Array.isArray(v);
  }
}

function hasType(rule: FieldRule, v: unknown): boolean {
  for (const t of rule.types) if (isJsonType(v, t)) return true;
  return false;
}

const isEmpty = (v: unknown): boolean => v === '' || (Array.isArray(v) && v.length === 0);
const typeMessage = (key: string, rule: FieldRule): string => rule.message ?? `\`${key}\` must be ${rule.expect}.`;

/** "a", "a" or "b", "a", "b" or "c" */
function enumWords(values: readonly string[]): string {
  const q = values.map((v) => JSON.stringify(v));
  return q.length === 1 ? q[0]! : `${q.slice(0, -1).join(', ')} or ${q.at(-1)}`;
}

/**
 * Checks one top-level field against its rule: missing (undefined, or empty when `nonEmpty`),
 * type, then a string's refused values and enum, or a number's bounds. Array items are the
 * caller's (checkFieldItem), in its own walk, so the order errors are found in stays the lane's.
 */
export function checkField(key: string, rule: FieldRule, v: unknown): void {
  if (v === undefined || (rule.nonEmpty === true && isEmpty(v))) {
    if (rule.required) fail(rule.missing?.code ?? rule.code ?? 'invalid_type', key, rule.missing?.message ?? rule.message ?? `\`${key}\` is required.`);
    return;
  }
  if (!hasType(rule, v)) fail(rule.code ?? 'invalid_type', key, typeMessage(key, rule));
  if (typeof v === 'string') {
    const why = rule.refused?.[v];
    if (why !== undefined) fail('unsupported_parameter', key, `\`${key}\` ${JSON.stringify(v)} is not supported in v1: ${why}.`);
    if (rule.enum !== undefined && !rule.enum.includes(v)) fail(rule.code ?? 'invalid_enum', key, rule.message ?? `\`${key}\` must be ${enumWords(rule.enum)}.`);
  } else if (typeof v === 'number') {
    const { minimum: min, maximum: max } = rule;
    if ((min !== undefined && v < min) || (max !== undefined && v > max)) {
      const range = min !== undefined && max !== undefined ? `from ${min} to ${max}` : min !== undefined ? `at least ${min}` : `at most ${max}`;
      fail(rule.code ?? 'invalid_value', key, rule.message ?? `\`${key}\` must be ${range}.`);
    }
  }
}

/** Checks item `i` of an array field against the rule's item type. */
export function checkFieldItem(key: string, rule: FieldRule, item: unknown, i: number): void {
  if (rule.items !== undefined && !isJsonType(item, rule.items)) fail(rule.code ?? 'invalid_type', `${key}.${i}`, typeMessage(key, rule));
}

export interface SchemaContext {
  /** The `model` field's enum: the catalogue's ids and aliases for the lane. */
  readonly modelIds: readonly string[];
  /** The largest output maximum of the lane's models (the schema's bound of a `modelMaximum` field). */
  readonly maxOutputTokens: number;
}

function typeSchema(rule: FieldRule, t: JsonType, ctx: SchemaContext, key: string): JsonSchema {
  const s: JsonSchema = { type: t };
  if (t === 'string') {
    const values = key === 'model' ? ctx.modelIds : rule.enum;
    if (values !== undefined) s.enum = [...values];
    if (rule.nonEmpty) s.minLength = 1;
  } else if (t === 'integer' || t === 'number') {
    if (rule.minimum !== undefined) s.minimum = rule.minimum;
    const max = rule.modelMaximum ? ctx.maxOutputTokens : rule.maximum;
    if (max !== undefined) s.maximum = max;
  } else if (t === 'array') {
    if (rule.nonEmpty) s.minItems = 1;
    s.items = rule.items !== undefined ? { type: rule.items } : { type: 'object', additionalProperties: true };
  } else if (t === 'object') {
    s.additionalProperties = true;
  }
  return s;
}

/** The JSON Schema of a request body whose top level is `table` (no other field is accepted). */
export function fieldsJsonSchema(table: FieldTable, ctx: SchemaContext): JsonSchema {
  const properties: Record<string, JsonSchema> = {};
  const required: string[] = [];
  for (const [key, rule] of Object.entries(table)) {
    const parts = rule.types.map((t) => ({ ...typeSchema(rule, t, ctx, key), ...rule.nested?.[t] }));
    const s: JsonSchema = parts.length === 1 ? parts[0]! : { oneOf: parts };
    if (rule.description !== undefined) s.description = rule.description;
    properties[key] = s;
    if (rule.required) required.push(key);
  }
  return { type: 'object', properties, ...(required.length ? { required } : {}), additionalProperties: false };
}
