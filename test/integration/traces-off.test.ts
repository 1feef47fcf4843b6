// Traces off (the default): the OpenTelemetry SDK is never loaded, no span is made, nothing is
// sent, and the vendor gets no traceparent. What the process loads is watched with a module
// resolve hook registered before the gateway is imported; the same hook then sees the SDK load
// once a gateway with traces on starts, so the watch itself is shown to work.
import { register } from 'node:module';
import { MessageChannel } from 'node:worker_threads';
import t from 'tap';
import { startOtlpReceiver } from '../helpers/otlp-receiver.js';

/** Runs in the loader thread: tells the test every URL a module import resolves to. */
const HOOKS = `
let port;
export function initialize(data) { port = data.port; }
export async function resolve(specifier, context, next) {
  const r = await next(specifier, context);
  port.postMessage(r.url);
  return r;
}`;

const resolved = new Set<string>();
const { port1, port2 } = new MessageChannel();
port1.on('message', (url: unknown) => resolved.add(String(url)));
port1.unref();
register(`data:text/javascript,${encodeURIComponent(HOOKS)}`, { data: { port: port2 }, transferList: [port2] });

/** Every resolution so far has been told: a fresh import's own URL arrives after them (one port, in order). */
async function settled(): Promise<void> {
  const marker = `data:text/javascript,export default ${Date.now()}${Math.random().toString().slice(2)}`;
  await import(marker);
  while (!resolved.has(marker)) await new Promise<void>((r) => port1.once('message', () => r()));
}

const sdkModules = () =>
  [...resolved].filter((u) => /@opentelemetry\/(sdk-trace|exporter-trace-otlp-http|otlp-exporter-base)\/|\/src\/tracing\/otel-tracing\.ts$/.test(u));

const { startMessagesStack } = await import('../helpers/messages-stack.js');

t.test('traces off: the SDK is not loaded, no span, nothing sent, no traceparent to the vendor', async (t) => {
  const rx = await startOtlpReceiver(t);
  const { g, k, sim } = await startMessagesStack(t);
  t.equal(g.config.tracing.endpoint, null, 'the default has no endpoint');
  t.equal(g.gw.services.tracing, undefined, 'no tracer');
  const body = { model: 'sonnet', max_tokens: 50, stream: true, messages: [{ role: 'user', content: 'hello' }] };
  const r = await g.call('POST', '/v1/messages', { key: k.key, body, headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' } });
  t.equal(r.status, 200);
  t.match(r.text, /service\.usage/);
  t.equal(sim.requests.at(-1)!.headers.traceparent, undefined, 'the vendor got no traceparent (an incoming one is not passed on either)');
  await settled();
  t.ok(
    [...resolved].some((u) => u.endsWith('/src/gateway.ts') || u.endsWith('/src/gateway.js')),
    'the watch saw the gateway load',
  );
  t.same(sdkModules(), [], 'no module of the SDK, the exporter or our OpenTelemetry code was loaded');
  t.same(rx.bodies, [], 'nothing was sent');
});

t.test('the same watch sees the SDK load once traces are on', async (t) => {
  const rx = await startOtlpReceiver(t);
  const { g } = await startMessagesStack(t, { config: { tracing: { endpoint: rx.url } } });
  t.ok(g.gw.services.tracing);
  await settled();
  t.ok(sdkModules().length >= 3, `loaded: ${sdkModules().length} SDK modules`);
});
