// Finds a native uWebSockets.js build for this Node. Tried in order: the upstream package name
// `uWebSockets.js` (installed from its own releases, which carry builds for current Node ABIs),
// then the registry's `@trufflesuite/uws-js-unofficial`, whose binary is loaded directly: its
// entry point would otherwise fall back silently to a slow JavaScript server we never want.
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type * as UwsTypes from '@trufflesuite/uws-js-unofficial';

const require = createRequire(import.meta.url);

export type HttpResponse = UwsTypes.HttpResponse;
export type HttpRequest = UwsTypes.HttpRequest;
export type UsListenSocket = UwsTypes.us_listen_socket;

export interface UwsModule {
  readonly App: typeof UwsTypes.App;
  readonly us_listen_socket_close: typeof UwsTypes.us_listen_socket_close;
  readonly us_socket_local_port: typeof UwsTypes.us_socket_local_port;
  /** The compression setting that turns permessage-deflate off (WebSockets). */
  readonly DISABLED: UwsTypes.CompressOptions;
  /** Which package the build came from. */
  readonly source: string;
}

export type UwsLoad = { readonly ok: true; readonly uws: UwsModule } | { readonly ok: false; readonly reason: string };

/** A native addon exports SSLApp and getParts beside App; anything else is not one. */
function asNative(mod: unknown, source: string): UwsModule | undefined {
  const m = mod as Record<string, unknown> | null;
  if (m === null || typeof m !== 'object' || typeof m.App !== 'function' || typeof m.SSLApp !== 'function' || typeof m.getParts !== 'function')
    return undefined;
  // `_cfg('silent')` sets the loop's no-mark flag: otherwise every answer carries `uWebSockets: 20`,
  // naming the engine and its version to any client (checked on every answer in test/integration/edge-framing.test.ts).
  if (typeof m._cfg === 'function') (m._cfg as (arg: string) => void)('silent');
  return {
    App: m.App as UwsModule['App'],
    us_listen_socket_close: m.us_listen_socket_close as UwsModule['us_listen_socket_close'],
    us_socket_local_port: m.us_socket_local_port as UwsModule['us_socket_local_port'],
    DISABLED: m.DISABLED as UwsModule['DISABLED'],
    source,
  };
}

const firstLine = (e: unknown): string => (e instanceof Error ? e.message : String(e)).split('\n')[0]!.slice(0, 200);

type Attempt = { uws: UwsModule } | { why: string };

function tryUpstream(): Attempt {
  try {
    const uws = asNative(require('uWebSockets.js'), 'uWebSockets.js');
    return uws ? { uws } : { why: 'uWebSockets.js: not a native build' };
  } catch (e) {
    return { why: `uWebSockets.js: ${(e as { code?: string }).code === 'MODULE_NOT_FOUND' ? 'not installed' : firstLine(e)}` };
  }
}

function tryTrufflesuite(): Attempt {
  const pkg = '@trufflesuite/uws-js-unofficial';
  let dir: string;
  try {
    dir = dirname(require.resolve(`${pkg}/package.json`));
  } catch {
    return { why: `${pkg}: not installed` };
  }
  const file = `uws_${process.platform}_${process.arch}_${process.versions.modules}.node`;
  try {
    const uws = asNative(require(join(dir, 'binaries', file)), pkg);
    return uws ? { uws } : { why: `${pkg}: ${file} is not a uWS build` };
  } catch (e) {
    return { why: `${pkg}: no ${file} (${firstLine(e)})` };
  }
}

let cached: UwsLoad | undefined;

/** The first native build that loads, or why none did. Never throws; remembered once tried. */
export function loadUws(): UwsLoad {
  if (cached) return cached;
  const whys: string[] = [];
  for (const attempt of [tryUpstream, tryTrufflesuite]) {
    const a = attempt();
    if ('uws' in a) return (cached = { ok: true, uws: a.uws });
    whys.push(a.why);
  }
  return (cached = {
    ok: false,
    reason: `no native uWebSockets.js build for Node ${process.versions.node} (ABI ${process.versions.modules}, ${process.platform}-${process.arch}): ${whys.join('; ')}`,
  });
}
