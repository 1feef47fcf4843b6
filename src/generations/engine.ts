// The job engine: every instance may run it. It keeps up to `batchSize` rows in hand: it claims due
// rows with FOR UPDATE SKIP LOCKED and a lease (store.claimDue), works each concurrently while
// renewing its lease, and as soon as one finishes claims again for the free slot, so one slow row
// (a 180-second image call) never holds back the other jobs of the instance. A crashed instance's
// rows come back when their leases lapse: another instance (or this one after restart) claims them
// and resumes (poll), restarts (never-called submit) or fails and refunds (a create whose outcome
// is unknown) them. Nothing here keeps state another instance needs.
import type { Services } from '../services.js';
import type { GenerationDeps } from './deps.js';
import { ImageRunner } from './images/run.js';
import { claimDue, renewLease, type GenerationRow } from './store.js';
import { sweepRetention, type SweepReport } from './sweep.js';
import { VideoRunner } from './video/run.js';

/** Kinds of generation rows this engine works. */
export const JOB_KINDS = ['video', 'image'] as const;

export interface JobEngine {
  /** Claims due rows for the free slots now; resolves, with their number, once those rows are worked. */
  tick(): Promise<number>;
  /** One retention sweep now. */
  sweep(): Promise<SweepReport>;
  /** Stops the timers and waits for the rows in hand. */
  stop(): Promise<void>;
  /** Rows in hand now. */
  readonly working: number;
}

export interface JobEngineOptions {
  /**
   * Claim every config.jobs.tickMs and whenever a row finishes, and sweep() every sweepIntervalMs
   * (default true). Without timers only tick() claims (tests drive it with their own clock).
   */
  timers?: boolean;
}

export function startJobEngine(services: Services, deps: GenerationDeps, opts: JobEngineOptions = {}): JobEngine {
  const jobs = services.config.jobs;
  const runners = { video: new VideoRunner(services, deps), image: new ImageRunner(services, deps) };
  const timersOn = opts.timers ?? true;
  const inFlight = new Set<Promise<unknown>>();
  let stopped = false;
  let working = 0;
  let claiming: Promise<unknown> | undefined;
  let claimAgain = false;

  const track = <T>(p: Promise<T>): Promise<T> => {
    inFlight.add(p);
    const drop = () => inFlight.delete(p);
    void p.then(drop, drop);
    return p;
  };

  const work = async (row: GenerationRow): Promise<void> => {
    // Renew while we work (a long download or vendor call), so no other instance takes the row from under us.
    const renewEveryMs = Math.max(50, Math.floor(jobs.leaseMs / 3));
    const timer = setInterval(() => {
      renewLease(services.pool, row.id, deps.owner, deps.clock(), jobs.leaseMs).catch(() => undefined);
    }, renewEveryMs);
    timer.unref();
    try {
      if (row.kind === 'video') await runners.video.run(row);
      else if (row.kind === 'image') await runners.image.run(row);
    } catch (e) {
      // The lease stays until it lapses; the row is then claimed again.
      services.log.warn('jobs.row_failed', { generation: row.id, state: row.state, err: (e as Error).message });
    } finally {
      clearInterval(timer);
    }
  };

  /** Claims rows for the free slots and starts each; resolves with their work. */
  const claim = async (): Promise<Array<Promise<void>>> => {
    const free = jobs.batchSize - working;
    if (stopped || free <= 0) return [];
    const rows = await claimDue(services.pool, JOB_KINDS, deps.owner, deps.clock(), jobs.leaseMs, free);
    working += rows.length;
    return rows.map((row) =>
      track(
        work(row).finally(() => {
          working--;
          if (timersOn) refill();
        }),
      ),
    );
  };

  /** One claim at a time; a row that finishes meanwhile asks for another claim after it. */
  function refill(): void {
    if (stopped) return;
    if (claiming !== undefined) {
      claimAgain = true;
      return;
    }
    claimAgain = false;
    claiming = track(claim())
      .catch((e: unknown) => services.log.warn('jobs.claim_failed', { err: (e as Error).message }))
      .finally(() => {
        claiming = undefined;
        if (claimAgain) refill();
      });
  }

  const timers: NodeJS.Timeout[] = [];
  if (timersOn) {
    const t = setInterval(refill, jobs.tickMs);
    t.unref();
    timers.push(t);
    const s = setInterval(() => {
      if (stopped) return;
      track(sweepRetention(services, deps)).catch((e: unknown) => services.log.warn('jobs.sweep_failed', { err: (e as Error).message }));
    }, jobs.sweepIntervalMs);
    s.unref();
    timers.push(s);
  }

  return {
    tick: () =>
      track(
        claim().then(async (started) => {
          await Promise.all(started);
          return started.length;
        }),
      ),
    sweep: () => track(sweepRetention(services, deps)),
    stop: async () => {
      stopped = true;
      for (const t of timers) clearInterval(t);
      // Rows started while we waited are tracked too: wait until nothing is left.
      while (inFlight.size > 0) await Promise.allSettled([...inFlight]);
    },
    get working() {
      return working;
    },
  };
}
