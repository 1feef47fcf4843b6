// The seam between the HTTP engines (uws-context.ts, node-context.ts) and everything above
// src/server/: one request snapshot, a capped body reader, response writers with backpressure,
// an abort signal and the caller's address. Lanes, generations, the media host, the console and
// the ops code see only this class; nothing above src/server/ knows which engine serves.
import { randomBytes } from 'node:crypto';
import { ApiError } from '../errors.js';
import { silentLogger, type Logger } from '../util/log.js';
import { BodyCollector, tooLarge } from './body-collector.js';
import type { RequestTrace } from '../tracing/hooks.js';
import type { WsUpgrade } from './ws-peer.js';
import { CLIENT_CLOSED_STATUS } from '../metrics/request-metrics.js';

const STATUS_LINES: Record<number, string> = {
  200: '200 OK',
  201: '201 Created',
  202: '202 Accepted',
  204: '204 No Content',
  206: '206 Partial Content',
  302: '302 Found',
  304: '304 Not Modified',
  400: '400 Bad Request',
  401: '401 Unauthorized',
  402: '402 Payment Required',
  403: '403 Forbidden',
  404: '404 Not Found',
  405: '405 Method Not Allowed',
  408: '408 Request Timeout',
  409: '409 Conflict',
  410: '410 Gone',
  411: '411 Length Required',
  413: '413 Payload Too Large',
  415: '415 Unsupported Media Type',
  416: '416 Range Not Satisfiable',
  417: '417 Expectation Failed',
  422: '422 Unprocessable Entity',
  429: '429 Too Many Requests',
  431: '431 Request Header Fields Too Large',
  500: '500 Internal Server Error',
  502: '502 Bad Gateway',
  503: '503 Service Unavailable',
  504: '504 Gateway Timeout',
  505: '505 HTTP Version Not Supported',
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
  /**
   * How the key's streamed text replies carry the usage frame, unless a request's
   * X-Service-Usage-Frame says otherwise. Spelled out rather than imported (UsageFrame in
   * accounts/usage-frame.ts), since accounts/ builds on server/; a value added there and not
   * here fails to compile where the key row is turned into this (auth/authenticate.ts).
   */
  readonly usageFrame: 'event' | 'comment' | 'none';
}

/**
 * Request ids are `req_` + 32 hex: 12 of milliseconds since 1970, then 20 random (80 bits, cut
 * from a pool of random bytes refilled 4 KiB at a time, so an id costs one hex encode: the
 * randomUUID and five slices it replaced were ~3 µs of every request). Time first because the id is
 * the primary key of the request record and keys several journal indexes: ids that grow with time
 * land at the right edge of those B-trees instead of on a random page each (measured: a 10+10 batch
 * of reserve and settle 2.95 -> 2.2 ms in Postgres).
 */
export function newRequestId(): string {
  if (idAt + ID_RANDOM_BYTES > idPool.length) {
    idPool = randomBytes(ID_POOL_BYTES);
    idAt = 0;
  }
  const random = idPool.toString('hex', idAt, idAt + ID_RANDOM_BYTES);
  idAt += ID_RANDOM_BYTES;
  return 'req_' + Date.now().toString(16).padStart(12, '0') + random;
}
const ID_RANDOM_BYTES = 10;
const ID_POOL_BYTES = 4096;
let idPool = Buffer.alloc(0);
let idAt = 0;

/** Header fields a request may carry, on either engine; more is answered 431 (node) or not read (uWS). */
export const MAX_HEADER_FIELDS = 100;

/** The Retry-After value an error answer carries (429 and 503 with a wait), in whole seconds; else undefined. */
export function retryAfter(err: ApiError): string | undefined {
  if (err.retryAfterS === undefined || (err.status !== 429 && err.status !== 503)) return undefined;
  return String(Math.max(1, Math.ceil(err.retryAfterS)));
}

/**
 * Why a request's framing cannot be trusted, or undefined. RFC 9112 section 6.3: a repeated or
 * listed Content-Length is an unrecoverable framing error (400 and close), because a proxy in
 * front that read the other value would see a different next request (smuggling). uWS itself
 * takes the first value and hangs on a list; node's parser refuses both before we see them.
 */
export function framingFault(contentLengths: number): string | undefined {
  return contentLengths > 1 ? 'The request carries more than one Content-Length header.' : undefined;
}

