// The event loop's delay, as a log line needs it: how late this process's own timers ran around now.
// A Postgres or Redis timeout is a timer too; after a long synchronous step it fires late and says
// "the store did not answer" about a peer that may have answered in time. Every warn and error line
// carries `loopDelayMs` (util/log.ts) so a stall on our side is never read as a slow database.
//
// One probe per process: a timer every PROBE_MS (unref'd, it keeps nothing alive) notes how late it
// ran. The figure is the largest lateness in the last one to two windows, or how overdue the probe
// is right now when the reading is taken inside or just after a long tick (the probe has had no
// chance to run yet). A few dozen timer callbacks a second: nothing against a request.
import { performance } from 'node:perf_hooks';

const PROBE_MS = 20;
/** A window's length: a reading covers the last WINDOW_MS to 2 * WINDOW_MS. */
const WINDOW_MS = 2000;

let timer: NodeJS.Timeout | undefined;
let dueMs = 0;
let windowStartMs = 0;
let currentMaxMs = 0;
let previousMaxMs = 0;

function tick(): void {
  const now = performance.now();
  const late = now - dueMs;
  if (now - windowStartMs >= WINDOW_MS) {
    previousMaxMs = currentMaxMs;
    currentMaxMs = 0;
    windowStartMs = now;
  }
  if (late > currentMaxMs) currentMaxMs = late;
  dueMs = now + PROBE_MS;
}

/** Starts the probe once per process (later calls do nothing). */
export function startLoopDelayProbe(): void {
  if (timer !== undefined) return;
  const now = performance.now();
  dueMs = now + PROBE_MS;
  windowStartMs = now;
  timer = setInterval(tick, PROBE_MS);
  timer.unref();
}

/**
 * The event loop's delay around now, whole ms: the largest lateness of the probe over the last
 * one to two windows, or how overdue it is at this moment if more. undefined while no probe runs.
 */
export function loopDelayMs(): number | undefined {
  if (timer === undefined) return undefined;
  const overdue = performance.now() - dueMs;
  return Math.max(0, Math.round(Math.max(currentMaxMs, previousMaxMs, overdue)));
}
