// Processes by pid, from /proc (Linux): what the tests that pause or kill real servers need.
import { readdirSync, readFileSync } from 'node:fs';

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

export { freePort } from '../../src/util/process.js';
