// What the server asks of an HTTP engine (node-engine.ts, uws-engine.ts), apart from the choice
// between them (engine.ts), so that neither engine imports the module that picks it.
import type { HttpContext } from './http-context.js';

/** What either engine needs to listen. The limits bind the node engine; uWS has its own, fixed in its build. */
export interface EngineOptions {
  readonly host: string;
  readonly port: number;
  /** A PROXY protocol v2 header may begin each connection (server.proxyProtocol). */
  readonly proxyProtocol: boolean;
  readonly keepAliveTimeoutMs: number;
  readonly headersTimeoutMs: number;
  readonly requestTimeoutMs: number;
  readonly maxHeaderBytes: number;
  /** A WebSocket message above this closes its socket (1009); absent: 16 MiB. */
  readonly maxWebSocketMessageBytes?: number;
}

export type OnRequest = (ctx: HttpContext) => void;

export interface EngineListener {
  readonly port: number;
  /** Closes the listening socket (kept-alive connections stay until closeAll). */
  stopAccepting(): void;
  /** Closes every connection still open. */
  closeAll(): void;
}
