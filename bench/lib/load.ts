// A small closed-loop load generator for the benches: N connections, each sending its next request
// when the previous answer is fully read, for a fixed duration after a warm-up. Latency samples go
// into a preallocated Float64Array; percentiles come from sorting it once at the end.
import { Pool, type Dispatcher } from 'undici';

export interface LoadResult {
  readonly label: string;
  readonly requests: number;
  readonly errors: number;
  readonly statuses: Record<string, number>;
  readonly seconds: number;
  readonly rps: number;
  readonly p50Ms: number;
  readonly p90Ms: number;
  readonly p99Ms: number;
  readonly maxMs: number;
}

export interface LoadOptions {
  readonly label: string;
  readonly url: string;
  readonly path: string;
  readonly method?: 'GET' | 'POST';
  readonly headers?: Record<string, string>;
  readonly body?: string;
  readonly connections: number;
  readonly durationMs: number;
  readonly warmupMs?: number;
  readonly maxSamples?: number;
  /** Called with each response body (for checks); keep it cheap. */
  readonly check?: (status: number, body: Buffer) => void;
}

export function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

export async function runLoad(o: LoadOptions): Promise<LoadResult> {
  const pool = new Pool(new URL(o.url).origin, { connections: o.connections, pipelining: 1 });
  const max = o.maxSamples ?? 2_000_000;
  const samples = new Float64Array(max);
  let n = 0;
  let errors = 0;
  const statuses: Record<string, number> = {};
  const opts: Dispatcher.RequestOptions = { path: o.path, method: o.method ?? 'GET', headers: o.headers, body: o.body };
  let recording = false;
  let stop = false;
  const worker = async () => {
    while (!stop) {
      const t0 = performance.now();
      try {
        const r = await pool.request(opts);
        const buf = Buffer.from(await r.body.arrayBuffer());
        o.check?.(r.statusCode, buf);
        if (recording) {
          statuses[r.statusCode] = (statuses[r.statusCode] ?? 0) + 1;
          if (n < max) samples[n++] = performance.now() - t0;
        }
      } catch {
        if (recording) errors++;
      }
    }
  };
  const workers = Array.from({ length: o.connections }, () => worker());
  await new Promise((r) => setTimeout(r, o.warmupMs ?? 1000));
  recording = true;
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, o.durationMs));
  recording = false;
  const seconds = (performance.now() - t0) / 1000;
  stop = true;
  await Promise.all(workers);
  await pool.close();
  const s = samples.subarray(0, n).sort();
  return {
    label: o.label,
    requests: n,
    errors,
    statuses,
    seconds,
    rps: n / seconds,
    p50Ms: percentile(s, 50),
    p90Ms: percentile(s, 90),
    p99Ms: percentile(s, 99),
    maxMs: s.length ? s[s.length - 1]! : NaN,
  };
}

export function table(rows: LoadResult[], baseline?: LoadResult): string {
  const head = '| target | conns | req/s | p50 ms | p90 ms | p99 ms | errors | vs baseline (rps) |';
  const lines = rows.map(
    (r) =>
      `| ${r.label} | | ${r.rps.toFixed(0)} | ${r.p50Ms.toFixed(3)} | ${r.p90Ms.toFixed(3)} | ${r.p99Ms.toFixed(3)} | ${r.errors} | ${baseline ? (r.rps / baseline.rps).toFixed(2) + 'x' : ''} |`,
  );
  return [head, '|---|---|---|---|---|---|---|---|', ...lines].join('\n');
}