/** The methods the gateway serves (a CONNECT is answered 405 with them in Allow). */
export const SERVED_METHODS = 'GET, HEAD, POST';

/** The answer to a CONNECT: nothing here tunnels. */
export const connectRefusal = (): ApiError =>
  new ApiError('method_not_allowed', { message: `CONNECT is not served here; this gateway takes ${SERVED_METHODS}.` });

/**
 * Why a request is refused for its head before any route sees it, on either engine, or undefined:
 * see framingFault; a repeated Host (RFC 9112 section 3.2: 400, a proxy in front may have routed
 * on the other one); CONNECT (nothing here tunnels); an Expect other than 100-continue (RFC 9110
 * section 10.1.1: 417).
 */
export function headRefusal(snapshot: RequestSnapshot): ApiError | undefined {
  const framing = framingFault(snapshot.contentLengths);
  if (framing !== undefined) return new ApiError('invalid_body', { message: framing });
  if (snapshot.hosts > 1) return new ApiError('invalid_header', { message: 'The request carries more than one Host header.', param: 'Host' });
  if (snapshot.method === 'CONNECT') return connectRefusal();
  const expect = snapshot.headers.expect;
  if (expect !== undefined && expect.trim().toLowerCase() !== '100-continue')
    return new ApiError('expectation_failed', { message: 'The only Expect the gateway meets is 100-continue.', param: 'Expect' });
  return undefined;
}

/** The request as the engine read it: copied once, when the request arrives. */
export interface RequestSnapshot {
  readonly method: string;
  readonly path: string;
  readonly query: string;
  /** Lower-case names; a repeated header keeps its first value (no list-merging tricks). */
  readonly headers: Record<string, string>;
  readonly remoteAddress: string;
  /** How many Content-Length fields (a listed value counts as two): see framingFault. */
  readonly contentLengths: number;
  /** How many Host fields. */
  readonly hosts: number;
  /** What the engine refuses the request for before any route sees it (answered, then the connection closed). */
  readonly refusal?: ApiError | undefined;
}

export abstract class HttpContext {
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
  aborted = false;
  /** The gateway cut its own answer (cutStream): an abort that is not the client's doing. */
  private cut = false;
  responded = false;
  /** A route took the request (the server counts it when its handler ends, not at once). */
  admitted = false;
  /** Status sent, for logs and tests. */
  status = 0;
  /** The error answered, if the answer was one (the access log names its code and param). */
  error: ApiError | undefined;
  /** The vendor deployment that took the request's last try, and how many tries it took (vendors/pool; 0: none). */
  vendorDeployment: string | undefined;
  tries = 0;
  /**
   * The caller's address as the server resolved it on arrival, for the access log: read then,
   * since uWS forbids touching a request once its answer has ended.
   */
  caller: string | undefined;
  /**
   * Set when the request cannot be served as read: its framing cannot be trusted (framingFault), or
   * the engine refuses it (too many header fields, no Host). Answered, then the connection closed.
   */
  readonly refusal: ApiError | undefined;
  /** How the request came: an HTTP exchange, or one turn on a WebSocket (ws-turn-context.ts). */
  readonly transport: 'http' | 'websocket' = 'http';
  /** The WebSocket handshake the engine offers when the request asks for one (GET with Upgrade: websocket). */
  upgrade: WsUpgrade | undefined = undefined;
  /** This request's spans (tracing/), set on arrival when traces are on. */
  trace: RequestTrace | undefined = undefined;
  /** The server's logger, set on arrival; `log` is this request's child of it. */
  serverLog: Logger = silentLogger;
  private scopedLog: Logger | undefined;
  private scopedKeyed = false;
  private abortHandlers: Array<() => void> = [];
  protected body: BodyCollector | undefined;

  constructor(snapshot: RequestSnapshot) {
    this.method = snapshot.method;
    this.path = snapshot.path;
    this.query = snapshot.query;
    this.headers = snapshot.headers;
    this.remoteAddress = snapshot.remoteAddress;
    this.refusal = snapshot.refusal ?? headRefusal(snapshot);
    this.requestId = newRequestId();
  }

  header(name: string): string | undefined {
    return this.headers[name];
  }

