// A WebSocket client that stops reading while a long turn streams, on each HTTP engine: the
// gateway stops reading the vendor (its send side sees backpressure) instead of buffering what the
// client does not take; once the client reads again the turn ends whole, in order, billed once.
import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import { WebSocket } from 'ws';
import { IdSource, planReply, readRequestFacts } from '../../simulators/openai/simulator-reply.js';
import { eachEngine } from '../helpers/engines.js';
import { startWsStack } from '../helpers/responses-ws.js';

const DELTAS = 6_000;
/** Each delta's `obfuscation` padding (the real API pads deltas with it): about 96 MiB of events in all. */
const PAD = 'p'.repeat(16 * 1024);
/** What may sit between the vendor and a client that reads nothing: socket buffers on both hops and the engines' own. */
const BOUND_BYTES = 32 * 1024 * 1024;
/** A vendor write that waits this long for 'drain' is stalled: nobody downstream is reading. */
const STALL_MS = 500;
/** A bound on each wait (ordinary runs take 2-4 s in all): a hang fails naming where it stopped, not at tap's timeout. */
const WAIT_MS = 45_000;

/**
 * The simulator's own stream for the request (`[[sim:tokens=N]]` deltas), each delta padded,
 * written honouring backpressure; reports how far it got and when a write stalled.
 */
function paddedVendor(): { server: Server; produced: () => number; padded: () => number; stalled: Promise<void>; done: Promise<void> } {
  let produced = 0;
  let padded = 0;
  let onStall!: () => void;
  let onDone!: () => void;
  const stalled = new Promise<void>((r) => (onStall = r));
  const done = new Promise<void>((r) => (onDone = r));
  const ids = new IdSource();
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown> & { model: string };
    const plan = planReply(body, readRequestFacts(body), { ids, createdAtS: Math.floor(Date.now() / 1000) }, true);
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'x-request-id': 'req_vendor_padded' });
    for (let i = 0; i < plan.frames.length; i++) {
      let frame = plan.frames[i]!;
      if (plan.isDelta[i]) {
        frame = frame.replace('"obfuscation":"', `"obfuscation":"${PAD}`);
        padded++;
      }
      produced += Buffer.byteLength(frame);
      if (res.write(frame)) continue;
      const timer = setTimeout(onStall, STALL_MS);
      await once(res, 'drain');
      clearTimeout(timer);
    }
    res.end();
    onDone();
  });
  return { server, produced: () => produced, padded: () => padded, stalled, done };
}

eachEngine('a client that stops reading mid-turn: the vendor is paused, nothing piles up, the turn ends whole', async (t, engine) => {
  const vendor = paddedVendor();
  vendor.server.listen(0, '127.0.0.1');
  await once(vendor.server, 'listening');
  t.teardown(() => new Promise<void>((r) => vendor.server.close(() => r())));
  const vendorUrl = `http://127.0.0.1:${(vendor.server.address() as { port: number }).port}/v1`;
  const s = await startWsStack(t, engine, { vendors: { openai: { baseUrl: vendorUrl, apiKey: 'sk-openai-padded' } } });

  const ws = new WebSocket(`${s.g.url.replace(/^http/, 'ws')}/v1/responses`, { headers: { authorization: `Bearer ${s.k.key}` }, perMessageDeflate: false });
  t.teardown(() => ws.terminate());
  await once(ws, 'open');
  let consumed = 0;
  let deltas = 0;
  let lastSeq = -1;
  let inOrder = true;
  const types: string[] = [];
  let usage: { ink_charged: number } | undefined;
  let onUsage!: () => void;
  const billed = new Promise<void>((r) => (onUsage = r));
  ws.on('message', (data: Buffer) => {
    consumed += data.length;
    const e = JSON.parse(data.toString('utf8')) as { type: string; sequence_number?: number; ink_charged: number };
    if (consumed === data.length) ws.pause(); // the first event read, the client stops reading
    if (e.type === 'response.output_text.delta') deltas++;
    else types.push(e.type);
    if (e.sequence_number !== undefined) {
      if (e.sequence_number !== lastSeq + 1) inOrder = false;
      lastSeq = e.sequence_number;
    }
    if (e.type === 'service.usage') {
      usage = e;
      onUsage();
    }
  });
  ws.send(JSON.stringify({ type: 'response.create', model: 'astra', input: `a long one [[sim:tokens=${DELTAS}]]` }));

  let finished = false;
  void vendor.done.then(() => (finished = true));
  const where = () =>
    `vendor wrote ${vendor.padded()} deltas (${(vendor.produced() / 1048576).toFixed(1)} MiB), client read ${deltas} deltas (${(consumed / 1048576).toFixed(1)} MiB), last sequence ${lastSeq}, other events ${types.join(',')}`;
  /** `work`, or a failure naming what was waited for and how far each side got at that moment. */
  const bounded = async (work: Promise<void>, what: string): Promise<void> => {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`no ${what} within ${WAIT_MS} ms: ${where()}`)), WAIT_MS)));
    try {
      await Promise.race([work, late]);
    } finally {
      clearTimeout(timer);
    }
  };
  await bounded(Promise.race([vendor.stalled, vendor.done]), 'vendor stall or end');
  t.notOk(finished, 'the vendor stalled before its end: its stream is paused');
  const gap = vendor.produced() - consumed;
  t.ok(
    gap <= BOUND_BYTES,
    `the vendor stalled with ${(gap / 1048576).toFixed(1)} MiB not yet read by the client (bound ${BOUND_BYTES / 1048576} MiB of ${((DELTAS * PAD.length) / 1048576).toFixed(0)} MiB)`,
  );

  // Reading again: the rest arrives, whole and in order.
  ws.resume();
  await bounded(billed, 'usage event after reading again');
  t.equal(vendor.padded(), DELTAS, 'the vendor padded every delta');
  t.equal(deltas, DELTAS, 'every delta relayed once');
  t.ok(inOrder, 'every event in order, none missing');
  t.same(types.slice(-2), ['response.completed', 'service.usage'], 'completed after the last delta, then billed');
  t.equal(types.filter((x) => x === 'error').length, 0, 'no error event');
  ws.close(1000);
  await once(ws, 'close');
  await vendor.done;

  const rows = await s.settledRecords(1);
  t.same(
    rows.map((r) => [r.status, r.charged]),
    [['settled', usage!.ink_charged]],
    'one request, settled at the usage event',
  );
  const me = await s.me();
  t.equal(me.key.ink_charged, usage!.ink_charged, 'charged once');
  t.equal(me.key.ink_reserved, 0, 'nothing held');
  await s.ledgerCheck();
});
