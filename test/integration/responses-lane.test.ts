// POST /v1/responses end to end: the official OpenAI SDK -> inkgate -> the OpenAI Responses simulator.
import t from 'tap';
import { responsesHoldInk, textChargeInk, textUsageFromResponses } from '../../src/catalog/pricing.js';
import { writtenRequest } from '../helpers/gateway.js';
import { me, rawResponsesStream, responsesCharge, startResponsesHarness, VENDOR_KEY } from '../helpers/responses-harness.js';
import { eachEngine } from '../helpers/engines.js';

const setup = startResponsesHarness;
const rawStream = rawResponsesStream;

eachEngine('official SDK: responses.create through inkgate', async (t, engine) => {
  const { g, k, client, sim, invariant } = await setup(t, { gateway: { server: { engine } } });
  const { data: resp, response } = await client.responses
    .create({ model: 'astra', input: 'Say hello', instructions: 'Be brief', max_output_tokens: 1000 })
    .withResponse();
  t.equal(resp.model, 'text-6-astra', 'the product id');
  t.ok(resp.output_text.length > 0, 'output_text');
  t.equal(resp.status, 'completed');
  const u = resp.usage!;
  const expected = responsesCharge(u);
  t.equal(Number(response.headers.get('x-service-ink-charged')), expected);
  t.match(response.headers.get('x-service-request-id'), /^req_/);
  const m = await me(g, k.key);
  t.equal(m.key.ink_charged, expected);
  t.equal(m.key.ink_reserved, 0);
  const wire = sim.requests.at(-1)!;
  t.equal((wire.body as any).model, g.gw.services.catalog.text('astra')!.vendorModel);
  t.equal(wire.headers.authorization, `Bearer ${VENDOR_KEY}`, 'our vendor key, exactly');
  t.equal(wire.headers['accept-encoding'], 'identity', 'no compressed answers asked for');
  t.notOk(JSON.stringify(wire).includes(k.key), 'the client key never reaches the vendor');
  await invariant();
});

