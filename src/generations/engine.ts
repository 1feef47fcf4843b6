// The job engine: every instance may run it. Each round claims up to `batchSize` due rows with
// FOR UPDATE SKIP LOCKED and a lease (store.claimDue), works them concurrently while renewing the
// leases, and lets go. A crashed instance's rows come back when their leases lapse: another instance
// (or this one after restart) claims them and resumes (poll), restarts (never-called submit) or fails
// and refunds (a create whose outcome is unknown) them. Nothing here keeps state another instance needs.
// Image rows (images/run.ts) go through the same claim: the Gemini call is made by the worker.
import type { Services } from '../services.js';
import { claimDue, renewLease, type GenerationRow } from './store.js';
import { sweepRetention, type SweepReport } from './sweep.js';
import type { VideoDeps } from './video/deps.js';
import { VideoRunner } from './video/run.js';
import { ImageRunner } from './images/run.js';

/** Kinds of generation rows this engine works. */
export const JOB_KINDS = ['video', 'image'] as const;

export interface JobEngine {
  /** One claim round now; resolves with the number of rows worked. */
  tick(): Promise<number>;
  /** One retention sweep now. */
  sweep(): Promise<SweepReport>;
  /** Stops the timers and waits for the rows in hand. */
  stop(): Promise<void>;
}

export interface JobEngineOptions {
  /** Run tick() every config.jobs.tickMs and sweep() every sweepIntervalMs (default true; tests drive tick() themselves). */
  timers?: boolean;
}

export function startJobEngine(services: Services, deps: VideoDeps, opts: JobEngineOptions = {}): JobEngine {
  const jobs = services.config.jobs;
  const video = new VideoRunner(services, deps);
  const image = new ImageRunner(services, deps);
  const inFlight = new Set<Promise<unknown>>();
  let stopped = false;
  let ticking: Promise<number> | undefined;

  const work = async (row: GenerationRow): Promise<void> => {
    // Renew while we work (a long download), so no other instance takes the row from under us.
    const renewEveryMs = Math.max(50, Math.floor(jobs.leaseMs / 3));
    const timer = setInterval(() => {
      renewLease(services.pool, row.id, deps.owner, deps.clock(), jobs.leaseMs).catch(() => undefined);
    }, renewEveryMs);
    timer.unref();
    try {
      if (row.kind === 'video') await video.run(row);
      else if (row.kind === 'image') await image.run(row);
    } catch (e) {
      // The lease stays until it lapses; the row is then claimed again.
      services.log.warn('jobs.row_failed', { generation: row.id, state: row.state, err: (e as Error).message });
    } finally {
      clearInterval(timer);
    }
  };

  const round = async (): Promise<number> => {
    if (stopped) return 0;
    const rows = await claimDue(services.pool, JOB_KINDS, deps.owner, deps.clock(), jobs.leaseMs, jobs.batchSize);
    await Promise.all(rows.map(work));
    return rows.length;
  };

  const track = <T>(p: Promise<T>): Promise<T> => {
    inFlight.add(p);
    void p.then(
      () => inFlight.delete(p),
      () => inFlight.delete(p),
    );
    return p;
  };

  const timers: NodeJS.Timeout[] = [];
  if (opts.timers ?? true) {
    const t = setInterval(() => {
      if (ticking !== undefined || stopped) return;
      ticking = track(round());
      ticking.catch((e: unknown) => services.log.warn('jobs.tick_failed', { err: (e as Error).message })).finally(() => {
        ticking = undefined;
      });
    }, jobs.tickMs);
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
    tick: () => track(round()),
    sweep: () => track(sweepRetention(services, deps)),
    stop: async () => {
      stopped = true;
      for (const t of timers) clearInterval(t);
      await Promise.allSettled([...inFlight]);
    },
  };
}
