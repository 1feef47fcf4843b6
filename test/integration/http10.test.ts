// HTTP/1.0 clients on each engine, with a billed streaming call: node serves it with HTTP/1.0
// framing (no chunked encoding, the stream ended by the close) and charges it once; uWS leaves it
// unanswered until its idle timeout and nothing is held or charged.
import { setLane } from '../../src/deployment/state.js';
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { eachEngine } from '../helpers/engines.js';
import { startTestGateway, journalWritten } from '../helpers/gateway.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';
import { rawExchange } from '../helpers/raw-socket.js';
import { parseSse } from '../helpers/sse.js';

/** uWS's fixed ~10 s idle timeout, checked on a 4 s timer (time is the behaviour: who closes). */
const IDLE_BOUND_MS = 16_000;

eachEngine('an HTTP/1.0 client streams a billed Messages call', async (t, engine) => {
  const sim = await startAnthropicSimulator({ apiKey: 'sk-ant-http10' });
  t.teardown(() => sim.close());
  const g = await startTestGateway(t, { server: { engine }, vendors: { anthropic: { baseUrl: sim.url, apiKey: 'sk-ant-http10' } } });
  await setLane(g.db.pool, 'messages', true);
  await g.gw.services.state.refresh();
  const k = await g.newKey();
  await g.gw.services.ledger.topUp(k.accountId, 10_000, 'test');
  const body = JSON.stringify({ model: 'sonnet', max_tokens: 100, stream: true, messages: [{ role: 'user', content: 'old client' }] });
  const req = `POST /v1/messages HTTP/1.0\r\nAuthorization: Bearer ${k.key}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
  const r = await rawExchange(g.gw.port, (s) => s.write(req), IDLE_BOUND_MS);
  t.ok(r.closed, `the server closed the connection (${Math.round(r.ms)} ms)`);
  const text = r.buf.toString('utf8');
  await journalWritten(g);
  const rows = (await g.db.pool.query(`SELECT hold_state, charged_ink FROM requests WHERE key_id = $1`, [k.keyId])).rows;
  if (engine === 'node') {
    const head = text.slice(0, text.indexOf('\r\n\r\n'));
    t.match(head, /^HTTP\/1\.1 200 /, 'answered 200');
    t.notMatch(head, /transfer-encoding/i, 'no chunked encoding for an HTTP/1.0 client');
    t.notMatch(head, /content-length/i, 'a stream has no length: the close ends it');
    const events = parseSse(text.slice(text.indexOf('\r\n\r\n') + 4));
    t.equal(events.at(-2)?.event, 'message_stop', 'the whole stream');
    t.equal(events.at(-1)?.event, 'service.usage', 'with the usage frame last');
    const frame = JSON.parse(events.at(-1)!.data);
    t.same(
      rows.map((x) => x.hold_state),
      ['settled'],
      'one request, settled',
    );
    t.equal(Number(rows[0]!.charged_ink), frame.ink_charged, 'charged what the frame says, once');
  } else {
    t.equal(text, '', 'uWS sends nothing to an HTTP/1.0 request');
    t.ok(r.ms < IDLE_BOUND_MS, 'closed by its idle timeout');
    t.same(rows, [], 'nothing held or charged');
  }
  const me = (await g.call('GET', '/v1/me', { key: k.key })).json;
  t.equal(me.key.ink_reserved, 0, 'no hold open');
  await assertLedgerInvariant(t, g.db.pool);
});
