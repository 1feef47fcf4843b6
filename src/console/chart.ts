// Ink per day by model as an inline SVG stacked bar chart: drawn on the server, no chart service,
// no script. Colours are distinguishable and each bar carries a <title> for screen readers.
import { esc } from './html.js';

const COLOURS = ['#1f5fbf', '#c2410c', '#15803d', '#7e22ce', '#b91c1c', '#0e7490', '#a16207', '#4d7c0f'];

export function dailyInkChart(points: ReadonlyArray<{ day: string; model: string; ink: number }>, days: number, today: Date): string {
  const dayList: string[] = [];
  for (let i = days - 1; i >= 0; i--) dayList.push(new Date(today.getTime() - i * 86_400_000).toISOString().slice(0, 10));
  const models = [...new Set(points.map((p) => p.model))].sort();
  const byDay = new Map<string, Map<string, number>>();
  for (const p of points) {
    const m = byDay.get(p.day) ?? new Map<string, number>();
    m.set(p.model, (m.get(p.model) ?? 0) + p.ink);
    byDay.set(p.day, m);
  }
  const max = Math.max(1, ...dayList.map((d) => [...(byDay.get(d)?.values() ?? [])].reduce((a, b) => a + b, 0)));
  const W = 720,
    H = 200,
    left = 48,
    bottom = 24,
    barW = (W - left) / days;
  const bars: string[] = [];
  dayList.forEach((day, dayIndex) => {
    let y = H - bottom;
    models.forEach((model, modelIndex) => {
      const v = byDay.get(day)?.get(model) ?? 0;
      if (v === 0) return;
      const h = Math.max(1, ((H - bottom - 8) * v) / max);
      y -= h;
      bars.push(
        `<rect x="${(left + dayIndex * barW + 1).toFixed(1)}" y="${y.toFixed(1)}" width="${Math.max(1, barW - 2).toFixed(1)}" height="${h.toFixed(1)}" fill="${COLOURS[modelIndex % COLOURS.length]}"><title>${esc(day)} ${esc(model)}: ${v} Ink</title></rect>`,
      );
    });
  });
  const labels = [0, Math.floor(days / 2), days - 1].map(
    (dayIndex, labelIndex) =>
      `<text x="${(labelIndex === 2 ? W : left + dayIndex * barW).toFixed(1)}" y="${H - 6}" font-size="11"${labelIndex === 2 ? ' text-anchor="end"' : ''}>${esc(dayList[dayIndex]!.slice(5))}</text>`,
  );
  const legend = models
    .map(
      (m, i) => `<li><svg width="12" height="12" aria-hidden="true"><rect width="12" height="12" fill="${COLOURS[i % COLOURS.length]}"/></svg> ${esc(m)}</li>`,
    )
    .join('');
  return `<figure><svg role="img" aria-label="Ink charged per day by model, last ${days} days" viewBox="0 0 ${W} ${H}" width="100%" preserveAspectRatio="xMinYMin meet">
<line x1="${left}" y1="${H - bottom}" x2="${W}" y2="${H - bottom}" stroke="#555"/><text x="0" y="14" font-size="11">${max} Ink</text>${bars.join('')}${labels.join('')}</svg>
<figcaption>Ink charged per day by model (UTC days)</figcaption>${models.length ? `<ul class="legend">${legend}</ul>` : '<p class="empty">No charges in this period.</p>'}</figure>`;
}
