// One open WebSocket that carries requests: each text message is one turn (ws-turn-context.ts),
// served through the server's own request path; one turn at a time (a message sent after the
// running turn's terminal event, before its usage event, waits for its end). The socket closes when idle
// for too long, when its lifetime ends (after a running turn), and when the server drains.
import { ApiError } from '../errors.js';
import type { HttpContext } from './http-context.js';
import { newRequestId } from './http-context.js';
import { errorEvent, WsTurnContext, type TurnSocket } from './ws-turn-context.js';
import { WS_CLOSE, type WsHandlers, type WsPeer } from './ws-peer.js';

/** How long a socket lives and idles. */
export interface SessionTimes {
  readonly idleMs: number;
  readonly maxLifeMs: number;
}

/** What a session tells the registry (ws-hub.ts) that keeps every open socket. */
export interface SessionOwner {
  readonly draining: boolean;
  closed(session: WsSession): void;
  turnEnded(ctx: HttpContext): void;
}

export interface SessionOrigin {
  readonly path: string;
  readonly keyId: string;
  readonly remoteAddress: string;
  readonly proxied: string;
  readonly carried: Readonly<Record<string, string>>;
}

export class WsSession implements TurnSocket, WsHandlers {
  readonly path: string;
  readonly keyId: string;
  readonly remoteAddress: string;
  readonly proxied: string;
  readonly carried: Readonly<Record<string, string>>;
  /** The running turn, if any. */
  private turn: WsTurnContext | undefined;
  /**
   * A message that came after the running turn sent its terminal event (the client may send its
   * next one then, before the usage event): it runs once that turn has ended. One at most.
   */
  private queued: Buffer | undefined;
  /** Close with this code once the running turn ends (lifetime over, draining). */
  private closeAfterTurn: { code: number; reason: string } | undefined;
  private isClosed = false;
  /** Gives the socket's place under its key's cap back (set by the hub). */
  release: () => void = () => undefined;
  private readonly idleTimer: NodeJS.Timeout;
  private readonly lifeTimer: NodeJS.Timeout;

  constructor(
    readonly peer: WsPeer,
    origin: SessionOrigin,
    times: SessionTimes,
    private readonly owner: SessionOwner,
    private readonly serve: (ctx: HttpContext) => void,
  ) {
    this.path = origin.path;
    this.keyId = origin.keyId;
    this.remoteAddress = origin.remoteAddress;
    this.proxied = origin.proxied;
    this.carried = origin.carried;
    this.idleTimer = setTimeout(this.onIdle, times.idleMs);
    this.lifeTimer = setTimeout(() => this.closeWhenIdle(WS_CLOSE.normal, 'The socket reached its maximum lifetime; open a new one.'), times.maxLifeMs);
  }

  message(data: Buffer, isBinary: boolean): void {
    if (this.isClosed) return;
    this.idleTimer.refresh();
    if (isBinary) return this.refuse(new ApiError('invalid_body', { message: 'Binary messages are not read: send each event as a JSON text message.' }));
    if (this.turn !== undefined) {
      if (this.turn.pastReceipt && this.queued === undefined) {
        this.queued = data;
        return;
      }
      return this.refuse(
        new ApiError('concurrency_limit', {
          message: 'A response is already running on this socket: send the next response.create after its terminal event.',
          param: 'type',
        }),
      );
    }
    if (this.closeAfterTurn !== undefined || this.owner.draining)
      return this.refuse(new ApiError('provider_unavailable', { message: 'This socket is closing; open a new one.', retryAfterS: 1 }));
    const turn = new WsTurnContext(this, data);
    this.turn = turn;
    this.serve(turn);
  }

  /** An `error` event for a message that never became a turn: nothing was held for it. */
  private refuse(err: ApiError): void {
    this.peer.send(errorEvent(err, newRequestId()));
  }

  turnEnded(ctx: WsTurnContext): void {
    if (this.turn !== ctx) return;
    this.turn = undefined;
    this.idleTimer.refresh();
    this.owner.turnEnded(ctx);
    const after = this.closeAfterTurn;
    if (after !== undefined) {
      // A message queued behind the turn is refused before the close, as one sent now would be.
      this.runQueued();
      this.close(after.code, after.reason);
    } else if (this.queued !== undefined) {
      // It starts once this turn's end has run its course (its access line, its metrics).
      setImmediate(this.runQueued);
    }
  }

  /** The queued message, as if it came now (refused if the socket is closing, dropped if it closed). */
  private readonly runQueued = (): void => {
    const data = this.queued;
    this.queued = undefined;
    if (data !== undefined) this.message(data, false);
  };

  /** Closes now when no turn runs, else once the running one has ended. */
  closeWhenIdle(code: number, reason: string): void {
    if (this.turn === undefined) this.close(code, reason);
    else this.closeAfterTurn ??= { code, reason };
  }

  private readonly onIdle = (): void => {
    if (this.turn !== undefined) this.idleTimer.refresh();
    else this.close(WS_CLOSE.normal, 'The socket was idle too long.');
  };

  close(code: number, reason: string): void {
    if (this.isClosed) return;
    this.peer.close(code, reason);
  }

  closed(): void {
    if (this.isClosed) return;
    this.isClosed = true;
    clearTimeout(this.idleTimer);
    clearTimeout(this.lifeTimer);
    // A turn still running goes on as an HTTP request whose client left: read to its receipt and billed.
    this.turn?.clientGone();
    this.owner.closed(this);
  }
}
