// Hostile bodies and what a client controls, on both engines: absurd JSON shapes are refused 400
// before the parse and never stall another client; field names, `param`, a user agent and a path
// never make a log line or an error body large; an unknown model or field name gets its hint.
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import type { Test } from 'tap';
import { request } from 'undici';
import { setLane } from '../../src/deployment/state.js';
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { startOpenAISimulator } from '../../simulators/openai/simulator.js';
import { createLogger } from '../../src/util/log.js';
import { eachEngine } from '../helpers/engines.js';
import { startTestGateway } from '../helpers/gateway.js';
import type { EngineName } from '../../src/server/engine.js';

const ANTHROPIC_KEY = 'sk-ant-test-vendor';
const OPENAI_KEY = 'sk-openai-test-vendor';

async function setup(t: Test, engine: EngineName) {
  const lines: string[] = [];
  const anthropic = await startAnthropicSimulator({ apiKey: ANTHROPIC_KEY });
  t.teardown(() => anthropic.close());
  const openai = await startOpenAISimulator({ apiKey: OPENAI_KEY });
  t.teardown(() => openai.close());
  const g = await startTestGateway(
    t,
    {
      server: { engine },
      log: { level: 'info', access: true },
      // The hostile key sends back to back: no per-minute limit stands in for the guard under test.
      limits: { requestsPerMinute: 100_000 },
      vendors: { anthropic: { baseUrl: anthropic.url, apiKey: ANTHROPIC_KEY }, openai: { baseUrl: openai.url, apiKey: OPENAI_KEY } },
    },
    { log: createLogger('info', (l) => lines.push(l)) },
  );
  await setLane(g.db.pool, 'messages', true);
  await setLane(g.db.pool, 'responses', true);
  await g.gw.services.state.refresh();
  const k = await g.newKey();
  await g.gw.services.ledger.topUp(k.accountId, 10_000, 'test');
  return { g, k, lines };
}

const post = (url: string, key: string, body: string | Buffer, headers: Record<string, string> = {}) =>
  request(url, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers }, body });

/** An object of `n` distinct keys, as JSON text. */
const keysObject = (n: number, from = 0): string => `{${Array.from({ length: n }, (_, i) => `"${(from + i).toString(36)}":1`).join(',')}}`;

eachEngine('absurd shapes are refused before the parse, and another client is served meanwhile', async (t, engine) => {
  const { g, k } = await setup(t, engine);
  const other = await g.newKey();
  const hostile: Array<{ body: string; code: string; param: string }> = [
    // The finding: 3.7 MB whose `system` is one object of 380,000 keys.
    {
      body: `{"model":"sonnet","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"system":${keysObject(380_000)}}`,
      code: 'too_many',
      param: 'system',
    },
    // Inside every per-object limit, above the body's different key names.
    {
      body: `{"model":"sonnet","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"system":[${Array.from({ length: 12 }, (_, j) => keysObject(1_000, j * 1_000)).join(',')}]}`,
      code: 'too_many',
      param: 'body',
    },
    // Inside every limit (80,000 keys of 1,000 names): checked off the serving thread, parsed, then refused by the lane.
    {
      body: `{"model":"sonnet","max_tokens":10,"messages":[{"role":"user","content":"hi"}],"system":[${Array.from({ length: 80 }, () => keysObject(1_000)).join(',')}]}`,
      code: 'invalid_type',
      param: 'system.0.type',
    },
    { body: `{"model":"sonnet","stop_sequences":[${'0,'.repeat(200_000)}0]}`, code: 'too_many', param: 'stop_sequences' },
  ];
  let stop = false;
  const latenciesMs: number[] = [];
  const poll = (async () => {
    while (!stop) {
      const started = performance.now();
      const r = await g.call('GET', '/v1/models', { key: other.key });
      latenciesMs.push(performance.now() - started);
      t.equal(r.status, 200, 'the other client is answered');
    }
  })();
  for (let round = 0; round < 3; round++) {
    for (const h of hostile) {
      const r = await post(`${g.url}/v1/messages`, k.key, h.body);
      const json = (await r.body.json()) as { error: { code: string; param: string } };
      t.equal(r.statusCode, 400, `${h.code} ${h.param}: 400`);
      t.match(json.error, { code: h.code, param: h.param });
    }
  }
  stop = true;
  await poll;
  latenciesMs.sort((a, b) => a - b);
  const p90 = latenciesMs[Math.floor(latenciesMs.length * 0.9)]!;
  t.ok(latenciesMs.length >= 5, `the other client got answers meanwhile (${latenciesMs.length})`);
  // Generous on purpose: on a shared 2-core machine an idle p90 is a few ms; before the guard one
  // such body held the serving thread for ~0.5 s. The bench (docs/performance.md) gives the figures.
  t.ok(p90 < 250, `the other client's p90 ${p90.toFixed(1)} ms is under 250 ms`);
});

