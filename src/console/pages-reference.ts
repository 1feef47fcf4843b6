// Reference pages, one per endpoint, generated from the endpoint table, the error table and the
// catalogue (the same sources as /v1/openapi.json). Public: they show nothing of an account.
import { endpointErrors, ENDPOINTS, openApiPath, type JsonSchema } from './api-reference.js';
import { PageError, type PageCtx } from './context.js';
import { esc, page, sendHtml, table } from './html.js';

function typeOf(s: JsonSchema): string {
  if (Array.isArray(s.oneOf)) return (s.oneOf as JsonSchema[]).map(typeOf).join(' or ');
  if (s.type === 'array') return `array of ${s.items ? typeOf(s.items as JsonSchema) : 'any'}`;
  return Array.isArray(s.type) ? (s.type as string[]).join(' or ') : String(s.type ?? 'any');
}

function rules(s: JsonSchema): string {
  const out: string[] = [];
  if (typeof s.description === 'string') out.push(esc(s.description));
  if (Array.isArray(s.enum)) out.push(`one of ${(s.enum as unknown[]).map((v) => `<code>${esc(v)}</code>`).join(', ')}`);
  if (s.const !== undefined) out.push(`always <code>${esc(s.const)}</code>`);
  for (const k of ['minimum', 'maximum', 'minLength', 'maxLength', 'minItems', 'maxItems'] as const) if (s[k] !== undefined) out.push(`${k} ${esc(s[k])}`);
  return out.join('; ');
}

function fields(schema: JsonSchema): string {
  const props = (schema.properties ?? {}) as Record<string, JsonSchema>;
  const req = new Set((schema.required ?? []) as string[]);
  return table(
    ['Field', 'Type', 'Required', 'Rules'],
    Object.entries(props).map(([k, s]) => [`<code>${esc(k)}</code>`, esc(typeOf(s)), req.has(k) ? 'yes' : '', rules(s)]),
    'Fields',
  );
}

const head = (p: PageCtx, title: string) => ({ title, nav: 'reference', csrf: p.session?.csrf, accountName: p.session?.accountName });

export async function referenceIndexPage(p: PageCtx): Promise<void> {
  const rows = ENDPOINTS.map((e) => [
    `<a href="/console/reference/${esc(e.slug)}">${esc(e.title)}</a>`,
    `<code>${e.method} ${esc(openApiPath(e.pattern))}</code>`,
    e.auth === 'key' ? 'API key' : 'none',
    esc(e.summary),
  ]);
  const body = `<p>Every endpoint of the API. The same descriptions make the OpenAPI 3.1 document at <a href="/v1/openapi.json"><code>/v1/openapi.json</code></a>.</p>
${table(['Endpoint', 'Method and path', 'Key', 'What it does'], rows, 'Endpoints')}`;
  sendHtml(p.ctx, 200, page(head(p, 'API reference'), body));
}

export async function referencePage(p: PageCtx): Promise<void> {
  const e = ENDPOINTS.find((x) => x.slug === p.params[0]);
  if (!e) throw new PageError(404, 'There is no such endpoint.');
  const body = e.body ? e.body(p.d.services.catalog) : undefined;
  const errs = endpointErrors(e).map((x) => [String(x.status), `<code>${esc(x.code)}</code>`, esc(x.type), esc(x.message)]);
  const html = `<p><code class="endpoint">${e.method} ${esc(openApiPath(e.pattern))}</code></p><p>${esc(e.summary)}</p>
<p>Authentication: ${e.auth === 'key' ? '<code>Authorization: Bearer &lt;key&gt;</code>' : 'none (a valid key, if sent, counts the call against its rate limit)'}.</p>
<h2>Request</h2>${body ? `<p>JSON body (<code>Content-Type: application/json</code>). Fields not listed are refused.</p>${fields(body)}` : '<p>No body.</p>'}
<h2>Response</h2><p><strong>${e.ok.status}</strong> <code>${esc(e.ok.type)}</code>: ${esc(e.ok.description)}</p>${e.ok.schema.properties ? fields(e.ok.schema) : ''}
<h2>Errors</h2><p>Every error has the envelope <code>{"error": {"type", "code", "message", "param"?, "request_id"}}</code>.</p>
${table(['Status', 'Code', 'Type', 'Meaning'], errs, 'Errors')}
<h2>Examples</h2><pre><code>${esc(e.curl)}</code></pre>${e.sdk ? `<p>${esc(e.sdk.lang)}:</p><pre><code>${esc(e.sdk.code)}</code></pre>` : ''}
<p class="muted">More in <code>${esc(e.doc)}</code> in the repository. <a href="/console/reference">All endpoints</a></p>`;
  sendHtml(p.ctx, 200, page(head(p, e.title), html));
}
