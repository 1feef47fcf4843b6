// The node:http engine: HTTP/1.1 keep-alive with pipelined requests answered in order, HTTP/1.0
// (a stream ends with the close), header count and size limits, timeouts on slow heads and bodies,
// and socket backpressure. Requests node cannot parse are answered with the error envelope, and
// every connection answered and closed releases its descriptor once the answer has left.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createNetServer, type Server as NetServer, type Socket } from 'node:net';
import { ApiError, type ErrorCode } from '../errors.js';
import type { EngineListener, EngineOptions, OnRequest } from './listener.js';
import { connectRefusal, framingFault, MAX_HEADER_FIELDS } from './http-context.js';
import { contexts, NodeContext } from './node-context.js';
import { closeWhenFlushed, methodOf, SocketContext } from './socket-context.js';
import { parseProxyHeader } from './proxy-header.js';
import { DEFAULT_WS_MESSAGE_BYTES, nodeUpgrades } from './ws-node.js';

/** The caller's address from the connection's PROXY v2 header, per socket ('' when it had none). */
const proxied = new WeakMap<Socket, string>();

/** How often node checks heads and bodies against their timeouts. */
const TIMEOUT_CHECK_MS = 1000;

/** node's parser codes that are about the body's framing (everything else in a head is a header's). */
const BODY_FRAMING = new Set(['HPE_INVALID_CONTENT_LENGTH', 'HPE_UNEXPECTED_CONTENT_LENGTH', 'HPE_INVALID_TRANSFER_ENCODING', 'HPE_INVALID_CHUNK_SIZE']);

/** What node's parser refused a connection's bytes for, as the error table names it. `inBody`: the head was read. */
function parseRefusal(err: NodeJS.ErrnoException, maxHeaderBytes: number, inBody: boolean): ApiError | undefined {
  switch (err.code) {
    case 'HPE_HEADER_OVERFLOW':
      return new ApiError('too_many_headers', { message: `The request head is larger than ${maxHeaderBytes} bytes.` });
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return new ApiError('request_timeout');
    case 'HPE_INVALID_VERSION':
      return new ApiError('http_version_not_supported');
    case 'ECONNRESET':
    case 'EPIPE':
      return undefined;
    default: {
      const why = (err as { reason?: string }).reason ?? err.message;
      // The same words as the uWS engine's own check (http-context.ts framingFault).
      if (err.code === 'HPE_UNEXPECTED_CONTENT_LENGTH' && /duplicate/i.test(why)) return new ApiError('invalid_body', { message: framingFault(2) });
      let code: ErrorCode = 'invalid_header';
      if (err.code === 'HPE_INVALID_METHOD' || err.code === 'HPE_INVALID_URL') code = 'invalid_target';
      else if (inBody || BODY_FRAMING.has(err.code ?? '')) code = 'invalid_body';
      return new ApiError(code, { message: `The request is not valid HTTP/1.1: ${String(why).slice(0, 120)}.` });
    }
  }
}

/**
 * Answers a connection whose bytes node's parser refused (or whose head or body came too slowly),
 * then closes it and releases its descriptor. A head never became a request: the refusal goes to
 * the server as a SocketContext. A request whose body failed is answered through its own context.
 */
function answerClientError(err: NodeJS.ErrnoException, socket: Socket, options: EngineOptions, onRequest: OnRequest): void {
  const answering = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
  const ownBody = answering != null && !answering.headersSent && !answering.req.complete;
  const e = parseRefusal(err, options.maxHeaderBytes, ownBody);
  if (e === undefined || !socket.writable) {
    socket.destroy();
    return;
  }
  if (answering != null && !answering.writableFinished) {
    // That very request's body failed (a bad chunk, too slow: nothing sent yet): the refusal is its answer.
    const ctx = ownBody ? contexts.get(answering) : undefined;
    if (ctx !== undefined) return void ctx.refuseBody(e);
    // Bytes after a good request failed to parse while that request is still being answered (node
    // reads ahead): its answer goes out whole, then the connection closes. A refusal written now
    // would overtake it.
    answering.once('close', () => {
      socket.end();
      closeWhenFlushed(socket);
    });
    return;
  }
  onRequest(new SocketContext(socket, methodOf((err as { rawPacket?: Buffer }).rawPacket), e, proxied.get(socket) ?? ''));
}

