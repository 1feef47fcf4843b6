// The container files cannot be built here (no image registry), so what can be checked without
// Docker is: every variable compose.yaml sets on an inkgate service is one the configuration
// reads (a misspelt name would be ignored silently), the values it sets load as a valid
// configuration, and the Dockerfile's run stage copies files that exist and runs no compiler.
import { existsSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import t from 'tap';
import { knownEnvironmentVariables, loadConfig, PROJECT_ROOT } from '../../src/config/config.js';
import { ASSETS_DIR } from '../../src/console/static.js';
import { FUNCTIONS_DIR, MIGRATIONS_DIR } from '../../src/store/migrate.js';

interface Service {
  readonly name: string;
  readonly lines: string[];
}

/** The services of a compose file written in block style (two-space indents), each with its lines. */
function services(text: string): Service[] {
  const out: Service[] = [];
  let inServices = false;
  for (const line of text.split('\n')) {
    if (/^\S/.test(line)) inServices = line.startsWith('services:');
    else if (inServices && /^ {2}[a-z0-9_-]+:\s*$/.test(line)) out.push({ name: line.trim().slice(0, -1), lines: [] });
    else if (inServices && out.length > 0) out[out.length - 1]!.lines.push(line);
  }
  return out;
}

/** A service's `environment:` map, values unquoted and ${VAR:-default} replaced by its default. */
function environment(s: Service): Record<string, string> {
  const env: Record<string, string> = {};
  let inEnv = false;
  for (const line of s.lines) {
    if (/^ {4}\S/.test(line)) inEnv = line.trim() === 'environment:';
    else if (inEnv) {
      const m = /^ {6}([A-Za-z_][A-Za-z0-9_]*):\s*(.*)$/.exec(line);
      if (!m) continue;
      env[m[1]!] = m[2]!.replace(/^"(.*)"$/, '$1').replace(/\$\{[A-Z0-9_]+:-([^}]*)\}/g, '$1');
    }
  }
  return env;
}

const compose = readFileSync(join(PROJECT_ROOT, 'compose.yaml'), 'utf8');
const inkgate = services(compose).filter((s) => s.lines.some((l) => /^ {4}build:/.test(l)));

t.test('every variable the compose file sets on inkgate is known to the configuration', async (t) => {
  t.ok(inkgate.length >= 3, `inkgate services: ${inkgate.map((s) => s.name).join(', ')}`);
  const known = new Set(knownEnvironmentVariables());
  for (const s of inkgate) {
    const env = environment(s);
    t.ok(Object.keys(env).length > 0, `${s.name} sets variables`);
    for (const name of Object.keys(env)) t.ok(known.has(name), `${s.name}: ${name} is read by the configuration`);
    t.doesNotThrow(() => loadConfig(env), `${s.name}: its values load as a valid configuration`);
  }
  const gateways = inkgate.filter((s) => s.name.startsWith('gateway'));
  t.ok(gateways.length >= 2, 'two gateways');
  for (const s of gateways) {
    const cfg = loadConfig(environment(s));
    t.equal(cfg.server.proxyProtocol, true, `${s.name} reads the balancer's PROXY header`);
    t.not(cfg.redis.url, null, `${s.name} shares Redis`);
    t.not(cfg.db.url, null, `${s.name} shares Postgres`);
  }
  t.equal(new Set(gateways.map((s) => environment(s).INKGATE_INSTANCE_ID)).size, gateways.length, 'each gateway has its own instance id');
});

t.test('the known variables include the ones the docs and the Dockerfile use', async (t) => {
  const known = new Set(knownEnvironmentVariables());
  for (const v of [
    'DATABASE_URL',
    'REDIS_URL',
    'INKGATE_PORT',
    'INKGATE_ADMIN_PORT',
    'INKGATE_ADMIN_HOST',
    'INKGATE_TRUSTED_PROXIES',
    'INKGATE_PROXY_PROTOCOL',
    'INKGATE_SERVER_ENGINE',
    'INKGATE_LOG_LEVEL',
    'INKGATE_DRAIN_DELAY_MS',
    'INKGATE_CONFIG',
  ])
    t.ok(known.has(v), v);
  const docker = readFileSync(join(PROJECT_ROOT, 'Dockerfile'), 'utf8');
  for (const m of docker.matchAll(/\b((?:INKGATE|DATABASE|REDIS)_[A-Z0-9_]+)=/g)) t.ok(known.has(m[1]!), `Dockerfile sets ${m[1]}, which is read`);
});

t.test('the Dockerfile: two stages, the run stage copies what exists and has no compiler', async (t) => {
  const docker = readFileSync(join(PROJECT_ROOT, 'Dockerfile'), 'utf8');
  const stages = docker.split(/^FROM /m).slice(1);
  t.equal(stages.length, 2, 'a build stage and a run stage');
  const run = stages[1]!;
  t.match(run, /^USER node$/m, 'runs as the unprivileged node user');
  t.notMatch(run, /\btsc\b|npm (ci|install)/, 'no compiler and no install in the run stage');
  t.match(stages[0]!, /npm prune --omit=dev/, 'dev dependencies (typescript) are pruned before the copy');
  for (const m of run.matchAll(/^COPY (?!--from)(\S+) /gm)) t.ok(existsSync(join(PROJECT_ROOT, m[1]!)), `COPY ${m[1]} exists`);
  // dist/ holds compiled code only: every directory the code reads from src/ at run time is copied too.
  for (const dir of [MIGRATIONS_DIR, FUNCTIONS_DIR, ASSETS_DIR]) {
    const rel = relative(PROJECT_ROOT, dir);
    t.match(run, new RegExp(`^COPY ${rel} \\./${rel}$`, 'm'), `the run stage copies ${rel}`);
  }
  const pkg = JSON.parse(readFileSync(join(PROJECT_ROOT, 'package.json'), 'utf8')) as { devDependencies: Record<string, string> };
  t.ok('typescript' in pkg.devDependencies, 'typescript is a dev dependency (pruned)');
});
