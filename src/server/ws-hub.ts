// Every WebSocket open on this server, and how one opens: a GET with `Upgrade: websocket` on a path
// that takes sockets (a WebSocketRoute), with a key that authenticates, under the key's socket cap,
// while the route's check passes. A refusal is the usual error envelope as the HTTP answer, never an
// open socket. Draining closes each socket with 1001 once its running turn has ended.
import { ApiError } from '../errors.js';
import type { HttpContext } from './http-context.js';
import { WsSession, type SessionOwner, type SessionTimes } from './ws-session.js';
import { WS_CLOSE } from './ws-peer.js';

/** A path whose messages are requests to its POST route, one at a time (docs/api/responses.md). */
export interface WebSocketRoute extends SessionTimes {
  readonly path: string;
  readonly maxSocketsPerKey: number;
  /** Throws the answer when no socket may open now (a closed lane: 503); the key is known. */
  check(ctx: HttpContext): void;
}

/** What the hub tells the metrics. Declared here so the HTTP layer imports no metrics code. */
export interface WsMetrics {
  socketOpened(): void;
  socketClosed(): void;
  turnEnded(status: number): void;
}

/** The request headers every turn of a socket carries on from its upgrade request. */
const CARRIED = ['authorization', 'x-service-usage-frame'] as const;

export class WsHub implements SessionOwner {
  private readonly sessions = new Set<WsSession>();
  private readonly perKey = new Map<string, number>();
  draining = false;

  constructor(
    private readonly routes: ReadonlyMap<string, WebSocketRoute>,
    private readonly metrics: WsMetrics | undefined,
  ) {}

  /** The socket route at `path`, if any. */
  route(path: string): WebSocketRoute | undefined {
    return this.routes.get(path.length > 1 && path.endsWith('/') ? path.slice(0, -1) : path);
  }

  /**
   * Opens the socket for an authenticated request (`ctx.auth` set), or throws the refusal. `serve`
   * takes each turn through the server's request path.
   */
  accept(ctx: HttpContext, route: WebSocketRoute, serve: (turn: HttpContext) => void): void {
    const upgrade = ctx.upgrade!;
    if (this.draining) throw new ApiError('provider_unavailable', { message: 'This instance is shutting down; retry.', retryAfterS: 1 });
    route.check(ctx);
    const keyId = ctx.auth!.keyId;
    const n = this.perKey.get(keyId) ?? 0;
    if (n >= route.maxSocketsPerKey)
      throw new ApiError('concurrency_limit', {
        message: `At most ${route.maxSocketsPerKey} WebSockets may be open per key; close one first.`,
        retryAfterS: 1,
      });
    const carried: Record<string, string> = {};
    for (const h of CARRIED) {
      const v = ctx.header(h);
      if (v !== undefined) carried[h] = v;
    }
    const origin = { path: route.path, keyId, remoteAddress: ctx.remoteAddress, proxied: ctx.proxiedAddress(), carried };
    // Counted before the handshake completes, so concurrent upgrades cannot pass the cap together.
    this.perKey.set(keyId, n + 1);
    let counted = true;
    const uncount = (): void => {
      if (!counted) return;
      counted = false;
      const left = (this.perKey.get(keyId) ?? 1) - 1;
      if (left <= 0) this.perKey.delete(keyId);
      else this.perKey.set(keyId, left);
    };
    ctx.onAbort(uncount);
    upgrade.accept((peer) => {
      const s = new WsSession(peer, origin, route, this, serve);
      s.release = uncount;
      this.sessions.add(s);
      this.metrics?.socketOpened();
      if (this.draining) s.closeWhenIdle(WS_CLOSE.goingAway, 'The server is shutting down.');
      return s;
    });
  }

  closed(session: WsSession): void {
    if (!this.sessions.delete(session)) return;
    session.release();
    this.metrics?.socketClosed();
  }

  turnEnded(ctx: HttpContext): void {
    this.metrics?.turnEnded(ctx.loggedStatus);
  }

  /** Stops opening sockets; each open one closes with 1001 as soon as no turn runs on it. */
  drain(): void {
    this.draining = true;
    for (const s of this.sessions) s.closeWhenIdle(WS_CLOSE.goingAway, 'The server is shutting down.');
  }

  /** Closes every socket now (the drain's time ran out). */
  closeAll(): void {
    for (const s of [...this.sessions]) s.close(WS_CLOSE.goingAway, 'The server is shutting down.');
  }
}
