// The bench's load generators (bench/tool/load.ts) against real HTTP servers on 127.0.0.1: the
// open loop counts latency from the scheduled send time, so a stall the target imposes shows in
// p99 and max even though it held back the sends (no coordinated omission); the uncorrected
// service time beside it shows what a naive generator would have reported.
import { createServer, type Server } from 'node:http';
import t from 'tap';
import { parseBenchArgs } from '../../bench/tool/args.js';
import { closedLoop, countEventEnds, openLoop } from '../../bench/tool/load.js';
import { newHistogram, recordMs, summarize } from '../../bench/tool/histogram.js';
import { goals, ratios } from '../../bench/tool/goals.js';
import { planRuns, profileFile, type RunKind, type RunResult } from '../../bench/tool/scenarios.js';
import type { Target, TargetName, TargetSet } from '../../bench/tool/targets.js';
import type { LaneName } from '../../bench/tool/args.js';
import { area, summarise, type CpuProfile } from '../../bench/cpuprofile-top.js';

async function listen(s: Server): Promise<string> {
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  return `http://127.0.0.1:${(s.address() as { port: number }).port}`;
}

t.test('open loop: a single 200 ms stall shows in p99 and max from the scheduled time', async (t) => {
  let first = 0;
  let stallUntil = 0;
  let stalls = 0;
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const now = performance.now();
      if (first === 0) first = now;
      // Once, 300 ms in: everything (this answer and all that arrive meanwhile) waits 200 ms.
      if (stalls === 0 && now - first > 300) {
        stalls++;
        stallUntil = now + 200;
      }
      const wait = stallUntil - now;
      if (wait > 0) setTimeout(() => res.end('{}'), wait);
      else res.end('{}');
    });
  });
  const origin = await listen(server);
  t.teardown(() => void server.close());
  // One request out at a time: the shape in which a closed-loop generator hides a stall.
  const r = await openLoop({
    request: { origin, path: '/', headers: {}, body: '{}' },
    rate: 200,
    maxInFlight: 1,
    warmupMs: 0,
    durationMs: 1000,
    maxRequests: 1_000_000,
  });
  t.equal(stalls, 1, 'the target stalled once');
  t.equal(r.scheduled, 200, '200 sends scheduled over 1 s at 200/s');
  t.equal(r.requests, 200, 'every scheduled send answered and measured');
  t.same(r.statuses, { 200: 200 });
  const corrected = summarize(r.latency);
  const naive = summarize(r.serviceTime);
  // Time is the behaviour: the generator's latency figures must show the target's real 200 ms
  // stall. Lower bounds only: a slower machine makes them larger, never smaller.
  t.ok(corrected.maxMs >= 190, `max from schedule includes the stall: ${corrected.maxMs} ms`);
  t.ok(corrected.p99Ms >= 150, `p99 from schedule shows the stall: ${corrected.p99Ms} ms`);
  t.ok(corrected.p90Ms >= 20, `the sends held back during the stall are about 20% of the run: p90 ${corrected.p90Ms} ms`);
  // Against the corrected figure of the same run, so that a busy machine (every answer slower) does not decide it.
  t.ok(naive.p99Ms < corrected.p99Ms / 2, `measured from the actual send the stall hides below p99: ${naive.p99Ms} ms against ${corrected.p99Ms} ms`);
  t.ok(naive.maxMs >= 190, 'the stalled request itself is still the naive max');
  t.ok(r.lateSends >= 20, `the sends due during the stall are counted late: ${r.lateSends}`);
});

t.test('open loop: a target that keeps up has no late sends and the schedule holds', async (t) => {
  const server = createServer((req, res) => (req.resume(), req.on('end', () => res.end('{}'))));
  const origin = await listen(server);
  t.teardown(() => void server.close());
  const r = await openLoop({
    request: { origin, path: '/', headers: {}, body: '{}' },
    rate: 100,
    maxInFlight: 10,
    warmupMs: 200,
    durationMs: 500,
    maxRequests: 1_000_000,
  });
  t.equal(r.scheduled, 50, 'warm-up sends are not measured');
  t.equal(r.requests, 50);
  // Late means more than one 10 ms interval behind: a busy machine's timers alone make a few late.
  t.ok(r.lateSends <= r.scheduled / 2, `most sends on time on an idle target: ${r.lateSends} late of ${r.scheduled}`);
  // The schedule holds: measured from the scheduled time, the median adds less than one 10 ms
  // interval to the service time of the same run (so a busy machine, every answer slower, does not
  // decide it, as a fixed bound would).
  const fromSchedule = summarize(r.latency).p50Ms;
  const service = summarize(r.serviceTime).p50Ms;
  t.ok(fromSchedule <= service + 10, `median from the schedule ${fromSchedule} ms, service time ${service} ms`);
});