  /**
   * This request's logger: every line carries its `request_id` and, once the key is known, its
   * `key_prefix`. Made on first use (most requests write no line but the access log's), and made
   * again once if the key became known after a first line.
   */
  get log(): Logger {
    const prefix = this.auth?.keyPrefix;
    if (this.scopedLog === undefined) {
      this.scopedLog = this.serverLog.child(prefix === undefined ? { request_id: this.requestId } : { request_id: this.requestId, key_prefix: prefix });
      this.scopedKeyed = prefix !== undefined;
    } else if (!this.scopedKeyed && prefix !== undefined) {
      this.scopedLog = this.scopedLog.child({ key_prefix: prefix });
      this.scopedKeyed = true;
    }
    return this.scopedLog;
  }

  /** The PROXY protocol v2 header's source address, '' when the connection sent none (ops/client-address.ts). */
  abstract proxiedAddress(): string;

  /**
   * Engine-specific: true when the server must let the engine finish parsing what it read with
   * this request before running it (uWS, which closes a connection that pipelines behind an
   * unanswered request: see UwsContext.holdReading).
   */
  abstract readonly admitsAfterParse: boolean;

  onAbort(handler: () => void): void {
    if (this.aborted) handler();
    else this.abortHandlers.push(handler);
  }

  /** The engine saw the client go away: fail the body read and tell every listener, once. */
  protected markAborted(): void {
    if (this.aborted) return;
    this.aborted = true;
    this.body?.fail(new ApiError('invalid_body', { message: 'The client went away.' }));
    this.wakeWriter(); // a writer waiting for room is told at once: there is no one to write to
    const hs = this.abortHandlers;
    this.abortHandlers = [];
    for (const h of hs) h();
  }

  get done(): boolean {
    return this.aborted || this.responded;
  }

  /** The client went away before its answer was complete (not a stream the gateway cut itself). */
  get clientClosed(): boolean {
    return this.aborted && !this.cut;
  }

  /** The status the access log and the metrics give this request: 499 when the client left early. */
  get loggedStatus(): number {
    return this.clientClosed ? CLIENT_CLOSED_STATUS : this.status;
  }

  /**
   * Answers a request whose body the engine refused while it arrived (a bad chunk, too slow): the
   * body read fails with `err`, and `err` is the answer, then the connection closes.
   */
  refuseBody(err: ApiError): void {
    this.body?.fail(err);
    this.sendError(err, true);
  }

  /**
   * Starts collecting the body now (uWS requires its reader attached in the handler's first tick),
   * never storing more than maxBytes. Above the cap the exchange is answered 413 at once and the
   * connection closed, so a client cannot make us buffer or read an unbounded body.
   */
  collectBody(maxBytes: number): void {
    const coding = this.headers['content-encoding'];
    if (coding !== undefined && coding.trim().toLowerCase() !== 'identity') {
      // Decoding would put an unbounded inflation in front of the body cap; refused instead.
      const message = 'The gateway does not decode a Content-Encoding: send the body uncompressed (identity).';
      this.sendError(new ApiError('unsupported_media_type', { message, param: 'Content-Encoding' }), true);
      return;
    }
    const declared = this.headers['content-length'];
    let size: number | undefined;
    if (declared !== undefined) {
      size = Number(declared);
      if (!/^\d+$/.test(declared) || !Number.isSafeInteger(size)) {
        this.sendError(new ApiError('invalid_body', { message: 'Content-Length is not valid.' }), true);
        return;
      }
      if (size > maxBytes) {
        this.sendError(tooLarge(maxBytes), true);
        return;
      }
    }
    this.body = new BodyCollector(maxBytes, size, this.admitsAfterParse);
    this.readBodyChunks(this.body);
  }

  /** Feeds the engine's body chunks into `collector`; when `collector.add` refuses one, answers 413 and closes. */
  protected abstract readBodyChunks(collector: BodyCollector): void;

  /** Answers the cap crossed while the body streamed in. */
  protected bodyTooLarge(): void {
    this.sendError(tooLarge(this.body?.maxBytes ?? 0), true);
  }

  /** Stops the engine reading this connection until our answer starts (uWS only; node orders pipelined answers itself). */
  abstract holdReading(): void;

  /** The collected body. Rejects with the 413 once the cap was crossed. */
  readBody(): Promise<Buffer> {
    if (!this.body) return Promise.resolve(Buffer.alloc(0));
    return this.body.promise;
  }

  /** Cache-Control, X-Request-Id (and the route's second name for it), then `extra`. */
  protected commonHeaders(extra: HeaderList | undefined, into: (name: string, value: string) => void): void {
    into('Cache-Control', 'no-store');
    into('X-Request-Id', this.requestId);
    if (this.requestIdHeader !== undefined) into(this.requestIdHeader, this.requestId);
    if (extra) for (const [k, v] of extra) into(k, v);
  }

