// The HTTP front (server.httpFront) on a real gateway, over raw sockets: what uWS alone leaves
// unanswered (HTTP/1.0, HTTP/1.1 without Host, too many header fields) gets an answer, what uWS
// answers still goes to it (pipelining in order), the caller's address survives the hop and cannot be
// renamed by a later request, a caller that stops reading is let go, a half-close is answered, and
// shutdown lets answers in flight through the front finish.
import { execSync } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import t, { type Test } from 'tap';
import { setLane } from '../../src/deployment/state.js';
import { startAnthropicSimulator } from '../../src/simulators/anthropic/simulator.js';
import { startTestGateway } from '../helpers/gateway.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';
import { parseSse } from '../helpers/sse.js';

const VENDOR_KEY = 'sk-ant-test-vendor';

interface Exchange {
  /** Everything the server sent before it closed. */
  readonly raw: string;
  /** The first answer: status, lower-cased headers, body (to the next answer or the close). */
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly body: string;
}

/**
 * Sends `bytes` on a fresh connection (or lets `send` write on it as it likes) and reads until the
 * server closes (10 s at most: a hang fails).
 */
function exchange(url: string, send: string | Buffer | ((s: Socket) => unknown), localAddress?: string): Promise<Exchange> {
  const u = new URL(url);
  return new Promise((resolveE, reject) => {
    const s: Socket = connect({ port: Number(u.port), host: u.hostname, ...(localAddress ? { localAddress } : {}) }, () => void (typeof send === 'function' ? send(s) : s.write(send)));
    let raw = '';
    s.setTimeout(10_000, () => s.destroy(new Error(`no answer and no close within 10 s; got ${JSON.stringify(raw.slice(0, 200))}`)));
    s.on('data', (d: Buffer) => (raw += d.toString('latin1')));
    s.on('error', reject);
    s.on('close', () => {
      const end = raw.indexOf('\r\n\r\n');
      const head = end < 0 ? raw : raw.slice(0, end);
      const [line = '', ...fields] = head.split('\r\n');
      const headers: Record<string, string> = {};
      for (const f of fields) headers[f.slice(0, f.indexOf(':')).toLowerCase()] = f.slice(f.indexOf(':') + 1).trim();
      resolveE({ raw, status: Number(/^HTTP\/1\.[01] (\d{3})/.exec(line)?.[1] ?? 0), headers, body: end < 0 ? '' : raw.slice(end + 4) });
    });
  });
}

/** A PROXY protocol v2 header (TCP over IPv4) naming `src` as the client. */
function proxyV2(src: string): Buffer {
  const sig = Buffer.from([0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a]);
  const addr = Buffer.from([...src.split('.').map(Number), 10, 0, 0, 1, 0x30, 0x39, 0x1f, 0x90]);
  return Buffer.concat([sig, Buffer.from([0x21, 0x11, 0x00, addr.length]), addr]);
}

const fields = (n: number): string => Array.from({ length: n }, (_, i) => `X-Filler-${i}: ${i}\r\n`).join('');

async function setup(t: Test, front = true) {
  const sim = await startAnthropicSimulator({ apiKey: VENDOR_KEY });
  t.teardown(() => sim.close());
  const g = await startTestGateway(t, { server: { httpFront: front }, vendors: { anthropic: { baseUrl: sim.url, apiKey: VENDOR_KEY } } });
  await setLane(g.db.pool, 'messages', true);
  await g.gw.services.state.refresh();
  const k = await g.newKey();
  await g.gw.services.ledger.topUp(k.accountId, 10_000, 'test');
  return { sim, g, k };
}

t.test('HTTP/1.0 GET /v1/models: 200, the whole body, then the close', async (t) => {
  const { g } = await setup(t);
  for (const req of ['GET /v1/models HTTP/1.0\r\n\r\n', 'GET /v1/models HTTP/1.0\r\nHost: x\r\n\r\n']) {
    const r = await exchange(g.url, req);
    t.equal(r.status, 200, JSON.stringify(req));
    t.equal(r.headers.connection, 'close');
    t.notOk(r.headers['transfer-encoding'], 'no chunked encoding for an HTTP/1.0 caller');
    t.equal(JSON.parse(r.body).object, 'list');
  }
});

