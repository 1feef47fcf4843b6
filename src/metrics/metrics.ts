// The gateway's Prometheus metrics (prom-client), one registry per gateway (tests run several in
// one process). Labels are bounded by construction: route templates, status classes, lanes,
// products, vendors, kinds from fixed lists, model ids from the catalogue; never a key, an account
// or a request id. What the hot path touches is made at start-up; what other parts keep already
// (the escrow's and journal's counters, the limiter) is read when Prometheus scrapes.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { CounterCells, HistogramCells } from './cells.js';
import { RequestMetrics } from './request-metrics.js';
import { storeMetrics, type StoreFigures } from './store-metrics.js';
import { registerPoolMetrics, type PoolFigures } from './vendor-pool-metrics.js';
import { WebSocketMetrics } from './websocket-metrics.js';

/** Seconds to a stream's first relayed byte. */
const TTFT_BUCKETS_S = [0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 20, 60];
const FLUSH_BUCKETS_S = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

export type UpstreamErrorKind = 'connect' | 'dispatch' | 'rate_limited' | 'status_4xx' | 'status_5xx' | 'body' | 'stream' | 'timeout';
export type LimitScope = 'key' | 'address';
/** Why a failed authentication was refused without a store lookup. */
export type AuthRefusalReason = 'over_budget' | 'negative_cache';

/** What the metrics read from the escrow (ledger/escrow.ts) at scrape time; declared here so metrics import no ledger code. */
export interface EscrowFigures {
  readonly openLeases: number;
  readonly stats: { readonly leaseHolds: number; readonly exactHolds: number; readonly recalls: number; readonly recovered: number; readonly edges: number };
  readonly journal: {
    readonly size: number;
    readonly pending: number;
    readonly stats: { readonly flushes: number; readonly records: number; readonly failures: number; readonly late: number };
    onFlushed: ((seconds: number, records: number) => void) | undefined;
  };
}

/** The drift gauge's last run (ledger/drift.ts). */
export interface DriftSource {
  readonly figures: {
    readonly leader: boolean;
    readonly driftAccounts: number;
    readonly staleHolds: number;
    readonly expiredLeases: number;
    readonly lastCheckS: number;
  };
}

export interface MetricsSources {
  escrow?: EscrowFigures;
  drift?: DriftSource;
  store?: StoreFigures;
  /** Reads store-wide figures at most this often (ms). */
  storeScrapeMs?: number;
  /** The vendor pools, per deployment (vendor-pool-metrics.ts). */
  vendorPools?: () => readonly PoolFigures[];
}

export class GatewayMetrics {
  readonly registry = new Registry();
  readonly http = new RequestMetrics();
  /** Responses over one WebSocket: sockets and turns (websocket-metrics.ts). */
  readonly websockets = new WebSocketMetrics();
  private readonly ttft = new HistogramCells(
    'inkgate_time_to_first_token_seconds',
    'From the request line to the first streamed byte relayed to the client, by text lane.',
    ['lane'],
    TTFT_BUCKETS_S,
  );
  private readonly upstreamErrors = new CounterCells(
    'inkgate_upstream_errors_total',
    'Vendor calls that failed, by vendor and kind (connect, dispatch, rate_limited, status_4xx, status_5xx, body, stream, timeout).',
    ['vendor', 'kind'],
  );
  private readonly refusals = new CounterCells(
    'inkgate_rate_limit_refusals_total',
    'Requests refused 429 by the per-minute limit, by bucket scope (key or address).',
    ['scope'],
  );
  private readonly authRefusals = new CounterCells(
    'inkgate_auth_refusals_total',
    'Failed authentications answered without a key lookup, by reason (over_budget: 429 for the address; negative_cache: 401 from memory).',
    ['reason'],
  );
  private readonly charged = new CounterCells(
    'inkgate_ink_charged_total',
    'Ink charged by settled requests (text, video, images) on this instance, by product and model.',
    ['product', 'model'],
  );
  private readonly held = new CounterCells(
    'inkgate_ink_held_total',
    'Ink put on hold by admitted requests (text, video, images) on this instance, by product and model.',
    ['product', 'model'],
  );
  private readonly flush: Histogram<string>;

  constructor() {
    collectDefaultMetrics({ register: this.registry, eventLoopMonitoringPrecision: 20 });
    for (const m of this.http.promMetrics()) this.registry.registerMetric(m as unknown as Gauge);
    this.websockets.register(this.registry);
    for (const c of [this.ttft, this.upstreamErrors, this.refusals, this.authRefusals, this.charged, this.held])
      this.registry.registerMetric(c.metric() as unknown as Gauge);
    this.flush = new Histogram({
      name: 'inkgate_ledger_flush_duration_seconds',
      help: 'One committed group flush of the ledger journal.',
      buckets: FLUSH_BUCKETS_S,
      registers: [this.registry],
    });
    // Present from the first scrape, so a rate() over them has a starting point.
    for (const scope of ['key', 'address'] as const) this.refusals.inc(scope, '', 0);
    for (const reason of ['over_budget', 'negative_cache'] as const) this.authRefusals.inc(reason, '', 0);
  }

