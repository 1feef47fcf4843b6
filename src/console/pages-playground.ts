// The playground: Messages and Responses calls made by the server for the signed-in account
// (playground.ts), shown as they stream (with the script) or in one piece (a plain form post).
import type { TextModel } from '../catalog/models.js';
import { AdminError } from '../accounts/accounts.js';
import { PageError, type SignedIn } from './context.js';
import { csrfField, esc, ink, page, sendHtml, SECURITY_HEADERS } from './html.js';
import { callSelf, playgroundKey, PLAYGROUND_MAX_TOKENS, PLAYGROUND_PROMPT_CHARS, type PlaygroundInput } from './playground.js';

const laneOf = (m: TextModel): 'messages' | 'responses' => (m.protocol === 'anthropic-messages' ? 'messages' : 'responses');

function models(pageCtx: SignedIn): TextModel[] {
  return pageCtx.d.services.catalog.listed.filter((m): m is TextModel => m.type === 'text');
}

function input(pageCtx: SignedIn, stream: boolean): PlaygroundInput {
  const choice = pageCtx.form.get('model') ?? '';
  const m = models(pageCtx).find((x) => `${laneOf(x)}:${x.id}` === choice);
  if (!m) throw new PageError(400, 'Pick a model from the list.');
  const prompt = pageCtx.form.get('prompt') ?? '';
  if (prompt.trim() === '' || prompt.length > PLAYGROUND_PROMPT_CHARS)
    throw new PageError(400, `The prompt must be 1 to ${PLAYGROUND_PROMPT_CHARS} characters.`);
  const mt = Number(pageCtx.form.get('max_tokens') ?? '512');
  if (!Number.isInteger(mt) || mt < 1 || mt > Math.min(PLAYGROUND_MAX_TOKENS, m.constraints.maxOutputTokens)) {
    throw new PageError(400, `Max tokens must be a whole number from 1 to ${Math.min(PLAYGROUND_MAX_TOKENS, m.constraints.maxOutputTokens)}.`);
  }
  return { lane: laneOf(m), model: m.id, prompt, maxTokens: mt, stream };
}

function form(pageCtx: SignedIn, last?: { model: string; prompt: string; maxTokens: number }): string {
  const opts = models(pageCtx).map((model) => {
    const v = `${laneOf(model)}:${model.id}`;
    return `<option value="${esc(v)}"${last?.model === v ? ' selected' : ''}>${esc(model.label)} — ${esc(model.id)} (${model.protocol === 'anthropic-messages' ? 'Messages' : 'Responses'})</option>`;
  });
  return `<form method="post" action="/console/playground" id="playground" class="stack">${csrfField(pageCtx.session.csrf)}
<label>Model <select name="model" required>${opts.join('')}</select></label>
<label>Prompt <textarea name="prompt" rows="5" required maxlength="${PLAYGROUND_PROMPT_CHARS}">${esc(last?.prompt ?? 'Write a haiku about ink.')}</textarea></label>
<label>Max tokens <input name="max_tokens" inputmode="numeric" value="${last?.maxTokens ?? 512}" size="6"></label>
<button type="submit">Send</button></form>
<p class="muted">Calls are made by the gateway with this account's playground key and billed like any other call.</p>`;
}

function result(reply: { text: string; status: number; charged: string | null; requestId: string | null; error?: string }): string {
  return `<section aria-labelledby="out" aria-live="polite" id="result"><h2 id="out">Reply</h2>
<pre class="reply" id="reply">${esc(reply.error ?? reply.text)}</pre>
<dl class="figures"><div><dt>Status</dt><dd id="status">${reply.status}</dd></div>
<div><dt>Charged</dt><dd id="charged">${reply.charged === null ? '—' : `${ink(reply.charged)} Ink`}</dd></div>
<div><dt>Request id</dt><dd id="request-id">${reply.requestId ? `<a href="/console/requests/${esc(reply.requestId)}"><code>${esc(reply.requestId)}</code></a>` : '—'}</dd></div></dl></section>`;
}