function httpServer(options: EngineOptions, onRequest: OnRequest): Server {
  const server = createServer(
    {
      maxHeaderSize: options.maxHeaderBytes,
      // Checked by the context, so the refusal is the error envelope, not node's empty 400.
      requireHostHeader: false,
      noDelay: true,
      keepAliveTimeout: options.keepAliveTimeoutMs,
      headersTimeout: options.headersTimeoutMs,
      requestTimeout: options.requestTimeoutMs,
      connectionsCheckingInterval: TIMEOUT_CHECK_MS,
    },
    (req: IncomingMessage, res: ServerResponse) => onRequest(new NodeContext(req, res, proxied.get(req.socket) ?? '')),
  );
  // One more than allowed is kept, so a request over the limit is seen as such (node drops the rest).
  server.maxHeadersCount = MAX_HEADER_FIELDS + 1;
  // A caller may send its request and then FIN (`printf ... | nc -N`); by default node aborts a
  // request whose caller half-closed. An internal property of node:http (a test fails if a node
  // upgrade drops it); the answer's own framing still ends the exchange.
  (server as Server & { httpAllowHalfOpen: boolean }).httpAllowHalfOpen = true;
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => answerClientError(err, socket, options, onRequest));
  // Without these listeners node closes a CONNECT unanswered and sends a bare 417 for an unknown
  // Expect; with them both reach the server, which refuses them with the envelope (headRefusal).
  server.on('connect', (_req: IncomingMessage, socket: Socket) => onRequest(new SocketContext(socket, 'CONNECT', connectRefusal(), proxied.get(socket) ?? '')));
  server.on(
    'upgrade',
    nodeUpgrades(server, options.maxWebSocketMessageBytes ?? DEFAULT_WS_MESSAGE_BYTES, onRequest, (s) => proxied.get(s) ?? ''),
  );
  server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => onRequest(new NodeContext(req, res, proxied.get(req.socket) ?? '')));
  return server;
}

/**
 * With server.proxyProtocol: reads the PROXY v2 header a connection may begin with (bounded in
 * bytes and in time), remembers its address, and hands the socket with the rest of its bytes to
 * node:http. A connection that begins without one is handed on untouched.
 */
function proxyFront(http: Server, headTimeoutMs: number): NetServer {
  return createNetServer({ noDelay: true }, (socket) => {
    let buf: Buffer = Buffer.alloc(0);
    const timer = setTimeout(() => socket.destroy(), headTimeoutMs);
    const onError = (): void => void socket.destroy();
    const onData = (chunk: Buffer): void => {
      buf = buf.length === 0 ? chunk : Buffer.concat([buf, chunk]);
      const h = parseProxyHeader(buf);
      if (h.kind === 'incomplete') return;
      clearTimeout(timer);
      socket.off('data', onData).off('error', onError);
      if (h.kind === 'invalid') return void socket.destroy();
      socket.pause();
      if (h.kind === 'header') proxied.set(socket, h.address);
      const rest = h.kind === 'header' ? buf.subarray(h.length) : buf;
      if (rest.length > 0) socket.unshift(rest);
      http.emit('connection', socket);
      socket.resume();
    };
    socket
      .on('data', onData)
      .on('error', onError)
      .on('close', () => clearTimeout(timer));
  });
}

export function listenNode(options: EngineOptions, onRequest: OnRequest): Promise<EngineListener> {
  const http = httpServer(options, onRequest);
  const listening: Server | NetServer = options.proxyProtocol ? proxyFront(http, options.headersTimeoutMs) : http;
  return new Promise((resolveL, reject) => {
    listening.once('error', reject);
    listening.listen({ host: options.host, port: options.port }, () => {
      listening.off('error', reject);
      const addr = listening.address();
      resolveL({
        port: typeof addr === 'object' && addr !== null ? addr.port : options.port,
        stopAccepting: () => {
          if (listening !== http) listening.close();
          // Also when the PROXY reader listens: node's close stops its timeout checks and closes idle kept-alive connections.
          http.close();
        },
        closeAll: () => http.closeAllConnections(),
      });
    });
  });
}