/** One HTTP/1.0 POST /v1/messages with its body delimited by Content-Length. */
const post10 = (key: string, body: object): string => {
  const json = JSON.stringify(body);
  return `POST /v1/messages HTTP/1.0\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nAnthropic-Version: 2023-06-01\r\nContent-Length: ${Buffer.byteLength(json)}\r\n\r\n${json}`;
};

t.test('HTTP/1.0 POST /v1/messages, plain and streaming: answered and billed once each', async (t) => {
  const { g, k, sim } = await setup(t);
  const plain = await exchange(g.url, post10(k.key, { model: 'sonnet', max_tokens: 100, messages: [{ role: 'user', content: 'Hello' }] }));
  t.equal(plain.status, 200);
  t.equal(plain.headers.connection, 'close');
  t.equal(JSON.parse(plain.body).type, 'message');
  const charged = Number(plain.headers['x-service-ink-charged']);
  t.ok(charged > 0, 'the charge header came through');

  const streamed = await exchange(g.url, post10(k.key, { model: 'sonnet', max_tokens: 100, stream: true, messages: [{ role: 'user', content: 'Hello' }] }));
  t.equal(streamed.status, 200);
  t.match(streamed.headers['content-type'], /^text\/event-stream/);
  t.notOk(streamed.headers['transfer-encoding'], 'the stream is sent as it comes, ended by the close');
  const events = parseSse(streamed.body).map((e) => e.event);
  t.equal(events[0], 'message_start');
  t.ok(events.includes('message_stop'), `the stream ran to its end: ${events.slice(-3).join(', ')}`);

  t.equal(sim.requestCount, 2, 'the vendor was called once per request');
  await g.gw.services.escrow.beforeView();
  const rows = (await g.db.pool.query<{ n: number; charged: number }>(`SELECT count(*)::int AS n, sum(charged_ink)::int AS charged FROM requests WHERE key_id = $1`, [k.keyId])).rows[0]!;
  t.equal(rows.n, 2, 'one request row each');
  t.ok(rows.charged > charged, 'both charged');
  const me = (await g.call('GET', '/v1/me', { key: k.key })).json;
  t.equal(me.key.ink_charged, rows.charged, 'the key was charged what the rows say, once');
  t.equal(me.key.ink_reserved, 0);
  await assertLedgerInvariant(t, g.db.pool);
});

