// The media host: answers GET (and HEAD) /media/<key>?exp=..&n=..&sig=.. (docs/api/media.md: signed links are
// authenticated by their signature alone, no API key). Transport-free: it returns what to send, and
// writeMediaResponse streams it into any sink with backpressure (the server adapts uWS to MediaSink).
import type { Readable } from 'node:stream';
import { ERRORS } from '../errors.js';
import { parseRange, type RangeSpec } from './byte-range.js';
import type { MediaObject, MediaStore } from './media-store.js';
import { isValidMediaKey } from './media-store.js';
import { MEDIA_PATH_PREFIX, verifyMediaLink } from './signed-link.js';

export interface MediaRequest {
  /** The request path exactly as received, without the query. */
  readonly path: string;
  /** The raw query string, without '?'. */
  readonly query: string;
  readonly requestId?: string;
  /** HEAD: the answer a GET would get, without its body (Range is not applied). */
  readonly headOnly?: boolean;
  /** The request's Range, If-Range and If-None-Match headers, as received. */
  readonly range?: string | undefined;
  readonly ifRange?: string | undefined;
  readonly ifNoneMatch?: string | undefined;
}

export type Headers = ReadonlyArray<readonly [string, string]>;

export interface MediaErrorBody {
  error: { type: string; code: string; message: string; request_id?: string };
}

export type MediaResponse =
  /** `sizeBytes`: the body's length (the range's, for 206). */
  | { status: 200 | 206; sizeBytes: number; stream: Readable; headers: Headers }
  /** Not modified: no body; `sizeBytes` is what a 200 would have carried. */
  | { status: 304; sizeBytes: number; headers: Headers }
  /** The store serves it: a presigned URL in `location`, no body. */
  | { status: 302; headers: Headers }
  | { status: 403 | 404 | 410 | 416; body: MediaErrorBody; headers: Headers };

type MediaErrorCode = 'invalid_signature' | 'link_expired' | 'not_found' | 'range_not_satisfiable';
const NOT_FOUND_MESSAGE = 'There is no media at this link.';

const MAX_QUERY_CHARS = 512;
// Signed links are short-lived and private: never cached by shared caches, never sniffed.
const COMMON_HEADERS: Headers = [
  ['cache-control', 'private, no-store'],
  ['x-content-type-options', 'nosniff'],
];
const ACCEPT_RANGES: readonly [string, string] = ['accept-ranges', 'bytes'];
/** What HEAD reads of the object: one byte (none of an empty one), for its size, type and ETag. */
const HEAD_PROBE: RangeSpec = { start: 0, end: 0 };

function fail(code: MediaErrorCode, requestId: string | undefined, more: Headers = []): MediaResponse {
  const e = ERRORS[code];
  const body: MediaErrorBody = { error: { type: e.type, code, message: code === 'not_found' ? NOT_FOUND_MESSAGE : e.message } };
  if (requestId !== undefined) body.error.request_id = requestId;
  return { status: e.status as 403 | 404 | 416, body, headers: [...COMMON_HEADERS, ['content-type', 'application/json'], ...more] };
}

/** Exactly one value for `name`, or undefined (missing or repeated). */
function single(params: URLSearchParams, name: string): string | undefined {
  const all = params.getAll(name);
  return all.length === 1 ? all[0] : undefined;
}

/** The key a signed request names and its link's expiry, or the refusal to answer with (signature first, then expiry, then the key's form). */
function authorise(req: MediaRequest, secret: Buffer, nowS: number): { key: string; expS: number } | MediaResponse {
  if (req.query.length > MAX_QUERY_CHARS) return fail('invalid_signature', req.requestId);
  const params = new URLSearchParams(req.query);
  const exp = single(params, 'exp');
  const sig = single(params, 'sig');
  const nonces = params.getAll('n');
  if (exp === undefined || sig === undefined || nonces.length > 1) return fail('invalid_signature', req.requestId);
  const verdict = verifyMediaLink(secret, req.path, exp, sig, nowS, nonces[0] ?? '');
  if (verdict === 'bad_signature') return fail('invalid_signature', req.requestId);
  if (verdict === 'expired') return fail('link_expired', req.requestId);
  if (!req.path.startsWith(MEDIA_PATH_PREFIX)) return fail('not_found', req.requestId);
  const key = req.path.slice(MEDIA_PATH_PREFIX.length);
  return isValidMediaKey(key) ? { key, expS: Number(exp) } : fail('not_found', req.requestId);
}

/** A 302 to the store's own presigned URL, valid no longer than the link it replaces. */
async function redirect(req: MediaRequest, presign: NonNullable<MediaStore['presignedGet']>, key: string, expS: number, nowS: number): Promise<MediaResponse> {
  const url = await presign(key, expS - nowS, contentDisposition(key));
  if (url === undefined) return fail('not_found', req.requestId);
  return { status: 302, headers: [...COMMON_HEADERS, ['location', url]] };
}

/**
 * Signature first (nothing about the store is revealed to an unsigned request), then expiry, then
 * the store. Tampered or unsigned → 403 invalid_signature; expired → 403 link_expired; no object
 * → 404 not_found (the caller may map retention-deleted keys to 410 itself). Then the conditions
 * (RFC 9110 13.2.2 order): If-None-Match naming the ETag → 304; a single satisfiable Range → 206
 * unless If-Range names another validator (→ 200 whole); an unsatisfiable one → 416. A store that
 * redirects (S3 presigned GETs) gets a 302 instead, and answers ranges and conditions itself.
 */
