// Long non-streaming calls. A non-streaming answer's headers come only with the whole reply, which
// real vendors take minutes to write for large outputs: such a call waits upstream.nonStreamTimeoutMs
// (10 minutes by default, as the official SDKs), not the 2-minute headersTimeoutMs meant for the first
// bytes of a stream. Here both are scaled down (500 ms stands for the 2 minutes, 4 s for the 10): a
// call longer than headersTimeoutMs is answered and billed; one longer than nonStreamTimeoutMs answers
// 502 and leaves its hold open, and the log says which hold and why.
import t from 'tap';
import { setLane } from '../../src/deployment/state.js';
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { createLogger } from '../../src/util/log.js';
import { startTestGateway, writtenRequest } from '../helpers/gateway.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';

const KEY = 'sk-ant-long-calls';
const HEADERS_TIMEOUT_MS = 500;
const NON_STREAM_TIMEOUT_MS = 4_000;
/** uWS's idle timeout, compiled in: a stream must outlast it to show reading resumes only at the end. */
const UWS_IDLE_TIMEOUT_MS = 10_000;

const sim = await startAnthropicSimulator({ apiKey: KEY });
t.teardown(() => sim.close());
const lines: string[] = [];
const g = await startTestGateway(
  t,
  {
    vendors: { anthropic: { baseUrl: sim.url, apiKey: KEY } },
    upstream: { headersTimeoutMs: HEADERS_TIMEOUT_MS, nonStreamTimeoutMs: NON_STREAM_TIMEOUT_MS },
  },
  { log: createLogger('warn', (l) => void lines.push(l)) },
);
await setLane(g.db.pool, 'messages', true);
await g.gw.services.state.refresh();
const k = await g.newKey();
await g.gw.services.ledger.topUp(k.accountId, 100_000, 'long calls');

/** A non-streaming call whose answer the simulator writes after `ms` (tokens x pace). */
const longCall = (ms: number) =>
  g.call('POST', '/v1/messages', {
    key: k.key,
    body: { model: 'sonnet', max_tokens: 200, messages: [{ role: 'user', content: `write at length [[sim:tokens=100]] [[sim:pace=${ms / 100}]]` }] },
  });

t.test('a non-streaming call longer than headersTimeoutMs is answered and billed', async (t) => {
  const t0 = performance.now();
  const r = await longCall(4 * HEADERS_TIMEOUT_MS);
  const ms = performance.now() - t0;
  t.equal(r.status, 200, r.text.slice(0, 200));
  t.ok(ms >= 4 * HEADERS_TIMEOUT_MS, `took ${Math.round(ms)} ms, past headersTimeoutMs (${HEADERS_TIMEOUT_MS})`);
  t.equal(r.json.usage.output_tokens, 100);
  const rec = await writtenRequest(g, r.headers['x-service-request-id'] as string);
  t.equal(rec?.hold_state, 'settled', 'settled');
  t.ok(Number(r.headers['x-service-ink-charged']) > 0, 'charged');
});

t.test('a call longer than nonStreamTimeoutMs: 502, its hold kept and logged with why', async (t) => {
  lines.length = 0;
  const r = await longCall(2 * NON_STREAM_TIMEOUT_MS);
  t.equal(r.status, 502, r.text.slice(0, 200));
  const requestId = r.json.error.request_id as string;
  const rec = await writtenRequest(g, requestId);
  t.equal(rec?.hold_state, 'open', 'the hold is kept for reconciliation');
  const logged = lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.msg === 'text.hold_left_open');
  t.equal(logged.length, 1, 'one log line for the open hold');
  t.equal(logged[0]?.request_id, requestId, 'naming the request');
  t.match(String(logged[0]?.reason), /dispatch failed: .*timeout/i, `saying why (${String(logged[0]?.reason)})`);
  t.ok('vendor_request_id' in (logged[0] ?? {}), 'and the vendor id field (null: no answer came)');
});

// The gateway stops reading a connection while its request is unanswered (pipelining); reading
// resumes only as the answer ends, because uWS's resume() arms its 10 s idle timer. A stream
// longer than that timer must run to its end.
t.test('a stream longer than uWS idle timeout (10 s) runs to its end', async (t) => {
  const t0 = performance.now();
  const r = await g.call('POST', '/v1/messages', {
    key: k.key,
    body: { model: 'sonnet', max_tokens: 200, stream: true, messages: [{ role: 'user', content: 'slowly [[sim:tokens=60]] [[sim:pace=200]]' }] },
  });
  const ms = performance.now() - t0;
  t.equal(r.status, 200);
  t.match(r.text, /event: message_stop/, 'the stream ended with message_stop');
  // Without this the test would pass just as well if the stream ended before the idle timer could fire.
  t.ok(ms > UWS_IDLE_TIMEOUT_MS, `and it lasted ${Math.round(ms)} ms, past uWS's ${UWS_IDLE_TIMEOUT_MS} ms idle timeout`);
});

t.test('ledger invariant', async (t) => {
  await assertLedgerInvariant(t, g.db.pool);
});
