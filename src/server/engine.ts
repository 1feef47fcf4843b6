// The two HTTP engines behind the seam (http-context.ts): uWebSockets.js where a native build
// loads, node:http everywhere. server.engine picks: `auto` (uWS when it loads, else node), `uws`
// (a start-up error where none loads) or `node`.
import type { EngineListener, EngineOptions, OnRequest } from './listener.js';
import { listenNode } from './node-engine.js';
import { loadUws } from './uws-loader.js';
import { listenUws } from './uws-engine.js';

export type EngineName = 'uws' | 'node';
export type { EngineListener, EngineOptions, OnRequest } from './listener.js';
export type EngineChoice = 'auto' | EngineName;

export interface Engine {
  readonly name: EngineName;
  /** Why this engine serves, for the start-up log. */
  readonly reason: string;
  listen(options: EngineOptions, onRequest: OnRequest): Promise<EngineListener>;
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
