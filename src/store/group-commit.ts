// Group commit: concurrent moves wait for each other briefly and go to Postgres as one statement
// and one commit. A hot wallet row serialises every transaction that touches it, and each holds the
// row lock through its commit's WAL flush; one statement for N moves pays that once instead of N
// times.
//
// Policy ("natural batching", no timer): a batch leaves as soon as a slot is free, at the next
// turn of the event loop (so every move submitted in the same tick rides along). While
// `maxInFlight` batches are running, new moves queue, and the queue leaves as one batch the moment
// a slot frees up. At low load a move waits for nothing (one round trip); under load batches grow
// to the size of the backlog, capped at `maxItems`.

export interface GroupCommitOptions {
  /** Most items in one batch (one statement). */
  readonly maxItems: number;
  /** Batches running at once. */
  readonly maxInFlight: number;
  /** Most items waiting; a submit beyond it is refused at once instead of queueing without bound. */
  readonly maxQueued: number;
}

interface Pending<I, O> {
  readonly item: I;
  readonly resolve: (output: O) => void;
  readonly reject: (error: unknown) => void;
}

export class QueueFullError extends Error {
  constructor(what: string, max: number) {
    super(`${what}: more than ${max} moves waiting`);
    this.name = 'QueueFullError';
  }
}

export class GroupCommit<I, O> {
  private queue: Pending<I, O>[] = [];
  private inFlight = 0;
  private scheduled = false;
  private closing: Promise<void> | undefined;
  private batches = 0;
  private items = 0;
  private drained: (() => void) | undefined;

  /**
   * `run` gets the items in submission order and must return one output per item, in the same
   * order; it throws only when the whole batch failed (then every item of it is rejected).
   */
  constructor(
    private readonly name: string,
    private readonly run: (items: I[]) => Promise<O[]>,
    private readonly opts: GroupCommitOptions,
  ) {
    if (!(opts.maxItems >= 1 && opts.maxInFlight >= 1 && opts.maxQueued >= opts.maxItems)) {
      throw new RangeError(`${name}: bad group-commit options ${JSON.stringify(opts)}`);
    }
  }

  submit(item: I): Promise<O> {
    if (this.closing) return Promise.reject(new Error(`${this.name}: closed`));
    if (this.queue.length >= this.opts.maxQueued) return Promise.reject(new QueueFullError(this.name, this.opts.maxQueued));
    return new Promise<O>((resolve, reject) => {
      this.queue.push({ item, resolve, reject });
      this.schedule();
    });
  }

  /** Items waiting, batches running, and totals so far (for tests, metrics and the bench). */
  get stats(): { queued: number; inFlight: number; batches: number; items: number } {
    return { queued: this.queue.length, inFlight: this.inFlight, batches: this.batches, items: this.items };
  }

  /** Refuses new items and resolves when everything already submitted has finished. */
  close(): Promise<void> {
    this.closing ??= new Promise<void>((resolve) => {
      this.drained = resolve;
      this.checkDrained();
    });
    return this.closing;
  }

  private schedule(): void {
    if (this.scheduled || this.inFlight >= this.opts.maxInFlight || this.queue.length === 0) return;
    this.scheduled = true;
    setImmediate(this.flush);
  }

  private readonly flush = (): void => {
    this.scheduled = false;
    while (this.inFlight < this.opts.maxInFlight && this.queue.length > 0) {
      const batch = this.queue.length <= this.opts.maxItems ? this.queue : this.queue.slice(0, this.opts.maxItems);
      this.queue = batch === this.queue ? [] : this.queue.slice(this.opts.maxItems);
      this.inFlight++;
      this.batches++;
      this.items += batch.length;
      void this.runBatch(batch);
    }
  };

  private async runBatch(batch: Pending<I, O>[]): Promise<void> {
    try {
      const items = new Array<I>(batch.length);
      for (let i = 0; i < batch.length; i++) items[i] = batch[i]!.item;
      const outs = await this.run(items);
      if (outs.length !== batch.length) throw new Error(`${this.name}: ${outs.length} results for ${batch.length} items`);
      for (let i = 0; i < batch.length; i++) batch[i]!.resolve(outs[i]!);
    } catch (e) {
      for (const p of batch) p.reject(e);
    } finally {
      this.inFlight--;
      this.schedule();
      this.checkDrained();
    }
  }

  private checkDrained(): void {
    if (this.drained && this.inFlight === 0 && this.queue.length === 0) {
      this.drained();
      this.drained = undefined;
    }
  }
}
