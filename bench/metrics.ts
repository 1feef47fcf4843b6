// Metrics bench: what counting costs per request, on this machine, in nanoseconds.
//   server       what every request pays: two clock reads and one observation of
//                inkgate_http_requests_total / _duration_seconds (metrics/request-metrics.ts)
//   text         what a billed text stream pays on top: Ink held, Ink charged, time to first
//                token (prom-client children, labels looked up per call)
//   prom-client  for comparison: the same request observation through prom-client's own labelled
//                Counter + Histogram, which is what the precomputed cells replace
// Each case runs --n iterations (default 2,000,000) after a warm-up of the same size, --repeat
// times (default 5); the report gives the median. The routes, statuses and durations cycle
// through realistic mixes, so branch prediction does not see one value.
//
// Run: npm run bench:metrics [-- --n 2000000 --repeat 5 --json]
import { performance } from 'node:perf_hooks';
import { Counter, Histogram, Registry } from 'prom-client';
import { GatewayMetrics } from '../src/metrics/metrics.js';
import { DURATION_BUCKETS_S } from '../src/metrics/request-metrics.js';
import { numberArg } from './lib/argv.js';
import { median } from './lib/stats.js';

const N = numberArg('n', 2_000_000);
const REPEAT = numberArg('repeat', 5);
const JSON_OUT = process.argv.slice(2).includes('--json');

const ROUTES: ReadonlyArray<readonly [string, string]> = [
  ['POST', '/v1/messages'],
  ['POST', '/v1/responses'],
  ['GET', '/v1/models'],
  ['GET', '/v1/me'],
  ['GET', '/v1/video/generations/:id'],
];
const STATUSES = [200, 200, 200, 200, 402, 429, 200, 503];
const SECONDS = [0.0004, 0.003, 0.02, 0.4, 1.7, 0.0009, 12, 0.05];

function time(run: (i: number) => void): number {
  for (let i = 0; i < N; i++) run(i);
  const t0 = performance.now();
  for (let i = 0; i < N; i++) run(i);
  return ((performance.now() - t0) * 1e6) / N;
}

const m = new GatewayMetrics();
let sink = 0;
const cases: Record<string, (i: number) => void> = {
  server: (i) => {
    const started = performance.now();
    const r = ROUTES[i % 5]!;
    m.http.observe(r[0], r[1], STATUSES[i & 7]!, (performance.now() - started) / 1000 + SECONDS[i & 7]!);
  },
  text: (i) => {
    m.inkHeld('messages', 'assistant-sonnet-5', 1200);
    m.firstToken('messages', SECONDS[i & 7]!);
    m.inkCharged('messages', 'assistant-sonnet-5', 37);
  },
};
const reg = new Registry();
const pc = new Counter({ name: 'pc_requests_total', help: 'x', labelNames: ['route', 'method', 'status_class'], registers: [reg] });
const ph = new Histogram({
  name: 'pc_duration_seconds',
  help: 'x',
  labelNames: ['route', 'method', 'status_class'],
  buckets: [...DURATION_BUCKETS_S],
  registers: [reg],
});
const CLASSES = ['1xx', '2xx', '3xx', '4xx', '5xx'];
cases['prom-client'] = (i) => {
  const started = performance.now();
  const r = ROUTES[i % 5]!;
  const labels = { route: r[1], method: r[0], status_class: CLASSES[Math.floor(STATUSES[i & 7]! / 100) - 1]! };
  pc.inc(labels);
  ph.observe(labels, (performance.now() - started) / 1000 + SECONDS[i & 7]!);
};

const results: Record<string, number> = {};
for (const [name, run] of Object.entries(cases)) {
  const runs: number[] = [];
  for (let r = 0; r < REPEAT; r++) runs.push(time(run));
  results[name] = median(runs);
}
sink += (await m.scrape()).body.length; // the cells were really written
if (JSON_OUT) process.stdout.write(JSON.stringify({ n: N, repeat: REPEAT, nsPerRequest: results }) + '\n');
else {
  process.stdout.write(`metrics cost per request (median of ${REPEAT} x ${N.toLocaleString()}; node ${process.version}):\n`);
  for (const [name, ns] of Object.entries(results)) process.stdout.write(`  ${name.padEnd(12)} ${ns.toFixed(0).padStart(6)} ns\n`);
  process.stdout.write(`  a text stream in all: ${(results.server! + results.text!).toFixed(0)} ns (goal: under 2,000)\n`);
}
if (sink === 0) process.exit(1);
