// The access log and /metrics tell the truth about the edge, on both engines: a client that hangs
// up before its answer is complete is 499 `client_closed` (never a 5xx); a refusal for framing,
// including the ones node's parser answers itself (a head it cannot parse, a 408), gets an access
// line under the route `framing` with the status and request id it sent, and is counted with that
// status; the console and the media host are counted under `console` and `media`, as logged.
import type { Test } from 'tap';
import { request } from 'undici';
import { loadConfig } from '../../src/config/config.js';
import { setLane } from '../../src/deployment/state.js';
import type { EngineName } from '../../src/server/engine.js';
import { serveAdmin } from '../../src/ops/serve.js';
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { createLogger, silentLogger } from '../../src/util/log.js';
import { eachEngine } from '../helpers/engines.js';
import { startTestGateway } from '../helpers/gateway.js';
import { parseExposition } from '../helpers/prometheus.js';
import { rawExchange } from '../helpers/raw-socket.js';
import { watchQueries } from '../helpers/query-watch.js';

const VENDOR_KEY = 'sk-ant-accounting';
/** A line is written when its answer has ended; a refused or aborted one within this (generous, loaded machine). */
const LINE_BOUND_MS = 10_000;

interface Line {
  msg: string;
  method: string;
  route: string;
  status: number;
  request_id: string;
  code?: string;
  param?: string | null;
  aborted?: boolean;
}

async function setup(t: Test, engine: EngineName) {
  const lines: string[] = [];
  const sim = await startAnthropicSimulator({ apiKey: VENDOR_KEY });
  t.teardown(() => sim.close());
  const g = await startTestGateway(
    t,
    {
      server: { engine, headersTimeoutMs: 1_000 },
      log: { level: 'info', access: true },
      vendors: { anthropic: { baseUrl: sim.url, apiKey: VENDOR_KEY } },
    },
    { log: createLogger('info', (l) => lines.push(l)) },
  );
  const admin = await serveAdmin(g.gw, loadConfig({}, { admin: { port: 0 } }), silentLogger);
  t.teardown(() => admin.close());
  await setLane(g.db.pool, 'messages', true);
  await g.gw.services.state.refresh();
  const k = await g.newKey();
  const accessLines = (): Line[] => lines.map((l) => JSON.parse(l) as Line).filter((l) => l.msg === 'http.request');
  /** The first access line that `match` picks, once written. */
  const lineWhere = async (what: string, match: (l: Line) => boolean): Promise<Line> => {
    const deadline = performance.now() + LINE_BOUND_MS;
    for (;;) {
      const hit = accessLines().find(match);
      if (hit) return hit;
      if (performance.now() > deadline) throw new Error(`no access line for ${what}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  const metrics = async () => {
    const r = await request(admin.url + '/metrics');
    return parseExposition(await r.body.text());
  };
  return { g, k, lineWhere, accessLines, metrics, port: g.gw.port };
}

/** The request id of the one answer in `raw`. */
const idOf = (raw: string): string => /\r\nx-request-id: (req_[0-9a-f]{32})/i.exec(raw)?.[1] ?? 'none';

eachEngine('a client that hangs up before its answer is 499 client_closed, not a 5xx', async (t, engine) => {
  const { g, k, lineWhere, metrics, port, accessLines } = await setup(t, engine);
  await g.gw.services.ledger.topUp(k.accountId, 10_000, 'test');
  // The key's lookup (its statements are find_live_key*): sent once the gateway has had the head.
  const lookups = watchQueries(t, g.gw.services.pool, (q) => /^find_live_key/.test(q.name ?? ''));
  // A body promised and never finished: the handler waits for it, then the client resets the connection.
  await rawExchange(
    port,
    (s) => {
      s.write(
        `POST /v1/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${k.key}\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"model":`,
      );
      // Gone once the gateway has had the head: its key check runs while the body is awaited.
      void lookups.until(1).then(() => s.resetAndDestroy());
    },
    LINE_BOUND_MS,
  );
  const midBody = await lineWhere('the hang-up mid-body', (l) => l.route === '/v1/messages');
  t.match(midBody, { method: 'POST', route: '/v1/messages', status: 499, code: 'client_closed', param: null });
  t.notOk('aborted' in midBody, 'the status says it all');
  // A stream (20 deltas 100 ms apart) left after its first bytes: the answer was never complete.
  const body = JSON.stringify({
    model: 'sonnet',
    max_tokens: 100,
    stream: true,
    messages: [{ role: 'user', content: 'slow [[sim:pace=100]] [[sim:tokens=20]]' }],
  });
  const cut = await rawExchange(
    port,
    (s) =>
      s.write(
        `POST /v1/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${k.key}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
      ),
    LINE_BOUND_MS,
    (buf) => buf.includes('event: content_block_delta'),
  );
  const streamId = /\r\nx-request-id: (req_[0-9a-f]{32})/i.exec(cut.buf.toString('latin1'))?.[1];
  t.match(cut.buf.toString('latin1'), /^HTTP\/1\.1 200 /, 'the stream had started');
  t.match(await lineWhere('the hang-up mid-stream', (l) => l.request_id === streamId), { route: '/v1/messages', status: 499, code: 'client_closed' });
  const m = await metrics();
  t.equal(m.value('inkgate_http_requests_total', { route: '/v1/messages', method: 'POST', status_class: 'client_closed' }), 2, 'counted apart');
  t.equal(m.sum('inkgate_http_requests_total', { status_class: '5xx' }), 0, 'no 5xx');
  t.same(
    accessLines().filter((l) => l.status >= 500 || l.status === 0),
    [],
    'no line with a 5xx or a 0',
  );
});

