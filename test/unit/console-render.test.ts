// The console's rendering helpers: HTML escaping, CSV cells a spreadsheet will not run as formulas,
// and the SVG chart (one bar segment per day and model with Ink, scaled to the largest day).
import t from 'tap';
import { dailyInkChart } from '../../src/console/chart.js';
import { esc } from '../../src/console/html.js';
import { usageCsvText } from '../../src/console/pages-usage.js';

t.test('esc escapes the five characters that matter in text and quoted attributes', async (t) => {
  t.equal(esc(`<a href="x" onclick='y'>&</a>`), '&lt;a href=&quot;x&quot; onclick=&#39;y&#39;&gt;&amp;&lt;/a&gt;');
  t.equal(esc(null), '');
  t.equal(esc(42), '42');
});

t.test('CSV: header, quoting, and no formulas', async (t) => {
  const row = (model: string) => ({
    id: 'req_1',
    keyId: 'key_1',
    product: 'messages',
    model,
    status: 'settled',
    holdInk: 5,
    chargedInk: 3,
    usage: { input_tokens: 10, output_tokens: 2 },
    createdAt: new Date('2026-11-20T12:00:00Z'),
  });
  const text = usageCsvText([row('=HYPERLINK("x")'), row('a,b')]);
  const lines = text.trimEnd().split('\n');
  t.equal(lines[0], 'request_id,key_id,product,model,input_tokens,output_tokens,cache_read_tokens,cache_write_tokens,hold_ink,charged_ink,status,created_at');
  t.equal(lines[1], `req_1,key_1,messages,"'=HYPERLINK(""x"")",10,2,,,5,3,settled,2026-11-20T12:00:00.000Z`);
  t.equal(lines[2], 'req_1,key_1,messages,"a,b",10,2,,,5,3,settled,2026-11-20T12:00:00.000Z');
  t.equal(usageCsvText([]).split('\n').filter(Boolean).length, 1, 'header only when empty');
});

t.test('chart: a bar per day with Ink, the tallest day full height, names escaped', async (t) => {
  const today = new Date('2026-11-20T12:00:00Z');
  const svg = dailyInkChart(
    [
      { day: '2026-11-20', model: 'm<1>', ink: 30 },
      { day: '2026-11-20', model: 'm2', ink: 10 },
      { day: '2026-11-19', model: 'm2', ink: 20 },
    ],
    7,
    today,
  );
  const rects = [...svg.matchAll(/<rect x="[^"]+" y="([^"]+)" width="[^"]+" height="([^"]+)"/g)].map((m) => Number(m[2]));
  t.equal(rects.length, 3, 'three segments');
  // Oldest day first: the 19th (20 Ink), then the 20th's two models (30 + 10 Ink).
  t.equal(Math.round(rects[1]! + rects[2]!), 168, 'the tallest day (40 Ink) fills the plot height');
  t.equal(Math.round(rects[0]!), 84, 'a day of 20 Ink is half as tall');
  t.equal(Math.round(rects[1]!), 42, 'segments in proportion to their Ink (models in name order: m2 is 10 Ink)');
  t.notOk(svg.includes('m<1>'), 'model names are escaped');
  t.match(svg, /m&lt;1&gt;/);
  t.match(svg, /11-14/, 'the first day of the window is labelled');
});
