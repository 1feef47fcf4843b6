// `npm start` that fails after its embedded PostgreSQL is up leaves nothing running. The start is
// the real one (bin/start.js, a fresh data dir, no DATABASE_URL), made to fail honestly: the test
// holds the port the gateway (or its admin listener) must listen on. Then the process must exit 1
// with a one-line cause on stderr, its log must show the store started before the failure, and
// the cluster must be gone: no postgres process on the data dir, no postmaster.pid, its port closed.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { connect, createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { leftAtExit, signal } from '../helpers/proc.js';
import { eachEngine } from '../helpers/engines.js';

const root = new URL('../..', import.meta.url).pathname;
// Generous: initdb and a first start take a few seconds, longer on a loaded machine.
const EXIT_DEADLINE_MS = 90_000;
// Three starts run initdb (about 8 s each on a quiet machine, several times that on a loaded one).
t.setTimeout(360_000);

interface Failed {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stderr: string;
  /** stdout's JSON log lines, in order (the demo's other output left out). */
  readonly log: Array<Record<string, unknown>>;
}

/** A listener of the test's own on 127.0.0.1, holding a port for the start to find taken. */
async function occupy(t: Test): Promise<number> {
  const server: Server = createServer((s) => s.destroy());
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.teardown(() => new Promise<void>((r) => server.close(() => r())));
  return (server.address() as { port: number }).port;
}

/** Runs bin/start.js on `dataDir` with `env` added, and resolves once it exited (bounded). */
async function runStart(dataDir: string, env: Record<string, string>, args: string[] = []): Promise<Failed> {
  const base: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !['DATABASE_URL', 'REDIS_URL'].includes(k) && !k.startsWith('INKGATE_')) base[k] = v;
  const child = spawn(process.execPath, [join(root, 'bin/start.js'), ...args], {
    cwd: root,
    env: { ...base, INKGATE_DATA_DIR: dataDir, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => void (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => void (stderr += d.toString()));
  const exited = once(child, 'close') as Promise<[number | null, NodeJS.Signals | null]>;
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`start still running after ${EXIT_DEADLINE_MS} ms:\n${stdout}\n${stderr}`));
    }, EXIT_DEADLINE_MS);
  });
  try {
    const [code, sig] = await Promise.race([exited, deadline]);
    const log = stdout
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    return { code, signal: sig, stderr, log };
  } finally {
    clearTimeout(timer);
  }
}

/** Pids of the processes whose command line names `dir` (a postmaster runs as `postgres -D <dir>/pg ...`). */
function processesOn(dir: string): number[] {
  const out: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    let cmdline: string;
    try {
      cmdline = readFileSync(`/proc/${name}/cmdline`, 'utf8').replaceAll('\0', ' ');
    } catch {
      continue; // gone meanwhile
    }
    if (cmdline.includes(`${dir}/`)) out.push(Number(name));
  }
  return out;
}

/** Whether something accepts TCP connections on 127.0.0.1:port (an answer of either kind ends it). */
function accepts(port: number): Promise<boolean> {
  return new Promise((resolveA) => {
    const s = connect({ host: '127.0.0.1', port });
    s.once('connect', () => {
      s.destroy();
      resolveA(true);
    });
    s.once('error', () => resolveA(false));
  });
}

/** A fresh data dir; removed at the end, and any postmaster the start left on it stopped then. */
function dataDir(t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'inkgate-failed-start-'));
  leftAtExit.dirs.add(dir);
  t.teardown(() => {
    for (const pid of processesOn(dir)) signal(pid, 'SIGQUIT');
  });
  return dir;
}

/** What every failed start must show: exit 1, one readable line, the store up first, and no cluster left. */
async function checkNothingLeft(t: Test, dir: string, r: Failed, o: { step: string; cause: RegExp; started: string[] }): Promise<void> {
  t.equal(r.signal, null, 'the process ended by itself');
  t.equal(r.code, 1, 'exit code 1');
  const lines = r.stderr.split('\n').filter((l) => l !== '' && !l.startsWith('inkgate: building dist/'));
  t.equal(lines.length, 1, `one line on stderr: ${r.stderr}`);
  t.match(lines[0], new RegExp(`^inkgate: start failed \\(${o.step}\\): ${o.cause.source}$`), 'it names the step and the cause');
  t.notMatch(r.stderr, /^\s+at /m, 'no stack trace');

  const msgs = r.log.map((l) => String(l.msg));
  const storeUp = r.log.findIndex((l) => l.msg === 'store.opened' && l.kind === 'embedded');
  const failed = msgs.indexOf('gateway.start_failed');
  t.ok(storeUp >= 0 && failed > storeUp, 'the log shows the embedded store started, then the failure');
  t.same(r.log[failed]?.started, o.started, 'the parts started before the failure, oldest first');
  t.equal(r.log[failed]?.level, 'fatal', 'the failure is a fatal line');
  t.notOk(msgs.includes('gateway.shutdown_step_failed'), 'every stop succeeded');

  // postmaster.opts stays after a shutdown: the command line, port included, the cluster ran with.
  const opts = readFileSync(join(dir, 'pg', 'postmaster.opts'), 'utf8');
  const port = Number(/"-p" "(\d+)"/.exec(opts)?.[1]);
  t.ok(port > 0, `the cluster ran on port ${port}`);
  t.same(processesOn(dir), [], 'no process runs on the data dir');
  t.notOk(existsSync(join(dir, 'pg', 'postmaster.pid')), 'postmaster.pid removed: a clean shutdown');
  t.notOk(await accepts(port), 'the cluster port accepts no connection');
  t.notOk(existsSync(join(dir, 'embedded-pg.json')), 'no address record left for the CLI to follow');
}

