// Responses over one WebSocket, its limits: sockets per key (429 at the upgrade), a message above
// the body cap (an error event, the socket kept), and the key's request budget counting each turn.
import OpenAI from 'openai';
import { startWsStack, WsConversation } from '../helpers/responses-ws.js';
import { eachEngine } from '../helpers/engines.js';
import { rawExchange } from '../helpers/raw-socket.js';

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

eachEngine('a handshake refused for its own headers gives the key its socket slot back', async (t, engine) => {
  const s = await startWsStack(t, engine, { responses: { websocket: { maxSocketsPerKey: 1 } } });
  const port = Number(new URL(s.g.url).port);
  // A valid API key, then a Sec-WebSocket-Key that is not 16 bytes in base64: the WebSocket layer
  // refuses the handshake itself, after the API key took its slot. Three in a row, past the cap of one.
  for (let i = 0; i < 3; i++) {
    const r = await rawExchange(
      port,
      (sock) =>
        sock.write(
          `GET /v1/responses HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${s.k.key}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n` +
            `Sec-WebSocket-Key: not-a-key\r\nSec-WebSocket-Version: 13\r\n\r\n`,
        ),
      10_000,
      (buf) => buf.includes('\r\n\r\n'),
    );
    t.match(r.buf.toString('latin1'), /^HTTP\/1\.1 4\d\d /, `attempt ${i + 1}: refused with a 4xx, no socket opened`);
  }
  // The slot was given back each time: a proper socket for the key still opens and serves.
  const c = new WsConversation(s.client);
  t.equal((await c.turn({ model: 'astra', input: 'after the refusals' })).at(-1)?.type, 'service.usage', 'a socket opens and serves a turn');
  c.close();
  await c.closedP;
});