  /** Reads the ledger's and the store's figures at scrape time. Called once, after the escrow started. */
  attach(src: MetricsSources): void {
    const r = [this.registry];
    const e = src.escrow;
    if (e) {
      e.journal.onFlushed = (s) => this.flush.observe(s);
      const gauge = (name: string, help: string, read: () => number) =>
        new Gauge({
          name,
          help,
          registers: r,
          collect() {
            this.set(read());
          },
        });
      const counter = (name: string, help: string, read: () => number) =>
        new Counter({
          name,
          help,
          registers: r,
          collect() {
            this.reset();
            this.inc(read());
          },
        });
      gauge('inkgate_ledger_open_leases', 'Escrow leases this instance holds now.', () => e.openLeases);
      gauge('inkgate_ledger_journal_queue_depth', 'Journal records waiting for the next flush.', () => e.journal.pending);
      gauge(
        'inkgate_ledger_unflushed_records',
        'Request records not fully written to Postgres (waiting, in flight, or started and not yet ended).',
        () => e.journal.size,
      );
      counter('inkgate_ledger_flushes_total', 'Committed journal flushes.', () => e.journal.stats.flushes);
      counter('inkgate_ledger_flush_failures_total', 'Journal flushes that failed (retried).', () => e.journal.stats.failures);
      counter('inkgate_ledger_late_records_total', 'Records written after their lease was recovered by another instance.', () => e.journal.stats.late);
      counter(
        'inkgate_ledger_recalls_total',
        'Lease recalls this instance sent: a hold at the edge of a wallet or key cap needed the spare Ink of leases.',
        () => e.stats.recalls,
      );
      counter('inkgate_ledger_recovered_leases_total', 'Expired leases this instance recovered.', () => e.stats.recovered);
      counter('inkgate_ledger_lease_holds_total', 'Holds served from a lease in memory.', () => e.stats.leaseHolds);
      counter(
        'inkgate_ledger_exact_holds_total',
        'Holds taken on the exact path (a durable move each: lease off, near the floor or at an edge).',
        () => e.stats.exactHolds,
      );
    }
    if (src.drift) this.attachDrift(src.drift);
    if (src.vendorPools) registerPoolMetrics(this.registry, src.vendorPools);
    if (src.store) for (const m of storeMetrics(src.store, src.storeScrapeMs ?? 5000)) this.registry.registerMetric(m as unknown as Gauge);
  }

  /** The drift gauge's figures; only the instance with `inkgate_ledger_drift_leader` 1 runs it (alert on the max over instances). */
  private attachDrift(drift: DriftSource): void {
    const gauge = (name: string, help: string, read: () => number) =>
      new Gauge({
        name,
        help,
        registers: [this.registry],
        collect() {
          this.set(read());
        },
      });
    gauge('inkgate_ledger_drift_leader', '1 on the instance that holds the lock and runs the ledger drift checks, else 0.', () =>
      drift.figures.leader ? 1 : 0,
    );
    gauge(
      'inkgate_ledger_drift_accounts',
      'Wallets touched since the previous drift check that break conservation or whose leased or held pools disagree with their leases and holds.',
      () => drift.figures.driftAccounts,
    );
    gauge('inkgate_ledger_stale_holds', 'Holds open for more than a day (reconciliation owed).', () => drift.figures.staleHolds);
    gauge('inkgate_ledger_expired_leases', 'Live leases more than a minute past their expiry (recovery is not running).', () => drift.figures.expiredLeases);
    gauge(
      'inkgate_ledger_drift_last_check_timestamp_seconds',
      'Unix time of the last completed drift check on this instance (0: none).',
      () => drift.figures.lastCheckS,
    );
  }

  /** A stream's first byte reached the client. */
  firstToken(lane: string, seconds: number): void {
    this.ttft.observe(lane, '', seconds);
  }

  upstreamError(vendor: string, kind: UpstreamErrorKind): void {
    this.upstreamErrors.inc(vendor, kind);
  }

  rateLimited(scope: LimitScope): void {
    this.refusals.inc(scope);
  }

  /** A failed authentication refused without a key lookup. */
  authRefused(reason: AuthRefusalReason): void {
    this.authRefusals.inc(reason);
  }

  inkHeld(product: string, model: string, ink: number): void {
    this.held.inc(product, model, ink);
  }

  inkCharged(product: string, model: string, ink: number): void {
    this.charged.inc(product, model, ink);
  }

  /** The text exposition format, and its content type. */
  async scrape(): Promise<{ body: string; contentType: string }> {
    return { body: await this.registry.metrics(), contentType: this.registry.contentType };
  }
}
