// Usage: request records (the `req_` ids clients see in X-Service-Request-Id) with filters, a chart
// of Ink per day by model, CSV export, and generations with their download links.
import { signedMediaLink } from '../media/signed-link.js';
import { CSV_MAX_ROWS, readDailyInk, readGenerations, readKeys, readRequests, USAGE_PAGE_ROWS, type RequestView, type UsageFilter } from './account-data.js';
import { dailyInkChart } from './chart.js';
import { PageError, type SignedIn } from './context.js';
import { esc, ink, page, redirect, sendHtml, SECURITY_HEADERS, table, time } from './html.js';

const CHART_DAYS = 30;
const DAY_RE = /^\d{4}-\d{2}-\d{2}$/;
const ID_RE = /^[A-Za-z0-9_.:-]{1,200}$/;

function filterOf(query: URLSearchParams): UsageFilter {
  const f: UsageFilter = {};
  const key = query.get('key') ?? '';
  const model = query.get('model') ?? '';
  const day = query.get('day') ?? '';
  if (ID_RE.test(key)) f.keyId = key;
  if (ID_RE.test(model)) f.model = model;
  if (DAY_RE.test(day) && !Number.isNaN(Date.parse(day))) f.day = day;
  return f;
}

const bucket = (u: Record<string, unknown> | null, k: string): string => (u && typeof u[k] === 'number' ? ink(u[k] as number) : '—');

export async function usagePage(pageCtx: SignedIn): Promise<void> {
  await pageCtx.d.services.escrow.beforeView();
  const db = pageCtx.d.services.pool;
  const f = filterOf(pageCtx.query);
  const [rows, keys, daily, gens] = await Promise.all([
    readRequests(db, pageCtx.session.accountId, f, USAGE_PAGE_ROWS),
    readKeys(db, pageCtx.session.accountId),
    readDailyInk(db, pageCtx.session.accountId, CHART_DAYS),
    readGenerations(db, pageCtx.session.accountId, 50),
  ]);
  const models = [...new Set([...daily.map((d) => d.model), ...rows.map((r) => r.model)])].sort();
  const opt = (v: string, label: string, cur: string | undefined) => `<option value="${esc(v)}"${v === (cur ?? '') ? ' selected' : ''}>${esc(label)}</option>`;
  const qs = new URLSearchParams(Object.entries(f).filter(([, v]) => v !== undefined) as Array<[string, string]>);
  qs.delete('keyId');
  if (f.keyId) qs.set('key', f.keyId);
  const filters = `<form method="get" action="/console/usage" class="filters">
<label>Key <select name="key">${opt('', 'All keys', f.keyId)}${keys.map((k) => opt(k.id, `${k.name} (${k.prefix}…)`, f.keyId)).join('')}</select></label>
<label>Model <select name="model">${opt('', 'All models', f.model)}${models.map((m) => opt(m, m, f.model)).join('')}</select></label>
<label>Day <input type="date" name="day" value="${esc(f.day ?? '')}"></label>
<button type="submit">Filter</button> <a href="/console/usage.csv${qs.toString() ? '?' + esc(qs.toString()) : ''}" download>Export CSV</a></form>`;
  const keyName = new Map(keys.map((k) => [k.id, k.name]));
  const reqRows = rows.map((request) => [
    `<a href="/console/requests/${esc(request.id)}"><code>${esc(request.id)}</code></a>`,
    esc(keyName.get(request.keyId) ?? request.keyId),
    esc(request.model),
    bucket(request.usage, 'input_tokens'),
    bucket(request.usage, 'output_tokens'),
    bucket(request.usage, 'cache_read_tokens'),
    bucket(request.usage, 'cache_write_tokens'),
    ink(request.holdInk),
    ink(request.chargedInk),
    esc(request.status),
    time(request.createdAt),
  ]);
  const genRows = gens.map((generation) => [
    `<code>${esc(generation.id)}</code>`,
    esc(generation.kind),
    esc(generation.model),
    esc(generation.state),
    generation.chargedInk === null ? '—' : ink(generation.chargedInk),
    time(generation.createdAt),
    generation.hasMedia && !generation.expired ? `<a href="${esc(mediaLink(pageCtx, generation.id))}">Download</a>` : generation.expired ? 'expired' : '—',
  ]);
  const body = `${dailyInkChart(daily, CHART_DAYS, new Date())}
<section aria-labelledby="req"><h2 id="req">Requests</h2>${filters}
${table(['Request id', 'Key', 'Model', 'Input', 'Output', 'Cache read', 'Cache write', 'Hold', 'Charged', 'Status', 'Time (UTC)'], reqRows, 'Requests')}
${rows.length === USAGE_PAGE_ROWS ? `<p class="muted">The newest ${USAGE_PAGE_ROWS} shown; narrow the filters or export CSV for more.</p>` : ''}</section>
<section aria-labelledby="gen"><h2 id="gen">Generations (video and images)</h2>
${table(['Generation', 'Kind', 'Model', 'State', 'Charged', 'Created (UTC)', 'Result'], genRows, 'Generations')}</section>`;
  sendHtml(pageCtx.ctx, 200, page({ title: 'Usage', nav: 'usage', csrf: pageCtx.session.csrf, accountName: pageCtx.session.accountName }, body));
}