t.test('HTTP/1.0 keep-alive with a second request pipelined: one answer, one vendor call, one charge', async (t) => {
  const { g, k, sim } = await setup(t);
  const msg = { model: 'sonnet', max_tokens: 100, messages: [{ role: 'user', content: 'Hello' }] };
  const keepAlive = post10(k.key, msg).replace('\r\n', '\r\nConnection: keep-alive\r\n');
  const r = await exchange(g.url, keepAlive + keepAlive);
  t.equal(r.status, 200);
  t.equal(JSON.parse(r.body).type, 'message', 'the first answer whole');
  t.equal(r.raw.match(/HTTP\/1\.[01] \d{3}/g)?.length, 1, 'one answer: the connection closes after it');
  t.equal(sim.requestCount, 1, 'the second request never reached the vendor');
  await g.gw.services.escrow.beforeView();
  const rows = (await g.db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM requests WHERE key_id = $1`, [k.keyId])).rows[0]!;
  t.equal(rows.n, 1, 'one request row');
  const me = (await g.call('GET', '/v1/me', { key: k.key })).json;
  t.equal(me.key.ink_charged, Number(r.headers['x-service-ink-charged']), 'charged once');
  await assertLedgerInvariant(t, g.db.pool);
});

t.test('HTTP/1.0 request then FIN at once (printf | nc -N): still answered', async (t) => {
  const { g } = await setup(t);
  const { raw } = await exchange(g.url, (s) => s.end('GET /v1/models HTTP/1.0\r\nHost: x\r\n\r\n'));
  t.match(raw, /^HTTP\/1\.[01] 200 /, 'answered, and the connection closed after it');
  t.match(raw, /"object":"list"/);
});

t.test('heads uWS cannot parse: 400 at once from node, not a hang', async (t) => {
  const { g } = await setup(t);
  const odd = [
    ['GET http://x/v1/models HTTP/1.1\r\nHost: x\r\n\r\n', 'invalid_target'],
    ['GET http://x/v1/models HTTP/1.0\r\n\r\n', 'invalid_target'],
    ['OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n', 'invalid_target'],
    ['GET /v1/models\tx HTTP/1.1\r\nHost: x\r\n\r\n', ''],
    ['GET /v1/models HTTP/1.1\r\nHost: x\r\nX Y: z\r\n\r\n', ''],
    ['GET /v1/models HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n', ''],
    ['GET /v1/models HTTP/1.1\r\nHost: x\r\nJunk\r\n\r\n', ''],
    ['GET /v1/models HTTP/1.1\r\nHost: x\nX: y\r\n\r\n', ''],
  ] as const;
  // Bare LF line ends throughout: answered by node:http (served or refused), never left to the head timeout.
  for (const req of ['GET /v1/models HTTP/1.0\n\n', 'GET /v1/models HTTP/1.1\nHost: x\n\n']) {
    const t0 = Date.now();
    const r = await exchange(g.url, req);
    t.ok(r.status === 200 || r.status === 400, `${JSON.stringify(req)}: answered ${r.status}`);
    t.ok(Date.now() - t0 < 5000, `answered in ${Date.now() - t0} ms`);
  }
  for (const [req, code] of odd) {
    const t0 = Date.now();
    const r = await exchange(g.url, req);
    t.equal(r.status, 400, JSON.stringify(req));
    if (code) t.equal(JSON.parse(r.body).error.code, code);
    t.ok(Date.now() - t0 < 5000, `answered in ${Date.now() - t0} ms`);
  }
});

t.test('too many header fields: 431 and the close, on HTTP/1.1 and HTTP/1.0; the limit itself passes', async (t) => {
  const { g } = await setup(t);
  for (const v of ['1.1', '1.0']) {
    const r = await exchange(g.url, `GET /v1/models HTTP/${v}\r\nHost: x\r\n${fields(59)}\r\n`);
    t.equal(r.status, 431, `HTTP/${v}, 60 fields`);
    t.equal(r.headers.connection, 'close');
    t.equal(JSON.parse(r.body).error.code, 'too_many_headers');
  }
  // 46 fields (the limit) pass on both paths; 47 do not.
  t.equal((await exchange(g.url, `GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n${fields(44)}\r\n`)).status, 200, 'HTTP/1.1 at the limit');
  t.equal((await exchange(g.url, `GET /v1/models HTTP/1.0\r\n${fields(46)}\r\n`)).status, 200, 'HTTP/1.0 at the limit, without Host');
  t.equal((await exchange(g.url, `GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n${fields(45)}\r\n`)).status, 431, 'one above');
});

/** Sends `text` a few bytes per write (each its own TCP segment) and reads until the close. */
async function dripped(url: string, text: string, piece: number): Promise<number> {
  const { raw } = await exchange(url, async (s) => {
    s.setNoDelay(true);
    for (let i = 0; i < text.length; i += piece) await new Promise((r) => s.write(text.slice(i, i + piece), r));
  });
  return Number(/^HTTP\/1\.1 (\d{3})/.exec(raw)?.[1] ?? 0);
}

t.test('a head dripped in small pieces, and one above 124 KiB', async (t) => {
  const { g } = await setup(t);
  for (const piece of [1, 2, 3]) {
    t.equal(await dripped(g.url, 'GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n', piece), 200, `HTTP/1.1, ${piece} byte(s) per write`);
    t.equal(await dripped(g.url, 'GET /v1/models HTTP/1.0\r\n\r\n', piece), 200, `HTTP/1.0, ${piece} byte(s) per write`);
  }
  const big = await exchange(g.url, `GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(125 * 1024)}\r\n\r\n`);
  t.equal(big.status, 431, 'a head above 124 KiB');
  t.equal(big.headers.connection, 'close');
});

t.test('a body announced above the cap: the 413 uWS sends at once, then closes, reaches the caller', async (t) => {
  const { g, k } = await setup(t);
  const cap = g.config.limits.textBodyBytes;
  const r = await exchange(
    g.url,
    Buffer.concat([
      Buffer.from(`POST /v1/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${k.key}\r\nContent-Type: application/json\r\nContent-Length: ${cap + 1}\r\n\r\n`),
      Buffer.alloc(64 * 1024, 0x20), // the start of the body; the rest never comes
    ]),
  );
  t.equal(r.status, 413);
  t.equal(JSON.parse(r.body).error.code, 'payload_too_large');
});

t.test('HTTP/1.1 without Host: 400 and the close', async (t) => {
  const { g } = await setup(t);
  const r = await exchange(g.url, 'GET /v1/models HTTP/1.1\r\n\r\n');
  t.equal(r.status, 400);
  t.equal(r.headers.connection, 'close');
  t.equal(JSON.parse(r.body).error.code, 'missing_host');
});

t.test('a pipelined HTTP/1.1 pair through the front: both answered, in order', async (t) => {
  // The second request is written while the first's vendor call runs (paced by the simulator):
  // uWS reads it after the first is answered, exactly as without the front.
  const { g, k, sim } = await setup(t);
  const body = JSON.stringify({ model: 'sonnet', max_tokens: 40, messages: [{ role: 'user', content: 'hi [[sim:tokens=30]] [[sim:pace=10]]' }] });
  const { raw } = await exchange(g.url, async (s) => {
    s.write(`POST /v1/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${k.key}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    await sim.waitForRequests(1);
    s.write(`GET /v1/me HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${k.key}\r\nConnection: close\r\n\r\n`);
  });
  t.same([...raw.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1])), [200, 200], 'both answered');
  t.ok(raw.indexOf('"type":"message"') < raw.indexOf('"key"'), 'the Messages reply first, then /v1/me');
});

