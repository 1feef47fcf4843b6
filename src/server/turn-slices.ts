// Request starts cut into slices of the serving thread's time. When hundreds of requests arrive
// in one turn of the event loop (a burst of streams opening together), starting each one at once
// ran every start's synchronous work (authentication, limits, parse, hold, vendor dispatch and its
// connect) back to back: the profile showed a single 270 ms stretch in which no running stream
// relayed a chunk. A start that finds the current slice spent waits for a later turn, after the
// loop has polled for I/O, so streams already open keep flowing between slices. Starts keep their
// order: deferred ones are queued in the order they were deferred, ahead of any later arrival.

/** What one slice of starts may take of the serving thread before the rest wait for the next turn. */
export const START_SLICE_MS = 5;

export class TurnSlices {
  private open = false;
  private openedMs = 0;
  /** Starts deferred so far, never reset (read by the tests). */
  deferred = 0;

  constructor(private readonly sliceMs: number = START_SLICE_MS) {}

  /**
   * Whether a start may run now. The first start of a turn opens a slice and queues its closing
   * as an immediate: queued before any start this slice defers, it runs first in the check phase
   * that follows (or, when the slice opened in that phase, in the next turn's), so the deferred
   * starts then open the next slice.
   */
  take(): boolean {
    const nowMs = performance.now();
    if (!this.open) {
      this.open = true;
      this.openedMs = nowMs;
      setImmediate(this.close);
      return true;
    }
    if (nowMs - this.openedMs < this.sliceMs) return true;
    this.deferred++;
    return false;
  }

  /** Runs `start(...args)` now when the current slice has time left, else in a later turn, in order. */
  run<A extends unknown[]>(start: (...args: A) => void, ...args: A): void {
    if (this.take()) start(...args);
    else setImmediate(this.rerun, start, args);
  }

  private rerunDeferred<A extends unknown[]>(start: (...args: A) => void, args: A): void {
    this.run(start, ...args);
  }

  /** Bound once: a deferred start costs the immediate and its arguments' array, no closure of its own. */
  private readonly rerun = this.rerunDeferred.bind(this);

  private readonly close = (): void => {
    this.open = false;
  };
}
