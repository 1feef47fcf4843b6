// Ratios between targets and the performance goals, computed only from figures the report prints, so
// anyone can check them by hand: a ratio is numerator / denominator, both as reported.
import type { LaneName, Scenario } from './args.js';
import type { RunKind, RunResult } from './scenarios.js';
import { POSTGRES_SERVER } from './postgres-cpu.js';
import { ENGINE_TARGETS, POOL_TARGETS, type TargetName } from './targets.js';
import type { LedgerAudit } from './child.js';

/** One gateway's ledger audit after the runs, as the report prints it. */
export interface AuditResult extends LedgerAudit {
  readonly process: string;
}

export interface Ratio {
  readonly lane: LaneName;
  readonly scenario: Scenario;
  readonly kind: RunKind;
  readonly connections: number;
  /** A figure of a run, as a path into RunResult: "latency.p50Ms", "rps", "own.cpuUsPerRequest" ... */
  readonly metric: string;
  readonly of: TargetName;
  readonly vs: TargetName;
  readonly numerator: number;
  readonly denominator: number;
  readonly ratio: number;
}

export interface Goal {
  /** 'all': a goal about a whole gateway (its ledger audit), not one lane. */
  readonly lane: LaneName | 'all';
  readonly goal: string;
  readonly value: number | null;
  readonly op: '<=' | '>=';
  readonly limit: number | null;
  readonly unit: string;
  /** null when the run it needs did not happen (or its process is not ours to measure). */
  readonly pass: boolean | null;
  readonly from: string;
}

export function figure(r: RunResult, metric: string): number | null {
  let v: unknown = r;
  for (const k of metric.split('.')) v = v === null || v === undefined ? undefined : (v as Record<string, unknown>)[k];
  return typeof v === 'number' && Number.isFinite(v) ? v : null;
}

const find = (runs: readonly RunResult[], lane: LaneName, scenario: Scenario, kind: RunKind, target: TargetName) =>
  runs.find((r) => r.lane === lane && r.scenario === scenario && r.kind === kind && r.target === target);

const RATIO_METRICS: Readonly<Record<RunKind, readonly string[]>> = {
  request: ['latency.p50Ms', 'latency.p99Ms', 'rps', 'own.cpuUsPerRequest'],
  stream: ['rps', 'ttft.p50Ms', 'ttft.p99Ms', 'latency.p50Ms', 'own.cpuUsPerRequest', 'own.cpuUsPerChunk'],
  'open-loop': ['latency.p50Ms', 'latency.p99Ms', 'latency.maxMs'],
  paced: ['paced.streamsPerS', 'latency.p50Ms', 'latency.p99Ms', 'paced.maxGapMs', 'own.cpuUsPerChunk'],
  websocket: ['ttft.p50Ms', 'latency.p50Ms', 'latency.p99Ms', 'own.cpuUsPerRequest'],
};

const PAIRS: ReadonlyArray<readonly [TargetName, TargetName]> = [
  ['inkgate', 'direct'],
  ['inkgate', 'plain proxy'],
  ['plain proxy', 'direct'],
  ['inkgate', 'inkgate (billing off)'],
  ['inkgate (sync)', 'inkgate'],
  [ENGINE_TARGETS.uws, 'plain proxy'],
  [ENGINE_TARGETS.node, 'plain proxy'],
  [ENGINE_TARGETS.node, ENGINE_TARGETS.uws],
  ['inkgate (many tenants)', 'inkgate (one key)'],
  ['inkgate (access log)', 'inkgate (no access log)'],
  [POOL_TARGETS.two, POOL_TARGETS.one],
];

export function ratios(runs: readonly RunResult[]): Ratio[] {
  const out: Ratio[] = [];
  for (const r of runs) {
    for (const [of, vs] of PAIRS) {
      if (r.target !== of) continue;
      const base = runs.find((b) => b.lane === r.lane && b.scenario === r.scenario && b.kind === r.kind && b.connections === r.connections && b.target === vs);
      if (!base) continue;
      for (const metric of RATIO_METRICS[r.kind]) {
        const n = figure(r, metric);
        const d = figure(base, metric);
        if (n === null || d === null || d === 0) continue;
        out.push({ lane: r.lane, scenario: r.scenario, kind: r.kind, connections: r.connections, metric, of, vs, numerator: n, denominator: d, ratio: n / d });
      }
    }
  }
  return out;
}

