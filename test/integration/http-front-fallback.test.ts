// The HTTP front's node:http side alone, before a fake uWS whose behaviour a test picks: a caller
// that half-closes after its request, an answer slower than the idle bound, an answer cut short.
import { connect, createServer, type Server, type Socket } from 'node:net';
import type { Test } from 'tap';
import t from 'tap';
import { fallbackServer } from '../../src/server/http-front-fallback.js';

const port = (s: Server): number => (s.address() as { port: number }).port;

/** A fake uWS that runs `onHead` once it has the forwarded request's head (with its PROXY header). */
async function fakeUws(t: Test, onHead: (s: Socket) => void): Promise<number> {
  const up = createServer((s) => {
    let seen = '';
    s.on('error', () => undefined);
    s.on('data', (d: Buffer) => {
      const had = seen.includes('\r\n\r\n', 28);
      seen += d.toString('latin1');
      if (!had && seen.includes('\r\n\r\n', 28)) onHead(s);
    });
  });
  await new Promise<void>((r) => up.listen(0, '127.0.0.1', r));
  t.teardown(() => void up.close());
  return port(up);
}

/** A net listener handing every connection to the fallback, as the front does (half-open allowed). */
async function front(t: Test, uwsPort: number, idleMs?: number): Promise<number> {
  const fb = fallbackServer(uwsPort, idleMs);
  const server = createServer({ allowHalfOpen: true }, (c) => fb.server.emit('connection', c));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => void server.close());
  return port(server);
}

/** Sends `bytes` (then FIN when `end`), reads until the close; fails after 5 s. */
function exchange(to: number, bytes: string, end = false): Promise<{ raw: string; ms: number }> {
  const t0 = Date.now();
  return new Promise((resolveE, reject) => {
    const c = connect({ port: to, host: '127.0.0.1' }, () => (end ? c.end(bytes) : c.write(bytes)));
    let raw = '';
    c.setTimeout(5000, () => c.destroy(new Error(`no close within 5 s; heard ${JSON.stringify(raw)}`)));
    c.on('data', (d: Buffer) => (raw += d.toString('latin1')));
    c.on('error', reject);
    c.on('close', () => resolveE({ raw, ms: Date.now() - t0 }));
  });
}

const OK = 'HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok';

// httpAllowHalfOpen is internal to node:http: the FIN test below fails if a node upgrade drops it.
t.test('the fallback allows half-open callers', async (t) => {
  const fb = fallbackServer(1);
  t.equal((fb.server as unknown as { httpAllowHalfOpen: unknown }).httpAllowHalfOpen, true);
});

t.test('a caller that sends FIN right after its request gets the answer, then the close', async (t) => {
  const uws = await fakeUws(t, (s) => setTimeout(() => s.end(OK), 200));
  const r = await exchange(await front(t, uws), 'GET / HTTP/1.0\r\n\r\n', true);
  t.match(r.raw, /^HTTP\/1\.[01] 200 OK\r\n/);
  t.match(r.raw, /\r\n\r\nok$/);
});

t.test('the idle bound does not run while uWS works on the answer, only while reading and writing', async (t) => {
  const uws = await fakeUws(t, (s) => setTimeout(() => s.end(OK), 600));
  const to = await front(t, uws, 150);
  const r = await exchange(to, 'GET / HTTP/1.0\r\n\r\n');
  t.match(r.raw, /^HTTP\/1\.[01] 200 OK\r\n[^]*\r\n\r\nok$/, 'an answer 4 idle bounds late still arrives');
  const partial = await exchange(to, 'GET / HTTP/1.0\r\nX-Half: ');
  t.equal(partial.raw, '', 'a head that stops coming: closed unanswered');
  t.ok(partial.ms < 2000, `closed by the idle bound (${partial.ms} ms)`);
});

t.test('uWS closing before the end of its answer closes the caller at once', async (t) => {
  const uws = await fakeUws(t, (s) => {
    s.write('HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nhello\n\r\n');
    setTimeout(() => s.end(), 100); // a clean FIN, no last chunk
  });
  const r = await exchange(await front(t, uws), 'GET /stream HTTP/1.0\r\n\r\n');
  t.match(r.raw, /^HTTP\/1\.[01] 200 OK\r\n[^]*hello\n$/, 'what came is passed on');
  t.ok(r.ms < 2000, `then the close (${r.ms} ms), not the idle timeout`);
});