eachEngine('what a client controls is cut in the access log and in the error body', async (t, engine) => {
  const { g, k, lines } = await setup(t, engine);
  const hugeName = 'n'.repeat(1024 * 1024);
  const longName = 'm'.repeat(3_000);
  // Just under the node engine's 64 KiB head (a longer one is its 431, with no access line of interest).
  const agent = 'a'.repeat(60 * 1024);
  const cases = [
    { body: JSON.stringify({ model: 'sonnet', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }], [hugeName]: 1 }), code: 'too_long' },
    { body: JSON.stringify({ model: 'sonnet', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }], [longName]: 1 }), code: 'unsupported_parameter' },
  ];
  const ids: string[] = [];
  for (const c of cases) {
    const r = await post(`${g.url}/v1/messages`, k.key, c.body, { 'user-agent': agent });
    const text = await r.body.text();
    const err = (JSON.parse(text) as { error: { code: string; param: string; message: string } }).error;
    t.equal(r.statusCode, 400);
    t.equal(err.code, c.code);
    t.ok(err.param.length <= 200 + '…(cut)'.length && err.param.endsWith('…(cut)'), `param cut: ${err.param.length} characters`);
    t.ok(text.length < 2_048, `the error body is small: ${text.length} bytes`);
    ids.push(r.headers['x-request-id'] as string);
  }
  const path = `/v1/${'p'.repeat(3_000)}`; // with the agent above, inside the node engine's head
  const r = await request(`${g.url}${path}`, { headers: { authorization: `Bearer ${k.key}`, 'user-agent': agent } });
  await r.body.text();
  t.equal(r.statusCode, 404);
  ids.push(r.headers['x-request-id'] as string);
  for (const id of ids) {
    let line: string | undefined;
    for (let i = 0; i < 200 && line === undefined; i++) {
      line = lines.find((l) => l.includes(id) && l.includes('"http.request"'));
      if (line === undefined) await new Promise((res) => setImmediate(res));
    }
    t.ok(line !== undefined, `an access line for ${id}`);
    t.ok(line!.length < 2_048, `the access line is small: ${line!.length} bytes`);
  }
  t.ok(
    lines.every((l) => l.length < 4_096),
    `no line of the run is large (longest ${Math.max(...lines.map((l) => l.length))} bytes)`,
  );
});

eachEngine('hints: the lane that serves a model, the field a misspelled one meant', async (t, engine) => {
  const { g, k } = await setup(t, engine);
  const anthropic = new Anthropic({ baseURL: g.url, apiKey: k.key, maxRetries: 0 });
  const openai = new OpenAI({ baseURL: `${g.url}/v1`, apiKey: k.key, maxRetries: 0 });
  const refusal = async (p: Promise<unknown>) => {
    const e = (await p.then(
      () => undefined,
      (x: unknown) => x,
    )) as { status: number; error: { code: string; param: string; message: string } & { error?: { code: string; param: string; message: string } } };
    t.equal(e?.status, 400);
    // The Anthropic SDK keeps the whole body in `error`, the OpenAI SDK its `error` member.
    return e.error.error ?? e.error;
  };
  const msg = { role: 'user' as const, content: 'hi' };
  let e = await refusal(anthropic.messages.create({ model: 'astra', max_tokens: 10, messages: [msg] }));
  t.match(e, { code: 'unknown_model', param: 'model' });
  t.match(e.message, 'that model is served at /v1/responses');
  e = await refusal(openai.responses.create({ model: 'sonnet', input: 'hi' }));
  t.match(e, { code: 'unknown_model', param: 'model' });
  t.match(e.message, 'that model is served at /v1/messages');
  e = await refusal(anthropic.messages.create({ model: 'sonnet', max_tokens: 10, messages: [msg], max_token: 5 } as never));
  t.match(e, { code: 'unsupported_parameter', param: 'max_token' });
  t.match(e.message, 'Did you mean `max_tokens`?');
  e = await refusal(openai.responses.create({ model: 'astra', input: 'hi', max_output_token: 50 } as never));
  t.match(e, { code: 'unsupported_parameter', param: 'max_output_token' });
  t.match(e.message, 'Did you mean `max_output_tokens`?');
  e = await refusal(openai.responses.create({ model: 'astra', input: 'hi', instruction: 'be brief' } as never));
  t.match(e.message, 'Did you mean `instructions`?');
  // Nothing close: no guess.
  e = await refusal(anthropic.messages.create({ model: 'sonnet', max_tokens: 10, messages: [msg], frobnicate: 1 } as never));
  t.match(e, { code: 'unsupported_parameter', param: 'frobnicate' });
  t.notMatch(e.message, 'Did you mean');
});
