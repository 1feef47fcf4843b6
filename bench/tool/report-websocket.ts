// The latency scenario's WebSocket comparison (Responses lane): a turn on an open socket against
// one HTTP request per turn, both through the self-started gateway in the same run.
import type { RunResult } from './scenarios.js';

const f = (v: number | null | undefined, d = 2): string => (v === null || v === undefined ? '-' : v.toFixed(d));
const ratio = (a: number | null | undefined, b: number | null | undefined): string => (a == null || b == null || b === 0 ? '-' : `${(a / b).toFixed(2)}x`);

export function websocketSummary(runs: readonly RunResult[]): string {
  const ws = runs.find((r) => r.kind === 'websocket' && r.scenario === 'latency');
  const http = runs.find((r) => r.kind === 'stream' && r.scenario === 'latency' && r.lane === 'responses' && r.target === 'inkgate' && r.connections === 1);
  if (ws === undefined || http === undefined) return '';
  const row = (name: string, r: RunResult) =>
    `  ${name.padEnd(34)} ${String(r.requests).padStart(7)} ${f(r.rps, 0).padStart(8)} ${f(r.ttft?.p50Ms).padStart(9)} ${f(r.latency.p50Ms).padStart(9)} ${f(r.latency.p99Ms).padStart(9)} ${f(r.own?.cpuUsPerRequest, 0).padStart(9)} ${String(r.failed).padStart(6)}`;
  return [
    '\n## responses: turns on one WebSocket against one HTTP request per turn (concurrency 1, inkgate)',
    `  ${'transport'.padEnd(34)} ${'turns'.padStart(7)} ${'turns/s'.padStart(8)} ${'TTFT p50'.padStart(9)} ${'last p50'.padStart(9)} ${'last p99'.padStart(9)} ${'CPU µs'.padStart(9)} ${'failed'.padStart(6)}`,
    row('HTTP stream, one request per turn', http),
    row('WebSocket, turns on one socket', ws),
    `  socket / HTTP: turn p50 ${ratio(ws.latency.p50Ms, http.latency.p50Ms)}, TTFT p50 ${ratio(ws.ttft?.p50Ms, http.ttft?.p50Ms)}, gateway CPU per turn ${ratio(ws.own?.cpuUsPerRequest, http.own?.cpuUsPerRequest)}`,
  ].join('\n');
}
