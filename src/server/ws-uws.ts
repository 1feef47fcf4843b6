// WebSockets on uWS: a request asking for an upgrade reaches the `upgrade` handler of the app's
// ws route; it becomes a UwsContext with an `upgrade` the server may accept (res.upgrade, then
// uWS calls `open`) or refuse like any request (the error envelope, then the connection closes).
import type * as UwsTypes from '@trufflesuite/uws-js-unofficial';
import type { HttpContext } from './http-context.js';
import { UwsContext } from './uws-context.js';
import { WS_HIGH_WATER_BYTES, type WsHandlers, type WsPeer } from './ws-peer.js';

type UwsSocket = UwsTypes.WebSocket<SocketData>;

/** What each socket carries: how to open its session, then the peer and the session's handlers. */
interface SocketData {
  open: (peer: WsPeer) => WsHandlers;
  peer?: UwsPeer;
  handlers?: WsHandlers;
}

/** Above what uWS buffers for a socket it drops messages: far above the mark the relay pauses at. */
const MAX_BACKPRESSURE_BYTES = 64 * 1024 * 1024;

class UwsPeer implements WsPeer {
  private waiters: Array<() => void> = [];
  private closed = false;
  /** The message of the corked send (a field, so the corked callback is made once per socket). */
  private pending: Uint8Array | string = '';
  private sendStatus = 1;

  constructor(private readonly socket: UwsSocket) {}

  send(text: Uint8Array | string): boolean {
    if (this.closed) return true;
    this.pending = text;
    this.socket.cork(this.corkedSend);
    this.pending = '';
    return this.sendStatus === 1 && this.socket.getBufferedAmount() <= WS_HIGH_WATER_BYTES;
  }

  private readonly corkedSend = (): void => {
    this.sendStatus = this.socket.send(this.pending, false);
  };

  waitDrained(): Promise<void> {
    if (this.closed || this.socket.getBufferedAmount() <= WS_HIGH_WATER_BYTES) return Promise.resolve();
    return new Promise((resolveW) => this.waiters.push(resolveW));
  }

  drained(): void {
    if (!this.closed && this.socket.getBufferedAmount() > WS_HIGH_WATER_BYTES) return;
    const ws = this.waiters;
    this.waiters = [];
    for (const w of ws) w();
  }

  close(code: number, reason: string): void {
    if (!this.closed) this.socket.end(code, reason);
  }

  markClosed(): void {
    this.closed = true;
    this.drained();
  }
}

/** The app's ws behavior: every upgrade request goes to `onRequest` as a context with `upgrade` set. */
export function uwsWebSockets(
  uws: { DISABLED: UwsTypes.CompressOptions },
  maxMessageBytes: number,
  onRequest: (ctx: HttpContext) => void,
): UwsTypes.WebSocketBehavior<SocketData> {
  return {
    maxPayloadLength: maxMessageBytes,
    maxBackpressure: MAX_BACKPRESSURE_BYTES,
    // The session keeps its own idle time and lifetime (ws-session.ts).
    idleTimeout: 0,
    sendPingsAutomatically: false,
    compression: uws.DISABLED,
    upgrade: (res, req, context) => {
      const ctx = new UwsContext(res, req);
      const h = ctx.headers;
      const key = h['sec-websocket-key'];
      if (key !== undefined && ctx.method === 'GET') {
        ctx.upgrade = {
          accept: (open) => {
            if (ctx.done) return;
            ctx.responded = true;
            ctx.status = 101;
            res.cork(() => res.upgrade<SocketData>({ open }, key, h['sec-websocket-protocol'] ?? '', h['sec-websocket-extensions'] ?? '', context));
          },
        };
      }
      onRequest(ctx);
    },
    open: (socket) => {
      const d = socket.getUserData();
      d.peer = new UwsPeer(socket);
      d.handlers = d.open(d.peer);
    },
    // uWS lends the message only during this call: copied.
    message: (ws, ab, isBinary) => ws.getUserData().handlers?.message(Buffer.from(new Uint8Array(ab)), isBinary),
    drain: (ws) => ws.getUserData().peer?.drained(),
    close: (socket, code) => {
      const d = socket.getUserData();
      d.peer?.markClosed();
      d.handlers?.closed(code);
    },
  };
}
