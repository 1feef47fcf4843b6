// A WebSocket turn's relay (ws-turn-context.ts): each SSE event the proxy writes leaves as one text
// message (its data, lines joined by a newline), the usage comment as its JSON, other comments and
// event names dropped; send's backpressure comes back from write. Checked against the recorded
// vendor streams read by an independent SSE parser (eventsource-parser, the one the tally uses).
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createParser } from 'eventsource-parser';
import t from 'tap';
import { WsTurnContext, type TurnSocket } from '../../src/server/ws-turn-context.js';

const fixtures = join(dirname(fileURLToPath(import.meta.url)), '..', 'fixtures', 'openai');

/** A turn on a socket that keeps what was sent; `full` says when the peer is past its mark. */
function turnOn(full: (sent: number) => boolean = () => false) {
  const sent: string[] = [];
  const socket: TurnSocket = {
    peer: {
      send: (m) => {
        sent.push(typeof m === 'string' ? m : Buffer.from(m).toString('utf8'));
        return !full(sent.length);
      },
      waitDrained: () => Promise.resolve(),
      close: () => undefined,
    },
    path: '/v1/responses',
    remoteAddress: '127.0.0.1',
    proxied: '127.0.0.1',
    carried: {},
    turnEnded: () => undefined,
  };
  return { ctx: new WsTurnContext(socket, Buffer.from('{}')), sent };
}

/** What a reader of the stream gets: each event's data, then the usage comment's JSON where it stands. */
function expected(sse: string): string[] {
  const out: string[] = [];
  const p = createParser({ onEvent: (e) => void out.push(e.data), onComment: (c) => void (c.startsWith('service.usage ') && out.push(c.slice(14))) });
  p.feed(sse);
  return out;
}

t.test('recorded vendor streams: one message per event, whole-event chunks and one chunk alike', async (t) => {
  const files = readdirSync(fixtures).filter((f) => f.endsWith('.sse'));
  t.ok(files.length >= 4, 'the recorded streams are there');
  for (const f of files) {
    const sse = readFileSync(join(fixtures, f), 'utf8');
    const want = expected(sse);
    const whole = turnOn();
    t.ok(whole.ctx.write(sse), 'not past the mark');
    t.same(whole.sent, want, `${f}: written at once`);
    const byEvent = turnOn();
    for (const ev of sse.split(/(?<=\n\n)/)) byEvent.ctx.write(Buffer.from(ev));
    t.same(byEvent.sent, want, `${f}: event by event`);
  }
});

t.test('CRLF, multi-line data, the data field without its space, comments and the usage comment', async (t) => {
  const { ctx, sent } = turnOn();
  const usage = '{"type":"service.usage","ink_charged":3,"usd_payg_charged":0.03,"request_id":"req_1"}';
  ctx.write('event: a\r\ndata: {"x":\r\ndata: 1}\r\n\r\n: keep-alive\n\nevent: b\ndata:{"y":2}\n\n');
  ctx.write(Buffer.from(`: service.usage ${usage}\n\n`));
  ctx.write(new Uint8Array(Buffer.from('data: {"z":3}\n\n')));
  t.same(sent, ['{"x":\n1}', '{"y":2}', usage, '{"z":3}']);
});

t.test('backpressure: write is false when any send of its chunk was, and the next events still leave', async (t) => {
  const { ctx, sent } = turnOn((n) => n === 2);
  t.notOk(ctx.write('data: 1\n\ndata: 2\n\ndata: 3\n\n'), 'the second send was past the mark');
  t.ok(ctx.write('data: 4\n\n'), 'the next chunk is not');
  t.same(sent, ['1', '2', '3', '4'], 'nothing dropped');
});
