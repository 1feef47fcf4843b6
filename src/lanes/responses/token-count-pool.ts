// Exact o200k counts of large prompts, off the event loop. Counting costs ~70 ms per MiB of
// ordinary text and up to ~0.5 us per byte (request.ts's rules block): a 4 MiB prompt counted on
// the event loop would stall every other client for ~0.3-2 s. No cheap bound can refuse such a
// prompt first: the longest o200k token is 128 bytes, so a 4 MiB body may hold as few as ~33,000
// tokens, well inside the context; only the count can tell. So prompts of up to
// INLINE_COUNT_CHARS are counted in place (a few ms at most), longer ones by one worker thread,
// one request at a time, with a bound on what may wait for it.
import { OneWorker } from '../../util/one-worker.js';
import { countTexts, rankTable, type TextCounts } from './token-count.js';
import type { CountJob } from './token-count-thread.js';

/** Up to this many UTF-16 code units, counted on the event loop (~4 ms of ordinary text, ~30 ms worst case). */
export const INLINE_COUNT_CHARS = 64 * 1024;
/** Text waiting for (or in) the worker beyond this is refused 503 (several full-size prompts already queue). */
export const MAX_QUEUED_COUNT_CHARS = 64 * 1024 * 1024;
/** The worker answers in seconds at most; past this the job fails (and the worker is replaced). */
const COUNT_TIMEOUT_MS = 60_000;

/** What the thread posts back for one job. */
interface CountAnswer {
  readonly id: number;
  readonly verbatim: number;
  readonly hold: number[];
}

/** A job needs nothing back from its request: the answer is the counts. */
export class TokenCountPool extends OneWorker<CountJob, CountAnswer, TextCounts, undefined> {
  constructor() {
    super({
      base: import.meta.url,
      thread: 'token-count-thread',
      maxQueued: MAX_QUEUED_COUNT_CHARS,
      timeoutMs: COUNT_TIMEOUT_MS,
      busyMessage: 'Too many large prompts are being counted on this instance; retry.',
      timeoutMessage: `token count took more than ${COUNT_TIMEOUT_MS} ms`,
      exitMessage: 'the token-count thread exited',
      // This thread's rank table (shared memory): the worker neither loads the rank list nor builds its own.
      workerData: { rankTable },
    });
  }

  count(verbatim: readonly string[], hold: readonly string[], chars: number): Promise<TextCounts> {
    return this.run(chars, undefined, (id) => ({ job: { id, verbatim, hold } }));
  }

  protected answer(message: CountAnswer): TextCounts {
    return { verbatim: message.verbatim, hold: message.hold };
  }
}

const pool = new TokenCountPool();

/** The counts of a request's texts: in place when short, on the worker thread when long. */
export function countRequestTexts(verbatim: readonly string[], hold: readonly string[], chars: number): TextCounts | Promise<TextCounts> {
  if (chars <= INLINE_COUNT_CHARS) return countTexts(verbatim, hold);
  return pool.count(verbatim, hold, chars);
}

/**
 * Starts the worker and waits until it counts (it is handed this thread's rank table, so a start
 * costs a thread's own start-up only). Otherwise the first long prompt waits for that itself.
 */
export async function warmTokenCountPool(): Promise<void> {
  await pool.count(['warm'], [], 4);
}
