// The terminal report: one table per lane and scenario, the ratios under each, then the goals with
// pass/fail marks. Plain text (markdown tables), so it pastes into an issue or a doc as is.
import { websocketSummary } from './report-websocket.js';
import type { BenchReport } from './report.js';
import type { Ratio } from './goals.js';
import type { RunResult } from './scenarios.js';

const f = (v: number | null | undefined, digits = 3) => (v === null || v === undefined || !Number.isFinite(v) ? '-' : v.toFixed(digits));
const n0 = (v: number | null | undefined) => f(v, 0);
const mb = (r: RunResult) => (r.own ? n0(r.own.peakRssMb) : '-');

function table(head: string[], rows: string[][]): string {
  return [`| ${head.join(' | ')} |`, `|${head.map(() => '---').join('|')}|`, ...rows.map((r) => `| ${r.join(' | ')} |`)].join('\n');
}

const LABEL: Record<string, string> = {
  'latency.p50Ms': 'p50',
  'latency.p99Ms': 'p99',
  'latency.maxMs': 'max',
  rps: 'req/s',
  'own.cpuUsPerRequest': 'CPU/req',
  'own.cpuUsPerChunk': 'CPU/chunk',
  'ttft.p50Ms': 'TTFT p50',
  'ttft.p99Ms': 'TTFT p99',
  'paced.streamsPerS': 'streams/s',
  'paced.maxGapMs': 'max gap',
};

function ratioLines(rs: readonly Ratio[]): string {
  const groups = new Map<string, Ratio[]>();
  for (const r of rs) {
    const k = `${r.of} vs ${r.vs}`;
    groups.set(k, [...(groups.get(k) ?? []), r]);
  }
  return [...groups.entries()].map(([k, list]) => `  ${k}: ${list.map((r) => `${LABEL[r.metric] ?? r.metric} ${r.ratio.toFixed(2)}x`).join(', ')}`).join('\n');
}

interface SectionView {
  readonly title: string;
  readonly body: string;
}

/** Requests, one row per target: latency percentiles, CPU and memory. */
function requestSection(r0: RunResult, runs: RunResult[]): SectionView {
  return {
    title: `${r0.scenario === 'billing' ? 'billing on vs off' : r0.scenario}, ${r0.connections === 1 ? 'concurrency 1, non-streaming' : `closed loop, ${r0.connections} connections`}`,
    body: table(
      ['target', 'requests', 'req/s', 'p50 ms', 'p90 ms', 'p99 ms', 'max ms', 'CPU µs/req', 'peak RSS MB', 'loop delay p99 ms', 'failed'],
      runs.map((r) => [
        r.target,
        String(r.requests),
        n0(r.rps),
        f(r.latency.p50Ms),
        f(r.latency.p90Ms),
        f(r.latency.p99Ms),
        f(r.latency.maxMs),
        n0(r.own?.cpuUsPerRequest),
        mb(r),
        f(r.own?.eldP99Ms, 1),
        String(r.failed),
      ]),
    ),
  };
}

/** Streams, one row per target: time to first token and to the last byte, SSE events, CPU per chunk. */
function streamSection(r0: RunResult, runs: RunResult[]): SectionView {
  return {
    title: `${r0.scenario}, ${r0.connections === 1 ? 'concurrency 1' : `closed loop, ${r0.connections} connections`}, ${r0.kind === 'websocket' ? 'turns on one WebSocket each' : 'streaming'}`,
    body: table(
      [
        'target',
        'streams',
        'streams/s',
        'TTFT p50 ms',
        'TTFT p99 ms',
        'last byte p50 ms',
        'last byte p99 ms',
        'SSE events',
        'CPU µs/req',
        'CPU µs/chunk',
        'failed',
      ],
      runs.map((r) => [
        r.target,
        String(r.requests),
        n0(r.rps),
        f(r.ttft?.p50Ms),
        f(r.ttft?.p99Ms),
        f(r.latency.p50Ms),
        f(r.latency.p99Ms),
        String(r.chunks ?? '-'),
        n0(r.own?.cpuUsPerRequest),
        f(r.own?.cpuUsPerChunk, 1),
        String(r.failed),
      ]),
    ),
  };
}

/** The open-loop run: latency from each request's scheduled send, and how many sends were late. */
function openLoopSection(r0: RunResult, runs: RunResult[]): SectionView {
  return {
    title: `open loop, ${r0.openLoop!.rate} req/s, latency from the scheduled send (at most ${r0.connections} out at once)`,
    body: table(
      ['target', 'sent', `late (> ${f(r0.openLoop!.lateMs, 1)} ms)`, 'p50 ms', 'p90 ms', 'p99 ms', 'max ms', 'uncorrected p99 ms', 'CPU µs/req', 'failed'],
      runs.map((r) => [
        r.target,
        String(r.openLoop!.scheduled),
        String(r.openLoop!.lateSends),
        f(r.latency.p50Ms),
        f(r.latency.p90Ms),
        f(r.latency.p99Ms),
        f(r.latency.maxMs),
        f(r.openLoop!.serviceTime.p99Ms),
        n0(r.own?.cpuUsPerRequest),
        String(r.failed),
      ]),
    ),
  };
}

