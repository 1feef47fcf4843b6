// The job runner: every instance may run it. It keeps up to `batchSize` rows in hand: it claims due
// rows with FOR UPDATE SKIP LOCKED and a lease (store.claimDue), works each concurrently while
// renewing its lease, and as soon as one finishes claims again for the free slot, so one slow row
// (a 180-second image call) never holds back the other jobs of the instance. A crashed instance's
// rows come back when their leases lapse: another instance (or this one after restart) claims them
// and resumes (poll), restarts (never-called submit) or fails and refunds (a create whose outcome
// is unknown) them. Nothing here keeps state another instance needs.
import { isLedgerAssertion } from '../ledger/assertion.js';
import type { Services } from '../services.js';
import type { Logger } from '../util/log.js';
import type { GenerationDeps } from './deps.js';
import { ImageRunner } from './images/run.js';
import { claimDue, renewLease, type GenerationRow } from './store.js';
import { sweepRetention, type SweepReport } from './sweep.js';
import { VideoRunner } from './video/run.js';

/** Kinds of generation rows this runner works. */
export const JOB_KINDS = ['video', 'image'] as const;

export interface JobRunner {
  /** Claims due rows for the free slots now; resolves, with their number, once those rows are worked. */
  tick(): Promise<number>;
  /** One retention sweep now. */
  sweep(): Promise<SweepReport>;
  /** Stops the timers and waits for the rows in hand. */
  stop(): Promise<void>;
  /** Rows in hand now. */
  readonly working: number;
}

export interface JobRunnerOptions {
  /**
   * Claim every config.jobs.tickMs and whenever a row finishes, and sweep() every sweepIntervalMs
   * (default true). Without timers only tick() claims (tests drive it with their own clock).
   */
  timers?: boolean;
}

export function startJobRunner(services: Services, deps: GenerationDeps, opts: JobRunnerOptions = {}): JobRunner {
  return new Runner(services, deps, opts.timers ?? true);
}

class Runner implements JobRunner {
  private readonly runners: { readonly video: VideoRunner; readonly image: ImageRunner };
  private readonly inFlight = new Set<Promise<unknown>>();
  private readonly timers: NodeJS.Timeout[] = [];
  private stopped = false;
  private inHand = 0;
  private claiming: Promise<unknown> | undefined;
  private claimAgain = false;
  /** The runner's own lines; each row's carry its generation and request too (work). */
  private readonly log: Logger;

  constructor(
    private readonly services: Services,
    private readonly deps: GenerationDeps,
    private readonly timersOn: boolean,
  ) {
    this.log = services.log.child({ component: 'jobs' });
    this.runners = { video: new VideoRunner(services, deps), image: new ImageRunner(services, deps) };
    if (!timersOn) return;
    const jobs = services.config.jobs;
    const t = setInterval(() => this.refill(), jobs.tickMs);
    const s = setInterval(() => {
      if (!this.stopped) this.sweep().catch((e: unknown) => this.log.warn({ err: (e as Error).message }, 'jobs.sweep_failed'));
    }, jobs.sweepIntervalMs);
    for (const x of [t, s]) {
      x.unref();
      this.timers.push(x);
    }
  }

  get working(): number {
    return this.inHand;
  }

  tick(): Promise<number> {
    return this.track(
      this.claim().then(async (started) => {
        await Promise.all(started);
        return started.length;
      }),
    );
  }

  sweep(): Promise<SweepReport> {
    return this.track(sweepRetention(this.services, this.deps));
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const t of this.timers) clearInterval(t);
    // Rows started while we waited are tracked too: wait until nothing is left.
    while (this.inFlight.size > 0) await Promise.allSettled([...this.inFlight]);
  }

  private track<T>(promise: Promise<T>): Promise<T> {
    this.inFlight.add(promise);
    const drop = () => this.inFlight.delete(promise);
    void promise.then(drop, drop);
    return promise;
  }

  /** Claims rows for the free slots and starts each; resolves with their work. */
  private async claim(): Promise<Array<Promise<void>>> {
    const jobs = this.services.config.jobs;
    const free = jobs.batchSize - this.inHand;
    if (this.stopped || free <= 0) return [];
    const rows = await claimDue(this.services.pool, JOB_KINDS, this.deps.owner, this.deps.clock(), jobs.leaseMs, free);
    this.inHand += rows.length;
    return rows.map((row) =>
      this.track(
        this.work(row).finally(() => {
          this.inHand--;
          if (this.timersOn) this.refill();
        }),
      ),
    );
  }

  /** One claim at a time; a row that finishes meanwhile asks for another claim after it. */
  private refill(): void {
    if (this.stopped) return;
    if (this.claiming !== undefined) {
      this.claimAgain = true;
      return;
    }
    this.claimAgain = false;
    this.claiming = this.track(this.claim())
      .catch((e: unknown) => this.log.warn({ err: (e as Error).message }, 'jobs.claim_failed'))
      .finally(() => {
        this.claiming = undefined;
        if (this.claimAgain) this.refill();
      });
  }

  private async work(row: GenerationRow): Promise<void> {
    const { services, deps } = this;
    const leaseMs = services.config.jobs.leaseMs;
    // One child per row worked: its lines name the generation and the request that bought it.
    const log = this.log.child({ generation: row.id, request_id: row.request_id });
    // Renew while we work (a long download or vendor call), so no other instance takes the row from under us.
    const timer = setInterval(
      () => {
        renewLease(services.pool, row.id, deps.owner, deps.clock(), leaseMs).catch(() => undefined);
      },
      Math.max(50, Math.floor(leaseMs / 3)),
    );
    timer.unref();
    // A span linked to the submit (tracing/), when the submit was traced; the finish hangs under it.
    const span = services.tracing?.startJob(row);
    try {
      if (row.kind === 'video') await this.runners.video.run(row, log);
      else if (row.kind === 'image') await this.runners.image.run(row, log);
      span?.end();
    } catch (e) {
      span?.end(e);
      // A broken money rule stops the instance (fail-stop.ts); the row is claimed again elsewhere.
      if (isLedgerAssertion(e)) services.failStop?.trip(e);
      // The lease stays until it lapses; the row is then claimed again.
      log.warn({ state: row.state, err: (e as Error).message }, 'jobs.row_failed');
    } finally {
      clearInterval(timer);
    }
  }
}
