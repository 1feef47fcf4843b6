// A private redis-server for tests that pause, kill and restart it (never do that to a shared
// service). Started on a free 127.0.0.1 port, no persistence, killed when the test process exits.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { tmpdir } from 'node:os';
import type { Test } from 'tap';
import { freePort } from './proc.js';

export class RedisServerMissingError extends Error {
  constructor() {
    super('redis-server is not on PATH: install it (apt-get install redis-server) to run the Redis tests');
    this.name = 'RedisServerMissingError';
  }
}

/** REDIS_URL from the environment (tests read the environment only through helpers). */
export const envRedisUrl = (): string | undefined => process.env.REDIS_URL || undefined;

const START_TIMEOUT_MS = 10_000;
const STOP_TIMEOUT_MS = 5_000;

/** Spawns redis-server on `port`; resolves when it accepts connections. */
async function spawnRedis(port: number): Promise<ChildProcess> {
  const child = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', tmpdir(), '--loglevel', 'notice'],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let out = '';
  return new Promise<ChildProcess>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`redis-server on port ${port} did not start within ${START_TIMEOUT_MS} ms:\n${out}`));
    }, START_TIMEOUT_MS);
    const onData = (b: Buffer) => {
      out += b.toString('utf8');
      if (out.includes('Ready to accept connections')) {
        clearTimeout(timer);
        child.stdout!.off('data', onData);
        child.stdout!.resume(); // keep draining so the pipe never fills
        resolve(child);
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', (b: Buffer) => (out += b.toString('utf8')));
    child.once('error', (err: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      reject(err.code === 'ENOENT' ? new RedisServerMissingError() : err);
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`redis-server on port ${port} exited (${code ?? signal}) before ready:\n${out}`));
    });
  });
}

export interface PrivateRedis {
  readonly port: number;
  readonly url: string;
  readonly pid: number;
  /** SIGSTOP: the process keeps its sockets open but answers nothing. */
  pause(): void;
  /** SIGCONT */
  resume(): void;
  /** SIGKILL, resolves once the process is gone. */
  kill(): Promise<void>;
  /** Starts a fresh (empty) server on the same port. */
  restart(): Promise<void>;
  /** Stops it for good (safe to call twice). */
  stop(): Promise<void>;
}

const live = new Set<ChildProcess>();
let exitHookInstalled = false;

function track(child: ChildProcess): void {
  live.add(child);
  child.once('exit', () => live.delete(child));
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.once('exit', () => {
      for (const c of live) c.kill('SIGKILL');
    });
  }
}

async function killAndWait(child: ChildProcess, signal: NodeJS.Signals): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGCONT'); // a stopped process does not act on SIGTERM until continued
  child.kill(signal);
  const timer = setTimeout(() => child.kill('SIGKILL'), STOP_TIMEOUT_MS);
  await exited;
  clearTimeout(timer);
}

/** Starts a private redis-server; throws RedisServerMissingError when the binary is absent. */
export async function startPrivateRedis(): Promise<PrivateRedis> {
  let child: ChildProcess | undefined;
  let port = 0;
  let lastErr: unknown;
  // A free port can be taken between probing and binding; try a few.
  for (let attempt = 0; attempt < 5 && child === undefined; attempt++) {
    port = await freePort();
    try {
      child = await spawnRedis(port);
    } catch (err) {
      if (err instanceof RedisServerMissingError) throw err;
      lastErr = err;
    }
  }
  if (child === undefined) throw lastErr;
  track(child);
  let current: ChildProcess = child;
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    get pid() {
      return current.pid!;
    },
    pause: () => {
      current.kill('SIGSTOP');
    },
    resume: () => {
      current.kill('SIGCONT');
    },
    kill: () => killAndWait(current, 'SIGKILL'),
    restart: async () => {
      await killAndWait(current, 'SIGKILL');
      current = await spawnRedis(port);
      track(current);
    },
    stop: () => killAndWait(current, 'SIGTERM'),
  };
}

/**
 * The Redis that several gateway processes share in a test: the suite's when one answered,
 * otherwise a private redis-server stopped at teardown. Without either the test fails (never
 * skips): `why` says what needed it.
 */
export async function sharedRedisUrl(t: Test, suiteUrl: string | null, why: string): Promise<string | null> {
  if (suiteUrl !== null) return suiteUrl;
  try {
    const r = await startPrivateRedis();
    t.teardown(() => r.stop());
    t.comment('Redis: a private redis-server (no shared Redis answered)');
    return r.url;
  } catch (e) {
    if (!(e instanceof RedisServerMissingError)) throw e;
    t.fail(`${why}: no REDIS_URL answered and redis-server is missing`);
    return null;
  }
}