/** Paced streams: throughput, duration, the longest gap between chunks, memory. */
function pacedSection(r0: RunResult, runs: RunResult[]): SectionView {
  const p = r0.paced!;
  return {
    title: `${p.streams} paced streams at once, ${p.deltas} deltas ${p.paceMs} ms apart`,
    body: table(
      [
        'target',
        'streams/s',
        'TTFT p50 ms',
        'duration p50 ms',
        'duration p99 ms',
        'longest gap ms',
        'CPU µs/chunk',
        'peak RSS MB',
        'RSS before MB',
        'KiB/stream',
        'loop delay p99 ms',
        'failed',
      ],
      runs.map((r) => [
        r.target,
        f(r.paced!.streamsPerS, 1),
        f(r.ttft?.p50Ms, 1),
        f(r.latency.p50Ms, 1),
        f(r.latency.p99Ms, 1),
        f(r.paced!.maxGapMs, 1),
        f(r.own?.cpuUsPerChunk, 1),
        mb(r),
        f(r.own?.startRssMb, 0),
        f(r.paced!.rssPerStreamKb, 1),
        f(r.own?.eldP99Ms, 1),
        String(r.failed),
      ]),
    ),
  };
}

function section(rep: BenchReport, runs: RunResult[]): string {
  const r0 = runs[0]!;
  const rs = rep.ratios.filter((x) => x.lane === r0.lane && x.scenario === r0.scenario && x.kind === r0.kind && x.connections === r0.connections);
  const view =
    r0.kind === 'request'
      ? requestSection
      : r0.kind === 'stream' || r0.kind === 'websocket'
        ? streamSection
        : r0.kind === 'open-loop'
          ? openLoopSection
          : pacedSection;
  const { title, body } = view(r0, runs);
  const ratiosText = rs.length ? `\n${ratioLines(rs)}` : '';
  const errs = runs
    .filter((r) => r.failed > 0)
    .map(
      (r) =>
        `  ${r.target} failures: statuses ${JSON.stringify(r.statuses)} errors ${JSON.stringify(r.errors)}${r.failureSamples.map((f) => `\n    ${f}`).join('')}`,
    );
  return `\n## ${r0.lane}: ${title}\n${body}${ratiosText}${errs.length ? '\n' + errs.join('\n') : ''}`;
}

/**
 * The engines scenario in one table per lane: each engine and the plain proxy under load (req/s and
 * gateway CPU per request, each against the proxy's) and the p50 each adds at concurrency 1 over
 * the simulator called directly (non-streaming: whole answer; streaming: first token).
 */
function enginesSummary(rep: BenchReport): string {
  const runs = rep.runs.filter((r) => r.scenario === 'engines');
  if (runs.length === 0) return '';
  const out: string[] = ['\n## HTTP engines against the plain proxy (same run, billing on)'];
  for (const lane of [...new Set(runs.map((r) => r.lane))]) {
    const rows: string[][] = [];
    for (const [kind, mode, metric] of [
      ['request', 'non-streaming', 'latency'],
      ['stream', 'streaming', 'ttft'],
    ] as const) {
      const at = (t: string, c1: boolean) =>
        runs.find((r) => r.lane === lane && r.kind === kind && r.target === t && (c1 ? r.connections === 1 : r.connections > 1));
      const p50 = (r: RunResult | undefined) => (r === undefined ? null : metric === 'latency' ? r.latency.p50Ms : (r.ttft?.p50Ms ?? null));
      const direct = p50(at('direct', true));
      const proxyLoad = at('plain proxy', false);
      const proxyAdded = direct === null || p50(at('plain proxy', true)) === null ? null : p50(at('plain proxy', true))! - direct;
      for (const t of ['plain proxy', 'inkgate (uws)', 'inkgate (node)']) {
        const load = at(t, false);
        if (load === undefined && at(t, true) === undefined) continue;
        const ratio = (a: number | null | undefined, b: number | null | undefined) => (a == null || b == null || b === 0 ? '-' : `${(a / b).toFixed(2)}x`);
        const added = direct === null || p50(at(t, true)) === null ? null : p50(at(t, true))! - direct;
        rows.push([
          mode,
          t,
          n0(load?.rps),
          t === 'plain proxy' ? '1.00x' : ratio(load?.rps, proxyLoad?.rps),
          n0(load?.own?.cpuUsPerRequest),
          t === 'plain proxy' ? '1.00x' : ratio(load?.own?.cpuUsPerRequest, proxyLoad?.own?.cpuUsPerRequest),
          f(added),
          t === 'plain proxy' || added === null || proxyAdded === null ? '-' : `${added - proxyAdded >= 0 ? '+' : ''}${f(added - proxyAdded)}`,
        ]);
      }
    }
    const c = runs.find((r) => r.lane === lane && r.connections > 1)?.connections ?? 0;
    out.push(`\n### ${lane}`);
    out.push(
      table(['mode', 'target', `req/s at ${c} conns`, 'vs proxy', 'CPU µs/req', 'vs proxy', 'added p50 c=1 ms (stream: TTFT)', "minus proxy's ms"], rows),
    );
  }
  return out.join('\n');
}