t.test('closed loop: counts only the measured window, statuses and SSE events', async (t) => {
  const server = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      if (req.url === '/teapot') return void res.writeHead(418).end();
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('event: a\ndata: {"type":"content_block_delta"}\n');
      // The blank line that ends the event comes in the next write: counted across the boundary.
      setImmediate(() => res.end('\nevent: b\ndata: {}\n\n'));
    });
  });
  const origin = await listen(server);
  t.teardown(() => void server.close());
  const s = await closedLoop({
    request: { origin, path: '/', headers: {}, body: '{}' },
    connections: 2,
    warmupMs: 100,
    durationMs: 400,
    maxRequests: 1_000_000,
    marker: Buffer.from('content_block_delta'),
  });
  t.ok(s.requests > 10, `requests measured: ${s.requests}`);
  t.same(Object.keys(s.statuses), ['200']);
  t.equal(s.latency.totalCount, s.requests);
  t.equal(s.ttft.totalCount, s.requests, 'every stream had its first delta');
  t.equal(s.chunks, 2 * s.requests, 'two SSE events per stream, one split across writes');
  const capped = await closedLoop({
    request: { origin, path: '/teapot', headers: {}, body: '{}' },
    connections: 1,
    warmupMs: 0,
    durationMs: 5000,
    maxRequests: 25,
    marker: null,
  });
  t.equal(capped.requests, 25, 'the per-run request cap ends the run early');
  t.ok(capped.seconds < 4, 'well before its duration');
  t.same(capped.statuses, { 418: 25 });
});

t.test('SSE event ends and histogram summaries', async (t) => {
  t.equal(countEventEnds(Buffer.from('a\n\nb\n\n'), false), 2);
  t.equal(countEventEnds(Buffer.from('\nb'), true), 1, 'a blank line split across chunks');
  t.equal(countEventEnds(Buffer.from('\nb'), false), 0);
  const h = newHistogram();
  for (let i = 1; i <= 1000; i++) recordMs(h, i / 10);
  const s = summarize(h);
  t.ok(Math.abs(s.p50Ms - 50) < 0.1 && Math.abs(s.p99Ms - 99) < 0.1 && s.maxMs === 100, JSON.stringify(s));
  t.ok(Number.isNaN(summarize(newHistogram()).p50Ms), 'an empty run has no percentiles, not zero');
});

t.test('arguments: bounded and checked', async (t) => {
  const o = parseBenchArgs([], false);
  t.same(o.scenarios, [
    'latency',
    'saturation',
    'stream-saturation',
    'open-loop',
    'paced',
    'billing',
    'many-tenants',
    'durability',
    'engines',
    'access-log',
    'pool',
  ]);
  t.equal(o.cpuProfDir, null, 'no profile unless asked');
  t.equal(parseBenchArgs(['--cpu-prof', '/tmp/p'], false).cpuProfDir, '/tmp/p');
  t.same([o.tenantAccounts, o.tenantKeys], [100, 1000], 'many tenants: 1,000 keys over 100 accounts');
  t.same(o.lanes, ['messages', 'responses']);
  t.equal(o.seconds, 5);
  t.equal(o.connections, 50);
  t.equal(o.streams, 1000);
  t.equal(o.progress, false, 'no progress bar off a terminal');
  t.equal(parseBenchArgs(['--progress'], false).progress, true);
  for (const bad of [
    ['--seconds', '0'],
    ['--scenario', 'latency,warp'],
    ['--lane', 'video'],
    ['--gateway', 'http://x'],
    ['--direct', 'ftp://x', '--direct-key', 'k'],
    ['--frobnicate'],
    ['--connections', '2.5'],
    ['stray'],
    ['--tenant-accounts', '10', '--tenant-keys', '5'],
    ['--cpu-prof'],
    ['--cpu-prof', ' '],
    ['--scenario', 'http-front'],
  ]) {
    t.throws(() => parseBenchArgs(bad, false), { name: 'BenchUsageError' }, bad.join(' '));
  }
});

