// The request fields every generation product validates the same way: the model, unknown fields,
// prompt, seed, metadata, and https URLs (single or in a list). Pure: no I/O (whether each URL can be
// fetched is checked later, by url-check.ts). Each product's validate.ts keeps only its own fields
// and the order of its checks.
import type { CatalogModel } from '../catalog/models.js';
import { checkFetchUrl, MAX_URL_CHARS, parseClientUrl } from '../net/ssrf-guard.js';
import { bad, checkField, type FieldRule } from '../util/request-fields.js';

export { bad } from '../util/request-fields.js';

/** Shared by the products' field tables (request-fields.ts). */
export const MAX_METADATA_BYTES = 4096;
export const MIN_SEED = -1;
export const MAX_SEED = 2_147_483_647;

export interface CheckedUrl {
  /** The field, with its index for list elements (`reference_image_urls[2]`). */
  readonly param: string;
  readonly url: URL;
}

/** A submit body as the product's validation accepted it. */
export interface Validated<R, M extends CatalogModel = CatalogModel> {
  readonly request: R;
  readonly model: M;
  /** Every URL of the request, in field order: each is fetched once before admission. */
  readonly urls: readonly CheckedUrl[];
}

export interface ValidateOptions {
  /** TEST ONLY: "host:port" pairs exempt from the public-host rule (as safeFetch's allowList). */
  readonly allowList?: ReadonlySet<string>;
}

/** `null` is the same as leaving an optional field out. */
export const givenIn =
  (body: Record<string, unknown>) =>
  (field: string): unknown =>
    body[field] === null ? undefined : body[field];

/**
 * The catalogue entry named by `model`, or 400 unknown_model. `name`: "video model"; `pick`: what
 * to send instead ("one of the video model ids").
 */
export function requireModel<M extends { readonly listed: boolean }>(raw: unknown, lookup: (id: string) => M | undefined, name: string, pick: string): M {
  const model = typeof raw === 'string' ? lookup(raw) : undefined;
  if (model?.listed) return model;
  throw bad(
    'unknown_model',
    'model',
    typeof raw === 'string'
      ? `Unknown ${name} ${JSON.stringify(raw.slice(0, 100))}; use ${pick} of GET /v1/models.`
      : `\`model\` is required: ${pick} of GET /v1/models.`,
  );
}

/** 400 unsupported_parameter for the first field (in body order) outside `known`. */
export function refuseUnknownFields(body: Record<string, unknown>, known: ReadonlySet<string>, message: (field: string) => string): void {
  for (const k of Object.keys(body)) if (!known.has(k)) throw bad('unsupported_parameter', k, message(k));
}

/** An optional prompt, checked against its row (type, length in characters). */
export function parsePrompt(value: unknown, rule: FieldRule): string | undefined {
  if (value === undefined) return undefined;
  checkField('prompt', rule, value);
  return value as string;
}

/**
 * An optional field whose values are the chosen model's own list: checked against its row, then
 * against `offered` (the row's code answers either way, naming the model's list).
 */
export function parseModelChoice<T extends string>(value: unknown, field: string, rule: FieldRule, offered: readonly T[]): T | undefined {
  if (value === undefined) return undefined;
  const onlyModel = () => `\`${field}\` must be one of ${offered.join(', ')}.`;
  checkField(field, rule, value, onlyModel);
  if (!offered.includes(value as T)) throw bad(rule.code ?? 'invalid_enum', field, onlyModel());
  return value as T;
}

/** An optional seed: an integer inside its row's bounds (-1 asks for a random one). */
export function parseSeed(value: unknown, rule: FieldRule): number | undefined {
  if (value === undefined) return undefined;
  checkField('seed', rule, value, () => `\`seed\` must be an integer from ${rule.minimum} to ${rule.maximum}.`);
  return value as number;
}

/** Optional metadata: a JSON object no larger than its row allows, stored and echoed. */
export function parseMetadata(value: unknown, rule: FieldRule): Record<string, unknown> | undefined {
  if (value === undefined) return undefined;
  checkField('metadata', rule, value);
  return value as Record<string, unknown>;
}

/**
 * A client URL: https, no credentials, <= 2,048 characters, public host (unless allow-listed for
 * tests). `param` names the field, with the index for a list element (`reference_image_urls[2]`),
 * so a client learns which URL was refused whatever the code.
 */
export function parseUrlField(raw: unknown, param: string, allowList: ReadonlySet<string> | undefined): URL {
  if (typeof raw !== 'string') throw bad('invalid_type', param, `\`${param}\` must be a string (an https URL).`);
  if (raw.length > MAX_URL_CHARS) throw bad('too_long', param, `\`${param}\` is longer than ${MAX_URL_CHARS} characters.`);
  const listed = allowList !== undefined && allowList.size > 0 ? allowListed(raw, allowList) : undefined;
  if (listed === undefined) return parseClientUrl(raw, param);
  const authority = raw.slice(raw.indexOf('//') + 2).split(/[/\\?#]/, 1)[0] ?? '';
  if (authority.includes('@')) throw bad('invalid_url', param, `\`${param}\`: the URL must not carry credentials`);
  checkFetchUrl(listed, param, true);
  return listed;
}

/** The URL when its host:port is on the test allow-list. */
function allowListed(raw: string, allowList: ReadonlySet<string>): URL | undefined {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    return undefined;
  }
  const host = u.hostname.startsWith('[') ? u.hostname.slice(1, -1) : u.hostname;
  return allowList.has(`${host}:${u.port === '' ? 443 : u.port}`) ? u : undefined;
}

/**
 * An optional list of URLs, checked against its row, of at most `cap` (the model's; the row's
 * maxItems bounds it too; `capOwner` names whose cap): each element parsed, pushed onto `urls` (to
 * be fetched before admission), and returned normalised. An empty list is the same as none.
 */
export function parseUrlList(
  value: unknown,
  field: string,
  rule: FieldRule,
  cap: number,
  capOwner: string,
  allowList: ReadonlySet<string> | undefined,
  urls: CheckedUrl[],
): string[] | undefined {
  if (value === undefined) return undefined;
  checkField(field, rule, value);
  const list = value as unknown[];
  const most = Math.min(cap, rule.maxItems ?? cap);
  if (list.length > most) throw bad('too_many', field, `\`${field}\` holds ${list.length} URLs; ${capOwner} accepts at most ${most}.`);
  if (list.length === 0) return undefined;
  return list.map((raw: unknown, index) => {
    const param = `${field}[${index}]`;
    const u = parseUrlField(raw, param, allowList);
    urls.push({ param, url: u });
    return u.href;
  });
}
