// Module hooks behind test/loader/register.js: `./x.js` written in a .ts file finds `./x.ts` (the
// NodeNext convention the sources follow), and a .ts file loads as the ES module TypeScript's
// transpileModule makes of it (no type check: tsc does that once per run). The output is cached under
// node_modules/.cache/inkgate-ts by a hash of the source, the compiler version and these options, so
// parallel test processes share one transpile per file and an edit is never served stale.
// The hooks are synchronous so that Node 22.15 and later run them in the loading thread
// (module.registerHooks); Node 20 gets the async wrappers at the end, on its hooks thread.
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const cacheDir = join(root, 'node_modules', '.cache', 'inkgate-ts');
const OPTIONS = {
  target: 'ES2022',
  // ES module output whatever the file name: every .ts here is an ES module (package.json type).
  module: 'ES2022',
  esModuleInterop: true,
  resolveJsonModule: true,
  isolatedModules: true,
  inlineSourceMap: true,
  inlineSources: true,
};
let ts = null; // loaded on the first cache miss only: most processes never need the compiler
let salt = null;

function compilerVersion() {
  try {
    return JSON.parse(readFileSync(join(root, 'node_modules', 'typescript', 'package.json'), 'utf8')).version;
  } catch {
    return 'unknown';
  }
}

function transpile(path, source) {
  salt ??= `${compilerVersion()}\0${JSON.stringify(OPTIONS)}\0`;
  const key = createHash('sha256').update(salt).update(path).update('\0').update(source).digest('hex').slice(0, 40);
  // Named after the file too, so a person (or a test) can tell the entries apart.
  const cached = join(cacheDir, `${basename(path, '.ts')}-${key}.js`);
  try {
    return readFileSync(cached, 'utf8');
  } catch {
    // a miss: transpile below
  }
  ts ??= createRequire(import.meta.url)('typescript');
  const out = ts.transpileModule(source, { fileName: path, compilerOptions: ts.convertCompilerOptionsFromJson(OPTIONS, root).options });
  mkdirSync(cacheDir, { recursive: true });
  // Written aside and renamed: a process reading the cache never sees half a file.
  const tmp = `${cached}.${process.pid}.${Math.random().toString(36).slice(2)}`;
  writeFileSync(tmp, out.outputText);
  renameSync(tmp, cached);
  return out.outputText;
}

export function resolveSync(specifier, context, next) {
  // Only paths, never bare package names: those are node_modules' business.
  const parent = context.parentURL;
  if (parent !== undefined && specifier.endsWith('.js') && (specifier.startsWith('./') || specifier.startsWith('../') || specifier.startsWith('file:'))) {
    const asTs = new URL(`${specifier.slice(0, -3)}.ts`, parent);
    // Handed on, not short-circuited: hooks registered after these (a test's watch) still see it.
    if (existsSync(fileURLToPath(asTs))) return next(asTs.href, context);
  }
  return next(specifier, context);
}

export function loadSync(url, context, next) {
  if (url.startsWith('file:') && url.endsWith('.ts')) {
    const path = fileURLToPath(url);
    return { format: 'module', source: transpile(path, readFileSync(path, 'utf8')), shortCircuit: true };
  }
  return next(url, context);
}

export const resolve = async (specifier, context, next) => resolveSync(specifier, context, next);
export const load = async (url, context, next) => loadSync(url, context, next);
