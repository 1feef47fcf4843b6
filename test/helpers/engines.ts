// The HTTP engines the tests run on this Node: node:http always, uWS where a native build loads.
// Where uWS does not load, each per-engine test says so (a skip with the loader's reason), never silently.
import t, { type Test } from 'tap';
import type { EngineName } from '../../src/server/engine.js';
import { loadUws } from '../../src/server/uws-loader.js';

const uws = loadUws();

/** The engines that load here. */
export const testEngines: readonly EngineName[] = uws.ok ? ['uws', 'node'] : ['node'];

/** Why uWS is not tested here, or undefined when it is. */
export const uwsMissing: string | undefined = uws.ok ? undefined : uws.reason;

/** One subtest per engine, named `<name> [<engine>]`; the uWS one is skipped with its reason where no build loads. */
export function eachEngine(name: string, fn: (t: Test, engine: EngineName) => Promise<void>, opts: { timeout?: number } = {}, parent: Test = t): void {
  for (const engine of ['uws', 'node'] as const) {
    if (engine === 'uws' && uwsMissing !== undefined) parent.test(`${name} [uws]`, { skip: `uws engine: ${uwsMissing}` }, async () => {});
    else parent.test(`${name} [${engine}]`, opts, (tt) => fn(tt, engine));
  }
}
