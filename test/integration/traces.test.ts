// OpenTelemetry traces end to end: a gateway exporting to a real OTLP/HTTP receiver (the official
// exporter's JSON encoding), the text lanes against their simulators. Checked: the server span and
// its children, parented; the vendor's traceparent; an incoming traceparent continued; the GenAI
// and inkgate attributes; the journal flush linked to the requests it carried; nothing secret in
// any payload; and an endpoint that never answers costs the requests nothing.
import { createServer, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import t, { type Test } from 'tap';
import { request } from 'undici';
import { eachEngine } from '../helpers/engines.js';
import { journalWritten } from '../helpers/gateway.js';
import { ANTHROPIC_VENDOR_KEY, startMessagesStack } from '../helpers/messages-stack.js';
import { startOtlpReceiver, SPAN_KIND, type OtlpReceiver, type ReceivedSpan } from '../helpers/otlp-receiver.js';
import { startResponsesHarness, VENDOR_KEY as OPENAI_VENDOR_KEY } from '../helpers/responses-harness.js';
import { parseSse } from '../helpers/sse.js';
import { recordingLogger } from '../helpers/log-lines.js';

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-0[01]$/;

/** The server span of the request `requestId`, once exported. */
const serverSpan = (rx: OtlpReceiver, flush: () => Promise<void>, requestId: string): Promise<ReceivedSpan> =>
  rx.until(flush, (spans) => spans.find((s) => s.kind === SPAN_KIND.server && s.attrs['inkgate.request_id'] === requestId));

/** The steps every billed text request has, each a child of the server span. */
function checkChildren(t: Test, rx: OtlpReceiver, server: ReceivedSpan): ReceivedSpan {
  const trace = rx.spans().filter((s) => s.traceId === server.traceId);
  for (const name of ['inkgate.auth', 'inkgate.limits', 'inkgate.reserve', 'inkgate.settle']) {
    const s = trace.filter((x) => x.name === name);
    t.equal(s.length, 1, `one ${name} span`);
    t.equal(s[0]?.parentSpanId, server.spanId, `${name} is a child of the server span`);
  }
  const vendor = trace.filter((s) => s.kind === SPAN_KIND.client);
  t.equal(vendor.length, 1, 'one vendor CLIENT span');
  t.equal(vendor[0]!.parentSpanId, server.spanId, 'the vendor span is a child of the server span');
  return vendor[0]!;
}

/** No secret and no text of the conversation in anything exported. */
function checkNothingSecret(t: Test, rx: OtlpReceiver, secrets: Record<string, string>): void {
  const all = rx.bodies.join('\n');
  t.ok(all.length > 0, 'something was exported');
  for (const [what, value] of Object.entries(secrets)) {
    t.ok(value.length >= 8, `${what} is long enough to search for`);
    t.notOk(all.includes(value), `the ${what} appears in no exported payload`);
  }
}

eachEngine('a billed streaming Messages call: the server span, its children, the vendor told the trace', async (t, engine) => {
  const rx = await startOtlpReceiver(t);
  const { g, k, sim, invariant } = await startMessagesStack(t, { engine, config: { tracing: { endpoint: rx.url } } });
  const tracing = g.gw.services.tracing!;
  t.ok(tracing, 'traces are on');
  const flush = () => tracing.forceFlush();
  const prompt = 'Tracing check: the lighthouse keeper counts eleven gulls';
  const raw = await request(g.url + '/v1/messages', {
    method: 'POST',
    headers: { authorization: `Bearer ${k.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sonnet', max_tokens: 120, stream: true, messages: [{ role: 'user', content: prompt }] }),
  });
  t.equal(raw.statusCode, 200);
  const requestId = String(raw.headers['x-request-id']);
  const events = parseSse(await raw.body.text());
  const output = events
    .filter((e) => e.event === 'content_block_delta')
    .map((e) => JSON.parse(e.data).delta.text ?? '')
    .join('');
  const start = JSON.parse(events.find((e) => e.event === 'message_start')!.data).message.usage;
  const delta = JSON.parse(events.find((e) => e.event === 'message_delta')!.data);
  const frame = JSON.parse(events.at(-1)!.data);
  await journalWritten(g);

  const server = await serverSpan(rx, flush, requestId);
  t.equal(server.name, 'POST /v1/messages');
  t.equal(server.parentSpanId, '', 'no incoming traceparent: the server span is a root');
  t.match(server.attrs, {
    'http.request.method': 'POST',
    'url.path': '/v1/messages',
    'http.response.status_code': 200,
    'http.route': '/v1/messages',
    'inkgate.request_id': requestId,
    'inkgate.ink.charged': frame.ink_charged,
  });
  t.ok(Number(server.attrs['inkgate.ink.held']) >= frame.ink_charged, 'the hold is on the span');
  const prefix = String(server.attrs['inkgate.key_prefix']);
  t.ok(prefix.length > 0 && prefix.length < k.key.length && k.key.startsWith(prefix), 'the key prefix, not the key');
  t.equal(server.resource['service.name'], 'inkgate');

  const vendor = checkChildren(t, rx, server);
  const vendorModel = g.gw.services.catalog.text('sonnet')!.vendorModel;
  t.equal(vendor.name, `chat ${vendorModel}`);
  t.match(vendor.attrs, {
    'gen_ai.operation.name': 'chat',
    'gen_ai.system': 'anthropic',
    'gen_ai.request.model': vendorModel,
    'gen_ai.response.model': vendorModel,
    'gen_ai.request.max_tokens': 120,
    'gen_ai.usage.input_tokens': start.input_tokens,
    'gen_ai.usage.output_tokens': delta.usage.output_tokens,
    'http.response.status_code': 200,
  });
  t.same(vendor.attrs['gen_ai.response.finish_reasons'], [delta.delta.stop_reason]);
  t.ok(vendor.events.includes('gen_ai.first_token'), 'the first token is an event on the vendor span');

  const sent = sim.requests.at(-1)!.headers.traceparent;
  const m = TRACEPARENT.exec(String(sent));
  t.ok(m, `the vendor received a traceparent (${String(sent)})`);
  t.equal(m?.[1], server.traceId, 'in the request trace');
  t.equal(m?.[2], vendor.spanId, 'naming the vendor span as its parent');

  const flushSpan = await rx.until(flush, (spans) => spans.find((s) => s.name === 'inkgate.journal.flush' && s.links.some((l) => l.spanId === server.spanId)));
  t.equal(flushSpan.links.find((l) => l.spanId === server.spanId)?.traceId, server.traceId, 'the flush links to the request span it carried');
  t.equal(flushSpan.parentSpanId, '', 'a flush is a root of its own (it carries many requests)');
  t.ok(Number(flushSpan.attrs['inkgate.journal.records']) >= 1);

  t.ok(output.length > 0, 'the reply had text');
  checkNothingSecret(t, rx, { 'API key': k.key, 'vendor key': ANTHROPIC_VENDOR_KEY, prompt, ...(output.length >= 8 ? { output } : {}) });
  await invariant();
});

t.test('a Responses call: the same tree, the OpenAI attributes', async (t) => {
  const rx = await startOtlpReceiver(t);
  const { g, k, sim, client, invariant } = await startResponsesHarness(t, { gateway: { tracing: { endpoint: rx.url } } });
  const flush = () => g.gw.services.tracing!.forceFlush();
  const prompt = 'Tracing check: describe the orange harbour crane';
  const { data: resp, response } = await client.responses.create({ model: 'astra', input: prompt, max_output_tokens: 64 }).withResponse();
  const requestId = response.headers.get('x-request-id')!;
  t.equal(resp.status, 'completed');
  const server = await serverSpan(rx, flush, requestId);
  t.equal(server.name, 'POST /v1/responses');
  t.equal(server.attrs['inkgate.ink.charged'], Number(response.headers.get('x-service-ink-charged')));
  const vendor = checkChildren(t, rx, server);
  const vendorModel = g.gw.services.catalog.text('astra')!.vendorModel;
  t.match(vendor.attrs, {
    'gen_ai.system': 'openai',
    'gen_ai.request.model': vendorModel,
    'gen_ai.request.max_tokens': 64,
    'gen_ai.usage.input_tokens': resp.usage!.input_tokens,
    'gen_ai.usage.output_tokens': resp.usage!.output_tokens,
  });
  t.same(vendor.attrs['gen_ai.response.finish_reasons'], ['completed']);
  t.notOk(vendor.events.includes('gen_ai.first_token'), 'no stream, no first-token event');
  const sent = TRACEPARENT.exec(String(sim.requests.at(-1)!.headers.traceparent));
  t.equal(sent?.[1], server.traceId, "the vendor's traceparent is in the request trace");
  t.equal(sent?.[2], vendor.spanId);
  await journalWritten(g);
  checkNothingSecret(t, rx, { 'API key': k.key, 'vendor key': OPENAI_VENDOR_KEY, prompt, output: resp.output_text });
  await invariant();
});

t.test('an incoming traceparent is continued, and its sampled flag followed', async (t) => {
  const rx = await startOtlpReceiver(t);
  const { g, k, sim } = await startMessagesStack(t, { config: { tracing: { endpoint: rx.url } } });
  const flush = () => g.gw.services.tracing!.forceFlush();
  const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
  const parentId = '00f067aa0ba902b7';
  const body = { model: 'sonnet', max_tokens: 50, messages: [{ role: 'user', content: 'hello' }] };
  const sampled = await g.call('POST', '/v1/messages', { key: k.key, body, headers: { traceparent: `00-${traceId}-${parentId}-01` } });
  t.equal(sampled.status, 200);
  const server = await serverSpan(rx, flush, String(sampled.headers['x-request-id']));
  t.equal(server.traceId, traceId, "the caller's trace");
  t.equal(server.parentSpanId, parentId, "the caller's span is the parent");
  t.equal(TRACEPARENT.exec(String(sim.requests.at(-1)!.headers.traceparent))?.[1], traceId, 'and the vendor is in it too');

  // A caller that did not sample: nothing recorded here, the trace still goes on to the vendor.
  const unsampledTrace = '0af7651916cd43dd8448eb211c80319c';
  const before = rx.spans().length;
  const unsampled = await g.call('POST', '/v1/messages', { key: k.key, body, headers: { traceparent: `00-${unsampledTrace}-b7ad6b7169203331-00` } });
  t.equal(unsampled.status, 200);
  const sent = String(sim.requests.at(-1)!.headers.traceparent);
  t.equal(TRACEPARENT.exec(sent)?.[1], unsampledTrace, 'the vendor gets the unsampled trace');
  t.ok(sent.endsWith('-00'), 'marked not sampled');
  // A later sampled request proves the flushes ran after the unsampled one ended.
  const later = await g.call('POST', '/v1/messages', { key: k.key, body });
  await serverSpan(rx, flush, String(later.headers['x-request-id']));
  t.notOk(
    rx
      .spans()
      .slice(before)
      .some((s) => s.traceId === unsampledTrace),
    'no span of the unsampled trace was exported',
  );
});

t.test('an endpoint that never answers: requests are served, the failure logged, shutdown bounded', async (t) => {
  // Accepts connections and never answers: the exporter's worst case (a refused connection fails at once).
  const held: Socket[] = [];
  const blackHole = createServer((s) => void held.push(s));
  await new Promise<void>((resolve) => blackHole.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    for (const s of held) s.destroy();
    blackHole.close();
  });
  const endpoint = `http://127.0.0.1:${(blackHole.address() as AddressInfo).port}/v1/traces`;
  const { log, lines } = recordingLogger('info');
  const { g, k, invariant } = await startMessagesStack(t, {
    config: { tracing: { endpoint, exportTimeoutMs: 300, shutdownTimeoutMs: 1000 } },
    log,
  });
  const body = { model: 'sonnet', max_tokens: 50, stream: true, messages: [{ role: 'user', content: 'hello' }] };
  for (let i = 0; i < 3; i++) {
    const r = await g.call('POST', '/v1/messages', { key: k.key, body });
    t.equal(r.status, 200, `request ${i + 1} served`);
    t.match(r.text, /service\.usage/, 'and billed');
  }
  // forceFlush waits for the export, which fails after its timeout: the failure is logged.
  await g.gw.services.tracing!.forceFlush();
  const failed = lines.filter((l) => l.msg === 'tracing.export_failed');
  t.equal(failed.length, 1, 'the first failure is logged (then every 100th)');
  t.equal(failed[0]?.level, 'warn');
  t.equal(failed[0]?.endpoint, endpoint);
  await invariant();
  // More spans queued, then the gateway stops: the exporter gets shutdownTimeoutMs, not more.
  await g.call('POST', '/v1/messages', { key: k.key, body });
  const startedMs = performance.now();
  await g.gw.close();
  // Time is the behaviour here: generous (the bound is 1 s of export wait plus the usual stop).
  t.ok(performance.now() - startedMs < 20_000, `the stop was not held by the exporter (${Math.round(performance.now() - startedMs)} ms)`);
});

t.test('shutdown sends the spans still queued', async (t) => {
  const rx = await startOtlpReceiver(t);
  const { g, k } = await startMessagesStack(t, { config: { tracing: { endpoint: rx.url } } });
  const r = await g.call('POST', '/v1/messages', { key: k.key, body: { model: 'sonnet', max_tokens: 30, messages: [{ role: 'user', content: 'bye' }] } });
  t.equal(r.status, 200);
  await g.gw.close(); // no forceFlush: the batch processor's delay has not passed
  const requestId = String(r.headers['x-request-id']);
  t.ok(
    rx.spans().some((s) => s.kind === SPAN_KIND.server && s.attrs['inkgate.request_id'] === requestId),
    'the server span was exported by the shutdown',
  );
});
