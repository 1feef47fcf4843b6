// Bookkeeping the ledger finishes in the background once the store is back: an abandoned
// reserve's tombstone (reserve-void.ts) and a usage_unknown mark (request-marks.ts). No money rule
// is decided here: each attempt is a move that asserts its own rules, and an attempt that broke one
// (LedgerAssertionError, already handed to the fail-stop by the move) is never tried again. What
// this module keeps is a bound: a fixed list of delays, then a log line, and close() waits for
// what is running.
import { isLedgerAssertion } from './assertion.js';
import type { EventLog } from '../util/log.js';
import type { LogEvent } from '../util/log-events.js';

export class BackgroundRetries {
  private readonly running = new Set<Promise<void>>();
  private readonly timers = new Set<NodeJS.Timeout>();
  private closed = false;

  constructor(
    private readonly delaysMs: readonly number[],
    private readonly log: EventLog,
  ) {}

  /** Background work close() waits for. */
  track(promise: Promise<unknown>): void {
    const done = promise.then(() => undefined);
    this.running.add(done);
    void done.finally(() => this.running.delete(done));
  }

  /**
   * Runs `attempt` again `delaysMs[delayIndex]` from now and, while it fails, after each following delay;
   * when the delays run out (or the ledger closes) it logs `gaveUp`.
   */
  retryLater(gaveUp: LogEvent, requestId: string, attempt: () => Promise<unknown>, delayIndex = 0): void {
    const delay = this.delaysMs[delayIndex];
    if (delay === undefined || this.closed) {
      this.log({ requestId }, gaveUp);
      return;
    }
    const t = setTimeout(() => {
      this.timers.delete(t);
      this.track(
        attempt().then(
          () => undefined,
          (e: unknown) => this.failed(e, gaveUp, requestId, attempt, delayIndex + 1),
        ),
      );
    }, delay);
    t.unref();
    this.timers.add(t);
  }

  /** An attempt failed: try again later, unless it broke a money rule (the fail-stop has it). */
  failed(error: unknown, gaveUp: LogEvent, requestId: string, attempt: () => Promise<unknown>, delayIndex = 0): void {
    if (isLedgerAssertion(error)) this.log({ requestId, err: error.message }, gaveUp);
    else this.retryLater(gaveUp, requestId, attempt, delayIndex);
  }

  /** No new retries; waits for the attempts running now. */
  async close(): Promise<void> {
    this.closed = true;
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    await Promise.allSettled([...this.running]);
  }
}
