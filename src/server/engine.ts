// The two HTTP engines behind the seam (http-context.ts): uWebSockets.js where a native build
// loads, node:http everywhere. server.engine picks: `auto` (uWS when it loads, else node), `uws`
// (a start-up error where none loads) or `node`.
import type { HttpContext } from './http-context.js';
import { listenNode } from './node-engine.js';
import { loadUws } from './uws-loader.js';
import { listenUws } from './uws-engine.js';

export type EngineName = 'uws' | 'node';
export type EngineChoice = 'auto' | EngineName;

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
}

export type OnRequest = (ctx: HttpContext) => void;

export interface EngineListener {
  readonly port: number;
  /** Closes the listening socket (kept-alive connections stay until closeAll). */
  stopAccepting(): void;
  /** Closes every connection still open. */
  closeAll(): void;
}

export interface Engine {
  readonly name: EngineName;
  /** Why this engine serves, for the start-up log. */
  readonly reason: string;
  listen(o: EngineOptions, onRequest: OnRequest): Promise<EngineListener>;
}

/** The engine `choice` names on this Node; throws for `uws` where no native build loads. */
export function chooseEngine(choice: EngineChoice): Engine {
  const nodeEngine = (reason: string): Engine => ({ name: 'node', reason, listen: listenNode });
  if (choice === 'node') return nodeEngine('server.engine is node');
  const load = loadUws();
  if (load.ok) {
    const why = choice === 'uws' ? 'server.engine is uws' : 'auto: a native build loads on this Node';
    return { name: 'uws', reason: `${why} (${load.uws.source}, Node ${process.versions.node})`, listen: (o, on) => listenUws(load.uws, o, on) };
  }
  if (choice === 'uws') throw new Error(`server.engine is uws, but ${load.reason}. Use server.engine auto or node (INKGATE_SERVER_ENGINE).`);
  return nodeEngine(`auto: ${load.reason}`);
}