export async function playgroundPage(pageCtx: SignedIn): Promise<void> {
  const body = form(pageCtx) + result({ text: '', status: 0, charged: null, requestId: null }).replace('<section', '<section hidden');
  sendHtml(pageCtx.ctx, 200, playgroundHtml(pageCtx, body));
}

async function keyFor(pageCtx: SignedIn): Promise<string> {
  try {
    return await playgroundKey(pageCtx.d.services.pool, pageCtx.session.accountId);
  } catch (e) {
    if (e instanceof AdminError) throw new PageError(402, `The playground needs a key, and ${e.message}.`);
    throw e;
  }
}

/** The form's call sent through /v1 with the account's playground key; the browser leaving cuts it. */
async function send(pageCtx: SignedIn, stream: boolean): Promise<{ inp: PlaygroundInput; call: Awaited<ReturnType<typeof callSelf>> }> {
  const inp = input(pageCtx, stream);
  const key = await keyFor(pageCtx);
  const call = await callSelf(pageCtx.d.selfUrl(), key, inp, pageCtx.d.services.config.console.playgroundTimeoutMs, (abort) => pageCtx.ctx.onAbort(abort));
  return { inp, call };
}

const playgroundHtml = (pageCtx: SignedIn, body: string): string =>
  page({ title: 'Playground', nav: 'playground', csrf: pageCtx.session.csrf, accountName: pageCtx.session.accountName, scripts: ['console.js'] }, body);

/** Without the script: one non-streamed call, the page answered with the whole reply. */
export async function playgroundFormAction(pageCtx: SignedIn): Promise<void> {
  const { inp, call } = await send(pageCtx, false);
  const r = call.res;
  const json = (await r.body.json().finally(call.done)) as any;
  const h = (n: string) => (typeof r.headers[n] === 'string' ? (r.headers[n] as string) : null);
  const text = r.statusCode === 200 ? replyText(inp.lane, json) : '';
  const error = r.statusCode === 200 ? undefined : `${json?.error?.code ?? 'error'}: ${json?.error?.message ?? ''}`;
  const body =
    form(pageCtx, { model: `${inp.lane}:${inp.model}`, prompt: inp.prompt, maxTokens: inp.maxTokens }) +
    result({ text, status: r.statusCode, charged: h('x-service-ink-charged'), requestId: h('x-service-request-id') ?? h('x-request-id'), error });
  sendHtml(pageCtx.ctx, 200, playgroundHtml(pageCtx, body));
}

function replyText(lane: 'messages' | 'responses', body: any): string {
  if (lane === 'messages')
    return (Array.isArray(body?.content) ? body.content : [])
      .filter((b: any) => b?.type === 'text')
      .map((b: any) => String(b.text))
      .join('');
  const out: string[] = [];
  for (const item of Array.isArray(body?.output) ? body.output : []) {
    for (const c of Array.isArray(item?.content) ? item.content : []) if (c?.type === 'output_text') out.push(String(c.text));
  }
  return out.join('');
}

/**
 * With the script: the lane's event stream relayed as it arrives (the page reads the text deltas
 * and the closing service.usage), with the request id in a header. Errors keep the API's envelope.
 */
export async function playgroundStreamAction(pageCtx: SignedIn): Promise<void> {
  const { call } = await send(pageCtx, true);
  const r = call.res;
  const rid = r.headers['x-service-request-id'] ?? r.headers['x-request-id'];
  const type = typeof r.headers['content-type'] === 'string' ? r.headers['content-type'] : 'application/json';
  pageCtx.ctx.startStream(r.statusCode, [...SECURITY_HEADERS, ['Content-Type', type], ['X-Service-Request-Id', typeof rid === 'string' ? rid : '']]);
  try {
    for await (const chunk of r.body) {
      if (pageCtx.ctx.aborted) break;
      if (!pageCtx.ctx.write(chunk as Buffer)) await pageCtx.ctx.waitWritable();
    }
  } catch {
    // The browser left (the call is aborted with it) or the relay timed out: the lane settles
    // what was used either way; the page shows what arrived.
  } finally {
    call.done();
  }
  pageCtx.ctx.end();
}
