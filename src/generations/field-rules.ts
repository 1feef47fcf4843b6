// The top-level fields of a generation submit body as data: each product's request-fields.ts holds
// one frozen table (field -> JSON type, enum, bounds, required, the error code of a wrong value).
// The product's validate.ts checks every field through checkField() with its row, in its documented
// order, and the API reference and /v1/openapi.json describe the body with fieldsSchema() of the
// same table, so the description and the validation cannot part ways. What depends on the chosen
// model (its aspect ratios, durations, reference caps) stays in validate.ts and the model cards.
import { ApiError, type ErrorCode } from '../errors.js';

export type JsonType = 'string' | 'integer' | 'boolean' | 'object' | 'array';
export type JsonSchema = Record<string, unknown>;

export interface FieldRule {
  readonly type: JsonType;
  /** Must be present (what answers when it is not is the validator's: unknown_model, missing_prompt). */
  readonly required?: boolean;
  /** The code for a value of another JSON type, outside `enum`, or outside `minimum`..`maximum`. */
  readonly code: ErrorCode;
  /** Ends "`field` must be ..." in an invalid_type message: "a string", "a JSON object". */
  readonly expects: string;
  readonly description?: string;
  readonly enum?: readonly string[];
  readonly minimum?: number;
  readonly maximum?: number;
  /** Characters (code points), as JSON Schema counts them; past it: too_long. */
  readonly maxLength?: number;
  /** A list's cap across models (a model may accept fewer); past it: too_many. */
  readonly maxItems?: number;
  /** Size of the value written as JSON; past it: too_long. Not expressible in JSON Schema: described. */
  readonly maxJsonBytes?: number;
  readonly format?: 'uri';
  /** A list's elements (each checked as a single field of this shape, with its index in `param`). */
  readonly items?: { readonly type: 'string'; readonly format: 'uri'; readonly maxLength: number };
}

export type FieldTable = Readonly<Record<string, FieldRule>>;

export const bad = (code: ErrorCode, param: string, message: string): ApiError => new ApiError(code, { param, message });

/** Characters as the user sees them: code points, not UTF-16 units. */
export function charCount(s: string, stopAbove: number): number {
  if (s.length <= stopAbove) return s.length; // code points <= UTF-16 units
  let n = 0;
  for (const _ of s) if (++n > stopAbove) return n;
  return n;
}

/** Freezes a table and everything in it (rows, enums, items): it is read by every request. */
export function freezeTable<T extends FieldTable>(table: T): T {
  for (const rule of Object.values(table)) {
    if (rule.enum) Object.freeze(rule.enum);
    if (rule.items) Object.freeze(rule.items);
    Object.freeze(rule);
  }
  return Object.freeze(table);
}

/** Whether `v` is of the JSON type `type` (integer: a number without a fraction; object: not an array). */
export function hasJsonType(type: JsonType, v: unknown): boolean {
  switch (type) {
    case 'string':
      return typeof v === 'string';
    case 'integer':
      return typeof v === 'number' && Number.isInteger(v);
    case 'boolean':
      return typeof v === 'boolean';
    case 'object':
      return typeof v === 'object' && v !== null && !Array.isArray(v);
    case 'array':
      return Array.isArray(v);
  }
}

/**
 * Checks a present value against its row: JSON type, enum and bounds answer the row's `code`
 * (with `valueMessage` when it is not invalid_type: the product words it, often naming the model's
 * own choices), then maxLength and maxJsonBytes answer too_long. List caps and list elements are
 * the list parser's (they depend on the model).
 */
export function checkField(name: string, rule: FieldRule, v: unknown, valueMessage?: () => string): void {
  const refuse = () => bad(rule.code, name, rule.code === 'invalid_type' || valueMessage === undefined ? `\`${name}\` must be ${rule.expects}.` : valueMessage());
  if (!hasJsonType(rule.type, v)) throw refuse();
  if (rule.enum !== undefined && !rule.enum.includes(v as string)) throw refuse();
  if ((rule.minimum !== undefined && (v as number) < rule.minimum) || (rule.maximum !== undefined && (v as number) > rule.maximum)) throw refuse();
  if (rule.maxLength !== undefined && charCount(v as string, rule.maxLength) > rule.maxLength) {
    throw bad('too_long', name, `\`${name}\` is longer than ${rule.maxLength} characters.`);
  }
  if (rule.maxJsonBytes !== undefined && Buffer.byteLength(JSON.stringify(v)) > rule.maxJsonBytes) {
    throw bad('too_long', name, `\`${name}\` is larger than ${rule.maxJsonBytes} bytes of JSON.`);
  }
}

/**
 * The JSON Schema (2020-12) of a body with these top-level fields, in table order; fields outside
 * the table are refused (additionalProperties: false). `extra` adds what the table cannot know,
 * such as the model enum from the catalogue.
 */
export function fieldsSchema(table: FieldTable, extra: Readonly<Record<string, JsonSchema>> = {}): JsonSchema {
  const properties: Record<string, JsonSchema> = {};
  for (const [name, r] of Object.entries(table)) {
    const description = [r.description, r.maxJsonBytes === undefined ? undefined : `at most ${r.maxJsonBytes} bytes of JSON`].filter((x) => x !== undefined).join('; ');
    properties[name] = {
      type: r.type,
      ...(description ? { description } : {}),
      ...(r.enum ? { enum: [...r.enum] } : {}),
      ...(r.minimum !== undefined ? { minimum: r.minimum } : {}),
      ...(r.maximum !== undefined ? { maximum: r.maximum } : {}),
      ...(r.maxLength !== undefined ? { maxLength: r.maxLength } : {}),
      ...(r.format ? { format: r.format } : {}),
      ...(r.maxItems !== undefined ? { maxItems: r.maxItems } : {}),
      ...(r.items ? { items: { ...r.items } } : {}),
      ...(r.type === 'object' ? { additionalProperties: true } : {}),
      ...extra[name],
    };
  }
  const required = Object.entries(table).filter(([, r]) => r.required === true).map(([name]) => name);
  return { type: 'object', properties, ...(required.length ? { required } : {}), additionalProperties: false };
}
