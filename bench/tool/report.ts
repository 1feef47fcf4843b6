// The one document every output is made from: the terminal table, --json and the HTML report.
import type { BenchOptions, LaneName } from './args.js';
import type { AuditResult, Goal, Ratio } from './goals.js';
import type { RunResult, Skipped } from './scenarios.js';
import type { TargetName } from './targets.js';

export interface BenchReport {
  readonly tool: 'inkgate bench';
  readonly schemaVersion: 1;
  readonly startedAt: string;
  readonly node: string;
  readonly cpus: number;
  /** The options as run, keys replaced by "(set)". */
  readonly options: Record<string, unknown>;
  readonly selfStarted: boolean;
  readonly database: string | null;
  readonly upstreamConnections: number | null;
  /** The many-tenants gateway's rate limiter ("redis" or "in-process"), null when not started. */
  readonly tenantsLimiter: string | null;
  /** Each self-started gateway and the HTTP engine it served with. */
  readonly engines: ReadonlyArray<{ readonly process: string; readonly engine: string | null }>;
  /** What the reader must know about the run (an engine that could not run on this Node, ...). */
  readonly notes: readonly string[];
  readonly targets: ReadonlyArray<{ readonly lane: LaneName; readonly name: TargetName; readonly url: string; readonly process: string | null }>;
  /** Every process the bench started, ended before the report is printed. */
  readonly processes: ReadonlyArray<{ readonly name: string; readonly pid: number; readonly extraPids: readonly number[] }>;
  readonly runs: readonly RunResult[];
  readonly ratios: readonly Ratio[];
  /** Each self-started billing gateway's ledger once the load is over. */
  readonly audits: readonly AuditResult[];
  readonly goals: readonly Goal[];
  readonly skipped: readonly Skipped[];
  readonly wallSeconds: number;
}

export function publicOptions(o: BenchOptions): Record<string, unknown> {
  const hide = (t: { url: string; key: string } | null) => (t ? { url: t.url, key: '(set)' } : null);
  return { ...o, gateway: hide(o.gateway), direct: { messages: hide(o.direct.messages), responses: hide(o.direct.responses) } };
}

/** JSON with NaN/Infinity as null (JSON has no NaN), pretty enough to diff. */
export function toJson(rep: BenchReport): string {
  return JSON.stringify(rep, (_k, v: unknown) => (typeof v === 'number' && !Number.isFinite(v) ? null : v), 2) + '\n';
}
