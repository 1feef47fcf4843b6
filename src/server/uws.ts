// Loads uWebSockets.js. The package silently falls back to a slow pure-JS server when its native
// binary does not load for this Node ABI; we refuse that unless the operator allows it explicitly.
import { createRequire } from 'node:module';
import type * as UwsTypes from '@trufflesuite/uws-js-unofficial';

const require = createRequire(import.meta.url);

export type TemplatedApp = UwsTypes.TemplatedApp;
export type HttpResponse = UwsTypes.HttpResponse;
export type HttpRequest = UwsTypes.HttpRequest;
export type UsListenSocket = UwsTypes.us_listen_socket;

export interface UwsModule {
  App: typeof UwsTypes.App;
  us_listen_socket_close: typeof UwsTypes.us_listen_socket_close;
  us_socket_local_port: typeof UwsTypes.us_socket_local_port;
  native: boolean;
}

let loaded: UwsModule | undefined;

export function loadUws(allowFallback: boolean): UwsModule {
  if (loaded) return loaded;
  const origWarn = console.warn;
  const warnings: string[] = [];
  // The package prints its fallback notice with console.warn; capture it so we can decide ourselves.
  console.warn = (...a: unknown[]) => void warnings.push(a.map(String).join(' '));
  let mod: Record<string, unknown>;
  try {
    mod = require('@trufflesuite/uws-js-unofficial') as Record<string, unknown>;
  } finally {
    console.warn = origWarn;
  }
  // The native addon exports SSLApp and getParts; the JS fallback exports only App and helpers.
  const native = typeof mod.SSLApp === 'function' && typeof mod.getParts === 'function';
  if (!native && !allowFallback) {
    throw new Error(
      `uWebSockets.js native binary did not load for Node ${process.versions.node} (ABI ${process.versions.modules}); ` +
        `refusing the slow fallback. Use Node 20, or set INKGATE_ALLOW_UWS_FALLBACK=1.\n${warnings.join('\n')}`,
    );
  }
  loaded = {
    App: mod.App as UwsModule['App'],
    us_listen_socket_close: mod.us_listen_socket_close as UwsModule['us_listen_socket_close'],
    us_socket_local_port: mod.us_socket_local_port as UwsModule['us_socket_local_port'],
    native,
  };
  return loaded;
}