type GoalLine = (goal: string, value: number | null, op: Goal['op'], limit: number | null, unit: string, from: string) => void;

/** `metric` of run `a` over the same of run `b`; null when either run or figure is missing, or `b`'s is 0. */
function quotient(a: RunResult | undefined, b: RunResult | undefined, metric: string): number | null {
  const x = a ? figure(a, metric) : null;
  const y = b ? figure(b, metric) : null;
  return x === null || y === null || y === 0 ? null : x / y;
}

/** `metric` of run `a` less the same of run `b`; null when either run or figure is missing. */
function difference(a: RunResult | undefined, b: RunResult | undefined, metric: string): number | null {
  const x = a ? figure(a, metric) : null;
  const y = b ? figure(b, metric) : null;
  return x === null || y === null ? null : x - y;
}

/**
 * The engines scenario: each engine against the plain proxy in the same run. Under load (its most
 * connections) requests per second and gateway CPU per request, non-streaming and streaming; at
 * concurrency 1 the latency an engine adds over the simulator called directly, less the plain
 * proxy's own (the direct figure cancels: it is engine p50 - proxy p50).
 */
function engineGoals(runs: readonly RunResult[], lane: LaneName, g: GoalLine): void {
  const of = (kind: RunKind, c1: boolean, t: TargetName) =>
    runs
      .filter((r) => r.lane === lane && r.scenario === 'engines' && r.kind === kind && r.target === t && (c1 ? r.connections === 1 : r.connections > 1))
      .sort((a, b) => b.connections - a.connections)[0];
  const q = quotient;
  const d = difference;
  const proxy = 'plain proxy';
  for (const [kind, mode] of [
    ['request', 'non-streaming'],
    ['stream', 'streaming'],
  ] as const) {
    const load = (t: TargetName) => of(kind, false, t);
    g(
      `engines: node rps vs plain proxy (${mode}, under load)`,
      q(load(ENGINE_TARGETS.node), load(proxy), 'rps'),
      '>=',
      1.0,
      'x',
      'engines: rps inkgate (node) / plain proxy',
    );
    g(
      `engines: node CPU per request vs plain proxy (${mode}, under load)`,
      q(load(ENGINE_TARGETS.node), load(proxy), 'own.cpuUsPerRequest'),
      '<=',
      1.1,
      'x',
      'engines: CPU µs/req inkgate (node) / plain proxy',
    );
    g(
      `engines: uws rps vs plain proxy (${mode}, under load)`,
      q(load(ENGINE_TARGETS.uws), load(proxy), 'rps'),
      '>=',
      1.3,
      'x',
      'engines: rps inkgate (uws) / plain proxy',
    );
  }
  for (const engine of ['uws', 'node'] as const) {
    const t = ENGINE_TARGETS[engine];
    g(
      `engines: ${engine} added latency c=1 p50 over the plain proxy's (non-streaming)`,
      d(of('request', true, t), of('request', true, proxy), 'latency.p50Ms'),
      '<=',
      0.1,
      'ms',
      `engines c=1: (${t} - direct) - (plain proxy - direct), p50`,
    );
    g(
      `engines: ${engine} added time to first token c=1 p50 over the plain proxy's`,
      d(of('stream', true, t), of('stream', true, proxy), 'ttft.p50Ms'),
      '<=',
      0.1,
      'ms',
      `engines c=1 stream: (${t} - direct) - (plain proxy - direct), TTFT p50`,
    );
  }
  const engineRuns = runs.filter((r) => r.lane === lane && r.scenario === 'engines');
  g(
    'engines: failed requests, every run',
    engineRuns.length ? engineRuns.reduce((n, r) => n + r.failed, 0) : null,
    '<=',
    0,
    '',
    'engines: answers other than 200 and transport errors, every target',
  );
}

/**
 * The pool scenario: what choosing among two deployments costs the gateway per request, as its CPU
 * per request with two deployments less the same gateway's with one, in the same run.
 */
