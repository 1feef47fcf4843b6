// One HTTP exchange on uWS: the request snapshot (uWS only lets us read the request synchronously),
// the body collector with its cap, and the response writers (JSON, error envelope, SSE stream).
import { randomUUID } from 'node:crypto';
import { ApiError } from '../errors.js';
import type { HttpRequest, HttpResponse } from './uws.js';

const STATUS_LINES: Record<number, string> = {
  200: '200 OK', 201: '201 Created', 202: '202 Accepted', 204: '204 No Content', 302: '302 Found',
  400: '400 Bad Request', 401: '401 Unauthorized', 402: '402 Payment Required', 403: '403 Forbidden',
  404: '404 Not Found', 409: '409 Conflict', 410: '410 Gone',
  413: '413 Payload Too Large', 415: '415 Unsupported Media Type', 422: '422 Unprocessable Entity',
  429: '429 Too Many Requests', 500: '500 Internal Server Error', 502: '502 Bad Gateway',
  503: '503 Service Unavailable', 504: '504 Gateway Timeout',
};
export const statusLine = (s: number): string => STATUS_LINES[s] ?? `${s} Status`;

export type HeaderList = ReadonlyArray<readonly [string, string]>;

/** What the authenticated key brings to a handler (filled in by the auth step). */
export interface AuthInfo {
  readonly keyId: string;
  readonly accountId: string;
  readonly keyName: string;
  readonly keyPrefix: string;
  readonly planId: string;
  /** When the key expires (epoch ms), null: never. A remembered key is checked against it before a hold. */
  readonly expiresAtMs: number | null;
}

/**
 * Request ids are `req_` + 32 hex: 12 of milliseconds since 1970, then 20 random (80 bits, from
 * randomUUID's cached entropy pool, so this is cheap). Time first because the id is the primary
 * key of the request record and keys several journal indexes: ids that grow with time land at
 * the right edge of those B-trees instead of on a random page each (measured: a 10+10 batch of
 * reserve and settle 2.95 -> 2.2 ms in Postgres).
 */
export function newRequestId(): string {
  const u = randomUUID();
  return 'req_' + Date.now().toString(16).padStart(12, '0') + u.slice(0, 8) + u.slice(9, 13) + u.slice(15, 18) + u.slice(20, 23) + u.slice(24, 26);
}

const MAX_HEADERS = 100;

/** The Retry-After value an error answer carries (429 and 503 with a wait), in whole seconds; else undefined. */
export function retryAfter(err: ApiError): string | undefined {
  if (err.retryAfterS === undefined || (err.status !== 429 && err.status !== 503)) return undefined;
  return String(Math.max(1, Math.ceil(err.retryAfterS)));
}

/**
 * Why a request's framing cannot be trusted, or undefined. RFC 9112 section 6.3: a repeated or
 * listed Content-Length is an unrecoverable framing error (400 and close), because a proxy in
 * front that read the other value would see a different next request (smuggling). uWS itself
 * takes the first value and hangs on a list; both are refused here, equal values too.
 */
function framingFault(contentLengths: number): string | undefined {
  return contentLengths > 1 ? 'The request carries more than one Content-Length header.' : undefined;
}

/** Placeholder for HttpContext.write's chunk field between writes (keeps no chunk alive). */
const EMPTY_CHUNK = new Uint8Array(0);

export class HttpContext {
  readonly res: HttpResponse;
  readonly method: string;
  readonly path: string;
  readonly query: string;
  readonly headers: Record<string, string>;
  readonly requestId: string;
  readonly remoteAddress: string;
  params: string[] = [];
  /** The route's extra name for X-Request-Id (Route.requestIdHeader), set once the route is known. */
  requestIdHeader: string | undefined;
  auth: AuthInfo | undefined;
  /**
   * The key was found live by a statement of this request itself (the text lanes' reserve), so an
   * error after this point is not a revoked key's: the server skips its fresh look-up.
   */
  keyConfirmed = false;
  aborted = false;
  responded = false;
  /** A route took the request (the server counts it when its handler ends, not at once). */
  admitted = false;
  /** Status sent, for logs and tests. */
  status = 0;
  /** Set when the request's framing cannot be trusted (see framingFault): answered 400 and closed. */
  readonly framingError: string | undefined;
  /** uWS stopped reading this connection (holdReading) until our answer starts. */
  private readingHeld = false;
  private abortHandlers: Array<() => void> = [];
  private body: BodyCollector | undefined;

  constructor(res: HttpResponse, req: HttpRequest) {
    this.res = res;
    // uWS hands out the request only during this synchronous call: copy what we need now.
    this.method = req.getCaseSensitiveMethod();
    this.path = req.getUrl();
    this.query = req.getQuery() ?? '';
    const headers: Record<string, string> = Object.create(null) as Record<string, string>;
    let n = 0;
    let contentLengths = 0;
    req.forEach((k, v) => {
      if (k === 'content-length') contentLengths += v.includes(',') ? 2 : 1;
      if (++n > MAX_HEADERS) return;
      // uWS lowercases names; a repeated header keeps its first value (no list-merging tricks).
      if (headers[k] === undefined) headers[k] = v;
    });
    this.headers = headers;
    this.framingError = framingFault(contentLengths);
    this.requestId = newRequestId();
    this.remoteAddress = Buffer.from(res.getRemoteAddressAsText()).toString();
    res.onAborted(() => {
      this.aborted = true;
      this.body?.fail(new ApiError('invalid_body', { message: 'The client went away.' }));
      for (const h of this.abortHandlers) h();
    });
  }

