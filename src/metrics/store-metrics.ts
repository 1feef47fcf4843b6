// Store-wide figures every instance reports alike (so alert on max() across instances, not sum()):
// open holds by status (usage_unknown ones wait for reconciliation) and generations by state with
// the age of the oldest. Read from Postgres at scrape time through partial indexes, at most once
// per `everyMs`, bounded by the pool's query timeout; a failed read leaves the last figures.
import type { Queryable } from '../store/pool.js';
import type { CustomMetric } from './request-metrics.js';

export interface StoreFigures {
  readonly db: Queryable;
}

const ACTIVE_STATES = ['submitting', 'creating', 'queued', 'running'] as const;

interface Snapshot {
  holds: Array<{ status: string; n: number; ink: number }>;
  generations: Array<{ kind: string; state: string; n: number; oldest_s: number }>;
  ok: number;
}

export function storeMetrics(src: StoreFigures, everyMs: number): CustomMetric[] {
  let snap: Snapshot = { holds: [], generations: [], ok: 0 };
  let readAt = -Infinity;
  let reading: Promise<void> | undefined;
  const refresh = async (): Promise<void> => {
    if (performance.now() - readAt < everyMs) return;
    reading ??= (async () => {
      try {
        const holds = await src.db.query<{ status: string; n: string; ink: string }>(
          `SELECT status, count(*) AS n, COALESCE(sum(hold_ink), 0) AS ink FROM requests WHERE hold_state = 'open' GROUP BY status`,
        );
        const gens = await src.db.query<{ kind: string; state: string; n: string; oldest_s: string }>(
          `SELECT kind, state, count(*) AS n, EXTRACT(EPOCH FROM now() - min(created_at)) AS oldest_s
             FROM generations WHERE state = ANY($1) GROUP BY kind, state`,
          [ACTIVE_STATES],
        );
        snap = {
          holds: holds.rows.map((r) => ({ status: r.status, n: Number(r.n), ink: Number(r.ink) })),
          generations: gens.rows.map((r) => ({ kind: r.kind, state: r.state, n: Number(r.n), oldest_s: Number(r.oldest_s) })),
          ok: 1,
        };
      } catch {
        snap = { ...snap, ok: 0 };
      } finally {
        readAt = performance.now();
        reading = undefined;
      }
    })();
    await reading;
  };
  const metric = (name: string, help: string, values: () => Array<{ labels: Record<string, string>; value: number }>): CustomMetric => {
    const m: CustomMetric = {
      name,
      help,
      type: 'gauge',
      aggregator: 'sum',
      get: () => ({ ...m, values: values() }),
    };
    // The registry awaits get(): the first metric of the set refreshes the snapshot for all.
    return { ...m, get: (async () => (await refresh(), m.get())) as unknown as CustomMetric['get'] };
  };
  return [
    metric('inkgate_store_scrape_ok', 'Whether the last read of the store-wide figures below succeeded (1) or they are stale (0).', () => [
      { labels: {}, value: snap.ok },
    ]),
    metric('inkgate_open_holds', 'Open holds in the ledger (every instance), by status: running, or usage_unknown (waiting for reconciliation).', () =>
      ['running', 'usage_unknown'].map((status) => ({ labels: { status }, value: snap.holds.find((h) => h.status === status)?.n ?? 0 })),
    ),
    metric('inkgate_open_holds_ink', 'Ink on open holds in the ledger (every instance), by status.', () =>
      ['running', 'usage_unknown'].map((status) => ({ labels: { status }, value: snap.holds.find((h) => h.status === status)?.ink ?? 0 })),
    ),
    metric('inkgate_generations', 'Video and image generations not finished (every instance), by kind and state.', () =>
      snap.generations.map((g) => ({ labels: { kind: g.kind, state: g.state }, value: g.n })),
    ),
    metric('inkgate_generation_oldest_age_seconds', 'Age of the oldest unfinished generation, by kind and state.', () =>
      snap.generations.map((g) => ({ labels: { kind: g.kind, state: g.state }, value: g.oldest_s })),
    ),
  ];
}
