// The token-count pool's worker thread (token-count-pool.ts): counts the texts of one request at a
// time, off the event loop that serves every other client. It starts with the pool's rank table
// (workerData, shared memory: token-count.ts takes it from there), so it builds none of its own.
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
