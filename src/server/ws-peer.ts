// What the WebSocket transport needs of an engine (ws-node.ts on node:http with the `ws` package,
// ws-uws.ts on uWS), so that the session (ws-session.ts) and the turns (ws-turn-context.ts) never
// know which engine serves.

/** One open WebSocket, as the session writes to it. */
export interface WsPeer {
  /** Sends one text message; false: the engine buffered past its mark (wait with waitDrained before more). */
  send(text: Uint8Array | string): boolean;
  /** Resolves once the engine's buffer drained, or the socket closed (never hangs). */
  waitDrained(): Promise<void>;
  /** Closes with a code (1000 normal, 1001 going away, 1008 policy, 1009 too big, 1011 server fault). */
  close(code: number, reason: string): void;
}

/** What the session hears from the engine about its socket. */
export interface WsHandlers {
  message(data: Buffer, isBinary: boolean): void;
  /** The socket closed (either side); called once. */
  closed(code: number): void;
}

/** A request that asks for a WebSocket (GET with `Upgrade: websocket`), as the engine offers it. */
export interface WsUpgrade {
  /**
   * Completes the handshake (101) and opens the socket; `open` is called once with it and returns
   * the handlers for its messages. After accept the request's HTTP answer is over.
   */
  accept(open: (peer: WsPeer) => WsHandlers): void;
}

/**
 * How many bytes an engine may buffer for a slow reader before send says false and the turn's
 * vendor stream pauses (the same role the socket's high-water mark plays on SSE).
 */
export const WS_HIGH_WATER_BYTES = 256 * 1024;

/** Close codes the transport uses (RFC 6455 section 7.4.1). */
export const WS_CLOSE = Object.freeze({ normal: 1000, goingAway: 1001, policy: 1008, tooBig: 1009, serverError: 1011 });
