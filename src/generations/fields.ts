// The request fields every generation product validates the same way: the model, unknown fields,
// prompt, seed, metadata, and https URLs (single or in a list). Pure: no I/O (whether each URL can be
// fetched is checked later, by url-check.ts). Each product's validate.ts keeps only its own fields
// and the order of its checks.
import { ApiError, type ErrorCode } from '../errors.js';
import { checkFetchUrl, MAX_URL_CHARS, parseClientUrl } from '../net/ssrf-guard.js';

export const MAX_METADATA_BYTES = 4096;
export const MIN_SEED = -1;
export const MAX_SEED = 2_147_483_647;

export interface CheckedUrl {
  /** The field, with its index for list elements (`reference_image_urls[2]`). */
  readonly param: string;
  readonly url: URL;
}

export interface ValidateOptions {
  /** TEST ONLY: "host:port" pairs exempt from the public-host rule (as safeFetch's allowList). */
  readonly allowList?: ReadonlySet<string>;
}

export const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
export const bad = (code: ErrorCode, param: string, message: string): ApiError => new ApiError(code, { param, message });

/** Characters as the user sees them: code points, not UTF-16 units. */
export function charCount(s: string, stopAbove: number): number {
  if (s.length <= stopAbove) return s.length; // code points <= UTF-16 units
  let n = 0;
  for (const _ of s) if (++n > stopAbove) return n;
  return n;
}

/** `null` is the same as leaving an optional field out. */
export const givenIn =
  (body: Record<string, unknown>) =>
  (k: string): unknown =>
    body[k] === null ? undefined : body[k];

/**
 * The catalogue entry named by `model`, or 400 unknown_model. `name`: "video model"; `pick`: what
 * to send instead ("one of the video model ids").
 */
export function requireModel<M extends { readonly listed: boolean }>(raw: unknown, lookup: (id: string) => M | undefined, name: string, pick: string): M {
  const model = typeof raw === 'string' ? lookup(raw) : undefined;
  if (model !== undefined && model.listed) return model;
  throw bad('unknown_model', 'model', typeof raw === 'string'
    ? `Unknown ${name} ${JSON.stringify(raw.slice(0, 100))}; use ${pick} of GET /v1/models.`
    : `\`model\` is required: ${pick} of GET /v1/models.`);
}

/** 400 unsupported_parameter for the first field (in body order) outside `known`. */
export function refuseUnknownFields(body: Record<string, unknown>, known: ReadonlySet<string>, message: (field: string) => string): void {
  for (const k of Object.keys(body)) if (!known.has(k)) throw bad('unsupported_parameter', k, message(k));
}

/** An optional prompt: a string of at most `maxChars` characters. */
export function parsePrompt(v: unknown, maxChars: number): string | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'string') throw bad('invalid_type', 'prompt', '`prompt` must be a string.');
  if (charCount(v, maxChars) > maxChars) throw bad('too_long', 'prompt', `\`prompt\` is longer than ${maxChars} characters.`);
  return v;
}

/** An optional seed: an integer from -1 (random) to 2^31 - 1. */
export function parseSeed(v: unknown): number | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < MIN_SEED || v > MAX_SEED) {
    throw bad('invalid_seed', 'seed', `\`seed\` must be an integer from ${MIN_SEED} to ${MAX_SEED}.`);
  }
  return v;
}

/** Optional metadata: a JSON object of at most 4 KiB, stored and echoed. */
export function parseMetadata(v: unknown): Record<string, unknown> | undefined {
  if (v === undefined) return undefined;
  if (!isObject(v)) throw bad('invalid_type', 'metadata', '`metadata` must be a JSON object.');
  if (Buffer.byteLength(JSON.stringify(v)) > MAX_METADATA_BYTES) throw bad('too_long', 'metadata', `\`metadata\` is larger than ${MAX_METADATA_BYTES} bytes of JSON.`);
  return v;
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
 * An optional list of URLs of at most `cap` (`capMessage` says whose cap): each element parsed,
 * pushed onto `urls` (to be fetched before admission), and returned normalised. An empty list is
 * the same as none (undefined).
 */
export function parseUrlList(v: unknown, field: string, cap: number, capOwner: string, allowList: ReadonlySet<string> | undefined, urls: CheckedUrl[]): string[] | undefined {
  if (v === undefined) return undefined;
  if (!Array.isArray(v)) throw bad('invalid_type', field, `\`${field}\` must be an array of https URLs.`);
  if (v.length > cap) throw bad('too_many', field, `\`${field}\` holds ${v.length} URLs; ${capOwner} accepts at most ${cap}.`);
  if (v.length === 0) return undefined;
  return v.map((raw: unknown, i) => {
    const param = `${field}[${i}]`;
    const u = parseUrlField(raw, param, allowList);
    urls.push({ param, url: u });
    return u.href;
  });
}
