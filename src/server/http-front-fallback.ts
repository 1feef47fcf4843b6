// The HTTP front's node:http side (http-front.ts hands it every connection whose first request
// uWS would leave unanswered): too many header fields -> 431, HTTP/1.1 without Host -> 400, and
// the rest (HTTP/1.0 above all) forwarded to uWS over loopback, the answer streamed back with
// the caller's HTTP version (for HTTP/1.0: no chunked encoding, the body ended by the close).
import { createServer, request, type IncomingHttpHeaders, type IncomingMessage, type OutgoingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import { connect, type Socket } from 'node:net';
import { ApiError, type ApiErrorOptions, type ErrorCode } from '../errors.js';
import { newRequestId } from './http-context.js';
import { proxyV2Header } from './proxy-header.js';
import { MAX_HEAD_BYTES, MAX_HEADER_FIELDS } from './request-head.js';

/**
 * A fallback connection quiet this long in both directions is closed (a stream's pings keep it
 * busy). A body that trickles is bounded by uWS instead: it closes the forwarded request ~10 s
 * after it opened (node's own request and head timeouts run only on a server that listens).
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
  if (err.retryAfterS !== undefined) headers['Retry-After'] = String(err.retryAfterS);
  res.writeHead(err.status, headers);
  res.end(body);
}

/** Forwards one request to uWS on its own loopback connection, which begins with the caller's PROXY header. */
function forward(req: IncomingMessage, res: ServerResponse, uwsPort: number, proxyHeader: Buffer): void {
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
        const s = connect({ port: uwsPort, host: '127.0.0.1', noDelay: true });
        s.write(proxyHeader);
        return s;
      },
    },
    (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.statusMessage, forwardable(answer.headers));
      answer.pipe(res);
    },
  );
  up.on('error', () => {
    if (!res.headersSent) refuse(res, 'provider_unavailable', { message: 'The request ended before an answer (the instance is shutting down, or the body came too slowly); retry.', retryAfterS: 1 });
    else res.destroy();
  });
  // A caller gone before the end: uWS sees its request aborted, as on a direct connection.
  res.on('close', () => {
    if (!res.writableFinished) up.destroy();
  });
  req.pipe(up);
}

function answer(req: IncomingMessage, res: ServerResponse, uwsPort: number, proxyHeader: Buffer): void {
  res.setHeader('Connection', 'close'); // one request per fallback connection
  if (req.rawHeaders.length / 2 > MAX_HEADER_FIELDS) refuse(res, 'too_many_headers', { message: `A request may carry at most ${MAX_HEADER_FIELDS} header fields.` });
  else if (req.httpVersion !== '1.0' && req.headers.host === undefined) refuse(res, 'missing_host');
  else forward(req, res, uwsPort, proxyHeader);
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
export function fallbackServer(uwsPort: number): Fallback {
  const proxyHeaders = new WeakMap<Socket, Buffer>();
  const server = createServer({ maxHeaderSize: MAX_HEAD_BYTES, noDelay: true, requireHostHeader: false }, (req, res) =>
    answer(req, res, uwsPort, proxyHeaders.get(req.socket) ?? proxyV2Header(req.socket)),
  );
  // One more than allowed is kept, so a request over the limit is seen as such (node drops the rest).
  server.maxHeadersCount = MAX_HEADER_FIELDS + 1;
  server.timeout = IDLE_MS;
  return { server, proxyHeaders };
}
