// The node:http engine: HTTP/1.1 keep-alive with pipelined requests answered in order, HTTP/1.0
// (a stream ends with the close), header count and size limits, timeouts on slow heads and bodies,
// and socket backpressure. Requests node cannot parse are answered with the error envelope.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createNetServer, type Server as NetServer, type Socket } from 'node:net';
import { ApiError, type ErrorCode } from '../errors.js';
import type { EngineListener, EngineOptions, OnRequest } from './listener.js';
import { framingFault, MAX_HEADER_FIELDS, newRequestId, retryAfter, statusLine } from './http-context.js';
import { NodeContext } from './node-context.js';
import { parseProxyHeader } from './proxy-header.js';

/** The caller's address from the connection's PROXY v2 header, per socket ('' when it had none). */
const proxied = new WeakMap<Socket, string>();

/** How often node checks heads and bodies against their timeouts. */
const TIMEOUT_CHECK_MS = 1000;

/** What node's parser refused a connection's bytes for, as the error table names it. */
function parseRefusal(err: NodeJS.ErrnoException, maxHeaderBytes: number): ApiError | undefined {
  switch (err.code) {
    case 'HPE_HEADER_OVERFLOW':
      return new ApiError('too_many_headers', { message: `The request head is larger than ${maxHeaderBytes} bytes.` });
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return new ApiError('request_timeout');
    case 'ECONNRESET':
    case 'EPIPE':
      return undefined;
    default: {
      const why = (err as { reason?: string }).reason ?? err.message;
      // The same words as the uWS engine's own check (http-context.ts framingFault).
      if (err.code === 'HPE_UNEXPECTED_CONTENT_LENGTH' && /duplicate/i.test(why)) return new ApiError('invalid_body', { message: framingFault(2) });
      const code: ErrorCode = err.code === 'HPE_INVALID_METHOD' || err.code === 'HPE_INVALID_URL' ? 'invalid_target' : 'invalid_body';
      return new ApiError(code, { message: `The request is not valid HTTP/1.1: ${String(why).slice(0, 120)}.` });
    }
  }
}

/** Writes the envelope straight to a socket whose request node could not parse, then closes it. */
function answerClientError(err: NodeJS.ErrnoException, socket: Socket, maxHeaderBytes: number): void {
  const e = parseRefusal(err, maxHeaderBytes);
  if (e === undefined || !socket.writable) {
    socket.destroy();
    return;
  }
  // Bytes after a good request failed to parse while that request is still being answered (node
  // reads ahead): its answer goes out whole, then the connection ends. A refusal written now
  // would overtake it.
  const answering = (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage;
  if (answering != null && !answering.writableFinished) {
    // Unless it is that very request whose body failed (a bad chunk, too slow: nothing sent yet):
    // then the refusal is its answer, and the close tells the handler the client is gone.
    const ownBody = !answering.headersSent && !answering.req.complete;
    if (!ownBody) {
      answering.once('close', () => socket.end());
      return;
    }
  }
  const id = newRequestId();
  const body = JSON.stringify(e.toBody(id));
  const after = retryAfter(e);
  socket.end(
    `HTTP/1.1 ${statusLine(e.status)}\r\nCache-Control: no-store\r\nX-Request-Id: ${id}\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\n${after === undefined ? '' : `Retry-After: ${after}\r\n`}Connection: close\r\n\r\n${body}`,
  );
}

function httpServer(o: EngineOptions, onRequest: OnRequest): Server {
  const server = createServer(
    {
      maxHeaderSize: o.maxHeaderBytes,
      // Checked by the context, so the refusal is the error envelope, not node's empty 400.
      requireHostHeader: false,
      noDelay: true,
      keepAliveTimeout: o.keepAliveTimeoutMs,
      headersTimeout: o.headersTimeoutMs,
      requestTimeout: o.requestTimeoutMs,
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
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => answerClientError(err, socket, o.maxHeaderBytes));
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

export function listenNode(o: EngineOptions, onRequest: OnRequest): Promise<EngineListener> {
  const http = httpServer(o, onRequest);
  const listening: Server | NetServer = o.proxyProtocol ? proxyFront(http, o.headersTimeoutMs) : http;
  return new Promise((resolveL, reject) => {
    listening.once('error', reject);
    listening.listen({ host: o.host, port: o.port }, () => {
      listening.off('error', reject);
      const addr = listening.address();
      resolveL({
        port: typeof addr === 'object' && addr !== null ? addr.port : o.port,
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
