// Runs `npm run bench` for real but tiny, and checks what every report must satisfy: figures sane
// and consistent with each other (not how fast anything is), and nothing the tool started left behind.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import type { Test } from 'tap';
import type { BenchReport } from '../../bench/tool/report.js';
import type { RunResult } from '../../bench/tool/scenarios.js';
import { figure } from '../../bench/tool/goals.js';
import { createPool } from '../../src/store/pool.js';
import { loadConfig } from '../../src/config/config.js';
import { testDatabaseUrl, testRedisUrl } from './env.js';
import { pidAlive } from '../../src/util/process.js';

const root = join(import.meta.dirname, '..', '..');

// `inkgate bench` as an operator runs it: the built tool (bin/inkgate.js builds dist/ first when it
// is older than src/), so the simulators, gateways and proxy it starts load compiled JavaScript
// instead of each transpiling the sources at start-up, which on a busy two-core machine took
// minutes when two bench tests started a dozen children at once.
export async function bench(t: Test, args: string[]): Promise<{ code: number | null; pid: number; rep: BenchReport; stderr: string }> {
  const child = spawn(process.execPath, ['bin/inkgate.js', 'bench', ...args], {
    cwd: root,
    env: { ...process.env, DATABASE_URL: testDatabaseUrl, REDIS_URL: testRedisUrl ?? '', INKGATE_CONFIG: '' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  t.teardown(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const code = await new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
  t.equal(code, 0, `exit 0; stderr: ${err.slice(-2000)}`);
  return { code, pid: child.pid!, rep: JSON.parse(out) as BenchReport, stderr: err };
}

export function checkRun(t: Test, r: RunResult): void {
  const at = r.id;
  t.ok(r.requests > 0, `${at}: requests measured (${r.requests})`);
  t.same(Object.keys(r.statuses), ['200'], `${at}: only 200s`);
  t.same(r.errors, {}, `${at}: no transport errors`);
  t.equal(r.failed, 0, `${at}: nothing failed`);
  const l = r.latency;
  t.equal(l.count, r.requests, `${at}: one latency sample per answer`);
  t.ok(
    l.p50Ms > 0 && l.p50Ms <= l.p90Ms && l.p90Ms <= l.p99Ms && l.p99Ms <= l.maxMs,
    `${at}: 0 < p50 <= p90 <= p99 <= max (${l.p50Ms} ${l.p90Ms} ${l.p99Ms} ${l.maxMs})`,
  );
  t.ok(Math.abs(r.rps - r.requests / r.seconds) < 1e-6 * r.rps, `${at}: rps = requests / seconds`);
  if (r.kind === 'stream' || r.kind === 'paced') {
    t.ok(r.ttft !== null && r.ttft.count === r.requests, `${at}: a first token on every stream`);
    t.ok(r.ttft!.p50Ms <= l.p50Ms && r.ttft!.maxMs <= l.maxMs, `${at}: first token before last byte`);
    t.ok(r.chunks !== null && r.chunks >= r.requests * 5, `${at}: SSE events counted (${r.chunks})`);
  }
  t.ok(r.own !== null, `${at}: the target's own process measured`);
  t.ok(r.own!.cpuUs > 0 && Math.abs(r.own!.cpuUsPerRequest - r.own!.cpuUs / r.requests) < 1e-9 * r.own!.cpuUs, `${at}: CPU per request = CPU / requests`);
  t.ok(r.own!.peakRssMb > 10 && r.own!.peakRssMb < 4096, `${at}: peak RSS plausible (${r.own!.peakRssMb} MB)`);
  t.ok(r.plot.length > 10 && r.plot.every(([, v], i) => i === 0 || v >= r.plot[i - 1]![1]), `${at}: plot points monotone`);
}

export function checkRatiosAndGoals(t: Test, rep: BenchReport): void {
  t.ok(rep.ratios.length > 0, 'ratios reported');
  for (const q of rep.ratios) {
    const of = rep.runs.find(
      (r) => r.lane === q.lane && r.scenario === q.scenario && r.kind === q.kind && r.connections === q.connections && r.target === q.of,
    )!;
    const vs = rep.runs.find(
      (r) => r.lane === q.lane && r.scenario === q.scenario && r.kind === q.kind && r.connections === q.connections && r.target === q.vs,
    )!;
    const ok = figure(of, q.metric) === q.numerator && figure(vs, q.metric) === q.denominator && q.ratio === q.numerator / q.denominator;
    if (!ok) t.fail(`ratio ${q.metric} ${q.of}/${q.vs} is not the quotient of the reported figures`, { q });
  }
  t.pass(`${rep.ratios.length} ratios are quotients of the reported figures`);
  for (const g of rep.goals) {
    if (g.value === null || g.limit === null) t.equal(g.pass, null, `${g.goal}: not measured, no verdict`);
    else t.equal(g.pass, g.op === '<=' ? g.value <= g.limit : g.value >= g.limit, `${g.goal}: verdict follows value ${g.value} ${g.op} ${g.limit}`);
  }
}

export async function checkStopped(t: Test, rep: BenchReport, toolPid: number): Promise<void> {
  const pids = rep.processes.flatMap((p) => [p.pid, ...p.extraPids]);
  t.ok(pids.length >= 3, `child pids reported: ${pids.join(' ')}`);
  t.same(pids.filter(pidAlive), [], 'every process the bench started has ended');
  const cfg = loadConfig({}, { db: { url: testDatabaseUrl } });
  const pool = createPool({ ...cfg.db, url: testDatabaseUrl, poolMax: 1 });
  try {
    const left = await pool.query(`SELECT nspname FROM pg_namespace WHERE nspname LIKE 'inkgate_bench_${toolPid}_%'`);
    t.same(left.rows, [], 'the private schemas are dropped');
  } finally {
    await pool.end();
  }
}