t.test("the caller's address survives the front (both paths), and a caller cannot name another", async (t) => {
  const sim = await startAnthropicSimulator({ apiKey: VENDOR_KEY });
  t.teardown(() => sim.close());
  const g = await startTestGateway(t, { server: { httpFront: true }, limits: { publicRequestsPerMinute: 2 } });
  const get11 = 'GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n';
  const get10 = 'GET /v1/models HTTP/1.0\r\n\r\n';
  const status = async (req: string, from: string) => (await exchange(g.url, req, from)).status;
  t.same([await status(get11, '127.0.0.2'), await status(get10, '127.0.0.2'), await status(get11, '127.0.0.2')], [200, 200, 429], 'one bucket for 127.0.0.2 over both paths');
  t.equal(await status(get10, '127.0.0.3'), 200, 'another address has its own bucket (HTTP/1.0)');
  t.equal(await status(get11, '127.0.0.4'), 200, 'another address has its own bucket (HTTP/1.1)');
  const page = 'GET /console/signin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n';
  t.same([await status(page, '127.0.0.5'), await status(page, '127.0.0.5'), await status(page, '127.0.0.5'), await status(page, '127.0.0.6')], [200, 200, 429, 200], "the console's per-address budget too");
  // A PROXY v2 header of the caller's own naming 10.0.0.1: refused, not believed.
  const sig = proxyV2('10.0.0.1');
  t.equal((await exchange(g.url, Buffer.concat([sig, Buffer.from(get11)]), '127.0.0.2')).status, 400, "a caller's own PROXY header is refused");
});

t.test("with server.proxyProtocol too: the balancer's PROXY header is passed on (both paths)", async (t) => {
  const g = await startTestGateway(t, { server: { httpFront: true, proxyProtocol: true }, limits: { publicRequestsPerMinute: 2 } });
  const from = (a: string, req: string) => Buffer.concat([proxyV2(a), Buffer.from(req)]);
  const get11 = 'GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n';
  const get10 = 'GET /v1/models HTTP/1.0\r\n\r\n';
  const status = async (b: Buffer) => (await exchange(g.url, b)).status;
  t.same([await status(from('10.1.0.1', get11)), await status(from('10.1.0.1', get10)), await status(from('10.1.0.1', get11))], [200, 200, 429], "one bucket for the balancer's client");
  t.equal(await status(from('10.1.0.2', get10)), 200, 'another client behind the same balancer');
});

