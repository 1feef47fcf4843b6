// Typed JSON schemas for the two files an operator writes (the configuration and config/models.json):
// builders that make a plain schema object and the TypeScript type it checks, and a checker that
// names every problem by its JSON pointer. Only the handful of shapes those files use are here.
// Why not a schema library: the one we had loaded 680 modules at start-up, about 0.4 s of CPU for
// every gateway, every `inkgate` command and every test process, for two checks made once.

/** The TypeScript type a schema checks; never present at run time. */
declare const STATIC: unique symbol;

interface Bounds {
  readonly minimum?: number;
  readonly maximum?: number;
}
interface StringBounds {
  readonly minLength?: number;
  readonly maxLength?: number;
  readonly pattern?: string;
}
interface ArrayBounds {
  readonly minItems?: number;
  readonly maxItems?: number;
  readonly uniqueItems?: boolean;
}
interface ObjectOptions {
  /** false: a property the schema does not name is a problem. Named properties only are checked either way. */
  readonly additionalProperties?: boolean;
}

type Node =
  | ({ readonly kind: 'integer' | 'number' } & Bounds)
  | ({ readonly kind: 'string' } & StringBounds)
  | { readonly kind: 'boolean' }
  | { readonly kind: 'null' }
  | { readonly kind: 'literal'; readonly value: string | number | boolean }
  | { readonly kind: 'union'; readonly anyOf: readonly Schema[] }
  | ({ readonly kind: 'array'; readonly items: Schema } & ArrayBounds)
  | ({ readonly kind: 'object'; readonly properties: Readonly<Record<string, Schema>> } & ObjectOptions);

export type Schema<T = unknown> = Node & { readonly optional?: true; readonly [STATIC]?: T };

/** The type of the values `schema` accepts. */
export type Static<S> = S extends { readonly [STATIC]?: infer T } ? T : never;

type OptionalKeys<P> = { [K in keyof P]: P[K] extends { readonly optional: true } ? K : never }[keyof P];
type RequiredKeys<P> = Exclude<keyof P, OptionalKeys<P>>;
type Flat<T> = { [K in keyof T]: T[K] } & {};
type ObjectStatic<P> = Flat<{ [K in RequiredKeys<P>]: Static<P[K]> } & { [K in OptionalKeys<P>]?: Static<P[K]> }>;

const schema = <T>(node: Node): Schema<T> => node as Schema<T>;

export const Type = {
  Integer: (b: Bounds = {}): Schema<number> => schema({ kind: 'integer', ...b }),
  Number: (b: Bounds = {}): Schema<number> => schema({ kind: 'number', ...b }),
  String: (b: StringBounds = {}): Schema<string> => schema({ kind: 'string', ...b }),
  Boolean: (): Schema<boolean> => schema({ kind: 'boolean' }),
  Null: (): Schema<null> => schema({ kind: 'null' }),
  Literal: <const T extends string | number | boolean>(value: T): Schema<T> => schema({ kind: 'literal', value }),
  Union: <S extends readonly Schema[]>(anyOf: [...S]): Schema<Static<S[number]>> => schema({ kind: 'union', anyOf }),
  Array: <S extends Schema>(items: S, b: ArrayBounds = {}): Schema<Static<S>[]> => schema({ kind: 'array', items, ...b }),
  Object: <P extends Record<string, Schema>>(properties: P, o: ObjectOptions = {}): Schema<ObjectStatic<P>> => schema({ kind: 'object', properties, ...o }),
  /** A property that may be left out of its object. */
  Optional: <S extends Schema>(s: S): S & { readonly optional: true } => ({ ...s, optional: true }) as S & { readonly optional: true },
};

export interface Problem {
  /** JSON pointer to the value at fault ('' for the whole document). */
  readonly instancePath: string;
  readonly message: string;
}

/** Problems past this many are not listed (a wrong file can have thousands). */
const MAX_PROBLEMS = 200;

const pointer = (path: string, key: string | number): string => `${path}/${String(key).replaceAll('~', '~0').replaceAll('/', '~1')}`;
const isPlainObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function checkBounds(s: Bounds, v: number, path: string, out: Problem[]): void {
  if (s.minimum !== undefined && v < s.minimum) out.push({ instancePath: path, message: `must be >= ${s.minimum}` });
  if (s.maximum !== undefined && v > s.maximum) out.push({ instancePath: path, message: `must be <= ${s.maximum}` });
}

