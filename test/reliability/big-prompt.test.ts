// A prompt as large as the body cap allows, on the Responses lane, while another client measures
// its own latency: the exact token count of a long prompt (hundreds of ms for 4 MB) runs on a
// worker thread, so nobody else waits for it. Both endings: refused 413 (over the model's input
// limit) and accepted (the largest prompt that fits), billed like any other.
import t from 'tap';
import { request } from 'undici';
import { setLane } from '../../src/deployment/state.js';
import { startOpenAISimulator } from '../../simulators/openai/simulator.js';
import { warmTokenCountPool } from '../../src/lanes/responses/token-count-pool.js';
import { startTestGateway } from '../helpers/gateway.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';

const OPENAI_KEY = 'sk-openai-big-prompt';
/** Generous for a loaded 2-core machine; counting this 4 MB on the event loop stalls it 0.45 to 2 s. */
const OTHER_CLIENT_MAX_MS = 400;

const sim = await startOpenAISimulator({ apiKey: OPENAI_KEY, maxRecordedRequests: 0 });
t.teardown(() => sim.close());
const g = await startTestGateway(t, {
  limits: { requestsPerMinute: 100_000, publicRequestsPerMinute: 100_000 },
  vendors: { openai: { baseUrl: sim.origin + '/v1', apiKey: OPENAI_KEY } },
});
await setLane(g.db.pool, 'responses', true);
await g.gw.services.state.refresh();
const k = await g.newKey();
await g.gw.services.ledger.topUp(k.accountId, 10_000_000, 'big prompt');
const cap = g.config.limits.textBodyBytes;
// The worker's first start (loading the rank table) is not what this file measures.
await warmTokenCountPool();

/** English-like text of `bytes` bytes: words that vary, so the count does real merges (~4-5 bytes a token). */
function prose(bytes: number): string {
  const words = ['the', 'gateway', 'counts', 'every', 'token', 'of', 'a', 'prompt', 'before', 'holding', 'Ink', 'for', 'it,', 'and', 'answers.'];
  const parts: string[] = [];
  let n = 0;
  for (let i = 0; n < bytes; i++) {
    const w = words[(i * 7 + (i >> 3)) % words.length]! + (i % 97 === 0 ? ` ${i}` : '');
    parts.push(w);
    n += w.length + 1;
  }
  return parts.join(' ').slice(0, bytes);
}

/**
 * Sends `input` while a second client calls GET /v1/models back to back (5 ms apart); the slowest
 * round, sleep excluded. The gateway shares this process's event loop: a stall anywhere in a round
 * (the answer, or the timer between two calls) shows in it.
 */
async function withObserver(input: string) {
  const body = JSON.stringify({ model: 'astra', input, max_output_tokens: 16 });
  let stop = false;
  let worst = 0;
  let calls = 0;
  let warmed!: () => void;
  const warm = new Promise<void>((res) => (warmed = res));
  const observer = (async () => {
    let last = performance.now();
    while (!stop) {
      const r = await request(g.url + '/v1/models');
      await r.body.text();
      await new Promise((res) => setTimeout(res, 5));
      const now = performance.now();
      worst = Math.max(worst, now - last - 5);
      last = now;
      if (++calls === 3) warmed();
    }
  })();
  // Let the observer warm up (connection open) before the big request leaves; a failing observer ends the wait too.
  await Promise.race([warm, observer]);
  worst = 0;
  const t0 = performance.now();
  const r = await g.call('POST', '/v1/responses', { key: k.key, body });
  const ms = performance.now() - t0;
  stop = true;
  await observer;
  return { r, ms, worst, calls };
}

/** Short words and numbers (~2-3 bytes a token): 4 MB of it is far above the input limit. */
function dense(bytes: number): string {
  const parts: string[] = [];
  let n = 0;
  for (let i = 0; n < bytes; i++) {
    const w = i % 3 === 0 ? String(i % 1000) : i % 3 === 1 ? 'ok' : 'no,';
    parts.push(w);
    n += w.length + 1;
  }
  return parts.join(' ').slice(0, bytes);
}

t.test('a 4 MB prompt over the input limit: 413, and the other client is not held up', async (t) => {
  const input = dense(cap - 200);
  const { r, ms, worst, calls } = await withObserver(input);
  t.equal(r.status, 413, r.text.slice(0, 200));
  t.equal(r.json.error.code, 'payload_too_large');
  t.match(r.json.error.message, /tokens, above the \d+-token input limit/, 'refused on the exact count');
  t.comment(`413 after ${Math.round(ms)} ms; the other client's slowest /v1/models meanwhile: ${worst.toFixed(1)} ms over ${calls} calls`);
  t.ok(worst < OTHER_CLIENT_MAX_MS, `the other client's slowest answer ${worst.toFixed(1)} ms < ${OTHER_CLIENT_MAX_MS} ms`);
  const me = (await g.call('GET', '/v1/me', { key: k.key })).json;
  t.equal(me.key.ink_charged, 0, 'nothing charged');
  t.equal(me.key.ink_reserved, 0, 'nothing held');
});

t.test('the largest accepted prompt: answered and billed, the other client not held up', async (t) => {
  // A body at the cap: this text is ~874,000 exact tokens, under the 922,000-token limit.
  const input = prose(cap - 200);
  const { r, ms, worst, calls } = await withObserver(input);
  t.equal(r.status, 200, r.text.slice(0, 200));
  t.ok(r.json.usage.input_tokens > 500_000, `the vendor read ${r.json.usage.input_tokens} input tokens`);
  t.comment(`200 after ${Math.round(ms)} ms; the other client's slowest /v1/models meanwhile: ${worst.toFixed(1)} ms over ${calls} calls`);
  t.ok(worst < OTHER_CLIENT_MAX_MS, `the other client's slowest answer ${worst.toFixed(1)} ms < ${OTHER_CLIENT_MAX_MS} ms`);
  t.ok(Number(r.headers['x-service-ink-charged']) > 0, 'charged');
  await assertLedgerInvariant(t, g.db.pool);
});
