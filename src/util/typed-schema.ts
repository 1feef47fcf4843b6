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

function checkBounds(bounds: Bounds, value: number, path: string, out: Problem[]): void {
  if (bounds.minimum !== undefined && value < bounds.minimum) out.push({ instancePath: path, message: `must be >= ${bounds.minimum}` });
  if (bounds.maximum !== undefined && value > bounds.maximum) out.push({ instancePath: path, message: `must be <= ${bounds.maximum}` });
}

function checkString(bounds: StringBounds, value: string, path: string, out: Problem[]): void {
  const length = [...value].length;
  if (bounds.minLength !== undefined && length < bounds.minLength)
    out.push({ instancePath: path, message: `must NOT have fewer than ${bounds.minLength} characters` });
  if (bounds.maxLength !== undefined && length > bounds.maxLength)
    out.push({ instancePath: path, message: `must NOT have more than ${bounds.maxLength} characters` });
  if (bounds.pattern !== undefined && !new RegExp(bounds.pattern).test(value))
    out.push({ instancePath: path, message: `must match pattern "${bounds.pattern}"` });
}

function checkArray(node: Extract<Node, { kind: 'array' }>, value: unknown[], path: string, out: Problem[]): void {
  if (node.minItems !== undefined && value.length < node.minItems) out.push({ instancePath: path, message: `must NOT have fewer than ${node.minItems} items` });
  if (node.maxItems !== undefined && value.length > node.maxItems) out.push({ instancePath: path, message: `must NOT have more than ${node.maxItems} items` });
  if (node.uniqueItems && new Set(value.map((x) => JSON.stringify(x))).size !== value.length)
    out.push({ instancePath: path, message: 'must NOT have duplicate items' });
  for (let i = 0; i < value.length; i++) walk(node.items, value[i], pointer(path, i), out);
}

function checkObject(node: Extract<Node, { kind: 'object' }>, value: Record<string, unknown>, path: string, out: Problem[]): void {
  for (const [key, prop] of Object.entries(node.properties)) {
    if (value[key] === undefined) {
      if (!prop.optional) out.push({ instancePath: path, message: `must have required property '${key}'` });
    } else walk(prop, value[key], pointer(path, key), out);
  }
  if (node.additionalProperties === false) {
    for (const key of Object.keys(value))
      if (!(key in node.properties)) out.push({ instancePath: pointer(path, key), message: 'must NOT be here (unknown property)' });
  }
}

function walk(node: Schema, value: unknown, path: string, out: Problem[]): void {
  if (out.length >= MAX_PROBLEMS) return;
  switch (node.kind) {
    case 'integer':
    case 'number':
      if (typeof value !== 'number' || !Number.isFinite(value) || (node.kind === 'integer' && !Number.isInteger(value)))
        out.push({ instancePath: path, message: `must be ${node.kind}` });
      else checkBounds(node, value, path, out);
      return;
    case 'string':
      if (typeof value !== 'string') out.push({ instancePath: path, message: 'must be string' });
      else checkString(node, value, path, out);
      return;
    case 'boolean':
    case 'null':
      if (node.kind === 'null' ? value !== null : typeof value !== 'boolean') out.push({ instancePath: path, message: `must be ${node.kind}` });
      return;
    case 'literal':
      if (value !== node.value) out.push({ instancePath: path, message: `must be ${JSON.stringify(node.value)}` });
      return;
    case 'union':
      if (!node.anyOf.some((alt) => problemsOf(alt, value).length === 0))
        out.push({ instancePath: path, message: `must be one of: ${node.anyOf.map(describe).join(', ')}` });
      return;
    case 'array':
      if (!Array.isArray(value)) out.push({ instancePath: path, message: 'must be array' });
      else checkArray(node, value, path, out);
      return;
    case 'object':
      if (!isPlainObject(value)) out.push({ instancePath: path, message: 'must be object' });
      else checkObject(node, value, path, out);
  }
}

/** A few words for a union's alternative in a message. */
function describe(alternative: Schema): string {
  return alternative.kind === 'literal' ? JSON.stringify(alternative.value) : alternative.kind;
}

function problemsOf(node: Schema, value: unknown): Problem[] {
  const out: Problem[] = [];
  walk(node, value, '', out);
  return out;
}

export interface Checker<T> {
  /** True when `value` is what the schema describes. */
  Check(value: unknown): value is T;
  /** Every problem with `value` (at most 200), each at its JSON pointer. */
  Errors(value: unknown): Problem[];
}

/** A checker for `root` (the name kept from the library it replaces). */
export function Compile<S extends Schema>(root: S): Checker<Static<S>> {
  return {
    Check: (value): value is Static<S> => problemsOf(root, value).length === 0,
    Errors: (value) => problemsOf(root, value),
  };
}
