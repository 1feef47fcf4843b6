// Where a child process that runs the product loads it from: the compiled tree (dist/, which
// `npm test` builds before any test runs) when it is newer than every source file, otherwise the
// TypeScript sources through the test loader (test/loader). Compiled children start in a fraction of the CPU: on a
// busy two-core machine a dozen children transpiling the sources at once took minutes to start.
import { existsSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const DIST = join(root, 'dist');
/** What the build compiles into dist/ (tsconfig.build.json). */
const COMPILED_DIRS = ['src', 'simulators', join('bench', 'tool')];
/** The `--import` that runs this repository's TypeScript (test/loader/register.js), as a file URL: it holds whatever the child's cwd. */
export const TS_LOADER = pathToFileURL(join(root, 'test', 'loader', 'register.js')).href;

/** Newest modification time under `dir` of files ending in `ext`. */
function newestMtimeMs(dir: string, ext: string): number {
  let newest = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isDirectory()) newest = Math.max(newest, newestMtimeMs(p, ext));
    else if (e.name.endsWith(ext)) newest = Math.max(newest, statSync(p).mtimeMs);
  }
  return newest;
}

export interface ProductCode {
  /** True when children load dist/. */
  readonly compiled: boolean;
  /** Node flags a child needs to load it (the TypeScript loader, or none). */
  readonly execArgv: readonly string[];
  /** The file URL of a module of the product, by its path under src/ written with `.js`. */
  url(srcPath: string): string;
  /** The same for a module outside src/ that the build compiles too, e.g. `simulators/demo.js`. */
  rootUrl(path: string): string;
}

let cached: ProductCode | undefined;

/** Decided once per test process: dist/ does not change while tests run. */
export function productCode(): ProductCode {
  if (cached) return cached;
  const gw = join(DIST, 'src', 'gateway.js');
  const newestSource = Math.max(...COMPILED_DIRS.map((d) => newestMtimeMs(join(root, d), '.ts')));
  const compiled = existsSync(gw) && statSync(gw).mtimeMs >= newestSource;
  // dist/ mirrors the repository (dist/src, dist/simulators, dist/bench/tool).
  const rootUrl = (p: string) => pathToFileURL(resolve(compiled ? DIST : root, p)).href;
  cached = {
    compiled,
    execArgv: compiled ? [] : ['--import', TS_LOADER],
    url: (p) => rootUrl(join('src', p)),
    rootUrl,
  };
  return cached;
}