function checkString(s: StringBounds, v: string, path: string, out: Problem[]): void {
  const length = [...v].length;
  if (s.minLength !== undefined && length < s.minLength) out.push({ instancePath: path, message: `must NOT have fewer than ${s.minLength} characters` });
  if (s.maxLength !== undefined && length > s.maxLength) out.push({ instancePath: path, message: `must NOT have more than ${s.maxLength} characters` });
  if (s.pattern !== undefined && !new RegExp(s.pattern).test(v)) out.push({ instancePath: path, message: `must match pattern "${s.pattern}"` });
}

function checkArray(s: Extract<Node, { kind: 'array' }>, v: unknown[], path: string, out: Problem[]): void {
  if (s.minItems !== undefined && v.length < s.minItems) out.push({ instancePath: path, message: `must NOT have fewer than ${s.minItems} items` });
  if (s.maxItems !== undefined && v.length > s.maxItems) out.push({ instancePath: path, message: `must NOT have more than ${s.maxItems} items` });
  if (s.uniqueItems && new Set(v.map((x) => JSON.stringify(x))).size !== v.length) out.push({ instancePath: path, message: 'must NOT have duplicate items' });
  for (let i = 0; i < v.length; i++) walk(s.items, v[i], pointer(path, i), out);
}

function checkObject(s: Extract<Node, { kind: 'object' }>, v: Record<string, unknown>, path: string, out: Problem[]): void {
  for (const [key, prop] of Object.entries(s.properties)) {
    if (v[key] === undefined) {
      if (!prop.optional) out.push({ instancePath: path, message: `must have required property '${key}'` });
    } else walk(prop, v[key], pointer(path, key), out);
  }
  if (s.additionalProperties === false) {
    for (const key of Object.keys(v))
      if (!(key in s.properties)) out.push({ instancePath: pointer(path, key), message: 'must NOT be here (unknown property)' });
  }
}

function walk(s: Schema, v: unknown, path: string, out: Problem[]): void {
  if (out.length >= MAX_PROBLEMS) return;
  switch (s.kind) {
    case 'integer':
    case 'number':
      if (typeof v !== 'number' || !Number.isFinite(v) || (s.kind === 'integer' && !Number.isInteger(v)))
        out.push({ instancePath: path, message: `must be ${s.kind}` });
      else checkBounds(s, v, path, out);
      return;
    case 'string':
      if (typeof v !== 'string') out.push({ instancePath: path, message: 'must be string' });
      else checkString(s, v, path, out);
      return;
    case 'boolean':
    case 'null':
      if (s.kind === 'null' ? v !== null : typeof v !== 'boolean') out.push({ instancePath: path, message: `must be ${s.kind}` });
      return;
    case 'literal':
      if (v !== s.value) out.push({ instancePath: path, message: `must be ${JSON.stringify(s.value)}` });
      return;
    case 'union':
      if (!s.anyOf.some((alt) => problemsOf(alt, v).length === 0))
        out.push({ instancePath: path, message: `must be one of: ${s.anyOf.map(describe).join(', ')}` });
      return;
    case 'array':
      if (!Array.isArray(v)) out.push({ instancePath: path, message: 'must be array' });
      else checkArray(s, v, path, out);
      return;
    case 'object':
      if (!isPlainObject(v)) out.push({ instancePath: path, message: 'must be object' });
      else checkObject(s, v, path, out);
  }
}

/** A few words for a union's alternative in a message. */
function describe(s: Schema): string {
  return s.kind === 'literal' ? JSON.stringify(s.value) : s.kind;
}

function problemsOf(s: Schema, v: unknown): Problem[] {
  const out: Problem[] = [];
  walk(s, v, '', out);
  return out;
}

export interface Checker<T> {
  /** True when `value` is what the schema describes. */
  Check(value: unknown): value is T;
  /** Every problem with `value` (at most 200), each at its JSON pointer. */
  Errors(value: unknown): Problem[];
}

/** A checker for `s` (the name kept from the library it replaces). */
export function Compile<S extends Schema>(s: S): Checker<Static<S>> {
  return {
    Check: (value): value is Static<S> => problemsOf(s, value).length === 0,
    Errors: (value) => problemsOf(s, value),
  };
}
