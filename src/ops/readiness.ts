// /readyz: may a balancer send this instance requests? Yes when Postgres answers within the bound
// and has every migration this build knows, Redis (when configured) answers within the bound, the
// media store answers within the bound (the S3 bucket to these credentials, or the results directory
// is writable), and the instance is not draining. Draining is checked first and needs no store: on
// SIGTERM the answer turns 503 at once, so the balancer stops sending before the public port stops
// admitting. The answer names the media store in use (`mediaStoreIn`).
import type { MediaLocation } from '../media/media-store.js';
import type { Queryable } from '../store/pool.js';

export interface ReadinessDeps {
  readonly db: Queryable;
  /** The newest migration this build applies (store/migrate.ts). */
  readonly latestMigration: number;
  /** Asks Redis something when it is configured; undefined: no Redis. Rejects when it cannot answer. */
  readonly redis: (() => Promise<unknown>) | undefined;
  /** Probes the media store (rejects when it cannot serve). */
  readonly mediaStore?: (() => Promise<unknown>) | undefined;
  /** Which media store that is: a directory of files, or an S3 bucket. */
  readonly mediaStoreIn: MediaLocation;
  readonly timeoutMs: number;
  /** Each vendor's deployments and their states on this instance (shown, never a reason to fail). */
  readonly vendors?: () => Readonly<Record<string, readonly DeploymentView[]>>;
}

/** One vendor deployment as /readyz lists it. */
export interface DeploymentView {
  readonly name: string;
  readonly state: string;
  readonly inFlight: number;
  readonly reopensInS: number;
}

export type CheckResult = 'ok' | 'timeout' | 'failed' | 'behind' | 'not configured';

export interface Readiness {
  readonly ready: boolean;
  readonly draining: boolean;
  readonly postgres: CheckResult;
  readonly migrations: CheckResult;
  readonly redis: CheckResult;
  /** The media store: its S3 bucket answers to these credentials, or its directory is writable. */
  readonly mediaStore: CheckResult;
  /** The media store in use: `{kind: 'files', dir}` or `{kind: 's3', bucket, prefix}`. */
  readonly mediaStoreIn: MediaLocation;
  /**
   * Each vendor's deployments: ready, half_open or cooling. Informational: a vendor cooling down is
   * the same vendor for every instance, so failing readiness for it would only empty the balancer.
   */
  readonly vendors: Readonly<Record<string, ReadonlyArray<{ name: string; state: string; in_flight: number; reopens_in_s: number }>>>;
}

const TIMEOUT = Symbol('timeout');

/** Resolves with the check's value, TIMEOUT after `timeoutMs`, or rejects with its error. Never hangs. */
function bounded<T>(promise: Promise<T>, timeoutMs: number): Promise<T | typeof TIMEOUT> {
  let timer: NodeJS.Timeout | undefined;
  const t = new Promise<typeof TIMEOUT>((r) => (timer = setTimeout(() => r(TIMEOUT), timeoutMs)));
  return Promise.race([promise, t]).finally(() => clearTimeout(timer));
}

export class ReadinessCheck {
  private drainingSince: number | undefined;

  constructor(private readonly deps: ReadinessDeps) {}

  /** From now on /readyz answers 503 (SIGTERM, or an operator's drain). */
  drain(): void {
    this.drainingSince ??= Date.now();
  }

  get draining(): boolean {
    return this.drainingSince !== undefined;
  }

  async check(): Promise<Readiness> {
    const draining = this.draining;
    const [pg, redis, mediaStore] = await Promise.all([this.postgres(), this.probe(this.deps.redis), this.probe(this.deps.mediaStore)]);
    const usable = (c: CheckResult) => c === 'ok' || c === 'not configured';
    const ready = !draining && pg.postgres === 'ok' && pg.migrations === 'ok' && usable(redis) && usable(mediaStore);
    return {
      ready,
      draining,
      postgres: pg.postgres,
      migrations: pg.migrations,
      redis,
      mediaStore,
      mediaStoreIn: this.deps.mediaStoreIn,
      vendors: this.vendors(),
    };
  }

  private vendors(): Readiness['vendors'] {
    const out: Record<string, Readiness['vendors'][string]> = {};
    for (const [vendor, list] of Object.entries(this.deps.vendors?.() ?? {})) {
      out[vendor] = list.map((m) => ({ name: m.name, state: m.state, in_flight: m.inFlight, reopens_in_s: m.reopensInS }));
    }
    return out;
  }

  private async postgres(): Promise<{ postgres: CheckResult; migrations: CheckResult }> {
    try {
      const r = await bounded(this.deps.db.query<{ v: number | null }>('SELECT max(version) AS v FROM schema_migrations'), this.deps.timeoutMs);
      if (r === TIMEOUT) return { postgres: 'timeout', migrations: 'timeout' };
      const v = r.rows[0]?.v ?? 0;
      return { postgres: 'ok', migrations: v >= this.deps.latestMigration ? 'ok' : 'behind' };
    } catch {
      return { postgres: 'failed', migrations: 'failed' };
    }
  }

  private async probe(check: (() => Promise<unknown>) | undefined): Promise<CheckResult> {
    if (check === undefined) return 'not configured';
    try {
      return (await bounded(check(), this.deps.timeoutMs)) === TIMEOUT ? 'timeout' : 'ok';
    } catch (e) {
      // A check with a deadline of its own (the S3 store's) says so in its error's code.
      return (e as { code?: unknown } | null)?.code === 'timeout' ? 'timeout' : 'failed';
    }
  }
}
