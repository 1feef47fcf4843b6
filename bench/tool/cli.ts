// `inkgate bench` (and `npm run bench`): parse, start or name the targets, run the planned
// scenarios one after another, stop everything, print. Exit 0 whatever the goals say (this is a
// measuring tool); 1 only when the tool itself fails (bad arguments, a target that cannot start).
import { writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { loadConfig } from '../../src/config/config.js';
import { BenchUsageError, parseBenchArgs, selfStarted, USAGE, type BenchOptions } from './args.js';
import { goals, ratios, type AuditResult } from './goals.js';
import { createProgress, type Progress } from './progress.js';
import { publicOptions, toJson, type BenchReport } from './report.js';
import { renderHtml } from './report-html.js';
import { renderTerminal } from './report-terminal.js';
import { executeRun, planRuns, type RunResult, type Skipped } from './scenarios.js';
import { startTargets, type BenchProcess, type TargetSet } from './targets.js';

type Write = (s: string) => unknown;

/** What the runs produced, for the report. */
interface Measured {
  results: RunResult[];
  skipped: Skipped[];
  audits: AuditResult[];
}

async function measure(o: BenchOptions, err: Write): Promise<BenchReport> {
  const started = Date.now();
  const progress = createProgress(o.progress, err);
  // The self-started inkgate's database: DATABASE_URL / INKGATE_CONFIG's db.url when set, else an
  // embedded Postgres of its own (never the operator's ./var cluster).
  // The many-tenants gateway shares its limiter through REDIS_URL's Redis when one is configured.
  const cfg = selfStarted(o) ? loadConfig() : null;
  const dbUrl = cfg ? cfg.db.url : null;
  const redisUrl = cfg ? cfg.redis.url : null;
  let set: TargetSet | undefined;
  let stopping: Promise<void> | null = null;
  const stopAll = () => (stopping ??= (set?.stop() ?? Promise.resolve()).then(() => progress.done()));
  const unhook = stopOnSignals(err, stopAll);
  let measured: Measured;
  try {
    set = await startTargets(o, dbUrl, redisUrl, (s) => progress.update(s, 0));
    const { results, skipped } = await runPlanned(o, set, started, progress);
    progress.update("reading the gateways' ledgers", 1);
    const audits = await auditLedgers(set.processes);
    progress.update('stopping the processes it started', 1);
    measured = { results, skipped, audits };
  } finally {
    await stopAll();
    unhook();
  }
  return benchReport(o, set, started, measured);
}

/** On SIGINT or SIGTERM: stop the processes the bench started, then exit 130. Returns the unhook. */
function stopOnSignals(err: Write, stopAll: () => Promise<void>): () => void {
  const onSignal = (sig: NodeJS.Signals) => {
    err(`\ninkgate bench: ${sig}, stopping the processes it started\n`);
    void stopAll().finally(() => process.exit(130));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  return () => {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  };
}

/** The planned runs one after another; a run that would end past --max-total-seconds is skipped. */
async function runPlanned(o: BenchOptions, set: TargetSet, started: number, progress: Progress): Promise<{ results: RunResult[]; skipped: Skipped[] }> {
  const plan = planRuns(o, set);
  const skipped = plan.skipped;
  const results: RunResult[] = [];
  const total = plan.runs.reduce((s, r) => s + r.plannedSeconds, 0);
  let done = 0;
  for (const run of plan.runs) {
    const elapsedS = (Date.now() - started) / 1000;
    if (elapsedS + run.plannedSeconds > o.maxTotalSeconds) {
      if (!skipped.some((s) => s.lane === run.lane && s.scenario === run.scenario)) {
        skipped.push({ lane: run.lane, scenario: run.scenario, reason: `--max-total-seconds ${o.maxTotalSeconds} reached` });
      }
      continue;
    }
    const label = `${run.lane} ${run.scenario} ${run.kind} c=${run.connections}: ${run.target.name}`;
    const t0 = Date.now();
    const tick = setInterval(() => progress.update(label, total ? (done + Math.min(run.plannedSeconds, (Date.now() - t0) / 1000)) / total : 1), 100);
    try {
      results.push(await executeRun(run, o, set.processes));
    } finally {
      clearInterval(tick);
    }
    done += run.plannedSeconds;
  }
  return { results, skipped };
}

/** Once the load is over: every hold should have ended and no ledger error been logged. */
async function auditLedgers(processes: readonly BenchProcess[]): Promise<AuditResult[]> {
  const audits: AuditResult[] = [];
  for (const p of processes) {
    const a = await p.audit();
    if (a) audits.push({ process: p.name, ...a });
  }
  return audits;
}

function benchReport(o: BenchOptions, set: TargetSet, started: number, m: Measured): BenchReport {
  return {
    tool: 'inkgate bench',
    schemaVersion: 1,
    startedAt: new Date(started).toISOString(),
    node: process.version,
    cpus: availableParallelism(),
    options: publicOptions(o),
    selfStarted: selfStarted(o),
    database: set.database,
    upstreamConnections: set.upstreamConnections,
    tenantsLimiter: set.tenantsLimiter,
    engines: set.engines,
    notes: set.notes,
    targets: set.targets.map((t) => ({ lane: t.lane, name: t.name, url: t.request.origin + t.request.path, process: t.processName })),
    processes: set.processes.filter((p) => p.pid > 0).map((p) => ({ name: p.name, pid: p.pid, extraPids: p.extraPids })),
    runs: m.results,
    ratios: ratios(m.results),
    audits: m.audits,
    goals: goals(m.results, o.lanes, o.paceMs, m.audits),
    skipped: m.skipped,
    wallSeconds: (Date.now() - started) / 1000,
  };
}

export async function runBench(
  argv: readonly string[],
  out: Write = (s) => process.stdout.write(s),
  err: Write = (s) => process.stderr.write(s),
): Promise<number> {
  let o: BenchOptions;
  try {
    o = parseBenchArgs(argv, process.stderr.isTTY === true);
  } catch (e) {
    err(`inkgate bench: ${(e as Error).message}\n`);
    return e instanceof BenchUsageError ? 2 : 1; // the inkgate exit statuses: 2 is a usage error
  }
  if (o.help) {
    out(USAGE);
    return 0;
  }
  try {
    const rep = await measure(o, err);
    out(o.json ? toJson(rep) : renderTerminal(rep));
    if (o.reportFile) {
      writeFileSync(o.reportFile, renderHtml(rep));
      if (!o.json) out(`HTML report: ${o.reportFile}\n`);
    }
    return 0;
  } catch (e) {
    const msg = e instanceof BenchUsageError ? e.message : e instanceof Error ? e.message : String(e);
    err(`inkgate bench: ${msg}\n`);
    return e instanceof BenchUsageError ? 2 : 1;
  }
}
