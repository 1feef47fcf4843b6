// Responses over one WebSocket, through the official SDK's ResponsesWS, on each HTTP engine: many
// turns on one socket, each one request billed once; refusals at the upgrade as HTTP answers;
// refused turns as error events on a socket that stays usable; one turn at a time.
import OpenAI from 'openai';
import { setLane } from '../../src/deployment/state.js';
import { eachEngine } from '../helpers/engines.js';
import { parseExposition } from '../helpers/prometheus.js';
import { startWsStack, TERMINAL, upgradeAnswer, WsConversation, type WsEvent } from '../helpers/responses-ws.js';

eachEngine('two and twenty turns on one socket: each completed, one request each, billed once', async (t, engine) => {
  const s = await startWsStack(t, engine);
  const usages: WsEvent[] = [];
  for (const turns of [2, 20]) {
    const c = new WsConversation(s.client);
    for (let i = 0; i < turns; i++) {
      const ev = await c.turn({ model: 'astra', input: `Turn ${i} of ${turns}`, max_output_tokens: 300 });
      const types = ev.map((e) => e.type);
      t.equal(types[0], 'response.created', `turn ${i + 1}/${turns} opens with response.created`);
      const terminal = ev.filter((e) => TERMINAL.has(e.type));
      t.match(terminal, [{ type: 'response.completed', response: { model: 'text-6-astra', status: 'completed' } }], 'one terminal event, the product id');
      t.equal(types.at(-2), 'response.completed', 'the terminal event is the last vendor event');
      t.match(ev.at(-1), { type: 'service.usage', ink_charged: Number, request_id: /^req_/ }, 'then the service usage');
      usages.push(ev.at(-1)!);
    }
    c.close();
    t.equal((await c.closedP).code, 1000, 'closed by the client');
  }
  t.equal(new Set(usages.map((u) => u.request_id)).size, 22, 'each turn has its own request id');
  const rows = await s.settledRecords(22);
  t.equal(rows.length, 22, 'one request record per turn');
  t.ok(
    rows.every((r) => r.status === 'settled'),
    'every hold settled',
  );
  const charged = usages.reduce((a, u) => a + u.ink_charged, 0);
  t.equal(
    rows.reduce((a, r) => a + r.charged, 0),
    charged,
    'the records sum to the usage events',
  );
  const me = await s.me();
  t.equal(me.key.ink_charged, charged, 'the key was charged the sum of the turns');
  t.equal(me.key.ink_reserved, 0, 'nothing held');

  const turnLines = s.lines.filter((l) => l.msg === 'http.request' && l.transport === 'websocket');
  t.equal(turnLines.length, 22, 'one access line per turn');
  t.ok(
    turnLines.every((l) => l.route === '/v1/responses' && l.status === 200 && l.method === 'POST'),
    'route /v1/responses, 200',
  );
  t.same(new Set(turnLines.map((l) => l.request_id)), new Set(usages.map((u) => u.request_id)), 'the lines carry the turns request ids');
  const upgrades = s.lines.filter((l) => l.msg === 'http.request' && l.method === 'GET' && l.route === '/v1/responses');
  t.same(
    upgrades.map((l) => l.status),
    [101, 101],
    'each upgrade logged once, 101',
  );
  const m = parseExposition((await s.g.gw.ops.metrics.scrape()).body);
  t.equal(m.value('inkgate_websocket_turns_total', { outcome: 'streamed' }), 22, 'turns counted');
  t.equal(m.value('inkgate_websockets_opened_total'), 2, 'sockets counted');
  await s.ledgerCheck();
});

eachEngine('refused at the upgrade, as an HTTP answer: a bad key 401, a closed lane 503', async (t, engine) => {
  const s = await startWsStack(t, engine);
  const bad = await upgradeAnswer(s.g.url, 'svc_not_a_key_at_all_0000000000');
  t.equal(bad.status, 401, 'a bad key: 401');
  t.match(bad.json, { error: { code: 'invalid_api_key', request_id: /^req_/ } }, 'the usual envelope');
  t.equal(bad.headers['www-authenticate'], 'Bearer');
  t.equal((await upgradeAnswer(s.g.url, undefined)).status, 401, 'no key: 401');
  t.equal((await upgradeAnswer(s.g.url, s.k.key)).status, 101, 'a good key opens a socket');

  const sdk = new WsConversation(new OpenAI({ baseURL: s.g.url + '/v1', apiKey: 'svc_wrong_key_0000000000000000', maxRetries: 0 }));
  await sdk.closedP;
  t.match(sdk.errors.map((e) => String(e.message)).join('\n'), /401/, 'the SDK reports the 401');

  const plain = await s.g.call('GET', '/v1/responses', { key: s.k.key });
  t.equal(plain.status, 404, 'a GET without an upgrade is still no route');

  await setLane(s.g.db.pool, 'responses', false);
  await s.g.gw.services.state.refresh();
  const closed = await upgradeAnswer(s.g.url, s.k.key);
  t.equal(closed.status, 503, 'a closed lane: 503 before the upgrade');
  t.match(closed.json, { error: { code: 'provider_unavailable', message: /not enabled/ } });
  t.equal(s.sim.requestCount, 0, 'nothing reached the vendor');
  await s.ledgerCheck();
});

