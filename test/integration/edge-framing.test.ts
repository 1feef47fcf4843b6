// The framing rules of the public port on both engines, with the raw bytes a hostile client sent:
// a repeated Host, HTTP versions other than 1.0 and 1.1, CONNECT and `OPTIONS *`, a
// Content-Encoding, a header that is not HTTP, an unknown Expect, chunked bodies (decoded on node;
// refused 411 on uWS, whose chunk parser misreads them). Every refusal carries the envelope,
// Content-Length and Connection: close, the connection is closed, a new one is served, and no
// answer names the engine. What uWS's own parser drops never reaches a route (no answer at all).
import { gzipSync } from 'node:zlib';
import t, { type Test } from 'tap';
import { request } from 'undici';
import { setLane } from '../../src/deployment/state.js';
import type { EngineName } from '../../src/server/engine.js';
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { eachEngine } from '../helpers/engines.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { rawExchange } from '../helpers/raw-socket.js';

/** A refused connection closes at once; an unanswered one on uWS closes at its ~10 s idle timeout (time is the behaviour). */
const CLOSE_BOUND_MS = 14_000;
const AT_ONCE_MS = 3_000;

interface Answer {
  readonly status: number;
  readonly head: string;
  readonly json: any;
}

/** Every answer in `buf`, framed by Content-Length (the gateway sends no chunked answer to these requests). */
function answers(buf: Buffer): Answer[] {
  const out: Answer[] = [];
  let text = buf.toString('latin1');
  for (;;) {
    const end = text.indexOf('\r\n\r\n');
    if (!text.startsWith('HTTP/1.1 ') || end === -1) return out;
    const head = text.slice(0, end);
    const len = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
    const body = text.slice(end + 4, end + 4 + len);
    out.push({ status: Number(head.slice(9, 12)), head, json: body === '' ? undefined : JSON.parse(body) });
    text = text.slice(end + 4 + len);
  }
}

/** Writes `bytes` on a fresh connection and collects everything until the server closes (or the bound). */
async function exchange(port: number, bytes: string | Buffer): Promise<{ answers: Answer[]; closed: boolean; ms: number; raw: string }> {
  const r = await rawExchange(port, (s) => s.write(bytes), CLOSE_BOUND_MS);
  return { answers: answers(r.buf), closed: r.closed, ms: r.ms, raw: r.buf.toString('latin1') };
}

/** The checks every refusal must pass: the envelope with `code`, its length, Connection: close, closed at once. */
function refused(t: Test, name: string, r: Awaited<ReturnType<typeof exchange>>, status: number, code: string): void {
  t.equal(r.answers.length, 1, `${name}: one answer (${JSON.stringify(r.raw.slice(0, 120))})`);
  const a = r.answers[0];
  if (a === undefined) return;
  t.equal(a.status, status, `${name}: ${status}`);
  t.equal(a.json?.error?.code, code, `${name}: ${code}`);
  t.match(a.json?.error?.request_id, /^req_[0-9a-f]{32}$/, `${name}: the envelope, with its request id`);
  t.match(a.head, new RegExp(`\\r\\nx-request-id: ${a.json?.error?.request_id}`, 'i'), `${name}: the same id in X-Request-Id`);
  t.match(a.head, /\r\ncontent-length: \d+/i, `${name}: Content-Length`);
  t.match(a.head, /\r\nconnection: close/i, `${name}: Connection: close`);
  t.ok(r.closed && r.ms < AT_ONCE_MS, `${name}: closed at once (${Math.round(r.ms)} ms)`);
}

/** uWS's parser refuses these bytes itself: no handler runs, nothing is answered, the connection ends. */
function droppedByUws(t: Test, name: string, r: Awaited<ReturnType<typeof exchange>>): void {
  t.equal(r.raw, '', `${name}: uWS sends nothing`);
  t.ok(r.closed, `${name}: the connection is closed (${Math.round(r.ms)} ms)`);
}

async function servedAfter(t: Test, g: TestGateway, name: string): Promise<void> {
  const r = await g.call('GET', '/v1/models');
  t.equal(r.status, 200, `${name}: a new connection is served`);
}

const head = (lines: string[]): string => lines.join('\r\n') + '\r\n\r\n';