t.test('front off (the default): uWS is the listener, as before', async (t) => {
  const { g } = await setup(t, false);
  t.equal(g.config.server.httpFront, false);
  // An HTTP/1.0 request is left unanswered by uWS: nothing by the time a later request is answered.
  const u = new URL(g.url);
  const waiting = connect(Number(u.port), u.hostname, () => waiting.write('GET /v1/models HTTP/1.0\r\n\r\n'));
  let heard = '';
  waiting.on('data', (d: Buffer) => (heard += d.toString('latin1')));
  waiting.on('error', () => undefined);
  t.teardown(() => void waiting.destroy());
  await new Promise((r) => waiting.once('connect', r));
  t.equal((await exchange(g.url, 'GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')).status, 200);
  t.equal(heard, '', 'no answer to HTTP/1.0 without the front');
  // uWS strips a PROXY header a client sends itself (the front would refuse the connection with 400).
  const sig = proxyV2('10.0.0.1');
  t.equal((await exchange(g.url, Buffer.concat([sig, Buffer.from('GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')]))).status, 200);
});

/** A kept-open connection: everything it hears, a wait on what it heard (event-driven), its close. */
async function openConn(url: string, localAddress?: string) {
  const u = new URL(url);
  const s = connect({ port: Number(u.port), host: u.hostname, ...(localAddress ? { localAddress } : {}) });
  let raw = '';
  const waiters = new Set<() => void>();
  s.on('data', (d: Buffer) => {
    raw += d.toString('latin1');
    for (const w of waiters) w();
  });
  s.on('error', () => undefined);
  const closed = new Promise<void>((r) => s.on('close', () => r()));
  await new Promise((r) => s.once('connect', r));
  /** Resolves once `ok(raw)` holds or the connection closed (10 s at most: a hang fails). */
  const until = (ok: (raw: string) => boolean): Promise<void> =>
    new Promise((done) => {
      const timer = setTimeout(finish, 10_000);
      function finish(): void {
        clearTimeout(timer);
        waiters.delete(check);
        done();
      }
      function check(): void {
        if (ok(raw)) finish();
      }
      waiters.add(check);
      void closed.then(finish);
      check();
    });
  return { s, raw: () => raw, closed, until };
}

