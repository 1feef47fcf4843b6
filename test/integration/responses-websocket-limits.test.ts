// Responses over one WebSocket, its limits: sockets per key (429 at the upgrade), a message above
// the body cap (an error event, the socket kept), and the key's request budget counting each turn.
import OpenAI from 'openai';
import { startWsStack, WsConversation } from '../helpers/responses-ws.js';
import { eachEngine } from '../helpers/engines.js';

eachEngine('limits: sockets per key, the body cap per message, a request budget counting turns', async (t, engine) => {
  const s = await startWsStack(t, engine, { limits: { textBodyBytes: 4096, requestsPerMinute: 3 }, responses: { websocket: { maxSocketsPerKey: 1 } } });
  const c = new WsConversation(s.client);
  t.equal((await c.turn({ model: 'astra', input: 'one' })).at(-1)?.type, 'service.usage', 'a turn (1 of the budget)');

  const second = new WsConversation(new OpenAI({ baseURL: s.g.url + '/v1', apiKey: s.k.key, maxRetries: 0 }));
  await second.closedP;
  t.match(second.errors.map((e) => String(e.message)).join('\n'), /429/, 'a second socket for the key: 429 at the upgrade');

  t.match(
    await c.turn({ model: 'astra', input: 'x'.repeat(5000) }),
    [{ type: 'error', status: 413, code: 'payload_too_large' }],
    'a message above the body cap: an error event',
  );
  t.equal((await c.turn({ model: 'astra', input: 'two' })).at(-1)?.type, 'service.usage', 'the socket still serves');
  // The oversized message was refused before the budget; turns one and two took 2 of 3.
  t.equal((await c.turn({ model: 'astra', input: 'three' })).at(-1)?.type, 'service.usage', 'the third turn of the minute');
  t.match(
    await c.turn({ model: 'astra', input: 'four' }),
    [{ type: 'error', status: 429, code: 'rate_limit_exceeded' }],
    'the fourth: the key budget counts turns',
  );
  c.close();
  await c.closedP;
  // (GET /v1/me would be over the key's budget too: the records are read from the store.)
  t.same(
    (await s.settledRecords(3)).map((r) => r.status),
    ['settled', 'settled', 'settled'],
    'three turns held and settled; nothing held for the refusals',
  );
  await s.ledgerCheck();
});