function poolGoals(runs: readonly RunResult[], lane: LaneName, g: GoalLine): void {
  for (const [kind, mode] of [
    ['request', 'non-streaming'],
    ['stream', 'streaming'],
  ] as const) {
    g(
      `pool: CPU per request, two deployments less one (${mode})`,
      difference(find(runs, lane, 'pool', kind, POOL_TARGETS.two), find(runs, lane, 'pool', kind, POOL_TARGETS.one), 'own.cpuUsPerRequest'),
      '<=',
      2,
      'µs',
      `pool: CPU µs/req ${POOL_TARGETS.two} - ${POOL_TARGETS.one}`,
    );
  }
}

/** Concurrency 1 (added latency and time to first token) and saturation, requests and streams, billing on against off and the plain proxy. */
function loadGoals(runs: readonly RunResult[], lane: LaneName, g: GoalLine): void {
  const diff = difference;
  const q = quotient;
  const c1 = (t: TargetName) => find(runs, lane, 'latency', 'request', t);
  const s1 = (t: TargetName) => find(runs, lane, 'latency', 'stream', t);
  const sat = (t: TargetName) => find(runs, lane, 'saturation', 'request', t);
  // The billing scenario's closed-loop run (its most connections), not its concurrency-1 one.
  const billing = (t: TargetName) =>
    runs.filter((r) => r.lane === lane && r.scenario === 'billing' && r.kind === 'request' && r.target === t).sort((a, b) => b.connections - a.connections)[0];
  const billingOn = billing('inkgate') ?? sat('inkgate');
  g('added latency c=1 p50 (non-streaming)', diff(c1('inkgate'), c1('direct'), 'latency.p50Ms'), '<=', 0.5, 'ms', 'latency: inkgate - direct');
  g('added time to first token c=1 p50', diff(s1('inkgate'), s1('direct'), 'ttft.p50Ms'), '<=', 0.5, 'ms', 'latency stream: inkgate - direct');
  g('added latency c=1 p99 (non-streaming)', diff(c1('inkgate'), c1('direct'), 'latency.p99Ms'), '<=', 2.0, 'ms', 'latency: inkgate - direct');
  g('added time to first token c=1 p99', diff(s1('inkgate'), s1('direct'), 'ttft.p99Ms'), '<=', 2.0, 'ms', 'latency stream: inkgate - direct');
  g(
    'saturation: billing on vs billing off',
    q(billing('inkgate'), billing('inkgate (billing off)'), 'rps'),
    '>=',
    0.9,
    'x',
    'billing, 50 connections: rps on / off',
  );
  g('saturation: billing on vs plain proxy', q(sat('inkgate'), sat('plain proxy'), 'rps'), '>=', 1.3, 'x', 'saturation: rps inkgate / plain proxy');
  const pg = billingOn?.processes.find((p) => p.name === POSTGRES_SERVER);
  g('Postgres CPU per billed request (saturation)', pg ? pg.cpuUsPerRequest : null, '<=', 25, 'µs', "Postgres server processes' CPU / inkgate requests");
  g('failed requests under saturation', billingOn ? billingOn.failed : null, '<=', 0, '', 'billing run: answers other than 200');
  const ss = (t: TargetName) => find(runs, lane, 'stream-saturation', 'stream', t);
  g(
    'stream saturation: billing on vs billing off',
    q(ss('inkgate'), ss('inkgate (billing off)'), 'rps'),
    '>=',
    0.9,
    'x',
    'stream-saturation: streams/s on / off',
  );
  g(
    'stream saturation: billing on vs plain proxy',
    q(ss('inkgate'), ss('plain proxy'), 'rps'),
    '>=',
    1.3,
    'x',
    'stream-saturation: streams/s inkgate / plain proxy',
  );
  const pgs = ss('inkgate')?.processes.find((p) => p.name === POSTGRES_SERVER);
  g('Postgres CPU per billed stream (saturation)', pgs ? pgs.cpuUsPerRequest : null, '<=', 25, 'µs', "Postgres server processes' CPU / inkgate streams");
}

