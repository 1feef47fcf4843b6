#!/usr/bin/env node
// `npm test`: typecheck, build, pick the stores, run every test with tap, print one closing line.
// `npm run test:quick` (--quick): typecheck, then only the files test/quick-tier.txt lists, no build.
// Stores: the machine's PostgreSQL (127.0.0.1:5432, database test) and Redis (127.0.0.1:6379) when
// they answer, otherwise an embedded PostgreSQL and the in-process limiter. It says which it used.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { delimiter, join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
// tsc and tap run on this very node (their `#!/usr/bin/env node` would pick whichever node is first
// on PATH), and every child finds it first on PATH too: tap runs each test file on its own
// process.execPath, and tests spawn process.execPath.
const bin = (n) => join(root, 'node_modules', '.bin', n);
const nodePath = `${dirname(process.execPath)}${delimiter}${process.env.PATH ?? ''}`;
console.log(`# node ${process.version} (${process.execPath})`);

function step(name, cmd, args) {
  process.stdout.write(`# ${name}\n`);
  const r = spawnSync(process.execPath, [cmd, ...args], { cwd: root, stdio: 'inherit', env: { ...process.env, PATH: nodePath } });
  if (r.status !== 0) {
    process.stdout.write(`0 passed, 1 failed\n# ${name} failed\n`);
    process.exit(1);
  }
}

/** Sends `probe` to host:port and resolves true when the answer starts with `expect` within 1 s. */
function answers(port, probe, expect) {
  return new Promise((resolve) => {
    const s = connect({ host: '127.0.0.1', port });
    const done = (ok) => {
      s.destroy();
      resolve(ok);
    };
    s.setTimeout(1000, () => done(false));
    s.on('error', () => done(false));
    s.on('connect', () => s.write(probe));
    s.on('data', (d) => done(expect(d)));
  });
}

const pgProbe = Buffer.from([0, 0, 0, 8, 4, 210, 22, 47]); // SSLRequest: a Postgres answers 'S' or 'N'
const isPg = (d) => d.length >= 1 && (d[0] === 0x53 || d[0] === 0x4e);
const isRedis = (d) => d.toString().startsWith('+PONG');

const args = process.argv.slice(2);
const quick = args[0] === '--quick';
if (quick) args.shift();

step('typecheck (tsc --noEmit)', bin('tsc'), ['-p', 'tsconfig.json', '--noEmit']);
if (!quick) step('build (tsc -> dist/)', bin('tsc'), ['-p', 'tsconfig.build.json']);

// tap runs its test files with the plugins it was built with, and it rebuilds for the configured
// ones (package.json: no ts-node, no mocks) only after it has picked the loaders of the run it is in.
// On a fresh install that first run would load ts-node and the mock loader into every test process;
// so the plugins are built first whenever the built set is not the configured one.
function tapPluginsBuilt() {
  const listed = spawnSync(process.execPath, [bin('tap'), 'plugin', 'list'], { cwd: root, encoding: 'utf8', env: { ...process.env, PATH: nodePath } });
  let built = '';
  try {
    const index = readFileSync(join(root, 'node_modules', '@tapjs', 'test', 'test-built', 'dist', 'esm', 'index.js'), 'utf8');
    built = /export const signature = `([^`]*)`/.exec(index)?.[1] ?? '';
  } catch {
    // not built at all
  }
  const norm = (text) =>
    text
      .trim()
      .split('\n')
      .map((l) => l.trim())
      .filter(Boolean)
      .sort()
      .join('\n');
  return listed.status === 0 && norm(listed.stdout) === norm(built);
}
// The test loader's transpile cache (test/loader/hooks.js) gains an entry per edited file: bounded here.
const TS_CACHE = join(root, 'node_modules', '.cache', 'inkgate-ts');
const TS_CACHE_MAX_ENTRIES = 5_000;
try {
  if (readdirSync(TS_CACHE).length > TS_CACHE_MAX_ENTRIES) rmSync(TS_CACHE, { recursive: true, force: true });
} catch {
  // no cache yet
}

if (!tapPluginsBuilt()) step("tap build (tap's test class with the configured plugins)", bin('tap'), ['build']);

const env = { ...process.env, PATH: nodePath };
let embedded;
let tmp;
if (env.DATABASE_URL) {
  env.TEST_DATABASE_URL = env.DATABASE_URL;
  console.log(`# stores: PostgreSQL from DATABASE_URL`);
} else if (await answers(5432, pgProbe, isPg)) {
  env.TEST_DATABASE_URL = 'postgres://postgres@127.0.0.1:5432/test';
  console.log("# stores: PostgreSQL at 127.0.0.1:5432/test (the machine's)");
} else {
  tmp = mkdtempSync(join(tmpdir(), 'inkgate-test-'));
  const { startEmbeddedPostgres } = await import(join(root, 'dist', 'src', 'store', 'embedded.js'));
  embedded = await startEmbeddedPostgres(tmp, (event, fields) => console.log(`# ${event} ${JSON.stringify(fields)}`));
  env.TEST_DATABASE_URL = embedded.url;
  console.log('# stores: embedded PostgreSQL (127.0.0.1:5432 did not answer)');
}
// The suite creates and drops a few thousand schemas; where autovacuum is off (as on some CI
// machines) the dead catalog rows they leave make every later CREATE and DROP slower, until DDL
// in a test's set-up or teardown runs into its timeout. Vacuum those catalogs first (bounded).
if (!embedded) await vacuumCatalogs(env.TEST_DATABASE_URL);

