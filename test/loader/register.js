// `node --import ./test/loader/register.js file.ts`: runs the TypeScript sources of this repository
// (tests, helpers, benches, the product's src/) with no build step. Every test file and every child a
// test spawns starts with it, so its cost is paid a few hundred times a run: the hooks transpile a
// file once per content and keep the JavaScript in node_modules/.cache, where the next process finds
// it without loading the compiler. Types are checked once by `tsc --noEmit` in test/run.js.
import module from 'node:module';
import { loadSync, resolveSync } from './hooks.js';

// In-thread hooks where Node has them (22.15 and later); Node 20 runs the same hooks on its hooks thread.
if (typeof module.registerHooks === 'function') module.registerHooks({ resolve: resolveSync, load: loadSync });
else module.register('./hooks.js', import.meta.url);
