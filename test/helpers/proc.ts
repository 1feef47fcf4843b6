// Processes by pid, from /proc (Linux): what the tests that pause or kill real servers need.
import { readdirSync, readFileSync, rmSync } from 'node:fs';

const MAX_CHILDREN = 10_000;

/** Parent pid and state of `pid`, or undefined once it is gone. */
export function procStat(pid: number): { ppid: number; state: string } | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  // Field 2 (the command) may hold spaces, so read after its ')': state, then parent pid.
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { state: rest[0] ?? '', ppid: Number(rest[1]) };
}

/** Direct children of `pid` (at most 10,000). */
export function childrenOf(pid: number): number[] {
  const out: number[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    if (procStat(Number(name))?.ppid === pid) out.push(Number(name));
    if (out.length >= MAX_CHILDREN) break;
  }
  return out;
}

/** Sends a signal; a process already gone is not an error. */
export function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ESRCH') throw e;
  }
}

/**
 * What a test process must not leave behind if it dies: clusters it started (maybe SIGSTOPped by
 * the test) and their temporary directories. At exit each postmaster is continued, with its
 * children, then asked for an immediate shutdown (SIGQUIT, which also ends its backends); the
 * directories are removed (an exiting backend writes nothing new). Callers take a process or a
 * directory out again once they have stopped it themselves.
 */
export const leftAtExit = { postmasters: new Set<number>(), dirs: new Set<string>() };

process.once('exit', () => {
  for (const p of leftAtExit.postmasters) {
    signal(p, 'SIGCONT');
    for (const c of childrenOf(p)) signal(c, 'SIGCONT');
    signal(p, 'SIGQUIT');
  }
  for (const d of leftAtExit.dirs) rmSync(d, { recursive: true, force: true });
});

export { freePort } from '../../src/util/process.js';
