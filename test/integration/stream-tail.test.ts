// A stream's tail on both engines: once the chunk with the vendor's receipt is written, the engine
// may keep it to send with the end (one write instead of two for most streams), but never past
// the next loop turn, never out of order, never cut. Driven through real routes of a real gateway
// and read by a real HTTP client.
import { request } from 'undici';
import type { HttpContext } from '../../src/server/http-context.js';
import type { Route } from '../../src/server/router.js';
import { eachEngine } from '../helpers/engines.js';
import { startTestGateway } from '../helpers/gateway.js';

const RECEIPT = 'event: message_stop\ndata: {"type":"message_stop"}\n\n';
const FRAME = 'event: service.usage\ndata: {"ink_charged":3}\n\n';

/** Release points the tests hand to the routes: the route waits on one before it ends its stream. */
const gates = new Map<string, () => void>();
function gate(name: string): Promise<void> {
  return new Promise((resolveG) => gates.set(name, resolveG));
}

function streamRoute(pattern: string, handler: (ctx: HttpContext) => Promise<void>): Route {
  return {
    method: 'GET',
    pattern,
    access: 'public',
    handler: async (ctx) => {
      ctx.startStream(200, [['Content-Type', 'text/event-stream']]);
      await handler(ctx);
    },
  };
}

const routes = (): Route[] => [
  // The usual case: the receipt, then the frame and the end a few microtasks later.
  streamRoute('/v1/test/tail/together', async (ctx) => {
    ctx.write('event: message_start\ndata: {}\n\n');
    ctx.holdTail();
    ctx.write(RECEIPT);
    await Promise.resolve();
    ctx.end(FRAME);
  }),
  // A slow settle: the end comes only after the client read the receipt (the test opens the gate
  // once it has), so a kept receipt that waited for the end would never arrive.
  streamRoute('/v1/test/tail/late', async (ctx) => {
    ctx.holdTail();
    ctx.holdTail();
    ctx.write(RECEIPT);
    await gate('late');
    ctx.write('event: after\ndata: {}\n\n');
    ctx.end(FRAME);
  }),
  // More after the receipt than is ever kept: the engine sends it at once.
  streamRoute('/v1/test/tail/large', async (ctx) => {
    ctx.holdTail();
    ctx.write(RECEIPT);
    ctx.write(`data: ${'x'.repeat(100 * 1024)}\n\n`);
    await gate('large');
    ctx.end(FRAME);
  }),
];

/** Reads the stream's body until `until` holds for the text so far, then calls `then` and reads to the end. */
async function readStream(url: string, until: (text: string) => boolean, then: () => void): Promise<{ status: number; text: string; sawBeforeEnd: boolean }> {
  const r = await request(url);
  let text = '';
  let sawBeforeEnd = false;
  for await (const chunk of r.body) {
    text += (chunk as Buffer).toString('utf8');
    if (!sawBeforeEnd && until(text)) {
      sawBeforeEnd = true;
      then();
    }
  }
  return { status: r.statusCode, text, sawBeforeEnd };
}

eachEngine(
  'a stream tail kept for the end',
  async (t, engine) => {
    const g = await startTestGateway(t, { server: { engine } }, { extraRoutes: routes });

    const together = await request(`${g.url}/v1/test/tail/together`);
    t.equal(together.statusCode, 200);
    t.equal(await together.body.text(), `event: message_start\ndata: {}\n\n${RECEIPT}${FRAME}`, 'every byte, in order, with the end');

    const late = await readStream(
      `${g.url}/v1/test/tail/late`,
      (s) => s.includes(RECEIPT),
      () => gates.get('late')!(),
    );
    t.ok(late.sawBeforeEnd, 'the kept receipt reached the client before the route ended the stream');
    t.equal(late.text, `${RECEIPT}event: after\ndata: {}\n\n${FRAME}`, 'what came later follows it, then the frame');

    const large = await readStream(
      `${g.url}/v1/test/tail/large`,
      (s) => s.endsWith('x\n\n'),
      () => gates.get('large')!(),
    );
    t.ok(large.sawBeforeEnd, 'a tail above the cap went out without the end');
    t.equal(large.text.length, RECEIPT.length + 100 * 1024 + 8 + FRAME.length, 'nothing lost or doubled');
  },
  { timeout: 30_000 },
);