t.test('children inherit the loader and profiling flags, not an eval script or a debugger port', async (t) => {
  const { childExecArgv } = await import('../../bench/tool/targets.js');
  t.same(childExecArgv(['--import', './loader.mjs', '--input-type=module', '-e', 'code()', '--cpu-prof', '--inspect=9229']), [
    '--import',
    './loader.mjs',
    '--cpu-prof',
  ]);
  t.same(childExecArgv(['--input-type', 'module', '--eval', 'x']), []);
});

/** A target of the given name on a lane, enough for planning. */
const fakeTarget = (name: TargetName, lane: LaneName): Target =>
  ({
    name,
    lane,
    request: { origin: 'http://127.0.0.1:1', path: '/', headers: {} },
    bodies: { plain: '{}', stream: '{}', paced: '{}' },
    processName: name,
  }) as Target;
const fakeSet = (names: readonly TargetName[]): TargetSet => ({
  targets: (['messages', 'responses'] as const).flatMap((l) => names.map((n) => fakeTarget(n, l))),
  processes: [],
  database: null,
  upstreamConnections: null,
  tenantsLimiter: null,
  engines: [],
  notes: [],
  stop: async () => undefined,
});

t.test('engines scenario: the plain proxy and each engine under load, and the direct simulator too at concurrency 1', async (t) => {
  const o = parseBenchArgs(['--scenario', 'engines', '--lane', 'messages', '--connections', '7'], false);
  const plan = (names: readonly TargetName[]) => planRuns(o, fakeSet(names)).runs.map((r) => `${r.kind}/${r.connections}/${r.target.name}`);
  const all: TargetName[] = ['direct', 'plain proxy', 'inkgate', 'inkgate (uws)', 'inkgate (node)'];
  t.same(
    plan(all),
    [
      'request/1/direct',
      'request/1/plain proxy',
      'request/1/inkgate (uws)',
      'request/1/inkgate (node)',
      'stream/1/direct',
      'stream/1/plain proxy',
      'stream/1/inkgate (uws)',
      'stream/1/inkgate (node)',
      'request/7/plain proxy',
      'request/7/inkgate (uws)',
      'request/7/inkgate (node)',
      'stream/7/plain proxy',
      'stream/7/inkgate (uws)',
      'stream/7/inkgate (node)',
    ],
    'the shared inkgate is not a target of this scenario',
  );
  // Where uWS does not load (Node 22 and later) only the node gateway is started: it runs alone.
  t.same(
    plan(['direct', 'plain proxy', 'inkgate (node)']).filter((r) => r.includes('inkgate')),
    ['request/1/inkgate (node)', 'stream/1/inkgate (node)', 'request/7/inkgate (node)', 'stream/7/inkgate (node)'],
  );
  const named = planRuns(o, fakeSet(['direct', 'plain proxy', 'inkgate']));
  t.same(named.runs, [], 'a named gateway: nothing to compare');
  t.match(named.skipped, [{ lane: 'messages', scenario: 'engines', reason: /a gateway per HTTP engine/ }]);
});

t.test('access-log scenario: the same gateway with its access log on and off, under load, and their ratios', async (t) => {
  const o = parseBenchArgs(['--scenario', 'access-log', '--lane', 'responses', '--connections', '9'], false);
  const set = fakeSet(['direct', 'plain proxy', 'inkgate', 'inkgate (access log)', 'inkgate (no access log)']);
  t.same(
    planRuns(o, set).runs.map((r) => `${r.kind}/${r.connections}/${r.target.name}`),
    ['request/9/inkgate (access log)', 'request/9/inkgate (no access log)', 'stream/9/inkgate (access log)', 'stream/9/inkgate (no access log)'],
  );
  t.match(planRuns(o, fakeSet(['direct', 'plain proxy', 'inkgate'])).skipped, [{ scenario: 'access-log', reason: /access log on and off/ }]);
  const run = (target: TargetName, cpu: number) =>
    ({
      lane: 'responses',
      scenario: 'access-log',
      kind: 'request',
      target,
      connections: 9,
      rps: 100,
      failed: 0,
      latency: { p50Ms: 1, p99Ms: 2 },
      ttft: null,
      own: { cpuUsPerRequest: cpu },
    }) as unknown as RunResult;
  const cpu = ratios([run('inkgate (access log)', 110), run('inkgate (no access log)', 100)]).find((r) => r.metric === 'own.cpuUsPerRequest');
  t.match(cpu, { of: 'inkgate (access log)', vs: 'inkgate (no access log)', numerator: 110, denominator: 100 });
  t.ok(Math.abs(cpu!.ratio - 1.1) < 1e-9);
});

