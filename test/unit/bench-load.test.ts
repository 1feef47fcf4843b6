// The bench's load generators (src/bench/load.ts) against real HTTP servers on 127.0.0.1: the
// open loop counts latency from the scheduled send time, so a stall the target imposes shows in
// p99 and max even though it held back the sends (no coordinated omission); the uncorrected
// service time beside it shows what a naive generator would have reported.
import { createServer, type Server } from 'node:http';
import t from 'tap';
import { parseBenchArgs } from '../../src/bench/args.js';
import { closedLoop, countEventEnds, openLoop } from '../../src/bench/load.js';
import { newHistogram, recordMs, summarize } from '../../src/bench/histogram.js';

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
  const r = await openLoop({ request: { origin, path: '/', headers: {}, body: '{}' }, rate: 200, maxInFlight: 1, warmupMs: 0, durationMs: 1000, maxRequests: 1_000_000 });
  t.equal(stalls, 1, 'the target stalled once');
  t.equal(r.scheduled, 200, '200 sends scheduled over 1 s at 200/s');
  t.equal(r.requests, 200, 'every scheduled send answered and measured');
  t.same(r.statuses, { 200: 200 });
  const corrected = summarize(r.latency);
  const naive = summarize(r.serviceTime);
  t.ok(corrected.maxMs >= 190, `max from schedule includes the stall: ${corrected.maxMs} ms`);
  t.ok(corrected.p99Ms >= 150, `p99 from schedule shows the stall: ${corrected.p99Ms} ms`);
  t.ok(corrected.p90Ms >= 20, `the sends held back during the stall are about 20% of the run: p90 ${corrected.p90Ms} ms`);
  t.ok(naive.p99Ms < 50, `measured from the actual send the stall hides below p99: ${naive.p99Ms} ms`);
  t.ok(naive.maxMs >= 190, 'the stalled request itself is still the naive max');
  t.ok(r.lateSends >= 20, `the sends due during the stall are counted late: ${r.lateSends}`);
});

t.test('open loop: a target that keeps up has no late sends and the schedule holds', async (t) => {
  const server = createServer((req, res) => (req.resume(), req.on('end', () => res.end('{}'))));
  const origin = await listen(server);
  t.teardown(() => void server.close());
  const r = await openLoop({ request: { origin, path: '/', headers: {}, body: '{}' }, rate: 100, maxInFlight: 10, warmupMs: 200, durationMs: 500, maxRequests: 1_000_000 });
  t.equal(r.scheduled, 50, 'warm-up sends are not measured');
  t.equal(r.requests, 50);
  t.ok(r.lateSends <= 5, `few late sends on an idle target: ${r.lateSends}`);
  t.ok(summarize(r.latency).p50Ms < 20);
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
  const s = await closedLoop({ request: { origin, path: '/', headers: {}, body: '{}' }, connections: 2, warmupMs: 100, durationMs: 400, maxRequests: 1_000_000, marker: Buffer.from('content_block_delta') });
  t.ok(s.requests > 10, `requests measured: ${s.requests}`);
  t.same(Object.keys(s.statuses), ['200']);
  t.equal(s.latency.totalCount, s.requests);
  t.equal(s.ttft.totalCount, s.requests, 'every stream had its first delta');
  t.equal(s.chunks, 2 * s.requests, 'two SSE events per stream, one split across writes');
  const capped = await closedLoop({ request: { origin, path: '/teapot', headers: {}, body: '{}' }, connections: 1, warmupMs: 0, durationMs: 5000, maxRequests: 25, marker: null });
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
  t.same(o.scenarios, ['latency', 'saturation', 'stream-saturation', 'open-loop', 'paced', 'billing', 'many-tenants', 'durability', 'http-front']);
  t.same([o.tenantAccounts, o.tenantKeys], [100, 1000], 'many tenants: 1,000 keys over 100 accounts');
  t.same(o.lanes, ['messages', 'responses']);
  t.equal(o.seconds, 5);
  t.equal(o.connections, 50);
  t.equal(o.streams, 1000);
  t.equal(o.progress, false, 'no progress bar off a terminal');
  t.equal(parseBenchArgs(['--progress'], false).progress, true);
  for (const bad of [['--seconds', '0'], ['--scenario', 'latency,warp'], ['--lane', 'video'], ['--gateway', 'http://x'], ['--direct', 'ftp://x', '--direct-key', 'k'], ['--frobnicate'], ['--connections', '2.5'], ['stray'], ['--tenant-accounts', '10', '--tenant-keys', '5']]) {
    t.throws(() => parseBenchArgs(bad, false), { name: 'BenchUsageError' }, bad.join(' '));
  }
});

t.test('children inherit the loader and profiling flags, not an eval script or a debugger port', async (t) => {
  const { childExecArgv } = await import('../../src/bench/targets.js');
  t.same(childExecArgv(['--import', './loader.mjs', '--input-type=module', '-e', 'code()', '--cpu-prof', '--inspect=9229']), ['--import', './loader.mjs', '--cpu-prof']);
  t.same(childExecArgv(['--input-type', 'module', '--eval', 'x']), []);
});