export async function handleMediaRequest(req: MediaRequest, store: MediaStore, secret: Buffer, nowS: number): Promise<MediaResponse> {
  const auth = authorise(req, secret, nowS);
  if ('status' in auth) return auth;
  const key = auth.key;
  if (store.presignedGet !== undefined) return redirect(req, store.presignedGet.bind(store), key, auth.expS, nowS);
  const spec = req.headOnly === true ? HEAD_PROBE : parseRange(req.range);
  let obj = await store.open(key, spec);
  if (obj === undefined) return fail('not_found', req.requestId);
  const validators = (o: MediaObject): Headers => [...COMMON_HEADERS, ACCEPT_RANGES, ['etag', o.etag], ['content-disposition', contentDisposition(key)]];
  if (req.ifNoneMatch !== undefined && etagListMatches(req.ifNoneMatch, obj.etag)) {
    obj.stream.destroy();
    return { status: 304, sizeBytes: obj.sizeBytes, headers: validators(obj) };
  }
  // A stale If-Range (another ETag, a weak one, or a date: we send no Last-Modified) asks for the whole object.
  if (req.headOnly !== true && obj.range !== undefined && req.ifRange !== undefined && !strongMatch(req.ifRange, obj.etag)) {
    obj.stream.destroy();
    obj = await store.open(key);
    if (obj === undefined) return fail('not_found', req.requestId);
  }
  const whole: Headers = [...validators(obj), ['content-type', obj.contentType]];
  if (req.headOnly === true || obj.range === undefined) {
    if (req.headOnly === true) obj.stream.destroy();
    return { status: 200, sizeBytes: obj.sizeBytes, stream: obj.stream, headers: [...whole, ['content-length', String(obj.sizeBytes)]] };
  }
  if (obj.range === 'unsatisfiable') {
    obj.stream.destroy();
    return fail('range_not_satisfiable', req.requestId, [ACCEPT_RANGES, ['content-range', `bytes */${obj.sizeBytes}`]]);
  }
  const { start, end } = obj.range;
  const length = end - start + 1;
  return {
    status: 206,
    sizeBytes: length,
    stream: obj.stream,
    headers: [...whole, ['content-range', `bytes ${start}-${end}/${obj.sizeBytes}`], ['content-length', String(length)]],
  };
}

/** `inline` (a player or an <img> shows it), named after the key's last segment, which isValidMediaKey keeps to [a-z0-9_.-]. */
function contentDisposition(key: string): string {
  return `inline; filename="${key.slice(key.lastIndexOf('/') + 1)}"`;
}

const MAX_CONDITION_CHARS = 2048;

/** If-None-Match: `*`, or a list of entity tags compared weakly (RFC 9110 13.1.2). */
export function etagListMatches(header: string, etag: string): boolean {
  if (header.length > MAX_CONDITION_CHARS) return false;
  const v = header.trim();
  if (v === '*') return true;
  const opaque = etag.startsWith('W/') ? etag.slice(2) : etag;
  return v.split(',').some((rawTag) => {
    const tag = rawTag.trim();
    return (tag.startsWith('W/') ? tag.slice(2) : tag) === opaque;
  });
}

/** If-Range: only the same strong entity tag counts (RFC 9110 13.1.5). */
export function strongMatch(header: string, etag: string): boolean {
  const v = header.trim();
  return !v.startsWith('W/') && !etag.startsWith('W/') && v === etag;
}

/** What writeMediaResponse needs from a transport (the server adapts its HttpContext to it). */
export interface MediaSink {
  /** Status and headers of a body of exactly `sizeBytes`, sent as its Content-Length; called once, before any body. */
  head(status: number, headers: Headers, sizeBytes: number): void;
  /** Returns false when the transport is full; `drained` is then awaited before the next chunk. */
  write(chunk: Buffer): boolean;
  /** Resolves when writable again, and also when the client goes away (never hangs). */
  drained(): Promise<void>;
  /** Ends a body whose `sizeBytes` were all written. */
  end(): void;
  /** Closes the connection mid-body: the store gave other than the declared bytes, so no clean end is possible. */
  cut(): void;
  /** A complete JSON answer (an error), with its Content-Length; for HEAD the length without the body. */
  json(status: number, headers: Headers, body: string): void;
  /** Ends a HEAD answer: status, headers and the size of the body a GET would send, no body. */
  endHead(status: number, headers: Headers, sizeBytes: number): void;
  /** True for HEAD: the answer is sent without its body. */
  readonly headOnly: boolean;
  /** True once the client went away. */
  readonly aborted: boolean;
}

/**
 * Sends a MediaResponse, every one with a fixed length (never chunked): JSON for errors, no body
 * for 302 and 304, the stream with backpressure for 200 and 206, declared by its size. A stream
 * that gives more or fewer bytes than declared is cut, so the client sees the body incomplete.
 */
export async function writeMediaResponse(response: MediaResponse, sink: MediaSink): Promise<void> {
  if (response.status === 304) return sink.endHead(304, response.headers, response.sizeBytes);
  if (response.status === 302) return sink.endHead(302, response.headers, 0);
  if (!('stream' in response)) return sink.json(response.status, response.headers, JSON.stringify(response.body));
  if (sink.headOnly) {
    response.stream.destroy();
    sink.endHead(response.status, response.headers, response.sizeBytes);
    return;
  }
  sink.head(response.status, response.headers, response.sizeBytes);
  let sentBytes = 0;
  try {
    for await (const chunk of response.stream as AsyncIterable<Buffer>) {
      if (sink.aborted) return;
      sentBytes += chunk.length;
      if (sentBytes > response.sizeBytes) break;
      if (!sink.write(chunk)) await sink.drained();
    }
    if (sink.aborted) return;
    if (sentBytes === response.sizeBytes) sink.end();
    else sink.cut();
  } finally {
    response.stream.destroy();
  }
}
