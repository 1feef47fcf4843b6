// `npm run bench` end to end, for real but tiny: the tool starts the simulators, two inkgates
// (billing on and off, ledger in the test Postgres) and the plain proxy as child processes, runs
// the scenarios, prints one JSON document and an HTML report, and stops everything it started.
// Checks the figures are sane and consistent with each other, not how fast anything is.
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import type { BenchReport } from '../../src/bench/report.js';
import type { RunResult } from '../../src/bench/scenarios.js';
import { figure } from '../../src/bench/goals.js';
import { createPool } from '../../src/store/pool.js';
import { loadConfig } from '../../src/config/config.js';
import { testDatabaseUrl, testRedisUrl } from '../helpers/env.js';
import { pidAlive } from '../../src/util/process.js';

const root = join(import.meta.dirname, '..', '..');

async function bench(t: Test, args: string[]): Promise<{ code: number | null; pid: number; rep: BenchReport; stderr: string }> {
  const child = spawn(process.execPath, ['--import', './node_modules/@tapjs/typescript/dist/esm/import.mjs', 'bench/bench.ts', ...args], {
    cwd: root,
    env: { ...process.env, TS_NODE_TRANSPILE_ONLY: '1', DATABASE_URL: testDatabaseUrl, REDIS_URL: testRedisUrl ?? '', INKGATE_CONFIG: '' },
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

function checkRun(t: Test, r: RunResult): void {
  const at = r.id;
  t.ok(r.requests > 0, `${at}: requests measured (${r.requests})`);
  t.same(Object.keys(r.statuses), ['200'], `${at}: only 200s`);
  t.same(r.errors, {}, `${at}: no transport errors`);
  t.equal(r.failed, 0, `${at}: nothing failed`);
  const l = r.latency;
  t.equal(l.count, r.requests, `${at}: one latency sample per answer`);
  t.ok(l.p50Ms > 0 && l.p50Ms <= l.p90Ms && l.p90Ms <= l.p99Ms && l.p99Ms <= l.maxMs, `${at}: 0 < p50 <= p90 <= p99 <= max (${l.p50Ms} ${l.p90Ms} ${l.p99Ms} ${l.maxMs})`);
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

function checkRatiosAndGoals(t: Test, rep: BenchReport): void {
  t.ok(rep.ratios.length > 0, 'ratios reported');
  for (const q of rep.ratios) {
    const of = rep.runs.find((r) => r.lane === q.lane && r.scenario === q.scenario && r.kind === q.kind && r.connections === q.connections && r.target === q.of)!;
    const vs = rep.runs.find((r) => r.lane === q.lane && r.scenario === q.scenario && r.kind === q.kind && r.connections === q.connections && r.target === q.vs)!;
    const ok = figure(of, q.metric) === q.numerator && figure(vs, q.metric) === q.denominator && q.ratio === q.numerator / q.denominator;
    if (!ok) t.fail(`ratio ${q.metric} ${q.of}/${q.vs} is not the quotient of the reported figures`, { q });
  }
  t.pass(`${rep.ratios.length} ratios are quotients of the reported figures`);
  for (const g of rep.goals) {
    if (g.value === null || g.limit === null) t.equal(g.pass, null, `${g.goal}: not measured, no verdict`);
    else t.equal(g.pass, g.op === '<=' ? g.value <= g.limit : g.value >= g.limit, `${g.goal}: verdict follows value ${g.value} ${g.op} ${g.limit}`);
  }
}

async function checkStopped(t: Test, rep: BenchReport, toolPid: number): Promise<void> {
  const pids = rep.processes.flatMap((p) => [p.pid, ...p.extraPids]);
  t.ok(pids.length >= 4, `child pids reported: ${pids.join(' ')}`);
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

t.test('latency, saturation and billing on the messages lane, with the HTML report', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'bench-tool-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const html = join(dir, 'report.html');
  const { rep, pid } = await bench(t, ['--seconds', '1', '--warmup-seconds', '0.2', '--scenario', 'latency,saturation,billing', '--lane', 'messages', '--connections', '8', '--json', '--report', html]);
  t.equal(rep.tool, 'inkgate bench');
  t.equal(rep.selfStarted, true);
  t.equal(rep.database, 'DATABASE_URL');
  t.same([...new Set(rep.runs.map((r) => r.scenario))], ['latency', 'saturation', 'billing']);
  const kinds = rep.runs.map((r) => `${r.scenario}/${r.kind}/${r.connections}/${r.target}`);
  for (const want of ['latency/request/1/direct', 'latency/request/1/plain proxy', 'latency/request/1/inkgate', 'latency/stream/1/inkgate', 'saturation/request/8/plain proxy', 'saturation/request/8/inkgate', 'billing/request/1/inkgate (billing off)', 'billing/request/8/inkgate (billing off)', 'billing/request/8/inkgate']) {
    t.ok(kinds.includes(want), `run ${want}`);
  }
  for (const r of rep.runs) checkRun(t, r);
  checkRatiosAndGoals(t, rep);
  const c1 = (target: string) => rep.runs.find((r) => r.scenario === 'latency' && r.kind === 'request' && r.target === target)!;
  const added = rep.goals.find((g) => g.goal.startsWith('added latency c=1 p50'))!;
  t.equal(added.value, c1('inkgate').latency.p50Ms - c1('direct').latency.p50Ms, 'added latency = inkgate p50 - direct p50');
  t.ok(rep.goals.filter((g) => g.value !== null).length >= 6, 'the latency, saturation and CPU goals have figures');
  t.ok(existsSync(html), 'HTML report written');
  const page = readFileSync(html, 'utf8');
  t.ok((page.match(/<svg/g) ?? []).length >= 5, 'one plot per lane and scenario (and first-token plots)');
  t.notMatch(page, /<script|<link|src=|href=/, 'self-contained: no script, no external asset');
  await checkStopped(t, rep, pid);
});

t.test('paced streams and the open loop on the responses lane', async (t) => {
  const { rep, pid } = await bench(t, ['--seconds', '1', '--warmup-seconds', '0.2', '--scenario', 'open-loop,paced', '--lane', 'responses', '--rate', '100', '--streams', '20', '--pace-ms', '10', '--deltas', '10', '--json']);
  for (const r of rep.runs) checkRun(t, r);
  checkRatiosAndGoals(t, rep);
  for (const r of rep.runs.filter((x) => x.kind === 'paced')) {
    t.equal(r.requests, 20, `${r.target}: every paced stream measured`);
    t.equal(r.paced!.failures, 0);
    t.ok(r.paced!.maxGapMs > 0 && r.paced!.maxGapMs <= r.latency.maxMs, `${r.target}: longest gap within the longest stream`);
    t.ok(r.latency.p50Ms >= 9 * 10 * 0.9, `${r.target}: a stream lasts about deltas x pace (${r.latency.p50Ms} ms)`);
    t.ok(r.own!.cpuUsPerChunk! > 0);
  }
  for (const r of rep.runs.filter((x) => x.kind === 'open-loop')) {
    t.equal(r.openLoop!.scheduled, 100, `${r.target}: 100 sends scheduled in 1 s at 100/s`);
    t.equal(r.requests, 100, `${r.target}: all answered`);
    t.ok(r.openLoop!.lateSends <= r.openLoop!.scheduled);
  }
  t.ok(rep.goals.some((g) => g.goal.includes('gateway peak RSS') && g.value !== null), 'paced goals measured');
  t.same(rep.skipped, []);
  await checkStopped(t, rep, pid);
});

t.test('stream saturation, many tenants and durability on the messages lane, with the ledger audited', async (t) => {
  const { rep, pid } = await bench(t, [
    '--seconds', '1', '--warmup-seconds', '0.2', '--scenario', 'stream-saturation,many-tenants,durability', '--lane', 'messages',
    '--connections', '6', '--tenant-accounts', '5', '--tenant-keys', '20', '--json',
  ]);
  const kinds = rep.runs.map((r) => `${r.scenario}/${r.kind}/${r.connections}/${r.target}`);
  for (const want of [
    'stream-saturation/stream/6/direct', 'stream-saturation/stream/6/plain proxy', 'stream-saturation/stream/6/inkgate', 'stream-saturation/stream/6/inkgate (billing off)',
    'many-tenants/request/6/inkgate (one key)', 'many-tenants/request/6/inkgate (many tenants)', 'many-tenants/stream/6/inkgate (many tenants)',
    'durability/request/6/inkgate', 'durability/request/6/inkgate (sync)', 'durability/stream/6/inkgate (sync)',
  ]) t.ok(kinds.includes(want), `run ${want}`);
  for (const r of rep.runs) checkRun(t, r);
  checkRatiosAndGoals(t, rep);
  t.equal(rep.tenantsLimiter, testRedisUrl ? 'redis' : 'in-process', 'the many-tenants gateway uses the configured limiter');
  // Every billing gateway is audited after the load: nothing open, nothing logged.
  t.same(rep.audits.map((a) => a.process).sort(), ['inkgate', 'inkgate (sync)', 'inkgate (tenants)']);
  for (const a of rep.audits) {
    t.equal(a.openHolds, 0, `${a.process}: no hold left open`);
    t.equal(a.invariantViolations, 0, `${a.process}: the ledger invariant holds`);
    t.equal(a.errorsLogged, 0, `${a.process}: no error logged ${a.firstErrors.join(' ')}`);
    t.ok(a.requests > 0, `${a.process}: requests recorded (${a.requests})`);
  }
  const tenants = rep.audits.find((a) => a.process === 'inkgate (tenants)')!;
  t.equal(tenants.keysUsed, 21, 'the many-tenants runs spread over all 20 keys (and the one-key run used its own)');
  const billedRequests = rep.runs.filter((r) => r.target === 'inkgate (one key)' || r.target === 'inkgate (many tenants)').reduce((n, r) => n + r.requests, 0);
  t.ok(tenants.requests >= billedRequests, `every measured answer was billed (${tenants.requests} >= ${billedRequests})`);
  for (const goal of ['stream saturation: billing on vs billing off', 'many tenants vs one key (non-streaming)', 'Postgres CPU per billed stream (saturation)']) {
    t.ok(rep.goals.some((g) => g.goal === goal && g.value !== null), `goal measured: ${goal}`);
  }
  t.ok(rep.goals.some((g) => g.lane === 'all' && g.goal === 'inkgate (sync): holds left open after the bench' && g.pass === true), 'audit goals reported');
  await checkStopped(t, rep, pid);
});