  /** Sends a complete JSON response; `body` may be pre-serialised. Safe to call from any tick. */
  sendJson(status: number, body: unknown, extra?: HeaderList, closeConnection = false): void {
    if (this.done) return;
    this.responded = true;
    this.status = status;
    const text = typeof body === 'string' ? body : JSON.stringify(body);
    // A HEAD answer carries the GET answer's Content-Length and no body.
    this.sendWhole(status, extra, 'application/json', text, closeConnection);
  }

  sendEmpty(status: number, extra?: HeaderList): void {
    if (this.done) return;
    this.responded = true;
    this.status = status;
    this.sendWhole(status, extra, undefined, '', false);
  }

  /** The error envelope (docs/api/errors.md), with Retry-After on 429/503 and WWW-Authenticate on 401. */
  sendError(err: ApiError, closeConnection = false, more?: HeaderList): void {
    if (this.done) return;
    this.error = err;
    const extra: Array<[string, string]> = more ? more.map(([k, v]) => [k, v] as [string, string]) : [];
    if (err.status === 401) extra.push(['WWW-Authenticate', 'Bearer']);
    const after = retryAfter(err);
    if (after !== undefined) extra.push(['Retry-After', after]);
    this.sendJson(err.status, err.toBody(this.requestId), extra, closeConnection);
  }

  /** Sends status and headers, and no body, declaring `contentLength` (a HEAD answer to a streamed GET). */
  sendHead(status: number, extra: HeaderList, contentLength: number): void {
    if (this.done) return;
    this.responded = true;
    this.status = status;
    this.sendHeadOnly(status, extra, contentLength);
  }

  /**
   * Sends status and headers of a stream; the body follows with write() and end(). With
   * `contentLength` the body is declared by that length instead of chunked: exactly that many
   * bytes must follow (a source that gives fewer is ended with cutStream, never end).
   */
  startStream(status: number, extra: HeaderList, contentLength?: number): void {
    if (this.done) return;
    this.responded = true;
    this.status = status;
    this.sendStreamHead(status, extra, contentLength);
  }

  /**
   * A whole answer: status, the common headers, `extra`, Content-Type when given, Content-Length,
   * then `text` (not for HEAD: its length is declared, the body left out). `close` ends the connection after it.
   */
  protected abstract sendWhole(status: number, extra: HeaderList | undefined, contentType: string | undefined, text: string, close: boolean): void;
  protected abstract sendHeadOnly(status: number, extra: HeaderList, contentLength: number): void;
  protected abstract sendStreamHead(status: number, extra: HeaderList, contentLength?: number): void;

  /** Writes a chunk of a started stream; false means the engine buffered it (backpressure): wait for waitWritable before more. */
  abstract write(chunk: Uint8Array | string): boolean;

  /** Resolves when the socket drained what the engine buffered, or the client went away (never hangs). */
  abstract waitWritable(): Promise<void>;

  /** The one waitWritable caller (an answer has one writer), woken once the engine can take more or the client left. */
  protected drainWaiter: (() => void) | undefined;
  protected readonly wakeWriter = (): void => {
    const w = this.drainWaiter;
    this.drainWaiter = undefined;
    w?.();
  };

  /** Ends a started stream, with an optional last chunk. */
  abstract end(last?: Uint8Array | string): void;

  /**
   * The stream's last vendor event (its receipt) has been written: only the service's own frame
   * follows. A WebSocket turn then takes the client's next message (ws-session.ts); HTTP has no use.
   * Called for every chunk from the receipt on, so it must be idempotent.
   */
  receiptRelayed(): void {}

  /**
   * The chunk about to be written holds the stream's receipt: only the service's frame and the end
   * follow, in this same loop turn when the settle is in memory. The engine may keep that chunk and
   * send it with the end in one write (a syscall less per stream; the proxy's one-read answers go
   * out in one); it sends it by the next loop turn at the latest. Idempotent.
   */
  holdTail(): void {}

  /**
   * Cuts a started stream whose source failed: the connection is closed without the body's end,
   * so the client sees the answer incomplete (a chunked body ended cleanly would look whole).
   */
  cutStream(): void {
    if (this.aborted) return;
    this.cut = true;
    this.markAborted();
    this.closeConnection();
  }

  protected abstract closeConnection(): void;
}