/** The console's download address: it answers with a fresh signed media link (signed on click, not on page load). */
const mediaLink = (_p: SignedIn, generationId: string): string => `/console/generations/${generationId}`;

export async function generationDownload(pageCtx: SignedIn): Promise<void> {
  const r = await pageCtx.d.services.pool.query<{ media_key: string | null; result_expired: boolean }>(
    'SELECT media_key, result_expired FROM generations WHERE id = $1 AND account_id = $2',
    [pageCtx.params[0]!, pageCtx.session.accountId],
  );
  const g = r.rows[0];
  if (!g) throw new PageError(404, 'There is no such generation on this account.');
  if (g.media_key === null || g.result_expired)
    throw new PageError(404, 'This generation has no result to download (not finished, failed, or past its retention).');
  const cfg = pageCtx.d.services.config;
  // Same origin unless the deployment serves media elsewhere (config.mediaUrl), as the API's links.
  const link = signedMediaLink(pageCtx.d.mediaSecret, cfg.mediaUrl ?? '', g.media_key, pageCtx.d.mediaClock(), cfg.media.linkTtlS);
  redirect(pageCtx.ctx, link.url);
}

const CSV_HEAD = 'request_id,key_id,product,model,input_tokens,output_tokens,cache_read_tokens,cache_write_tokens,hold_ink,charged_ink,status,created_at\n';

function csvCell(value: unknown): string {
  const s = value === null || value === undefined ? '' : String(value);
  // A leading =, +, - or @ would be read as a formula by a spreadsheet.
  const safe = /^[=+\-@]/.test(s) ? `'${s}` : s;
  return /[",\n\r]/.test(safe) ? `"${safe.replace(/"/g, '""')}"` : safe;
}

export function usageCsvText(rows: readonly RequestView[]): string {
  const u = (r: RequestView, k: string) => (r.usage && typeof r.usage[k] === 'number' ? r.usage[k] : '');
  return (
    CSV_HEAD +
    rows
      .map((request) =>
        [
          request.id,
          request.keyId,
          request.product,
          request.model,
          u(request, 'input_tokens'),
          u(request, 'output_tokens'),
          u(request, 'cache_read_tokens'),
          u(request, 'cache_write_tokens'),
          request.holdInk,
          request.chargedInk,
          request.status,
          request.createdAt.toISOString(),
        ]
          .map(csvCell)
          .join(','),
      )
      .join('\n') +
    (rows.length ? '\n' : '')
  );
}

export async function usageCsv(pageCtx: SignedIn): Promise<void> {
  await pageCtx.d.services.escrow.beforeView();
  const rows = await readRequests(pageCtx.d.services.pool, pageCtx.session.accountId, filterOf(pageCtx.query), CSV_MAX_ROWS);
  const text = usageCsvText(rows);
  const headers = [
    ...SECURITY_HEADERS,
    ['Content-Type', 'text/csv; charset=utf-8'] as const,
    ['Content-Disposition', 'attachment; filename="inkgate-usage.csv"'] as const,
  ];
  if (pageCtx.ctx.method === 'HEAD') return pageCtx.ctx.sendHead(200, headers, Buffer.byteLength(text));
  pageCtx.ctx.startStream(200, headers);
  pageCtx.ctx.end(text);
}

export async function requestPage(pageCtx: SignedIn): Promise<void> {
  await pageCtx.d.services.escrow.beforeView();
  const id = pageCtx.params[0]!;
  const r = await pageCtx.d.services.pool.query(
    `SELECT id, key_id, product, model, status, hold_ink, charged_ink, usage, vendor_request_id, reason, created_at, resolved_at
       FROM requests WHERE id = $1 AND account_id = $2`,
    [id, pageCtx.session.accountId],
  );
  const x = r.rows[0];
  // Another account's request id answers exactly like an unknown one.
  if (!x) throw new PageError(404, 'There is no such request on this account.');
  const rows: Array<[string, string]> = [
    ['Request id', `<code>${esc(x.id)}</code>`],
    ['Key', `<code>${esc(x.key_id)}</code>`],
    ['Product', esc(x.product)],
    ['Model', esc(x.model)],
    ['Status', esc(x.status)],
    ['Hold', `${ink(x.hold_ink)} Ink`],
    ['Charged', `${ink(x.charged_ink)} Ink`],
    ['Usage', x.usage ? `<code>${esc(JSON.stringify(x.usage))}</code>` : '—'],
    ['Reason', esc(x.reason ?? '—')],
    ['Started', time(x.created_at)],
    ['Resolved', time(x.resolved_at)],
  ];
  const body = `<dl class="detail">${rows.map(([k, v]) => `<div><dt>${k}</dt><dd>${v}</dd></div>`).join('')}</dl><p><a href="/console/usage">Back to usage</a></p>`;
  sendHtml(pageCtx.ctx, 200, page({ title: 'Request', nav: 'usage', csrf: pageCtx.session.csrf, accountName: pageCtx.session.accountName }, body));
}