eachEngine('refused turns are error events on a socket that stays usable; one turn at a time', async (t, engine) => {
  const s = await startWsStack(t, engine);
  const c = new WsConversation(s.client);
  t.match(
    await c.turn({ model: 'astra', input: 'x', max_output_tokens: 1 }),
    [
      {
        type: 'error',
        status: 400,
        code: 'invalid_value',
        param: 'max_output_tokens',
        error: { code: 'invalid_value', param: 'max_output_tokens', request_id: /^req_/ },
      },
    ],
    'a field error: the POST lane code and param',
  );
  t.match(
    await c.turn({ model: 'astra', input: 'x', previous_response_id: 'resp_abc' }),
    [{ type: 'error', code: 'unsupported_parameter', param: 'previous_response_id', message: /whole transcript/ }],
    'previous_response_id refused: no conversation state is kept',
  );
  t.match(await c.turn({ model: 'no-such-model', input: 'x' }), [{ type: 'error', code: 'unknown_model', param: 'model' }], 'an unknown model');
  t.match(await c.turn({ model: 'astra', input: 'x', stream: false }), [{ type: 'error', code: 'unsupported_parameter', param: 'stream' }], 'stream false');
  c.rws.send({ type: 'response.steer', previous_response_id: 'resp_x', input: 'more' } as never);
  t.match(await c.readTurn(), [{ type: 'error', code: 'invalid_enum', param: 'type' }], 'another event type');

  // A second response.create while one runs: refused, the first runs on.
  c.send({ model: 'astra', input: 'slow one [[sim:pace=20]] [[sim:tokens=15]]' });
  t.equal((await c.next()).type, 'response.created', 'the first turn runs');
  c.send({ model: 'astra', input: 'too soon' });
  const during: WsEvent[] = [];
  for (;;) {
    const e = await c.next();
    during.push(e);
    if (e.type === 'service.usage') break;
  }
  t.match(
    during.filter((e) => e.type === 'error'),
    [{ code: 'concurrency_limit', message: /already running/ }],
    'the second create: one error event',
  );
  t.equal(during.filter((e) => e.type === 'response.completed').length, 1, 'the first turn completed');
  const after = await c.turn({ model: 'astra', input: 'next one' });
  t.equal(after.at(-2)?.type, 'response.completed', 'the socket still serves a turn');
  c.close();
  await c.closedP;

  const rows = await s.settledRecords(2);
  t.same(
    rows.map((r) => r.status),
    ['settled', 'settled'],
    'two requests held and settled; nothing held for the refusals',
  );
  t.equal(s.sim.requestCount, 2, 'the vendor saw the two turns only');
  t.equal((await s.me()).key.ink_reserved, 0);
  await s.ledgerCheck();
});

eachEngine('a client closing mid-turn is billed as a disconnect; a vendor failing mid-turn sends the failure event', async (t, engine) => {
  const s = await startWsStack(t, engine);
  const c = new WsConversation(s.client);
  c.send({ model: 'astra', input: 'a long one [[sim:pace=10]] [[sim:tokens=60]]' });
  for (;;) if ((await c.next()).type === 'response.output_text.delta') break;
  c.close();
  await c.closedP;
  const rows = await s.settledRecords(1);
  t.equal(rows.length, 1);
  t.equal(rows[0]!.status, 'settled', 'the vendor read to its receipt and the hold settled, as a disconnect on HTTP');
  t.ok(rows[0]!.charged > 0, 'billed for what the vendor produced');
  t.equal((await s.me()).key.ink_reserved, 0, 'no hold left');

  const c2 = new WsConversation(s.client);
  const failed = await c2.turn({ model: 'astra', input: 'breaks [[sim:reset=3]]' });
  t.match(failed.at(-1), { type: 'error', code: 'usage_unknown', error: { type: 'provider_error', code: 'usage_unknown' } }, 'the failure frame as an event');
  t.notOk(
    failed.some((e) => e.type === 'service.usage'),
    'no usage event',
  );
  const next = await c2.turn({ model: 'astra', input: 'and on' });
  t.equal(next.at(-2)?.type, 'response.completed', 'the socket serves the next turn');
  c2.close();
  await c2.closedP;
  const all = await s.settledRecords(3);
  t.same(all.map((r) => r.status).sort(), ['settled', 'settled', 'usage_unknown'], 'the failed turn keeps its hold for reconciliation, as on HTTP');
  await s.ledgerCheck();
});

eachEngine('draining: the running turn ends whole, then every socket closes with 1001', async (t, engine) => {
  const s = await startWsStack(t, engine);
  const idle = new WsConversation(s.client);
  t.equal((await idle.turn({ model: 'astra', input: 'first' })).at(-1)?.type, 'service.usage', 'an idle socket, one turn done');
  const busy = new WsConversation(s.client);
  busy.send({ model: 'astra', input: 'slow one [[sim:pace=20]] [[sim:tokens=20]]' });
  t.equal((await busy.next()).type, 'response.created', 'a turn runs');
  const closing = s.g.gw.close();
  t.equal((await idle.closedP).code, 1001, 'the idle socket closes at once, going away');
  const rest = await busy.readTurn();
  t.equal(rest.at(-2)?.type, 'response.completed', 'the running turn completed');
  t.equal(rest.at(-1)?.type, 'service.usage', 'and was billed');
  t.equal((await busy.closedP).code, 1001, 'then its socket closed, going away');
  await closing;
  const rows = await s.settledRecords(2);
  t.same(
    rows.map((r) => r.status),
    ['settled', 'settled'],
    'both turns settled',
  );
  await s.ledgerCheck();
});
