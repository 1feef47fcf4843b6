// Reference pages, one per endpoint, generated from the endpoint table, the error table and the
// catalogue (the same sources as /v1/openapi.json). Public: they show nothing of an account.
import { endpointErrors, ENDPOINTS, openApiPath, type JsonSchema } from './api-reference.js';
import { PageError, type PageCtx } from './context.js';
import { esc, page, sendHtml, table } from './html.js';

function typeOf(schema: JsonSchema): string {
  if (Array.isArray(schema.oneOf)) return (schema.oneOf as JsonSchema[]).map(typeOf).join(' or ');
  if (schema.type === 'array') return `array of ${schema.items ? typeOf(schema.items as JsonSchema) : 'any'}`;
  return Array.isArray(schema.type) ? (schema.type as string[]).join(' or ') : String(schema.type ?? 'any');
}

function rules(schema: JsonSchema): string {
  const out: string[] = [];
  if (typeof schema.description === 'string') out.push(esc(schema.description));
  if (Array.isArray(schema.enum)) out.push(`one of ${(schema.enum as unknown[]).map((v) => `<code>${esc(v)}</code>`).join(', ')}`);
  if (schema.const !== undefined) out.push(`always <code>${esc(schema.const)}</code>`);
  for (const k of ['minimum', 'maximum', 'minLength', 'maxLength', 'minItems', 'maxItems'] as const)
    if (schema[k] !== undefined) out.push(`${k} ${esc(schema[k])}`);
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

export async function referenceIndexPage(pageCtx: PageCtx): Promise<void> {
  const rows = ENDPOINTS.map((endpoint) => [
    `<a href="/console/reference/${esc(endpoint.slug)}">${esc(endpoint.title)}</a>`,
    `<code>${endpoint.method} ${esc(openApiPath(endpoint.pattern))}</code>`,
    endpoint.auth === 'key' ? 'API key' : 'none',
    esc(endpoint.summary),
  ]);
  const body = `<p>Every endpoint of the API. The same descriptions make the OpenAPI 3.1 document at <a href="/v1/openapi.json"><code>/v1/openapi.json</code></a>.</p>
${table(['Endpoint', 'Method and path', 'Key', 'What it does'], rows, 'Endpoints')}`;
  sendHtml(pageCtx.ctx, 200, page(head(pageCtx, 'API reference'), body));
}

export async function referencePage(pageCtx: PageCtx): Promise<void> {
  const e = ENDPOINTS.find((x) => x.slug === pageCtx.params[0]);
  if (!e) throw new PageError(404, 'There is no such endpoint.');
  const body = e.body ? e.body(pageCtx.d.services.catalog) : undefined;
  const errs = endpointErrors(e).map((x) => [String(x.status), `<code>${esc(x.code)}</code>`, esc(x.type), esc(x.message)]);
  const html = `<p><code class="endpoint">${e.method} ${esc(openApiPath(e.pattern))}</code></p><p>${esc(e.summary)}</p>
<p>Authentication: ${e.auth === 'key' ? '<code>Authorization: Bearer &lt;key&gt;</code>' : 'none (a valid key, if sent, counts the call against its rate limit)'}.</p>
<h2>Request</h2>${body ? `<p>JSON body (<code>Content-Type: application/json</code>). Fields not listed are refused.</p>${fields(body)}` : '<p>No body.</p>'}
<h2>Response</h2><p><strong>${e.ok.status}</strong> <code>${esc(e.ok.type)}</code>: ${esc(e.ok.description)}</p>${e.ok.schema.properties ? fields(e.ok.schema) : ''}
<h2>Errors</h2><p>Every error has the envelope <code>{"error": {"type", "code", "message", "param"?, "request_id"}}</code>.</p>
${table(['Status', 'Code', 'Type', 'Meaning'], errs, 'Errors')}
<h2>Examples</h2><pre><code>${esc(e.curl)}</code></pre>${e.sdk ? `<p>${esc(e.sdk.lang)}:</p><pre><code>${esc(e.sdk.code)}</code></pre>` : ''}
<p class="muted">More in <code>${esc(e.doc)}</code> in the repository. <a href="/console/reference">All endpoints</a></p>`;
  sendHtml(pageCtx.ctx, 200, page(head(pageCtx, e.title), html));
}