eachEngine('framing rules, with the raw bytes', async (t, engine: EngineName) => {
  const sim = await startAnthropicSimulator({ apiKey: 'sk-ant-edge' });
  t.teardown(() => sim.close());
  const g = await startTestGateway(t, { server: { engine }, vendors: { anthropic: { baseUrl: sim.url, apiKey: 'sk-ant-edge' } } });
  // The lane open, so a decoded body is read as far as its model (`nope`: 400 unknown_model).
  await setLane(g.db.pool, 'messages', true);
  await g.gw.services.state.refresh();
  const k = await g.newKey();
  const port = g.gw.port;
  const json = '{"model":"nope","max_tokens":5,"messages":[{"role":"user","content":"x"}]}';
  const post = (extra: string[], body: string | Buffer): Buffer =>
    Buffer.concat([
      Buffer.from(head(['POST /v1/messages HTTP/1.1', 'Host: x', `Authorization: Bearer ${k.key}`, 'Content-Type: application/json', ...extra])),
      Buffer.from(body),
    ]);
  const chunked = (body: string) => post(['Transfer-Encoding: chunked'], body);
  const len = Buffer.byteLength(json).toString(16);

  // Cases run at once: those uWS leaves to its idle timeout cost the file that wait once.
  const cases = {
    twoHosts: exchange(port, head(['GET /v1/models HTTP/1.1', 'Host: a.example', 'Host: b.example'])),
    http20: exchange(port, head(['GET /v1/models HTTP/2.0', 'Host: x'])),
    noVersion: exchange(port, head(['GET /v1/models', 'Host: x'])),
    http12: exchange(port, head(['GET /v1/models HTTP/1.2', 'Host: x'])),
    connect: exchange(port, head(['CONNECT example.com:443 HTTP/1.1', 'Host: example.com:443'])),
    connectPath: exchange(port, head(['CONNECT /v1/models HTTP/1.1', 'Host: x'])),
    asterisk: exchange(port, head(['OPTIONS * HTTP/1.1', 'Host: x'])),
    badHeader: exchange(port, head(['GET /v1/models HTTP/1.1', 'Host: x', 'Bad Header: x'])),
    noColon: exchange(port, head(['GET /v1/models HTTP/1.1', 'Host: x', 'NoColon'])),
    expect: exchange(port, post(['Expect: magic', `Content-Length: ${Buffer.byteLength(json)}`], json)),
    gzipBody: exchange(port, post(['Content-Encoding: gzip', `Content-Length: ${gzipSync(json).length}`], gzipSync(json))),
    plainGzip: exchange(port, post(['Content-Encoding: gzip', `Content-Length: ${Buffer.byteLength(json)}`], json)),
    chunkBadCrlf: exchange(port, chunked(`${len}\r\n${json}XX0\r\n\r\n`)),
    chunkTrailer: exchange(
      port,
      Buffer.concat([chunked(`${len}\r\n${json}\r\n0\r\nX-Trailer: 1\r\n\r\n`), Buffer.from(head(['GET /v1/models HTTP/1.1', 'Host: x']))]),
    ),
    chunkExtension: exchange(port, chunked(`${len};x=y\r\n${json}\r\n0\r\n\r\n`)),
    chunkedAlone: exchange(port, chunked(`${len}\r\n${json}\r\n0\r\n\r\n`)),
  };

  const r = Object.fromEntries(await Promise.all(Object.entries(cases).map(async ([n, p]) => [n, await p] as const))) as {
    [K in keyof typeof cases]: Awaited<(typeof cases)[K]>;
  };

  refused(t, 'two Host headers', r.twoHosts, 400, 'invalid_header');
  t.match(r.twoHosts.answers[0]?.json.error, { param: 'Host', message: /more than one Host/ });
  // Both: an unknown Expect is refused with the envelope (node's own 417 had none; uWS ignored it).
  refused(t, 'Expect: magic', r.expect, 417, 'expectation_failed');
  // Both: a body the gateway would have to decode is refused, compressed or not.
  refused(t, 'a gzip body', r.gzipBody, 415, 'unsupported_media_type');
  t.match(r.gzipBody.answers[0]?.json.error, { param: 'Content-Encoding', message: /does not decode a Content-Encoding/ });
  refused(t, 'a plain body labelled gzip', r.plainGzip, 415, 'unsupported_media_type');

  if (engine === 'node') {
    refused(t, 'HTTP/2.0 request line', r.http20, 505, 'http_version_not_supported');
    refused(t, 'request line without a version', r.noVersion, 505, 'http_version_not_supported');
    refused(t, 'HTTP/1.2 request line', r.http12, 505, 'http_version_not_supported');
    refused(t, 'CONNECT host:port', r.connect, 405, 'method_not_allowed');
    t.match(r.connect.answers[0]?.head, /\r\nallow: GET, HEAD, POST/i, 'CONNECT: Allow names what is served');
    refused(t, 'CONNECT /path', r.connectPath, 405, 'method_not_allowed');
    refused(t, 'OPTIONS *', r.asterisk, 400, 'invalid_target');
    refused(t, 'a space in a header name', r.badHeader, 400, 'invalid_header');
    refused(t, 'a header line without a colon', r.noColon, 400, 'invalid_header');
    // node decodes chunked bodies: a bad CRLF after the data is a body error; a trailer and a
    // chunk extension are read correctly, and a request behind a trailer is answered.
    refused(t, 'chunk data not followed by CRLF', r.chunkBadCrlf, 400, 'invalid_body');
    t.same(
      r.chunkTrailer.answers.map((a) => [a.status, a.json?.error?.code ?? 'ok']),
      [
        [400, 'unknown_model'],
        [200, 'ok'],
      ],
      'a chunked body with a trailer is decoded (its model is read), and the next request answered',
    );
    t.equal(r.chunkExtension.answers[0]?.json?.error?.code, 'unknown_model', 'a chunk extension is skipped, the body decoded');
    t.equal(r.chunkedAlone.answers[0]?.json?.error?.code, 'unknown_model', 'a chunked body is decoded');
  } else {
    // uWS's parser drops these before any handler: nothing answered, nothing run.
    for (const n of ['http20', 'noVersion', 'http12', 'connect', 'asterisk', 'badHeader', 'noColon'] as const) droppedByUws(t, n, r[n]);
    refused(t, 'CONNECT /path', r.connectPath, 405, 'method_not_allowed');
    t.match(r.connectPath.answers[0]?.head, /\r\nallow: GET, HEAD, POST/i, 'CONNECT: Allow names what is served');
    // A chunked body is refused 411 before uWS's chunk parser reaches a route; whatever that
    // parser makes of the bytes behind the head ends in the close (at most the one 411).
    refused(t, 'a chunked body', r.chunkedAlone, 411, 'length_required');
    for (const n of ['chunkBadCrlf', 'chunkTrailer', 'chunkExtension'] as const) {
      const got = r[n];
      t.ok(got.closed && got.ms < AT_ONCE_MS, `${n}: closed at once (${Math.round(got.ms)} ms)`);
      t.same(
        got.answers.map((a) => [a.status, a.json?.error?.code]),
        got.answers.length === 0 ? [] : [[411, 'length_required']],
        `${n}: the 411 or nothing; never a route's answer (${JSON.stringify(got.raw.slice(0, 60))})`,
      );
    }
  }

  // No answer names the engine (uWS writes `uWebSockets: 20` unless told not to).
  const everyHead = Object.values(r).flatMap((x) => x.answers.map((a) => a.head));
  const plain = await request(g.url + '/v1/models');
  await plain.body.text();
  t.ok(everyHead.length > 5, `${everyHead.length} answer heads checked`);
  t.same(
    everyHead.filter((h) => /\r\nuwebsockets:/i.test(h)),
    [],
    'no refusal carries an engine header',
  );
  t.same(
    Object.keys(plain.headers).filter((h) => /uwebsockets|server|x-powered-by/i.test(h)),
    [],
    'nor a served answer',
  );
  await servedAfter(t, g, 'after every refusal');
});

t.test('a Transfer-Encoding node does not decode is refused, not passed through', async (t) => {
  const g = await startTestGateway(t, { server: { engine: 'node' } });
  const r = await exchange(g.gw.port, head(['POST /v1/messages HTTP/1.1', 'Host: x', 'Transfer-Encoding: gzip, chunked']) + '2\r\n{}\r\n0\r\n\r\n');
  refused(t, 'Transfer-Encoding: gzip, chunked', r, 415, 'unsupported_media_type');
  t.match(r.answers[0]?.json.error, { param: 'Transfer-Encoding' });
});
