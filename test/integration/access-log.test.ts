// The access log: one line per finished request on the public port, with the code and param of a
// refusal, on both engines; never a key, a query string or a body.
import Anthropic from '@anthropic-ai/sdk';
import t, { type Test } from 'tap';
import { request } from 'undici';
import { setLane } from '../../src/deployment/state.js';
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { createLogger } from '../../src/util/log.js';
import { eachEngine } from '../helpers/engines.js';
import { startTestGateway } from '../helpers/gateway.js';
import type { EngineName } from '../../src/server/engine.js';

const VENDOR_KEY = 'sk-ant-test-vendor';

interface Line {
  level: string;
  msg: string;
  method: string;
  route: string;
  status: number;
  duration_ms: number;
  request_id: string;
  key_prefix: string | null;
  client: string;
  code?: string;
  param?: string | null;
}

async function setup(t: Test, engine: EngineName, access = true) {
  const lines: string[] = [];
  const sim = await startAnthropicSimulator({ apiKey: VENDOR_KEY });
  t.teardown(() => sim.close());
  const g = await startTestGateway(
    t,
    { server: { engine }, log: { level: 'info', access }, vendors: { anthropic: { baseUrl: sim.url, apiKey: VENDOR_KEY } } },
    { log: createLogger('info', (l) => lines.push(l)) },
  );
  await setLane(g.db.pool, 'messages', true);
  await g.gw.services.state.refresh();
  const k = await g.newKey();
  await g.gw.services.ledger.topUp(k.accountId, 10_000, 'test');
  const requests = (): Line[] => lines.map((l) => JSON.parse(l) as Line).filter((l) => l.msg === 'http.request');
  /** The line of the request whose id the answer carried (waits for it: a line is written when the answer has ended). */
  const lineOf = async (requestId: string): Promise<Line> => {
    for (let i = 0; i < 200; i++) {
      const hit = requests().find((l) => l.request_id === requestId);
      if (hit) return hit;
      await new Promise((r) => setImmediate(r));
    }
    throw new Error(`no access line for ${requestId}`);
  };
  return { g, k, sim, lines, requests, lineOf };
}

eachEngine('one line per request: route, status, key prefix, and the code and param of a refusal', async (t, engine) => {
  const { g, k, lineOf, lines } = await setup(t, engine);
  const ok = await g.call('GET', '/v1/me', { key: k.key });
  t.equal(ok.status, 200);
  const okLine = await lineOf(ok.headers['x-request-id'] as string);
  t.match(okLine, { level: 'info', method: 'GET', route: '/v1/me', status: 200, client: '127.0.0.1' });
  t.equal(okLine.key_prefix, k.key.slice(0, 12), "the key's display prefix");
  t.notOk('code' in okLine, 'no code on a success');
  t.ok(okLine.duration_ms >= 0);

  // A system turn inside messages: refused in the vendor's words, logged with code and param.
  const body = {
    model: 'sonnet',
    max_tokens: 10,
    messages: [
      { role: 'user', content: 'a' },
      { role: 'system', content: 'b' },
    ],
  };
  const refused = await g.call('POST', '/v1/messages', { key: k.key, body });
  t.equal(refused.status, 400);
  t.equal(refused.json.error.code, 'invalid_message');
  t.equal(refused.json.error.param, 'messages[1].role');
  t.match(refused.json.error.message, /^Unexpected role "system"\. The Messages API accepts a top-level `system` parameter/);
  const refusedLine = await lineOf(refused.headers['x-request-id'] as string);
  t.match(refusedLine, { method: 'POST', route: '/v1/messages', status: 400, code: 'invalid_message', param: 'messages[1].role' });
  t.equal(refusedLine.key_prefix, k.key.slice(0, 12));

  // No key: the 401 line has no prefix; an unknown path is `unmatched`.
  const noKey = await g.call('GET', '/v1/me');
  t.match(await lineOf(noKey.headers['x-request-id'] as string), { status: 401, code: 'invalid_api_key', key_prefix: null, param: null });
  const missing = await g.call('GET', `/v1/nowhere/${k.key}?secret=s3`);
  const missingLine = await lineOf(missing.headers['x-request-id'] as string);
  t.match(missingLine, { route: 'unmatched', status: 404, code: 'not_found' });
  t.notOk('path' in missingLine, 'no path: a client may put anything there');

  // The console answers asynchronously: its line comes when its answer has ended.
  const page = await request(`${g.url}/console/signin`);
  await page.body.text();
  t.match(await lineOf(page.headers['x-request-id'] as string), { route: 'console', status: page.statusCode });

  const all = lines.join('\n');
  t.notOk(all.includes(k.key.slice(12)), 'the raw key is never written, not even when sent in the path');
  t.notOk(all.includes('secret=s3'), 'no query string');
});

t.test('a streamed answer is logged once, when it has ended; the SDK sees the same request id', async (t) => {
  const { g, k, requests, lineOf } = await setup(t, 'node');
  const client = new Anthropic({ baseURL: g.url, authToken: k.key, apiKey: null, maxRetries: 0 });
  const stream = client.messages.stream({ model: 'sonnet', max_tokens: 50, messages: [{ role: 'user', content: 'hi' }] });
  await stream.finalMessage();
  const id = (await stream.withResponse()).response.headers.get('x-request-id')!;
  const line = await lineOf(id);
  t.match(line, { route: '/v1/messages', status: 200 });
  t.equal(requests().filter((l) => l.request_id === id).length, 1, 'exactly one line');
});

t.test('an x-api-key alone gets a 401 that says to send a bearer token', async (t) => {
  const { g, k, lineOf } = await setup(t, 'node');
  const r = await g.call('POST', '/v1/messages', {
    headers: { 'x-api-key': k.key },
    body: { model: 'sonnet', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] },
  });
  t.equal(r.status, 401);
  t.equal(r.json.error.code, 'invalid_api_key');
  t.match(r.json.error.message, /x-api-key. header is not read/);
  t.match(r.json.error.message, /ANTHROPIC_AUTH_TOKEN/);
  t.equal(r.headers['www-authenticate'], 'Bearer');
  t.match(await lineOf(r.headers['x-request-id'] as string), { status: 401, code: 'invalid_api_key' });
});

t.test('log.access false: no access lines', async (t) => {
  const { g, k, requests } = await setup(t, 'node', false);
  const r = await g.call('GET', '/v1/me', { key: k.key });
  t.equal(r.status, 200);
  // The gateway's own request (above) has ended; a line, had there been one, was written with it.
  await g.call('GET', '/v1/models');
  t.same(requests(), []);
});