const statuses = (raw: string): number[] => [...raw.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]));
/** Answers of /v1/models (JSON, ended by its closing brace) or errors, counted by complete bodies. */
const answers = (raw: string): number => raw.split(/\r\n\r\n\{/).length - 1;

t.test('a PROXY header inside a kept-alive connection closes it: no fresh address bucket', async (t) => {
  const g = await startTestGateway(t, { server: { httpFront: true }, limits: { publicRequestsPerMinute: 2 } });
  const get = 'GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n';
  const c = await openConn(g.url, '127.0.0.10');
  c.s.write(get);
  await c.until((r) => answers(r) === 1 && r.endsWith('}'));
  c.s.write(Buffer.concat([proxyV2('10.66.0.1'), Buffer.from(get)]));
  await c.closed;
  t.same(statuses(c.raw()), [200], 'the connection is closed, the injected request unanswered');
  // The signature split over two writes (and so possibly two reads) is found as well.
  const d = await openConn(g.url, '127.0.0.11');
  d.s.write(get);
  await d.until((r) => answers(r) === 1 && r.endsWith('}'));
  const injected = Buffer.concat([proxyV2('10.66.0.2'), Buffer.from(get)]);
  d.s.write(injected.subarray(0, 6), () => d.s.write(injected.subarray(6)));
  await d.closed;
  t.same(statuses(d.raw()), [200]);
  // 127.0.0.10 still has its own bucket of 2, one spent: 200 then 429.
  const e = await openConn(g.url, '127.0.0.10');
  e.s.write(get);
  await e.until((r) => answers(r) === 1 && r.endsWith('}'));
  e.s.write(get);
  await e.until((r) => answers(r) === 2 && r.endsWith('}'));
  t.same(statuses(e.raw()), [200, 429]);
  e.s.destroy();
});

/** This process's TCP sockets, bar listeners and the stores' connections, as `ss` lists them. */
function ownSockets(): string[] {
  const rows = execSync('ss -tnpH state all').toString().split('\n');
  return rows.filter((l) => l.includes(`pid=${process.pid},`) && !l.startsWith('LISTEN') && !/:(5432|6379)\b/.test(l));
}

t.test('a caller that never reads: both its sockets are destroyed once the stall bound passes', async (t) => {
  const stallMs = 1000;
  const g = await startTestGateway(t, { server: { httpFront: true } }, { frontStallMs: stallMs });
  const before = ownSockets().length;
  const c = await openConn(g.url);
  c.s.pause();
  const mine = `${c.s.localAddress}:${c.s.localPort}`;
  c.s.write('GET /nope HTTP/1.1\r\nHost: x\r\n\r\n'.repeat(20_000)); // answers far beyond the socket buffers
  const startedMs = Date.now();
  const others = (): number => ownSockets().filter((l) => l.split(/\s+/)[3] !== mine).length; // bar the caller's own end
  // No event tells the test when the front accepts or gives up; the sockets are looked at (bounded).
  const watch = async (ok: (n: number) => boolean, ms: number): Promise<number> => {
    let n = others();
    for (const endMs = Date.now() + ms; !ok(n) && Date.now() < endMs; n = others()) await new Promise((r) => setTimeout(r, 50));
    return n;
  };
  t.ok((await watch((n) => n >= before + 3, 2000)) >= before + 3, 'the front holds the caller and a loopback connection (both ends) meanwhile');
  t.equal(await watch((n) => n === before, stallMs + 5000), before, 'the caller and the loopback connection are gone');
  t.ok(Date.now() - startedMs < stallMs + 5000);
  c.s.destroy();
});

t.test('a request then a FIN (half-close): answered', async (t) => {
  const g = await startTestGateway(t, { server: { httpFront: true } });
  const c = await openConn(g.url);
  c.s.end('GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n');
  await c.until((r) => r.endsWith('}'));
  t.same(statuses(c.raw()), [200]);
  t.equal(JSON.parse(c.raw().slice(c.raw().indexOf('\r\n\r\n') + 4)).object, 'list');
  await c.closed; // and the connection is closed afterwards, not left half-open
});

/**
 * Resolves once a fresh connection to `url` is refused. The front stops admitting and uWS closes its
 * listener in the same tick (http-front.ts behindFront), after whatever the gateway's close runs first.
 */
async function refused(url: string): Promise<void> {
  const u = new URL(url);
  const admitted = (): Promise<boolean> =>
    new Promise((r) => {
      const s = connect(Number(u.port), u.hostname, () => {
        s.destroy();
        r(true);
      });
      s.on('error', () => r(false));
    });
  while (await admitted()) continue; // an admitted probe is closed at once
}

t.test('shutdown: streams that end during the drain reach their callers whole', async (t) => {
  const { g, k } = await setup(t);
  const json = JSON.stringify({ model: 'sonnet', max_tokens: 100, stream: true, messages: [{ role: 'user', content: 'hi [[sim:tokens=20]] [[sim:pace=50]]' }] });
  const req = `POST /v1/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${k.key}\r\nContent-Type: application/json\r\nAnthropic-Version: 2023-06-01\r\nContent-Length: ${Buffer.byteLength(json)}\r\n\r\n${json}`;
  const conns = await Promise.all(Array.from({ length: 6 }, () => openConn(g.url)));
  for (const c of conns) c.s.write(req);
  await Promise.all(conns.map((c) => c.until((r) => r.includes('content_block_delta'))));
  const late = await openConn(g.url); // accepted, its head sent only once uWS stopped listening
  const closing = g.gw.close();
  await refused(g.url);
  late.s.write('GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n');
  await closing;
  await Promise.all([...conns, late].map((c) => c.closed));
  for (const c of conns) t.ok(c.raw().includes('message_stop'), 'the stream ended whole');
  t.match(late.raw(), /^HTTP\/1\.1 503 /, 'a head after the listener closed: 503');
  t.match(late.raw(), /Connection: close/i);
});
