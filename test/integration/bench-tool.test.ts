// `npm run bench` end to end, for real but tiny: the tool starts the simulators, two inkgates
// (billing on and off, ledger in the test Postgres) and the plain proxy as child processes, runs
// the scenarios, prints one JSON document and an HTML report, and stops everything it started.
// Checks the figures are sane and consistent with each other, not how fast anything is.
// (The escrow scenarios run in bench-tool-escrow.test.ts: each file stays within tap's limit.)
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { bench, checkRatiosAndGoals, checkRun, checkStopped } from '../helpers/bench-tool.js';

// Several bench runs, each starting the simulators, gateways and the plain proxy as processes:
// more than tap's default per-file limit on a busy machine (the limit is there to catch hangs).
t.setTimeout(240_000);

t.test('latency, saturation and billing on the messages lane, with the HTML report', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'bench-tool-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const html = join(dir, 'report.html');
  const { rep, pid } = await bench(t, [
    '--seconds',
    '1',
    '--warmup-seconds',
    '0.2',
    '--scenario',
    'latency,saturation,billing',
    '--lane',
    'messages',
    '--connections',
    '8',
    '--json',
    '--report',
    html,
  ]);
  t.equal(rep.tool, 'inkgate bench');
  t.equal(rep.selfStarted, true);
  t.equal(rep.database, 'DATABASE_URL');
  t.same([...new Set(rep.runs.map((r) => r.scenario))], ['latency', 'saturation', 'billing']);
  const kinds = rep.runs.map((r) => `${r.scenario}/${r.kind}/${r.connections}/${r.target}`);
  for (const want of [
    'latency/request/1/direct',
    'latency/request/1/plain proxy',
    'latency/request/1/inkgate',
    'latency/stream/1/inkgate',
    'saturation/request/8/plain proxy',
    'saturation/request/8/inkgate',
    'billing/request/1/inkgate (billing off)',
    'billing/request/8/inkgate (billing off)',
    'billing/request/8/inkgate',
  ]) {
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
  const { rep, pid } = await bench(t, [
    '--seconds',
    '1',
    '--warmup-seconds',
    '0.2',
    '--scenario',
    'open-loop,paced',
    '--lane',
    'responses',
    '--rate',
    '100',
    '--streams',
    '20',
    '--pace-ms',
    '10',
    '--deltas',
    '10',
    '--json',
  ]);
  for (const r of rep.runs) checkRun(t, r);
  checkRatiosAndGoals(t, rep);
  for (const r of rep.runs.filter((x) => x.kind === 'paced')) {
    t.equal(r.requests, 20, `${r.target}: every paced stream measured`);
    t.equal(r.paced!.failures, 0);
    t.ok(r.paced!.maxGapMs > 0 && r.paced!.maxGapMs <= r.latency.maxMs, `${r.target}: longest gap within the longest stream`);
    // Time is the behaviour: a paced stream lasts its deltas times the pace. A lower bound only.
    t.ok(r.latency.p50Ms >= 9 * 10 * 0.9, `${r.target}: a stream lasts about deltas x pace (${r.latency.p50Ms} ms)`);
    t.ok(r.own!.cpuUsPerChunk! > 0);
  }
  for (const r of rep.runs.filter((x) => x.kind === 'open-loop')) {
    t.equal(r.openLoop!.scheduled, 100, `${r.target}: 100 sends scheduled in 1 s at 100/s`);
    t.equal(r.requests, 100, `${r.target}: all answered`);
    t.ok(r.openLoop!.lateSends <= r.openLoop!.scheduled);
  }
  t.ok(
    rep.goals.some((g) => g.goal.includes('gateway peak RSS') && g.value !== null),
    'paced goals measured',
  );
  t.same(rep.skipped, []);
  await checkStopped(t, rep, pid);
});
