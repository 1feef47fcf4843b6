// The HTTP front's node:http side (http-front.ts hands it every connection whose first request
// uWS would leave unanswered): too many header fields -> 431, HTTP/1.1 without Host -> 400, and
// the rest (HTTP/1.0 above all) forwarded to uWS over loopback, the answer streamed back with
// the caller's HTTP version (for HTTP/1.0: no chunked encoding, the body ended by the close).
import { createServer, request, type IncomingHttpHeaders, type IncomingMessage, type OutgoingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import { connect, type Socket } from 'node:net';
import { ApiError, type ApiErrorOptions, type ErrorCode } from '../errors.js';
import { newRequestId, retryAfter } from './http-context.js';
import { proxyV2Header } from './proxy-header.js';
import { MAX_HEAD_BYTES, MAX_HEADER_FIELDS } from './request-head.js';

/**
 * A fallback connection quiet this long is closed while its request is read and while its answer
 * is written (a stream's pings keep it busy; a caller that stops reading stalls it). Not while
 * uWS works on the answer: uWS and the upstream timeouts bound that wait, and a non-streaming
 * call may take the whole upstream.nonStreamTimeoutMs. A body that trickles is bounded by uWS
 * too: it closes the forwarded request ~10 s after it opened (node's own request and head
 * timeouts run only on a server that listens).
 */
const IDLE_MS = 120_000;

/** Per connection, not forwarded: they describe the caller's connection, not the request. */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade']);

function forwardable(h: IncomingHttpHeaders): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const k in h) if (!HOP_BY_HOP.has(k)) out[k] = h[k];
  return out;
}

function refuse(res: ServerResponse, code: ErrorCode, opts: ApiErrorOptions = {}): void {
  const requestId = newRequestId();
  const err = new ApiError(code, opts);
  const body = JSON.stringify(err.toBody(requestId));
  const headers: OutgoingHttpHeaders = { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body), 'X-Request-Id': requestId, Connection: 'close' };
  const after = retryAfter(err);
  if (after !== undefined) headers['Retry-After'] = after;
  res.writeHead(err.status, headers);
  res.end(body);
}

/** Streams uWS's answer to the caller; an answer cut short by uWS cuts the caller's short too. */
function relay(answer: IncomingMessage, res: ServerResponse, idleMs: number): void {
  res.socket?.setTimeout(idleMs); // from here a quiet connection is a stalled caller
  res.writeHead(answer.statusCode ?? 502, answer.statusMessage, forwardable(answer.headers));
  answer.pipe(res);
  // Without this an HTTP/1.0 caller, whose body ends with the close, would wait for the idle
  // timeout and then take a truncated body for a whole one.
  answer.on('close', () => {
    if (!answer.complete) res.destroy();
  });
}

/** Forwards one request to uWS on its own loopback connection, which begins with the caller's PROXY header. */
function forward(req: IncomingMessage, res: ServerResponse, o: ForwardOptions): void {
  const client = req.socket;
  const headers = forwardable(req.headers);
  if (headers.host === undefined) headers.host = `${client.localAddress ?? '127.0.0.1'}:${client.localPort ?? 0}`;
  headers.connection = 'close';
  const up = request(
    {
      method: req.method,
      path: req.url,
      headers,
      // One connection per request, not a pool: a PROXY header names one caller per connection.
      createConnection: () => {
        const s = connect({ port: o.uwsPort, host: '127.0.0.1', noDelay: true });
        s.write(o.proxyHeader);
        return s;
      },
    },
    (answer) => relay(answer, res, o.idleMs),
  );
  up.on('error', () => {
    if (!res.headersSent) refuse(res, 'provider_unavailable', { message: 'The request ended before an answer (the instance is shutting down, or the body came too slowly); retry.', retryAfterS: 1 });
    else res.destroy();
  });
  // A caller gone before the end: uWS sees its request aborted, as on a direct connection.
  res.on('close', () => {
    if (!res.writableFinished) up.destroy();
  });
  // The request read, the caller waits for uWS: no idle bound until the answer starts.
  req.on('end', () => {
    if (!res.headersSent) client.setTimeout(0);
  });
  req.pipe(up);
}

interface ForwardOptions {
  readonly uwsPort: number;
  readonly proxyHeader: Buffer;
  readonly idleMs: number;
}

function answer(req: IncomingMessage, res: ServerResponse, o: ForwardOptions, served: WeakSet<Socket>): void {
  // One request per fallback connection: its answer closes it, so a request pipelined behind it
  // would run (a vendor called, Ink charged) with its answer thrown away. It is left unanswered,
  // and node drops it when the first answer closes the connection.
  if (served.has(req.socket)) return void req.resume();
  served.add(req.socket);
  res.setHeader('Connection', 'close');
  if (req.rawHeaders.length / 2 > MAX_HEADER_FIELDS) refuse(res, 'too_many_headers', { message: `A request may carry at most ${MAX_HEADER_FIELDS} header fields.` });
  else if (req.httpVersion !== '1.0' && req.headers.host === undefined) refuse(res, 'missing_host');
  // Node takes an absolute-form or `*` target; uWS, which it would be forwarded to, does not.
  else if (req.url?.charCodeAt(0) !== 0x2f) refuse(res, 'invalid_target');
  else forward(req, res, o);
}

export interface Fallback {
  readonly server: Server;
  /** Per handed-over socket, the PROXY header its forwarded requests begin with. */
  readonly proxyHeaders: WeakMap<Socket, Buffer>;
}

/**
 * The node:http server sockets are handed to (`emit('connection')`); it never listens itself.
 * Node answers a head above MAX_HEAD_BYTES with 431 and a malformed one with 400, and closes.
 */
export function fallbackServer(uwsPort: number, idleMs = IDLE_MS): Fallback {
  const proxyHeaders = new WeakMap<Socket, Buffer>();
  const served = new WeakSet<Socket>();
  const server = createServer({ maxHeaderSize: MAX_HEAD_BYTES, noDelay: true, requireHostHeader: false }, (req, res) =>
    answer(req, res, { uwsPort, proxyHeader: proxyHeaders.get(req.socket) ?? proxyV2Header(req.socket), idleMs }, served),
  );
  // One more than allowed is kept, so a request over the limit is seen as such (node drops the rest).
  server.maxHeadersCount = MAX_HEADER_FIELDS + 1;
  server.timeout = idleMs;
  // `printf ... | nc -N` sends its request and then FIN, the very callers this path serves; by
  // default node aborts a request whose caller half-closed. An internal property of node:http (a
  // test fails if a node upgrade drops it); the answer's Connection: close still ends the socket.
  (server as Server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true;
  return { server, proxyHeaders };
}