  header(name: string): string | undefined {
    return this.headers[name];
  }

  /** The PROXY protocol v2 header's source address, '' when the connection sent none (ops/client-address.ts). */
  proxiedAddress(): string {
    return this.aborted ? '' : Buffer.from(this.res.getProxiedRemoteAddressAsText()).toString();
  }

  onAbort(h: () => void): void {
    if (this.aborted) h();
    else this.abortHandlers.push(h);
  }

  get done(): boolean {
    return this.aborted || this.responded;
  }

  /**
   * Starts collecting the body now (uWS requires onData to be attached in the handler's first tick),
   * never storing more than maxBytes. Above the cap the exchange is answered 413 at once and the
   * connection closed, so a client cannot make us buffer or read an unbounded body.
   */
  collectBody(maxBytes: number): void {
    const declared = this.headers['content-length'];
    if (declared !== undefined) {
      const n = Number(declared);
      if (!Number.isSafeInteger(n) || n < 0) {
        this.sendError(new ApiError('invalid_body', { message: 'Content-Length is not valid.' }), true);
        return;
      }
      if (n > maxBytes) {
        this.sendError(tooLarge(maxBytes), true);
        return;
      }
    }
    this.body = new BodyCollector(maxBytes, declared === undefined ? undefined : Number(declared));
    this.res.onData((ab, isLast) => {
      const b = this.body!;
      if (!b.add(ab, isLast)) this.sendError(tooLarge(maxBytes), true);
      else if (isLast) this.holdReading();
    });
  }

  /**
   * Stops uWS reading this connection until our answer ends (releaseReading, as the last bytes go).
   * uWS refuses asynchronous pipelining: a request read while another is unanswered closes the
   * connection, and the unanswered one would then run for a client that never gets its answer.
   * Held, a pipelined request waits in the kernel's buffer and is read once this one is answered:
   * every request gets its answer, in order. Writing (and backpressure) still works while held,
   * and a client hanging up is seen at the next write; before the first write it is not seen (a
   * non-streaming call runs to its end, which the spec charges the same anyway). Reading resumes
   * only as the answer ends, never at a stream's start: uWS's resume() arms its 10 s idle timer,
   * which would cut any stream longer than that (measured).
   */
  holdReading(): void {
    if (this.readingHeld || this.done) return;
    this.readingHeld = true;
    this.res.pause();
  }

  private releaseReading(): void {
    if (!this.readingHeld) return;
    this.readingHeld = false;
    if (!this.aborted) this.res.resume();
  }

  /** The collected body. Rejects with the 413 once the cap was crossed. */
  readBody(): Promise<Buffer> {
    if (!this.body) return Promise.resolve(Buffer.alloc(0));
    return this.body.promise;
  }

  private writeCommon(status: number, extra: HeaderList | undefined): void {
    const res = this.res;
    this.status = status;
    res.writeStatus(statusLine(status));
    res.writeHeader('Cache-Control', 'no-store');
    res.writeHeader('X-Request-Id', this.requestId);
    if (this.requestIdHeader !== undefined) res.writeHeader(this.requestIdHeader, this.requestId);
    if (extra) for (const [k, v] of extra) res.writeHeader(k, v);
  }

  /** Sends a complete JSON response; `body` may be pre-serialised. Safe to call from any tick. */
  sendJson(status: number, body: unknown, extra?: HeaderList, closeConnection = false): void {
    if (this.done) return;
    this.responded = true;
    const text = typeof body === 'string' ? body : JSON.stringify(body);
    this.res.cork(() => {
      this.releaseReading();
      this.writeCommon(status, extra);
      this.res.writeHeader('Content-Type', 'application/json');
      // uWS writes a body even to HEAD, which a keep-alive client would read as the next response:
      // HEAD gets the GET answer's Content-Length and no body.
      if (this.method !== 'HEAD') this.res.end(text, closeConnection);
      else if (closeConnection) this.res.end(undefined, true);
      else this.endHead(Buffer.byteLength(text));
    });
  }

  sendEmpty(status: number, extra?: HeaderList): void {
    if (this.done) return;
    this.responded = true;
    this.res.cork(() => {
      this.releaseReading();
      this.writeCommon(status, extra);
      this.res.end();
    });
  }

