// A client that stops reading a stream, on each HTTP engine: backpressure reaches the vendor (the
// gateway stops reading it) instead of the gateway buffering what the client does not take; once
// the client reads again the stream ends whole, in order, and is billed once.
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import { connect, type Socket } from 'node:net';
import { setLane } from '../../src/deployment/state.js';
import { eachEngine } from '../helpers/engines.js';
import { startTestGateway } from '../helpers/gateway.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';

const DELTA_TEXT = 'x'.repeat(16 * 1024);
const DELTAS = 6_000; // about 96 MiB of events
/** What may sit between the vendor and a client that reads nothing: socket buffers on both hops and the engines' own. */
const BOUND_BYTES = 32 * 1024 * 1024;
/** A vendor write that waits this long for 'drain' is stalled: nobody downstream is reading. */
const STALL_MS = 500;

const frame = (event: string, data: unknown): string => `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;

/** An Anthropic-shaped vendor that streams DELTAS large text deltas, honouring backpressure, and reports how far it got. */
function bigStreamVendor(): { server: Server; produced: () => number; stalled: Promise<void>; done: Promise<void> } {
  let produced = 0;
  let onStall!: () => void;
  let onDone!: () => void;
  const stalled = new Promise<void>((r) => (onStall = r));
  const done = new Promise<void>((r) => (onDone = r));
  const server = createServer(async (req, res) => {
    for await (const _ of req);
    res.writeHead(200, { 'content-type': 'text/event-stream', 'request-id': 'req_vendor_big' });
    const write = async (s: string) => {
      produced += Buffer.byteLength(s);
      if (res.write(s)) return;
      const timer = setTimeout(onStall, STALL_MS);
      await once(res, 'drain');
      clearTimeout(timer);
    };
    await write(
      frame('message_start', {
        type: 'message_start',
        message: {
          id: 'msg_big',
          type: 'message',
          role: 'assistant',
          model: 'assistant-sonnet-5',
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: { input_tokens: 10, output_tokens: 1 },
        },
      }),
    );
    await write(frame('content_block_start', { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } }));
    for (let i = 0; i < DELTAS; i++)
      await write(frame('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: DELTA_TEXT } }));
    await write(frame('content_block_stop', { type: 'content_block_stop', index: 0 }));
    await write(frame('message_delta', { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: DELTAS } }));
    await write(frame('message_stop', { type: 'message_stop' }));
    res.end();
    onDone();
  });
  return { server, produced: () => produced, stalled, done };
}

eachEngine('a client that stops reading: backpressure reaches the vendor, nothing piles up', async (t, engine) => {
  const vendor = bigStreamVendor();
  vendor.server.listen(0, '127.0.0.1');
  await once(vendor.server, 'listening');
  t.teardown(() => new Promise<void>((r) => vendor.server.close(() => r())));
  const vendorUrl = `http://127.0.0.1:${(vendor.server.address() as { port: number }).port}`;
  const g = await startTestGateway(t, { server: { engine }, vendors: { anthropic: { baseUrl: vendorUrl, apiKey: 'sk-ant-big' } } });
  await setLane(g.db.pool, 'messages', true);
  await g.gw.services.state.refresh();
  const k = await g.newKey();
  await g.gw.services.ledger.topUp(k.accountId, 10_000_000, 'test');

  const body = JSON.stringify({ model: 'sonnet', max_tokens: 64_000, stream: true, messages: [{ role: 'user', content: 'a long one' }] });
  const s: Socket = connect(g.gw.port, '127.0.0.1');
  t.teardown(() => s.destroy());
  await once(s, 'connect');
  const chunks: Buffer[] = [];
  let consumed = 0;
  s.on('data', (d: Buffer) => {
    consumed += d.length;
    chunks.push(d);
    s.pause(); // the first bytes (the head) read, the client stops reading
  });
  s.write(
    `POST /v1/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${k.key}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );

  await Promise.race([vendor.stalled, vendor.done]);
  const gap = vendor.produced() - consumed;
  t.ok(
    gap <= BOUND_BYTES,
    `the vendor stalled with ${(gap / 1048576).toFixed(1)} MiB not yet read by the client (bound ${BOUND_BYTES / 1048576} MiB of ${((DELTAS * DELTA_TEXT.length) / 1048576).toFixed(0)} MiB)`,
  );

  // Reading again: the rest arrives, whole and in order.
  s.removeAllListeners('data');
  s.on('data', (d: Buffer) => {
    consumed += d.length;
    chunks.push(d);
  });
  s.resume();
  await once(s, 'end');
  const text = Buffer.concat(chunks).toString('latin1');
  t.match(text, /^HTTP\/1\.1 200 /, 'a 200 stream');
  const deltas = text.split('event: content_block_delta').length - 1;
  t.equal(deltas, DELTAS, 'every delta relayed once');
  t.ok(text.indexOf('event: message_stop') > text.lastIndexOf('event: content_block_delta'), 'message_stop after the last delta');
  t.match(text, /event: service\.usage/, 'and the usage frame');
  await vendor.done;
  const me = (await g.call('GET', '/v1/me', { key: k.key })).json;
  t.equal(me.key.ink_reserved, 0, 'the hold settled');
  t.ok(me.key.ink_charged > 0, 'billed for what the vendor reported');
  await assertLedgerInvariant(t, g.db.pool);
});