eachEngine('official SDK: stream, responses.stream() + finalResponse(), and the usage comment frame', async (t, engine) => {
  const { g, k, client, invariant } = await setup(t, { gateway: { server: { engine } } });
  const s = await client.responses.create({ model: 'text-6-astra', input: 'Stream it', stream: true });
  const types: string[] = [];
  for await (const ev of s) types.push(ev.type);
  t.equal(types.at(-1), 'response.completed');
  t.equal(types[0], 'response.created');

  const rs = client.responses.stream({ model: 'astra', input: 'Again please' });
  const final = await rs.finalResponse();
  t.equal(final.status, 'completed');
  t.equal(final.model, 'text-6-astra');
  t.ok(final.output_text.length > 0);

  const raw = await rawStream(g, k.key, { input: 'raw' });
  t.equal(raw.status, 200);
  t.notOk(raw.text.includes('[DONE]'));
  t.equal(raw.events.at(-1)!.event, 'response.completed', 'the terminal event is the last event');
  for (const e of raw.events) {
    const d = JSON.parse(e.data);
    if (d.response) t.equal(d.response.model, 'text-6-astra', `${e.event} carries the product id`);
  }
  t.equal(raw.comments.length, 1);
  t.match(raw.comments[0], /^service\.usage \{/);
  const frame = JSON.parse(raw.comments[0]!.slice('service.usage '.length));
  t.equal(frame.type, 'service.usage');
  t.match(frame.request_id, /^req_/);
  t.equal(frame.usd_payg_charged, frame.ink_charged / 100);
  const usage = JSON.parse(raw.events.at(-1)!.data).response.usage;
  t.equal(frame.ink_charged, responsesCharge(usage));
  t.equal((await me(g, k.key)).key.ink_reserved, 0);
  await invariant();
});

t.test('max_output_tokens: incomplete is charged for what the vendor reports', async (t) => {
  const { g, k, client, invariant } = await setup(t);
  const r = await client.responses.create({ model: 'astra', input: 'long [[sim:tokens=200]]', max_output_tokens: 20 });
  t.equal(r.status, 'incomplete');
  t.equal(r.incomplete_details?.reason, 'max_output_tokens');
  const m = await me(g, k.key);
  t.ok(m.key.ink_charged > 0);
  t.ok(m.key.ink_charged < responsesHoldInk(0, 20), 'far below the hold (floored at 32,768 output tokens)');
  t.equal(m.key.ink_reserved, 0);
  await invariant();
});

t.test('the hold: prompt plus max_output_tokens floored at 32,768', async (t) => {
  const { g, invariant } = await setup(t);
  const poor = await g.newKey();
  const need = responsesHoldInk(0, 100);
  await g.gw.services.ledger.topUp(poor.accountId, need - 1, 'just short');
  const r = await g.call('POST', '/v1/responses', { key: poor.key, body: { model: 'astra', input: 'hi', max_output_tokens: 100 } });
  t.equal(r.status, 402, `a hold of at least ${need} Ink even for max_output_tokens 100`);
  t.equal(r.json.error.code, 'insufficient_ink');
  await invariant();
});

t.test('failure paths: response.failed, cut streams, vendor statuses', async (t) => {
  const { g, k, invariant } = await setup(t);
  const failed = await rawStream(g, k.key, { input: 'x [[sim:failed]]' });
  const last = failed.events.at(-1)!;
  t.equal(last.event, 'error', 'a failed response ends with our error frame');
  t.equal(JSON.parse(last.data).error.code, 'usage_unknown');
  t.equal(failed.events.filter((e) => e.event === 'error').length, 1, "the vendor's error is folded into the one final error event");
  t.ok(
    failed.events.some((e) => e.event === 'response.failed'),
    'the terminal event is passed on',
  );
  let m = await me(g, k.key);
  t.ok(m.key.ink_reserved > 0, 'no usage receipt: the hold is kept');

  const cut = await rawStream(g, k.key, { input: 'x [[sim:cut=5]]' });
  t.equal(JSON.parse(cut.events.at(-1)!.data).code, 'usage_unknown');

  const noUsage = await rawStream(g, k.key, { input: 'x [[sim:no-usage]]' });
  t.equal(JSON.parse(noUsage.events.at(-1)!.data).code, 'usage_unknown');

  const bytes = await rawStream(g, k.key, { input: 'x [[sim:chunk=1]] [[sim:crlf]]' });
  t.equal(bytes.events.at(-1)!.event, 'response.completed');
  t.equal(bytes.comments.length, 1, 'one byte per chunk still ends with the usage comment');

  const reserved = (await me(g, k.key)).key.ink_reserved;
  const rej = await g.call('POST', '/v1/responses', { key: k.key, body: { model: 'astra', input: 'x [[sim:status=400]]' } });
  t.equal(rej.status, 400);
  t.equal(rej.json.error.code, 'upstream_rejected');
  const busy = await g.call('POST', '/v1/responses', { key: k.key, body: { model: 'astra', input: 'x [[sim:status=429]] [[sim:retry-after=9]]' } });
  t.equal(busy.status, 503);
  t.equal(busy.json.error.code, 'provider_unavailable');
  t.equal(busy.headers['retry-after'], '9');
  m = await me(g, k.key);
  t.equal(m.key.ink_reserved, reserved, 'refusals released their holds');
  await invariant();
});

t.test('the service visible-output cap stops the reply and charges the hold', async (t) => {
  const { g, k, client, invariant } = await setup(t, { gateway: { responses: { visibleOutputCapChars: 40 } } });
  const before = await me(g, k.key);
  const raw = await rawStream(g, k.key, { input: 'long reply [[sim:tokens=100]] [[sim:pace=2]]', max_output_tokens: 1000 });
  const names = raw.events.map((e) => e.event);
  t.equal(names.at(-1), 'response.incomplete', 'we end the stream with an incomplete terminal event');
  const frame = JSON.parse(raw.comments[0]!.slice('service.usage '.length));
  const after = await me(g, k.key);
  t.equal(after.key.ink_charged - before.key.ink_charged, frame.ink_charged);
  t.equal(after.key.ink_reserved, 0);
  const rec = await writtenRequest(g, frame.request_id);
  t.equal(rec?.charged_ink, frame.ink_charged);
  t.equal(frame.ink_charged, rec?.hold_ink, 'the charge equals the hold');
  // The SDK accepts the capped stream.
  const final = await client.responses
    .stream({ model: 'astra', input: 'long reply [[sim:tokens=100]] [[sim:pace=2]]', max_output_tokens: 1000 })
    .finalResponse();
  t.equal(final.status, 'incomplete');
  await invariant();
});

t.test('validation and unsupported fields', async (t) => {
  const { g, k, sim, invariant } = await setup(t);
  const n = sim.requests.length;
  const cases: Array<[Record<string, unknown>, string, string]> = [
    [{ model: 'gpt-5', input: 'x' }, 'unknown_model', 'model'],
    [{ model: 'astra', input: 'x', previous_response_id: 'resp_1' }, 'unsupported_parameter', 'previous_response_id'],
    [{ model: 'astra', input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'https://x/y.png' }] }] }, 'unsupported_parameter', 'input'],
    [{ model: 'astra', input: 'x', max_output_tokens: 128_001 }, 'too_large', 'max_output_tokens'],
    [{ model: 'astra', input: 'x', tools: [{ type: 'web_search' }] }, 'unsupported_parameter', 'tools'],
    [{ model: 'astra', input: 'x', bogus: true }, 'unsupported_parameter', 'bogus'],
  ];
  for (const [body, code, param] of cases) {
    const r = await g.call('POST', '/v1/responses', { key: k.key, body });
    t.equal(r.status, 400, code);
    t.equal(r.json.error.code, code);
    t.match(r.json.error.param, new RegExp('^' + param));
  }
  t.equal(sim.requests.length, n);
  await invariant();
});

t.test('long-context pricing with an upstream that counts characters / 4: charged in full, not capped at the hold', async (t) => {
  // The simulator counts ceil(chars / 4) + 4 per item: 1,087,988 letters are 272,001 input tokens
  // there (the long-context tier starts above 272,000), while o200k counts about a half of that.
  const { g, k, client, invariant } = await setup(t);
  for (const [letters, tier] of [
    [1_087_984, 'base'],
    [1_087_988, 'long-context'],
  ] as const) {
    const { data: resp, response } = await client.responses.create({ model: 'astra', input: 'a'.repeat(letters), max_output_tokens: 1000 }).withResponse();
    const u = resp.usage!;
    t.equal(u.input_tokens, tier === 'base' ? 272_000 : 272_001, `${tier}: the upstream's count`);
    const expected = textChargeInk(
      'text-6-astra',
      textUsageFromResponses({ inputTokens: u.input_tokens, cachedTokens: 0, cacheWriteTokens: 0, outputTokens: u.output_tokens }),
    );
    t.equal(Number(response.headers.get('x-service-ink-charged')), expected, `${tier}: rate x reported usage`);
  }
  const m = await me(g, k.key);
  t.equal(m.key.ink_reserved, 0);
  await invariant();
});