/** Many tenants against one key, failed requests of every billed run, and the paced streams (CPU per chunk, throughput, memory, gaps). */
function tenantAndPacedGoals(runs: readonly RunResult[], lane: LaneName, paceMs: number, g: GoalLine): void {
  const q = quotient;
  const billed = (t: TargetName) => t !== 'direct' && t !== 'plain proxy' && t !== 'inkgate (billing off)';
  const s1 = (t: TargetName) => find(runs, lane, 'latency', 'stream', t);
  const paced = (t: TargetName) => find(runs, lane, 'paced', 'paced', t);
  const mt = (kind: RunKind, t: TargetName) => find(runs, lane, 'many-tenants', kind, t);
  g(
    'many tenants vs one key (non-streaming)',
    q(mt('request', 'inkgate (many tenants)'), mt('request', 'inkgate (one key)'), 'rps'),
    '>=',
    0.8,
    'x',
    'many-tenants: rps over all keys / one key',
  );
  g(
    'many tenants vs one key (streaming)',
    q(mt('stream', 'inkgate (many tenants)'), mt('stream', 'inkgate (one key)'), 'rps'),
    '>=',
    0.8,
    'x',
    'many-tenants: streams/s over all keys / one key',
  );
  const billedRuns = runs.filter((r) => r.lane === lane && billed(r.target));
  g(
    'failed requests, every billed run',
    billedRuns.length ? billedRuns.reduce((n, r) => n + r.failed, 0) : null,
    '<=',
    0,
    '',
    'all runs of a billing inkgate: answers other than 200',
  );
  const chunkRun = paced('inkgate') ?? s1('inkgate');
  g(
    'CPU per relayed SSE chunk',
    chunkRun ? figure(chunkRun, 'own.cpuUsPerChunk') : null,
    '<=',
    40,
    'µs',
    chunkRun ? `${chunkRun.scenario}: gateway CPU / SSE events relayed` : 'paced or latency stream',
  );
  g('paced streams: throughput vs direct', q(paced('inkgate'), paced('direct'), 'paced.streamsPerS'), '>=', 0.95, 'x', 'paced: streams/s inkgate / direct');
  g('paced streams: p99 vs direct', q(paced('inkgate'), paced('direct'), 'latency.p99Ms'), '<=', 1.2, 'x', 'paced: stream duration p99 inkgate / direct');
  const rss = paced('inkgate')?.own?.peakRssMb;
  g('paced streams: gateway peak RSS', rss ?? null, '<=', 300, 'MB', 'paced: gateway process, sampled every 50 ms');
  const idle = paced('inkgate')?.own?.startRssMb;
  g('paced streams: gateway RSS before the wave', idle ?? null, '<=', 120, 'MB', 'paced: gateway process after the warm-up, streams ended');
  const perStream = paced('inkgate')?.paced?.rssPerStreamKb;
  g('paced streams: RSS per open stream', perStream ?? null, '<=', 32, 'KiB', 'paced: (peak RSS - RSS before) / streams');
  const gap = paced('inkgate') ? figure(paced('inkgate')!, 'paced.maxGapMs') : null;
  g('paced streams: longest gap between chunks', gap, '<=', paceMs > 0 ? 10 * paceMs : null, 'ms', `paced: 10 chunk intervals of ${paceMs} ms`);
}

export function goals(runs: readonly RunResult[], lanes: readonly LaneName[], paceMs: number, audits: readonly AuditResult[] = []): Goal[] {
  const out: Goal[] = [];
  for (const lane of lanes) {
    const g: GoalLine = (goal, value, op, limit, unit, from) => {
      const pass = value === null || limit === null ? null : op === '<=' ? value <= limit : value >= limit;
      out.push({ lane, goal, value, op, limit, unit, pass, from });
    };
    loadGoals(runs, lane, g);
    tenantAndPacedGoals(runs, lane, paceMs, g);
    engineGoals(runs, lane, g);
    poolGoals(runs, lane, g);
  }
  // The ledger after the load, per gateway (not per lane: a gateway serves both).
  for (const a of audits) {
    const g = (goal: string, value: number, from: string) =>
      out.push({ lane: 'all', goal: `${a.process}: ${goal}`, value, op: '<=', limit: 0, unit: '', pass: value <= 0, from });
    g('ledger invariant violations', a.invariantViolations, 'rows breaking a ledger rule once the journal is written (inkgate ledger check)');
    g('holds left open after the bench', a.openHolds, 'requests with an open hold once the journal is written');
    g('errors logged (failed settles and moves)', a.errorsLogged, 'error lines the gateway logged');
  }
  return out;
}