export function renderTerminal(rep: BenchReport): string {
  const out: string[] = [];
  out.push(
    `# inkgate bench, ${rep.startedAt}: ${rep.options.seconds} s per run after ${rep.options.warmupSeconds} s warm-up; Node ${rep.node}, ${rep.cpus} CPUs`,
  );
  if (rep.selfStarted) {
    const gateways = rep.engines.length > 0 ? rep.engines.map((e) => e.process).join(', ') : 'inkgate (billing on), inkgate (billing off)';
    out.push(
      `# self-started on 127.0.0.1: simulators, ${gateways} (ledger in ${rep.database}), plain node:http + undici proxy; in-process rate limiter; ${rep.upstreamConnections} upstream connections per vendor`,
    );
  }
  if (rep.engines.length > 0) out.push(`# HTTP engines: ${rep.engines.map((e) => `${e.process} ${e.engine ?? '(not named)'}`).join(', ')}`);
  for (const n of rep.notes) out.push(`# note: ${n}`);
  if (rep.tenantsLimiter)
    out.push(
      `# many tenants: a gateway of its own with the ${rep.tenantsLimiter} rate limiter, ${String(rep.options.tenantKeys)} keys over ${String(rep.options.tenantAccounts)} accounts`,
    );
  for (const t of rep.targets) out.push(`#   ${t.lane} ${t.name}: ${t.url}`);
  const groups = new Map<string, RunResult[]>();
  for (const r of rep.runs) {
    const k = `${r.lane}/${r.scenario}/${r.kind}/${r.connections}`;
    groups.set(k, [...(groups.get(k) ?? []), r]);
  }
  for (const runs of groups.values()) out.push(section(rep, runs));
  const engines = enginesSummary(rep);
  if (engines) out.push(engines);
  const sockets = websocketSummary(rep.runs);
  if (sockets) out.push(sockets);
  const profiles = rep.runs.filter((r) => r.cpuProfile !== null);
  if (profiles.length > 0)
    out.push(`\n(CPU profiles of each run's target over its measured window: ${profiles.length} files in ${String(rep.options.cpuProfDir)})`);
  for (const s of rep.skipped) out.push(`\n(skipped: ${s.lane} ${s.scenario}: ${s.reason})`);
  for (const a of rep.audits) {
    out.push(
      `\n(ledger of ${a.process} after the runs: ${a.requests} requests from ${a.keysUsed} keys, ${a.invariantViolations} invariant violations, ${a.openHolds} holds open, ${a.usageUnknown} usage_unknown, ${a.errorsLogged} error lines logged)`,
    );
    for (const e of a.firstErrors) out.push(`  ${e}`);
  }
  if (rep.goals.some((g) => g.value !== null)) {
    out.push('\n## goals (billing on)');
    out.push(
      table(
        ['lane', 'goal', 'measured', 'goal', 'result'],
        rep.goals
          .filter((g) => g.value !== null)
          .map((g) => {
            const digits = g.unit === 'x' ? 2 : g.unit === 'ms' ? 3 : 1;
            const limit = g.limit === null ? '-' : `${g.op} ${Number.isInteger(g.limit) ? g.limit : f(g.limit, digits)} ${g.unit}`;
            return [
              g.lane,
              g.goal,
              g.value === null ? 'not measured' : `${f(g.value, digits)} ${g.unit}`,
              limit,
              g.pass === null ? 'n/a' : g.pass ? 'PASS' : 'MISS',
            ];
          }),
      ),
    );
    const passed = rep.goals.filter((g) => g.pass === true).length;
    const failed = rep.goals.filter((g) => g.pass === false).length;
    out.push(
      `${passed} goals met, ${failed} missed, ${rep.goals.length - passed - failed} not measured (their scenarios not run, not shown). Bench wall time ${rep.wallSeconds.toFixed(0)} s.`,
    );
  }
  return out.join('\n') + '\n';
}
