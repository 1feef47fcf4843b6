// The token-count pool's worker thread (token-count-pool.ts): counts the texts of one request at a
// time, off the event loop that serves every other client. Builds its own rank table (~200 ms,
// ~5 MB) once, when the pool first starts it.
import { parentPort } from 'node:worker_threads';
import { countTexts } from './token-count.js';

export interface CountJob {
  readonly id: number;
  readonly verbatim: readonly string[];
  readonly hold: readonly string[];
}

parentPort!.on('message', (job: CountJob) => {
  const counts = countTexts(job.verbatim, job.hold);
  parentPort!.postMessage({ id: job.id, verbatim: counts.verbatim, hold: counts.hold });
});