// Each engine's listen fails on a port another socket holds (uWS does not share it: no SO_REUSEPORT with a node:net listener).
eachEngine('the public port taken: the gateway fails, the store is stopped', async (t, engine) => {
  const dir = dataDir(t);
  const port = await occupy(t);
  const r = await runStart(dir, { INKGATE_PORT: String(port), INKGATE_SERVER_ENGINE: engine });
  const cause =
    engine === 'uws' ? new RegExp(`cannot listen on 127\\.0\\.0\\.1:${port}`) : new RegExp(`listen EADDRINUSE: address already in use 127\\.0\\.0\\.1:${port}`);
  await checkNothingLeft(t, dir, r, { step: 'gateway', cause, started: ['store'] });
});

t.test('the admin port taken under --demo: the gateway, the store and the simulators are stopped', { timeout: 120_000 }, async (t) => {
  const dir = dataDir(t);
  const port = await occupy(t);
  const r = await runStart(dir, { INKGATE_PORT: '0', INKGATE_ADMIN_PORT: String(port) }, ['--demo']);
  await checkNothingLeft(t, dir, r, {
    step: 'admin listener',
    cause: new RegExp(`listen EADDRINUSE: address already in use 127\\.0\\.0\\.1:${port}`),
    started: ['demo vendor simulators', 'store', 'gateway'],
  });
  t.notOk(
    r.log.some((l) => l.msg === 'gateway.listening'),
    'the gateway never announced it serves',
  );
});

/** What a start that fails before its store is up must show: exit 1, one line saying what to do, no stack, nothing running. */
function checkRefused(t: Test, dir: string, r: Failed, cause: RegExp): void {
  t.equal(r.signal, null, 'the process ended by itself');
  t.equal(r.code, 1, 'exit code 1');
  const lines = r.stderr.split('\n').filter((l) => l !== '' && !l.startsWith('inkgate: building dist/'));
  t.equal(lines.length, 1, `one line on stderr: ${r.stderr}`);
  t.match(lines[0], new RegExp(`^inkgate: start failed \\(store\\): ${cause.source}`), 'it says why and what to do');
  t.notMatch(r.stderr, /^\s+at |Unhandled|node:events/m, 'no stack trace, no unhandled event');
  t.same(processesOn(dir), [], 'no process runs on the data dir');
}

t.test('a data dir that cannot be created: one line, exit 1, nothing started', { timeout: 120_000 }, async (t) => {
  const dir = dataDir(t);
  writeFileSync(join(dir, 'a-file'), 'not a directory');
  const target = join(dir, 'a-file', 'data');
  const r = await runStart(target, { INKGATE_PORT: '0', INKGATE_ADMIN_PORT: '0' });
  checkRefused(t, dir, r, /cannot create the data dir \S+ \(ENOTDIR\): set INKGATE_DATA_DIR to a directory this user can create, or set DATABASE_URL/);
});

t.test(
  'as root, a database the postgres user cannot reach: one line, exit 1, nothing started',
  { skip: process.getuid?.() === 0 ? false : 'needs root: only a root start runs PostgreSQL as another user', timeout: 120_000 },
  async (t) => {
    // A cluster directory already in place under a directory only root enters: it is not moved behind the operator's back.
    const dir = dataDir(t);
    const locked = join(dir, 'locked');
    mkdirSync(join(locked, 'data', 'pg'), { recursive: true, mode: 0o700 });
    chmodSync(locked, 0o700);
    const r = await runStart(join(locked, 'data'), { INKGATE_PORT: '0', INKGATE_ADMIN_PORT: '0' });
    checkRefused(t, dir, r, /embedded PostgreSQL: running as root, it runs as the 'postgres' user, which cannot reach the database in \S+\. Move/);
  },
);