async function vacuumCatalogs(url) {
  const { default: pg } = await import('pg');
  const client = new pg.Client({ connectionString: url, statement_timeout: 120_000, connectionTimeoutMillis: 5_000 });
  const started = Date.now();
  try {
    await client.connect();
    const catalogs = ['pg_depend', 'pg_attribute', 'pg_class', 'pg_constraint', 'pg_index', 'pg_trigger', 'pg_attrdef', 'pg_type', 'pg_proc', 'pg_namespace'];
    await client.query(`VACUUM ${catalogs.map((c) => `pg_catalog.${c}`).join(', ')}`);
    console.log(`# stores: vacuumed PostgreSQL's catalogs in ${Date.now() - started} ms`);
  } catch (e) {
    console.log(`# stores: could not vacuum PostgreSQL's catalogs (${e.message}); going on`);
  } finally {
    await client.end().catch(() => {});
  }
}

if (env.REDIS_URL) {
  env.TEST_REDIS_URL = env.REDIS_URL;
  console.log('# stores: Redis from REDIS_URL');
} else if (await answers(6379, 'PING\r\n', isRedis)) {
  env.TEST_REDIS_URL = 'redis://127.0.0.1:6379';
  console.log("# stores: Redis at 127.0.0.1:6379 (the machine's)");
} else {
  env.TEST_REDIS_URL = '';
  console.log('# stores: in-process rate limiter (127.0.0.1:6379 did not answer); Redis-only tests use a private redis-server when one is installed');
}

// Only *.test.ts files are tests: helpers and this runner are not.
function testFiles(dir) {
  const out = [];
  for (const e of readdirSync(join(root, dir), { withFileTypes: true })) {
    const rel = join(dir, e.name);
    if (e.isDirectory()) out.push(...testFiles(rel));
    else if (e.name.endsWith('.test.ts')) out.push(rel);
  }
  return out.sort();
}
/** The quick tier's files: test/quick-tier.txt, a file or a folder per line, # comments. */
function quickFiles() {
  const lines = readFileSync(join(root, 'test', 'quick-tier.txt'), 'utf8')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'));
  return lines.flatMap((l) => (l.endsWith('/') ? testFiles(l.slice(0, -1)) : [l]));
}
const files = args.length > 0 ? args : quick ? quickFiles() : testFiles('test');
const child = spawn(process.execPath, [bin('tap'), '--reporter=tap', ...files], { cwd: root, env, stdio: ['ignore', 'pipe', 'inherit'] });
let pass = 0;
let fail = 0;
let carry = '';
// What failed, gathered as the stream goes by and printed again just before the closing line, so a
// log that keeps only its tail still names every failed file, assertion and the reason tap gave.
const failures = [];
let nested = [];
let diag = null;
function noteFailure(l) {
  const indent = /^ */.exec(l)[0].length;
  const body = l.slice(indent);
  if (diag) {
    if (body === '...' || (indent <= diag.indent && body !== '')) diag = null;
    else {
      const keep = /^(lineNumber|message|error|code|found|wanted|errno|syscall|signal): /.test(body) || /^[-+][^-+]/.test(body);
      if (keep && diag.lines.length < 6) diag.lines.push(body.slice(0, 200));
      return;
    }
  }
  if (indent === 0 && /^(not )?ok \d+ - /.test(body)) {
    if (body.startsWith('not ok')) failures.push({ file: body.replace(/^not ok \d+ - /, ''), nested });
    nested = [];
    return;
  }
  if (/^not ok \d+ - /.test(body)) {
    const entry = { depth: indent / 4, name: body.replace(/^not ok \d+ - /, ''), lines: [] };
    if (nested.length < 40) nested.push(entry);
    diag = { indent, lines: entry.lines };
  }
}
child.stdout.on('data', (d) => {
  process.stdout.write(d);
  const text = carry + d.toString();
  const lines = text.split('\n');
  carry = lines.pop() ?? '';
  for (const l of lines) {
    noteFailure(l);
    // Top-level results of each test file count once per assertion via the summary below.
    const m = /^# \{ total: (\d+), pass: (\d+)(?:, fail: (\d+))?/.exec(l);
    if (m) {
      pass = Number(m[2]);
      fail = Number(m[3] ?? 0);
    }
    if (/^# (fail|failed)\s+(\d+)/.test(l)) fail = Math.max(fail, Number(/(\d+)/.exec(l)[1]));
  }
});
const code = await new Promise((r) => child.on('close', (c) => r(c ?? 1)));
if (embedded) await embedded.stop();
if (tmp) rmSync(tmp, { recursive: true, force: true });
if (code !== 0 && fail === 0) fail = 1;
if (failures.length > 0) {
  console.log(`# failed: ${failures.length} file(s)`);
  for (const f of failures) {
    console.log(`#   ${f.file}`);
    for (const n of f.nested) {
      const pad = '  '.repeat(n.depth);
      console.log(`#   ${pad}not ok - ${n.name}`);
      for (const dl of n.lines) console.log(`#   ${pad}    ${dl}`);
    }
  }
}
console.log(`${pass} passed, ${fail} failed`);
process.exit(code);
