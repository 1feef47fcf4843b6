// The media host: answers GET (and HEAD) /media/<key>?exp=..&n=..&sig=.. (spec: signed links are authenticated by
// their signature alone, no API key). Transport-free: it returns what to send, and
// writeMediaResponse streams it into any sink with backpressure (the server adapts uWS to MediaSink).
import type { Readable } from 'node:stream';
import { ERRORS } from '../errors.js';
import type { MediaStore } from './media-store.js';
import { isValidMediaKey } from './media-store.js';
import { MEDIA_PATH_PREFIX, verifyMediaLink } from './signed-link.js';

export interface MediaRequest {
  /** The request path exactly as received, without the query. */
  readonly path: string;
  /** The raw query string, without '?'. */
  readonly query: string;
  readonly requestId?: string;
}

export type Headers = ReadonlyArray<readonly [string, string]>;

export interface MediaErrorBody {
  error: { type: string; code: string; message: string; request_id?: string };
}

export type MediaResponse =
  | { status: 200; contentType: string; sizeBytes: number; stream: Readable; headers: Headers }
  | { status: 403 | 404 | 410; body: MediaErrorBody; headers: Headers };

type MediaErrorCode = 'invalid_signature' | 'link_expired' | 'not_found';
const NOT_FOUND_MESSAGE = 'There is no media at this link.';

const MAX_QUERY_CHARS = 512;
// Signed links are short-lived and private: never cached by shared caches, never sniffed.
const COMMON_HEADERS: Headers = [
  ['cache-control', 'private, no-store'],
  ['x-content-type-options', 'nosniff'],
];

function fail(code: MediaErrorCode, requestId: string | undefined): MediaResponse {
  const e = ERRORS[code];
  const body: MediaErrorBody = { error: { type: e.type, code, message: code === 'not_found' ? NOT_FOUND_MESSAGE : e.message } };
  if (requestId !== undefined) body.error.request_id = requestId;
  return { status: e.status as 403 | 404, body, headers: [...COMMON_HEADERS, ['content-type', 'application/json']] };
}

/** Exactly one value for `name`, or undefined (missing or repeated). */
function single(params: URLSearchParams, name: string): string | undefined {
  const all = params.getAll(name);
  return all.length === 1 ? all[0] : undefined;
}

/**
 * Signature first (nothing about the store is revealed to an unsigned request), then expiry, then
 * the store. Tampered or unsigned → 403 invalid_signature; expired → 403 link_expired; no object
 * → 404 not_found (the caller may map retention-deleted keys to 410 itself).
 */
export async function handleMediaRequest(req: MediaRequest, store: MediaStore, secret: Buffer, nowS: number): Promise<MediaResponse> {
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
  if (!isValidMediaKey(key)) return fail('not_found', req.requestId);
  const obj = await store.open(key);
  if (obj === undefined) return fail('not_found', req.requestId);
  return {
    status: 200,
    contentType: obj.contentType,
    sizeBytes: obj.sizeBytes,
    stream: obj.stream,
    headers: [...COMMON_HEADERS, ['content-type', obj.contentType], ['content-length', String(obj.sizeBytes)]],
  };
}

/** What writeMediaResponse needs from a transport (uWS: cork/writeStatus/writeHeader/write/onWritable/end). */
export interface MediaSink {
  /** Status and headers; called once, before any body. */
  head(status: number, headers: Headers): void;
  /** Returns false when the transport is full; `drained` is then awaited before the next chunk. */
  write(chunk: Buffer): boolean;
  /** Resolves when writable again, and also when the client goes away (never hangs). */
  drained(): Promise<void>;
  end(body?: string): void;
  /** Ends a HEAD answer: status, headers and the size of the body a GET would send, no body. */
  endHead(status: number, headers: Headers, sizeBytes: number): void;
  /** True for HEAD: the answer is sent without its body. */
  readonly headOnly: boolean;
  /** True once the client went away. */
  readonly aborted: boolean;
}

/** Sends a MediaResponse: JSON for errors, the stream with backpressure for 200. */
export async function writeMediaResponse(r: MediaResponse, sink: MediaSink): Promise<void> {
  if (r.status !== 200) {
    const body = JSON.stringify(r.body);
    if (sink.headOnly) return sink.endHead(r.status, r.headers, Buffer.byteLength(body));
    sink.head(r.status, r.headers);
    sink.end(body);
    return;
  }
  if (sink.headOnly) {
    r.stream.destroy();
    sink.endHead(200, r.headers, r.sizeBytes);
    return;
  }
  sink.head(200, r.headers);
  try {
    for await (const chunk of r.stream as AsyncIterable<Buffer>) {
      if (sink.aborted) return;
      if (!sink.write(chunk)) await sink.drained();
    }
    if (!sink.aborted) sink.end();
  } finally {
    r.stream.destroy();
  }
}
