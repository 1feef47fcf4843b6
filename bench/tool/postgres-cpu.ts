// The Postgres server's CPU, as one more bench "process": the sum of user + system time of every
// process named `postgres` on this machine (postmaster, backends, WAL writer, checkpointer, and
// the backends already reaped), read
// from /proc around each measured window. So a run reports Postgres CPU per request beside the
// gateway's own. Only meaningful when the database runs on this machine (the embedded one or
// DATABASE_URL at 127.0.0.1) and nothing else uses it during the run.
import { readdir, readFile } from 'node:fs/promises';
import type { ProcessSnapshot } from './child.js';
import type { BenchProcess } from './bench-process.js';

/** Clock ticks per second of /proc/<pid>/stat times (USER_HZ: 100 on Linux). */
const TICKS_PER_S = 100;

async function postgresCpuUs(): Promise<number> {
  let ticks = 0;
  let entries: string[];
  try {
    entries = await readdir('/proc');
  } catch {
    return 0;
  }
  for (const d of entries) {
    if (d.charCodeAt(0) < 48 || d.charCodeAt(0) > 57) continue;
    let st: string;
    try {
      st = await readFile(`/proc/${d}/stat`, 'utf8');
    } catch {
      continue; // ended meanwhile
    }
    const close = st.lastIndexOf(')');
    if (st.slice(st.indexOf('(') + 1, close) !== 'postgres') continue;
    const f = st.slice(close + 2).split(' ');
    // utime, stime, and cutime, cstime: the postmaster's reaped backends, so a backend that exits
    // during a window (a pool closing idle connections) does not take its CPU out of the sum.
    ticks += Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]);
  }
  return (ticks * 1_000_000) / TICKS_PER_S;
}

export const POSTGRES_SERVER = 'postgres (server)';

export function postgresServerProcess(): BenchProcess {
  return {
    name: POSTGRES_SERVER,
    pid: 0,
    extraPids: [],
    async stats(): Promise<ProcessSnapshot> {
      return { cpuUs: await postgresCpuUs(), rssBytes: 0, peakRssBytes: 0, eldP50Ms: 0, eldP99Ms: 0, eldMaxMs: 0 };
    },
    async audit() {
      return null;
    },
    async stop() {},
  };
}