t.test("engines goals: ratios to the plain proxy and added latency less the proxy's, from the reported figures", async (t) => {
  const run = (kind: RunKind, connections: number, target: TargetName, f: { rps?: number; cpu?: number; p50?: number; ttft?: number; failed?: number }) =>
    ({
      lane: 'responses',
      scenario: 'engines',
      kind,
      target,
      connections,
      rps: f.rps ?? 100,
      failed: f.failed ?? 0,
      latency: { p50Ms: f.p50 ?? 1 },
      ttft: kind === 'stream' ? { p50Ms: f.ttft ?? 1 } : null,
      own: { cpuUsPerRequest: f.cpu ?? 100 },
    }) as unknown as RunResult;
  const runs = [
    run('request', 1, 'direct', { p50: 0.2 }),
    run('request', 1, 'plain proxy', { p50: 0.5 }),
    run('request', 1, 'inkgate (uws)', { p50: 0.55 }),
    run('request', 1, 'inkgate (node)', { p50: 0.75 }),
    run('stream', 1, 'direct', { ttft: 0.3 }),
    run('stream', 1, 'plain proxy', { ttft: 0.6 }),
    run('stream', 1, 'inkgate (uws)', { ttft: 0.6 }),
    run('stream', 1, 'inkgate (node)', { ttft: 0.65 }),
    run('request', 50, 'plain proxy', { rps: 1000, cpu: 100 }),
    run('request', 50, 'inkgate (uws)', { rps: 1400, cpu: 90 }),
    run('request', 50, 'inkgate (node)', { rps: 1000, cpu: 110 }),
    run('stream', 50, 'plain proxy', { rps: 1000, cpu: 100 }),
    run('stream', 50, 'inkgate (uws)', { rps: 1200, cpu: 90 }),
    run('stream', 50, 'inkgate (node)', { rps: 900, cpu: 120, failed: 2 }),
  ];
  const gs = goals(runs, ['responses'], 20).filter((g) => g.goal.startsWith('engines:'));
  const at = (name: string) => gs.find((g) => g.goal === `engines: ${name}`)!;
  const is = (name: string, value: number, pass: boolean) => {
    t.ok(Math.abs(at(name).value! - value) < 1e-9, `${name}: ${at(name).value} = ${value}`);
    t.equal(at(name).pass, pass, `${name}: ${pass ? 'PASS' : 'MISS'}`);
  };
  is('node rps vs plain proxy (non-streaming, under load)', 1.0, true);
  is('node CPU per request vs plain proxy (non-streaming, under load)', 1.1, true);
  is('uws rps vs plain proxy (non-streaming, under load)', 1.4, true);
  is('node rps vs plain proxy (streaming, under load)', 0.9, false);
  is('node CPU per request vs plain proxy (streaming, under load)', 1.2, false);
  is('uws rps vs plain proxy (streaming, under load)', 1.2, false);
  is("uws added latency c=1 p50 over the plain proxy's (non-streaming)", 0.05, true);
  is("node added latency c=1 p50 over the plain proxy's (non-streaming)", 0.25, false);
  is("uws added time to first token c=1 p50 over the plain proxy's", 0, true);
  is("node added time to first token c=1 p50 over the plain proxy's", 0.05, true);
  is('failed requests, every run', 2, false);
  t.ok(
    goals([], ['responses'], 20)
      .filter((g) => g.goal.startsWith('engines:'))
      .every((g) => g.value === null && g.pass === null),
    'not run: no figure, no verdict',
  );
  const rs = ratios(runs).filter((r) => r.of === 'inkgate (node)' && r.vs === 'plain proxy' && r.kind === 'stream' && r.connections === 50);
  t.same(
    rs.map((r) => r.metric),
    ['rps', 'ttft.p50Ms', 'latency.p50Ms', 'own.cpuUsPerRequest'],
    'streams compare CPU per request too',
  );
});

t.test('--cpu-prof: one file per run, named after it', async (t) => {
  t.equal(
    profileFile('/p', { lane: 'messages', scenario: 'engines', kind: 'stream', connections: 50 }, 'inkgate (node)'),
    '/p/messages-engines-stream-c50-inkgate-node.cpuprofile',
  );
  t.equal(
    profileFile('/p', { lane: 'responses', scenario: 'latency', kind: 'request', connections: 1 }, 'plain proxy'),
    '/p/responses-latency-request-c1-plain-proxy.cpuprofile',
  );
});