eachEngine('refusals for framing are logged under `framing` with their status and request id, and counted', async (t, engine) => {
  const { k, lineWhere, metrics, port } = await setup(t, engine);
  const twoHosts = await rawExchange(port, (s) => s.write('GET /v1/models HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n'), LINE_BOUND_MS);
  const id = idOf(twoHosts.buf.toString('latin1'));
  t.match(await lineWhere('two Host headers', (l) => l.request_id === id), { route: 'framing', status: 400, code: 'invalid_header', param: 'Host' });
  let expected = 1;
  if (engine === 'node') {
    // Answered by node's parser (the head never became a request): a line all the same.
    const bad = await rawExchange(port, (s) => s.write('GET /v1/models HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n'), LINE_BOUND_MS);
    const badId = idOf(bad.buf.toString('latin1'));
    t.match(await lineWhere('a bad header', (l) => l.request_id === badId), { method: 'GET', route: 'framing', status: 400, code: 'invalid_header' });
    // A head that never ends: 408 after headersTimeoutMs (1 s here).
    const slow = await rawExchange(port, (s) => s.write('GET /v1/models HTTP/1.1\r\nHost: x\r\n'), LINE_BOUND_MS);
    t.match(slow.buf.toString('latin1'), /^HTTP\/1\.1 408 /, 'a slow head is answered 408');
    const slowId = idOf(slow.buf.toString('latin1'));
    t.match(await lineWhere('the 408', (l) => l.request_id === slowId), { route: 'framing', status: 408, code: 'request_timeout' });
    // A body node's parser refuses (chunk data not followed by CRLF): the route's own line, with the 400 it got.
    const chunk = await rawExchange(
      port,
      (s) =>
        s.write(
          `POST /v1/messages HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${k.key}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n`,
        ),
      LINE_BOUND_MS,
    );
    const chunkId = idOf(chunk.buf.toString('latin1'));
    t.match(await lineWhere('the bad chunk', (l) => l.request_id === chunkId), { route: '/v1/messages', status: 400, code: 'invalid_body' });
    expected += 2;
  }
  const m = await metrics();
  t.equal(m.sum('inkgate_http_requests_total', { route: 'framing', method: 'any', status_class: '4xx' }), expected, 'counted with their real status');
  t.equal(m.sum('inkgate_http_requests_total', { status_class: '5xx' }), 0, 'none of it a 5xx');
});

eachEngine('the console and the media host are counted under their own names, as logged', async (t, engine) => {
  const { g, lineWhere, metrics } = await setup(t, engine);
  const page = await request(`${g.url}/console/signin`);
  await page.body.text();
  t.equal(page.statusCode, 200, 'a console page');
  const media = await request(`${g.url}/media/gen_nothing/0.mp4?exp=1&sig=x`, { method: 'HEAD' });
  await media.body.text();
  t.match(await lineWhere('the console page', (l) => l.request_id === page.headers['x-request-id']), { route: 'console', status: 200 });
  t.match(await lineWhere('the media HEAD', (l) => l.request_id === media.headers['x-request-id']), { route: 'media', status: media.statusCode });
  const m = await metrics();
  t.equal(m.value('inkgate_http_requests_total', { route: 'console', method: 'GET', status_class: '2xx' }), 1, 'the console page under `console`');
  t.equal(m.sum('inkgate_http_requests_total', { route: 'media', method: 'HEAD' }), 1, 'the media HEAD under `media`');
  t.equal(m.sum('inkgate_http_requests_total', { route: 'unmatched' }), 0, 'neither under `unmatched`');
});
