// A self-contained HTML report: one SVG latency-distribution plot per lane and scenario (every
// target a line, percentile on a log "nines" axis as HdrHistogram plots do), the terminal tables
// below it, and the goals. No script, no external asset: it opens from a mail attachment.
import type { BenchReport } from './report.js';
import { renderTerminal } from './report-terminal.js';
import type { RunResult } from './scenarios.js';

const COLORS: Record<string, string> = {
  direct: '#2b7a0b',
  'plain proxy': '#1f5fbf',
  inkgate: '#c2410c',
  'inkgate (billing off)': '#7c3aed',
  'inkgate (uws)': '#c2410c',
  'inkgate (node)': '#0f766e',
};
const W = 640;
const H = 300;
const M = { l: 60, r: 16, t: 24, b: 40 };

const esc = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
/** Percentile to x in "nines": 0% -> 0, 90% -> 1, 99% -> 2, 99.9% -> 3 ... */
const nines = (p: number) => (p >= 100 ? NaN : -Math.log10(1 - p / 100));

interface Series {
  readonly name: string;
  readonly points: Array<[number, number]>;
}

export function svgPlot(title: string, series: readonly Series[]): string {
  const all = series
    .flatMap((s) => s.points.map(([p, v]) => [Number.isNaN(nines(p)) ? NaN : nines(p), v] as const))
    .filter(([x, v]) => Number.isFinite(x) && Number.isFinite(v));
  const maxX = Math.max(2, Math.ceil(Math.max(0, ...all.map(([x]) => x))));
  const maxV = Math.max(0.001, ...series.flatMap((s) => s.points.map(([, v]) => v)).filter(Number.isFinite));
  const sx = (x: number) => M.l + (x / maxX) * (W - M.l - M.r);
  const sy = (v: number) => H - M.b - (v / maxV) * (H - M.t - M.b);
  const parts: string[] = [];
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="${esc(title)}">`);
  parts.push(`<text x="${M.l}" y="16" font-size="13" font-weight="bold">${esc(title)}</text>`);
  for (let i = 0; i <= maxX; i++) {
    const label = i === 0 ? '0%' : `${(100 - 10 ** (2 - i)).toFixed(Math.max(0, i - 2))}%`;
    parts.push(
      `<line x1="${sx(i)}" y1="${M.t}" x2="${sx(i)}" y2="${H - M.b}" stroke="#ddd"/><text x="${sx(i)}" y="${H - M.b + 14}" font-size="10" text-anchor="middle">${label}</text>`,
    );
  }
  for (let i = 0; i <= 4; i++) {
    const v = (maxV * i) / 4;
    parts.push(
      `<line x1="${M.l}" y1="${sy(v)}" x2="${W - M.r}" y2="${sy(v)}" stroke="#eee"/><text x="${M.l - 4}" y="${sy(v) + 3}" font-size="10" text-anchor="end">${v.toPrecision(3)}</text>`,
    );
  }
  parts.push(`<text x="${(W + M.l) / 2}" y="${H - 6}" font-size="11" text-anchor="middle">percentile</text>`);
  parts.push(`<text x="12" y="${(H - M.b + M.t) / 2}" font-size="11" transform="rotate(-90 12 ${(H - M.b + M.t) / 2})" text-anchor="middle">latency ms</text>`);
  series.forEach((s, i) => {
    const pts = s.points.filter(([p, v]) => p < 100 && Number.isFinite(v)).map(([p, v]) => `${sx(nines(p)).toFixed(1)},${sy(v).toFixed(1)}`);
    const color = COLORS[s.name] ?? '#444';
    if (pts.length) parts.push(`<polyline fill="none" stroke="${color}" stroke-width="2" points="${pts.join(' ')}"><title>${esc(s.name)}</title></polyline>`);
    const max = s.points.find(([p]) => p >= 100);
    if (max) parts.push(`<circle cx="${sx(maxX)}" cy="${sy(max[1])}" r="3" fill="${color}"><title>${esc(s.name)} max ${max[1].toFixed(3)} ms</title></circle>`);
    parts.push(
      `<rect x="${M.l + 8}" y="${M.t + 6 + i * 14}" width="10" height="10" fill="${color}"/><text x="${M.l + 22}" y="${M.t + 15 + i * 14}" font-size="11">${esc(s.name)}</text>`,
    );
  });
  parts.push('</svg>');
  return parts.join('');
}

const kindTitle = (r: RunResult) =>
  r.kind === 'request'
    ? r.connections === 1
      ? 'concurrency 1, non-streaming'
      : `${r.connections} connections`
    : r.kind === 'stream'
      ? 'concurrency 1, streaming (to last byte)'
      : r.kind === 'websocket'
        ? 'concurrency 1, turns on one WebSocket (to the usage event)'
        : r.kind === 'open-loop'
          ? `open loop ${r.openLoop?.rate} req/s, from scheduled send`
          : `${r.paced?.streams} paced streams (stream duration)`;

export function renderHtml(rep: BenchReport): string {
  const groups = new Map<string, RunResult[]>();
  for (const r of rep.runs) {
    const k = `${r.lane}/${r.scenario}/${r.kind}/${r.connections}`;
    groups.set(k, [...(groups.get(k) ?? []), r]);
  }
  const plots: string[] = [];
  for (const runs of groups.values()) {
    const r0 = runs[0]!;
    const title = `${r0.lane} · ${r0.scenario} · ${kindTitle(r0)}`;
    plots.push(
      `<figure>${svgPlot(
        title,
        runs.map((r) => ({ name: r.target, points: r.plot })),
      )}</figure>`,
    );
    if (r0.ttftPlot)
      plots.push(
        `<figure>${svgPlot(
          `${r0.lane} · ${r0.scenario} · time to first token`,
          runs.map((r) => ({ name: r.target, points: r.ttftPlot ?? [] })),
        )}</figure>`,
      );
  }
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>inkgate bench ${esc(rep.startedAt)}</title>
<style>body{font:14px/1.4 system-ui,sans-serif;margin:24px;max-width:1400px}figure{display:inline-block;margin:8px;border:1px solid #ddd;padding:4px}pre{background:#f6f6f6;padding:12px;overflow-x:auto;font-size:12px}</style>
</head><body>
<h1>inkgate bench</h1>
<p>${esc(rep.startedAt)} · Node ${esc(rep.node)} · ${rep.cpus} CPUs · ${rep.options.seconds} s per run · ${rep.selfStarted ? `self-started targets on 127.0.0.1, ledger in ${esc(rep.database ?? '-')}` : 'named targets'}</p>
<h2>Latency distributions</h2>
${plots.join('\n')}
<h2>Figures, ratios and goals</h2>
<pre>${esc(renderTerminal(rep))}</pre>
</body></html>
`;
}