  /** The spec's error envelope, with Retry-After on 429/503 and WWW-Authenticate on 401. */
  sendError(err: ApiError, closeConnection = false, more?: HeaderList): void {
    const extra: Array<[string, string]> = more ? more.map(([k, v]) => [k, v] as [string, string]) : [];
    if (err.status === 401) extra.push(['WWW-Authenticate', 'Bearer']);
    const after = retryAfter(err);
    if (after !== undefined) extra.push(['Retry-After', after]);
    this.sendJson(err.status, err.toBody(this.requestId), extra, closeConnection);
  }

  // ---- streaming (SSE) -------------------------------------------------------------------------

  /** Sends status and headers, and no body, declaring `contentLength` (a HEAD answer to a streamed GET). */
  sendHead(status: number, extra: HeaderList, contentLength: number): void {
    if (this.done) return;
    this.responded = true;
    this.res.cork(() => {
      this.releaseReading();
      this.writeCommon(status, extra);
      this.endHead(contentLength);
    });
  }

  /**
   * Ends a HEAD answer, headers written. The length goes in as our own header: this uWS build's
   * endWithoutBody(length) sends nothing at all when another request is pipelined behind the HEAD
   * (measured), while endWithoutBody() after a Content-Length header of ours works either way.
   */
  private endHead(contentLength: number): void {
    this.res.writeHeader('Content-Length', String(contentLength));
    this.res.endWithoutBody();
  }

  /** Sends status and headers of a stream; the body follows with write() and end(). */
  startStream(status: number, extra: HeaderList): void {
    if (this.done) return;
    this.responded = true;
    this.res.cork(() => this.writeCommon(status, extra));
  }

  /** Writes a chunk; false means uWS buffered it (backpressure): wait for onWritable before more. */
  write(chunk: Uint8Array | string): boolean {
    if (this.aborted) return true;
    // The chunk and the answer travel through fields so that the corked callback is made once per
    // response, not once per relayed chunk (the stream hot path allocates nothing per chunk).
    this.pendingChunk = chunk;
    this.res.cork(this.corkedWrite);
    this.pendingChunk = EMPTY_CHUNK;
    return this.writeOk;
  }

  private pendingChunk: Uint8Array | string = EMPTY_CHUNK;
  private writeOk = true;
  private readonly corkedWrite = (): void => {
    this.writeOk = this.res.write(this.pendingChunk);
  };

  /** Resolves when the socket drained what uWS buffered, or the client went away. */
  waitWritable(): Promise<void> {
    if (this.aborted) return Promise.resolve();
    return new Promise((resolveW) => {
      let settled = false;
      const finish = () => {
        if (settled) return;
        settled = true;
        resolveW();
      };
      this.res.onWritable(() => {
        finish();
        return true;
      });
      this.onAbort(finish);
    });
  }

  end(last?: Uint8Array | string): void {
    if (this.aborted) return;
    this.res.cork(() => {
      this.releaseReading();
      this.res.end(last);
    });
  }
}

function tooLarge(maxBytes: number): ApiError {
  return new ApiError('payload_too_large', { message: `The request body is larger than ${maxBytes} bytes.` });
}

/** Copies uWS's transient ArrayBuffers into one buffer (pre-sized when Content-Length is known). */
class BodyCollector {
  readonly promise: Promise<Buffer>;
  private resolveP!: (b: Buffer) => void;
  private rejectP!: (e: unknown) => void;
  private chunks: Buffer[] = [];
  private fixed: Buffer | undefined;
  private size = 0;
  private finished = false;

  constructor(private readonly maxBytes: number, declared: number | undefined) {
    this.promise = new Promise((res, rej) => {
      this.resolveP = res;
      this.rejectP = rej;
    });
    // Unhandled until a handler awaits it: that is fine, the response already went out.
    this.promise.catch(() => undefined);
    if (declared !== undefined) this.fixed = Buffer.allocUnsafe(declared);
  }

  /** Returns false when the cap is crossed. */
  add(ab: ArrayBuffer, isLast: boolean): boolean {
    if (this.finished) return true;
    const n = ab.byteLength;
    if (this.size + n > this.maxBytes || (this.fixed && this.size + n > this.fixed.length)) {
      this.fail(tooLarge(this.maxBytes));
      return false;
    }
    if (this.fixed) Buffer.from(ab).copy(this.fixed, this.size);
    else if (n > 0) this.chunks.push(Buffer.from(new Uint8Array(ab))); // copy: uWS reuses ab
    this.size += n;
    if (isLast) {
      this.finished = true;
      const body = this.fixed
        ? (this.size === this.fixed.length ? this.fixed : this.fixed.subarray(0, this.size))
        : (this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks, this.size));
      this.chunks = [];
      // Handed over only once uWS has parsed all it read with this body: when that held a
      // pipelined request, uWS has closed the connection by then (see holdReading) and the
      // request is refused before anything ran for it.
      setImmediate(() => (this.failure === undefined ? this.resolveP(body) : this.rejectP(this.failure)));
    }
    return true;
  }

  private failure: unknown;

  fail(e: unknown): void {
    if (this.failure !== undefined) return;
    this.failure = e;
    if (this.finished) return; // the deferred hand-over sees the failure
    this.finished = true;
    this.chunks = [];
    this.rejectP(e);
  }
}
