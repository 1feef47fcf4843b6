// WebSockets on node:http, with the `ws` package (the one the official OpenAI SDK connects with).
// node hands every request that asks for an upgrade to the 'upgrade' listener with its raw socket:
// it becomes an UpgradeContext, which the server answers like any request (the error envelope,
// written straight to the socket, then closed) or accepts, and `ws` completes the handshake.
import type { IncomingMessage, Server } from 'node:http';
import type { Socket } from 'node:net';
import { WebSocketServer, type WebSocket } from 'ws';
import type { HttpContext } from './http-context.js';
import { snapshot } from './node-context.js';
import { RawSocketContext } from './socket-context.js';
import { WS_HIGH_WATER_BYTES, type WsHandlers, type WsPeer } from './ws-peer.js';

/** A message above this closes the socket (1009); one above the route's body cap and under this gets an error event. */
export const DEFAULT_WS_MESSAGE_BYTES = 16 * 1024 * 1024;

const TEXT = Object.freeze({ binary: false });

/** True for a GET asking for a WebSocket (RFC 6455 section 4.1; `ws` checks the rest of the handshake). */
export const asksForWebSocket = (method: string, upgrade: string | undefined): boolean => method === 'GET' && upgrade?.trim().toLowerCase() === 'websocket';

class NodePeer implements WsPeer {
  private waiters: Array<() => void> = [];
  private closed = false;

  constructor(private readonly socket: WebSocket) {}

  send(text: Uint8Array | string): boolean {
    if (this.closed) return true;
    const over = this.socket.bufferedAmount + text.length > WS_HIGH_WATER_BYTES;
    // Only a send past the mark asks to hear when it left: everything before it left by then.
    if (over) this.socket.send(text, TEXT, this.flushed);
    else this.socket.send(text, TEXT);
    return !over;
  }

  private readonly flushed = (): void => {
    const ws = this.waiters;
    this.waiters = [];
    for (const w of ws) w();
  };

  waitDrained(): Promise<void> {
    if (this.closed || this.socket.bufferedAmount <= WS_HIGH_WATER_BYTES) return Promise.resolve();
    return new Promise((resolveW) => this.waiters.push(resolveW));
  }

  close(code: number, reason: string): void {
    if (!this.closed) this.socket.close(code, reason);
  }

  markClosed(): void {
    this.closed = true;
    this.flushed();
  }
}

/** A request with an upgrade, on its raw socket: refused like any request, or handed to `ws`. */
class UpgradeContext extends RawSocketContext {
  private upgraded = false;

  constructor(
    private readonly req: IncomingMessage,
    socket: Socket,
    private readonly head: Buffer,
    private readonly wss: WebSocketServer,
    proxied: string,
  ) {
    super(snapshot(req), socket, proxied);
    socket.once('close', () => {
      if (!this.upgraded) this.markAborted();
    });
    if (asksForWebSocket(this.method, this.headers.upgrade)) this.upgrade = { accept: (open) => this.accept(open) };
  }

  private accept(open: (peer: WsPeer) => WsHandlers): void {
    if (this.done) return;
    this.responded = true;
    this.status = 101;
    // Marked upgraded only once `ws` has taken the socket: a handshake it refuses itself (a bad
    // Sec-WebSocket-Key or version, a client already gone) ends in a close that must count as an
    // abort, or the key's socket slot taken for this request would never be given back.
    this.wss.handleUpgrade(this.req, this.socket, this.head, (webSocket) => {
      this.upgraded = true;
      const peer = new NodePeer(webSocket);
      const h = open(peer);
      webSocket.on('message', (data, isBinary) => h.message(data as Buffer, isBinary));
      webSocket.once('close', (code) => {
        peer.markClosed();
        h.closed(code);
      });
      webSocket.on('error', () => webSocket.terminate());
    });
  }
}

/**
 * A request that asks for another upgrade (curl's `Upgrade: h2c`, a HEAD or POST with websocket)
 * is served as plain HTTP/1.1, as it was before this listener existed: its head is given back to
 * node without the upgrade, on the same socket, to a fresh parser.
 */
function replayWithoutUpgrade(server: Server, req: IncomingMessage, socket: Socket, head: Buffer): void {
  let text = `${req.method ?? 'GET'} ${req.url ?? '/'} HTTP/${req.httpVersion}\r\n`;
  const raw = req.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const k = raw[i]!.toLowerCase();
    if (k === 'upgrade') continue;
    if (k === 'connection') {
      const rest = raw[i + 1]!.split(',').filter((v) => v.trim().toLowerCase() !== 'upgrade');
      if (rest.length > 0) text += `${raw[i]}: ${rest.join(',')}\r\n`;
      continue;
    }
    text += `${raw[i]}: ${raw[i + 1]}\r\n`;
  }
  socket.unshift(head.length > 0 ? Buffer.concat([Buffer.from(text + '\r\n', 'latin1'), head]) : Buffer.from(text + '\r\n', 'latin1'));
  server.emit('connection', socket);
}

/** The 'upgrade' listener: a WebSocket request goes to the server as an UpgradeContext; any other is replayed as plain HTTP. */
export function nodeUpgrades(
  server: Server,
  maxMessageBytes: number,
  onRequest: (ctx: HttpContext) => void,
  proxiedOf: (socket: Socket) => string,
): (req: IncomingMessage, socket: Socket, head: Buffer) => void {
  const wss = new WebSocketServer({ noServer: true, maxPayload: maxMessageBytes, perMessageDeflate: false, clientTracking: false });
  return (req, socket, head) => {
    if (!asksForWebSocket(req.method ?? '', req.headers.upgrade)) return replayWithoutUpgrade(server, req, socket, head);
    socket.on('error', () => socket.destroy());
    onRequest(new UpgradeContext(req, socket, head, wss, proxiedOf(socket)));
  };
}