t.test('cpuprofile-top: self time by function and area, inclusive time by pattern', async (t) => {
  const frame = (functionName: string, url = '', lineNumber = 0) => ({ functionName, url, lineNumber });
  // root -> main (app.js) -> { write (native), helper (node_modules/lib) }; idle beside.
  const p: CpuProfile = {
    nodes: [
      { id: 1, callFrame: frame('(root)'), children: [2, 5, 6] },
      { id: 2, callFrame: frame('main', 'file:///x/dist/src/server/app.js', 9), children: [3, 4] },
      { id: 3, callFrame: frame('writev') },
      { id: 4, callFrame: frame('helper', 'file:///x/node_modules/undici/lib/a.js', 1) },
      { id: 5, callFrame: frame('(idle)') },
      { id: 6, callFrame: frame('(garbage collector)') },
    ],
    startTime: 0,
    endTime: 1000,
    // Each sample's self time is the delta to the next one.
    samples: [2, 3, 3, 4, 5, 6, 2],
    timeDeltas: [0, 100, 200, 300, 400, 500, 600],
  };
  const s = summarise(p, [/main/, /helper/]);
  t.equal(s.totalMs, 2.1);
  t.equal(s.idleMs, 0.5);
  t.equal(s.busyMs, 1.6);
  t.same(
    s.functions,
    [
      { key: 'writev (native, from main src/server/app.js:10)', ms: 0.5 },
      { key: '(garbage collector)', ms: 0.6 },
      { key: 'helper undici/lib/a.js:2', ms: 0.4 },
      { key: 'main src/server/app.js:10', ms: 0.1 },
    ].sort((a, b) => b.ms - a.ms),
  );
  t.same(s.areas.map((a) => a.key).sort(), ['(garbage collector)', '(native)', 'src/server/app.js', 'undici'].sort());
  t.same(
    s.matches,
    [
      { pattern: 'main', ms: 1.0 },
      { pattern: 'helper', ms: 0.4 },
    ],
    "inclusive: main is on the stack of its own, writev's and helper's samples",
  );
  t.same(summarise(p, [], /^writev /).callers, [{ key: 'writev < main src/server/app.js:10', ms: 0.5 }], 'callers: the path up to the root');
  t.equal(area(frame('x', 'node:internal/streams/readable', 1)), 'node:streams/readable');
  t.equal(area(frame('x', 'file:///a/node_modules/@scope/pkg/lib/x.js', 1)), '@scope/pkg');
});

t.test('pool scenario: one deployment then two, under load; the goal is the CPU per request two less one', async (t) => {
  const o = parseBenchArgs(['--scenario', 'pool', '--lane', 'messages', '--connections', '6'], false);
  const set = fakeSet(['direct', 'plain proxy', 'inkgate (one deployment)', 'inkgate (two deployments)']);
  t.same(
    planRuns(o, set).runs.map((r) => `${r.kind}/${r.connections}/${r.target.name}`),
    ['request/6/inkgate (one deployment)', 'request/6/inkgate (two deployments)', 'stream/6/inkgate (one deployment)', 'stream/6/inkgate (two deployments)'],
  );
  t.match(planRuns(o, fakeSet(['direct', 'plain proxy', 'inkgate'])).skipped, [{ scenario: 'pool', reason: /one vendor deployment and with two/ }]);
  const run = (kind: RunKind, target: TargetName, cpu: number) =>
    ({
      lane: 'messages',
      scenario: 'pool',
      kind,
      target,
      connections: 6,
      rps: 100,
      failed: 0,
      latency: { p50Ms: 1, p99Ms: 2 },
      ttft: kind === 'stream' ? { p50Ms: 1 } : null,
      own: { cpuUsPerRequest: cpu },
    }) as unknown as RunResult;
  const runs = [
    run('request', 'inkgate (one deployment)', 300),
    run('request', 'inkgate (two deployments)', 301.5),
    run('stream', 'inkgate (one deployment)', 400),
    run('stream', 'inkgate (two deployments)', 403),
  ];
  const pool = goals(runs, ['messages'], 20).filter((g) => g.goal.startsWith('pool:'));
  t.match(pool, [
    { goal: 'pool: CPU per request, two deployments less one (non-streaming)', value: 1.5, limit: 2, unit: 'µs', pass: true },
    { goal: 'pool: CPU per request, two deployments less one (streaming)', value: 3, limit: 2, pass: false },
  ]);
  t.ok(ratios(runs).some((q) => q.of === 'inkgate (two deployments)' && q.vs === 'inkgate (one deployment)' && q.metric === 'own.cpuUsPerRequest'));
});
