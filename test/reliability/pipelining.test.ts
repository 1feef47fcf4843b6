// HTTP/1.1 pipelining over raw sockets, on every route and each HTTP engine: every request gets
// its answer, in order, or it is not run at all (nothing held, charged, sent to a vendor or
// submitted). node:http answers every pipelined request, in order. uWS refuses asynchronous
// pipelining by closing the connection when it reads a request while another is unanswered; the
// gateway stops reading a uWS connection while a request is unanswered (so a request written
// behind it waits unread and is answered after it) and starts nothing for a request until uWS has
// parsed all it read with it (so a request that uWS's close drops never ran).
import type { Socket } from 'node:net';
import t, { type Test } from 'tap';
import { setLane } from '../../src/deployment/state.js';
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { startOpenAISimulator } from '../../simulators/openai/simulator.js';
import { journalWritten } from '../helpers/gateway.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';
import { rawExchange } from '../helpers/raw-socket.js';
import { startVideoHarness, type VideoHarness } from '../integration/video-harness.js';
import { eachEngine } from '../helpers/engines.js';
import type { EngineName } from '../../src/server/engine.js';

const ANTHROPIC_KEY = 'sk-ant-pipelining';
const OPENAI_KEY = 'sk-openai-pipelining';
/** Generous: the gateway answers these in milliseconds; a closed connection ends a case at once. */
const CASE_BOUND_MS = 8_000;

const anthropic = await startAnthropicSimulator({ apiKey: ANTHROPIC_KEY });
t.teardown(() => anthropic.close());
const openai = await startOpenAISimulator({ apiKey: OPENAI_KEY });
t.teardown(() => openai.close());
type Kind = 'messages' | 'responses' | 'video' | 'me' | 'models' | 'model' | 'generation' | 'head';
const KINDS: Kind[] = ['messages', 'responses', 'video', 'me', 'models', 'model', 'generation', 'head'];
/** Routes whose request moves money: each answered one is one ledger request on the key. */
const BILLED = new Set<Kind>(['messages', 'responses', 'video']);

function post(path: string, key: string, body: unknown): string {
  const b = JSON.stringify(body);
  return `POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(b)}\r\n\r\n${b}`;
}
const get = (path: string, key: string, method = 'GET') => `${method} ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\n\r\n`;

function requestOf(kind: Kind, key: string, generationId: string): string {
  switch (kind) {
    case 'messages':
      return post('/v1/messages', key, { model: 'sonnet', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] });
    case 'responses':
      return post('/v1/responses', key, { model: 'astra', input: 'hi', max_output_tokens: 16 });
    case 'video':
      return post('/v1/video/generations', key, { model: 'clip-2.0-fast', prompt: 'a lighthouse at dusk' });
    case 'me':
      return get('/v1/me', key);
    case 'models':
      return get('/v1/models', key);
    case 'model':
      return get('/v1/models/sonnet', key);
    case 'generation':
      return get(`/v1/video/generations/${generationId}`, key);
    case 'head':
      return get('/v1/models', key, 'HEAD');
  }
}

interface Answer {
  status: number;
  body: string;
}

/** The answers `buf` holds, framed by Content-Length (none after a HEAD, as `heads` says). */
function answersIn(buf: Buffer, heads: boolean[]): Answer[] {
  const answers: Answer[] = [];
  for (;;) {
    const end = buf.indexOf('\r\n\r\n');
    if (end === -1) return answers;
    const head = buf.subarray(0, end).toString('latin1');
    const len = heads[answers.length] ? 0 : Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
    if (buf.length < end + 4 + len) return answers;
    answers.push({ status: Number(head.slice(9, 12)), body: buf.subarray(end + 4, end + 4 + len).toString() });
    buf = buf.subarray(end + 4 + len);
  }
}

/**
 * Writes `parts` (each after the previous by `gapMs`, never waiting for an answer) and reads
 * answers, framed by Content-Length, until every part has its answer, the server closed, or the bound.
 */
async function exchange(port: number, parts: string[], gapMs: number, heads: boolean[]): Promise<{ answers: Answer[]; closed: boolean }> {
  const write = async (s: Socket) => {
    for (const p of parts) {
      if (s.destroyed) return;
      s.write(p, 'latin1');
      if (gapMs > 0) await new Promise((r) => setTimeout(r, gapMs));
    }
  };
  const r = await rawExchange(port, write, CASE_BOUND_MS, (buf) => answersIn(buf, heads).length === parts.length);
  return { answers: answersIn(r.buf, heads), closed: r.closed };
}

/**
 * Ledger requests on the key, what it was charged, and text holds still open (a video hold stays
 * open while its generation runs), once the journal is written.
 */
async function moneyOf(h: VideoHarness, keyId: string): Promise<{ requests: number; charged: number; openTextHolds: number }> {
  await journalWritten(h.tg);
  const r = await h.services.pool.query<{ n: string; charged: string; open: string }>(
    `SELECT count(*) AS n, coalesce(sum(charged_ink), 0) AS charged,
            count(*) FILTER (WHERE hold_state = 'open' AND product IN ('messages', 'responses')) AS open
       FROM requests WHERE key_id = $1`,
    [keyId],
  );
  return { requests: Number(r.rows[0]!.n), charged: Number(r.rows[0]!.charged), openTextHolds: Number(r.rows[0]!.open) };
}

/** What each route answers here: a video submit may meet the account's concurrency cap (429, nothing held). */
const answersOk = (k: Kind, status: number) => (k === 'video' ? status === 202 || status === 429 : status === 200);

interface Rig {
  readonly h: VideoHarness;
  readonly port: number;
  readonly engine: EngineName;
}

async function rig(t: Test, engine: EngineName): Promise<Rig> {
  const h = await startVideoHarness(t, {
    config: {
      server: { engine },
      limits: { requestsPerMinute: 100_000, publicRequestsPerMinute: 100_000 },
      vendors: { anthropic: { baseUrl: anthropic.url, apiKey: ANTHROPIC_KEY }, openai: { baseUrl: openai.origin + '/v1', apiKey: OPENAI_KEY } },
    },
  });
  const pool = h.services.pool;
  for (const lane of ['messages', 'responses', 'video'] as const) await setLane(pool, lane, true);
  await h.services.state.refresh();
  const port = Number(new URL(h.tg.url).port);
  return { h, port, engine };
}

/** node answers every pipelined request; uWS may close on one read behind an unanswered one (then the rest never ran). */
async function runCase(t: Test, r0: Rig, name: string, kinds: Kind[], gapMs: number, mustAnswerAllOnUws: boolean) {
  const { h, port } = r0;
  const mustAnswerAll = mustAnswerAllOnUws || r0.engine === 'node';
  const k = await h.funded(100_000);
  const first = await h.submit(k.key, { model: 'clip-2.0-fast', prompt: 'a lighthouse at dawn' });
  const before = await moneyOf(h, k.keyId);
  const parts = kinds.map((kind) => requestOf(kind, k.key, first.json.id));
  const r = await exchange(
    port,
    parts,
    gapMs,
    kinds.map((kind) => kind === 'head'),
  );
  const statuses = r.answers.map((a) => a.status);
  t.ok(
    statuses.every((st, i) => answersOk(kinds[i]!, st)),
    `${name}: answers in order (${JSON.stringify(statuses)})`,
  );
  if (mustAnswerAll) t.equal(statuses.length, kinds.length, `${name}: every request answered`);
  if (gapMs > 0) t.ok(statuses.length >= 1, `${name}: the first request, read alone, is answered`);
  else t.ok(statuses.length === kinds.length || r.closed, `${name}: a request left unanswered only on a closed connection`);
  // An answered request ran once; an unanswered one never ran (no ledger request, no charge).
  const answeredBilled = statuses.filter((st, i) => BILLED.has(kinds[i]!) && st < 300).length;
  const after = await moneyOf(h, k.keyId);
  t.equal(after.requests - before.requests, answeredBilled, `${name}: one ledger request per accepted billed request, none for the others`);
  if (answeredBilled === 0) t.equal(after.charged, before.charged, `${name}: nothing charged`);
  t.equal(after.openTextHolds, 0, `${name}: no text hold left open`);
  t.comment(`${name}: ${statuses.length} of ${kinds.length} answered${r.closed ? ', then closed' : ''}`);
}

eachEngine('pipelining', async (t, engine) => {
  const r0 = await rig(t, engine);
  const { h, port } = r0;

  t.test('pairs in one write, every route first: answered in order, or not run (node: answered)', async (t) => {
    for (const kind of KINDS) await runCase(t, r0, `${kind} + models, one write`, [kind, 'models'], 0, false);
  });

  t.test('triples in one write: answered in order, or not run (node: answered)', async (t) => {
    for (const kind of KINDS) await runCase(t, r0, `${kind} x3, one write`, [kind, kind, kind], 0, false);
    await runCase(t, r0, 'messages + responses + video, one write', ['messages', 'responses', 'video'], 0, false);
  });

  t.test('pairs written 40 ms apart without waiting: both answered, in order, each charged once', async (t) => {
    // uWS: the second waits unread while the first is unanswered, and is read alone once it is answered.
    for (const kind of KINDS) await runCase(t, r0, `${kind} + ${kind}, 40 ms apart`, [kind, kind], 40, true);
    for (const kind of KINDS) await runCase(t, r0, `${kind} + models, 40 ms apart`, [kind, 'models'], 40, true);
  });

  t.test('triples and a run of every route, 40 ms apart: answered in order up to a close, nothing after it ran', async (t) => {
    // uWS: requests that waited unread together are read together once the answer ends: uWS then
    // closes on the second of them, and none of them ran (which ones depends on the machine's pace).
    for (const kind of KINDS) await runCase(t, r0, `${kind} x3, 40 ms apart`, [kind, kind, kind], 40, false);
    await runCase(t, r0, 'every route, 40 ms apart', [...KINDS], 40, false);
  });

  t.test('a request behind a long answer waits for it', async (t) => {
    // The second request arrives while the first's vendor call is still running (the simulator
    // paces the first at 20 ms a token): it is answered only after the first.
    const k = await h.funded(100_000);
    const slow = post('/v1/messages', k.key, {
      model: 'sonnet',
      max_tokens: 40,
      messages: [{ role: 'user', content: 'hi [[sim:tokens=30]] [[sim:pace=10]]' }],
    });
    const r = await exchange(port, [slow, get('/v1/me', k.key)], 100, [false, false]);
    t.same(
      r.answers.map((a) => a.status),
      [200, 200],
      'both answered, in order',
    );
    t.match(r.answers[0]!.body, /"type":"message"/, 'the first answer is the Messages reply');
    t.match(r.answers[1]!.body, /"key"/, 'the second is /v1/me');
    t.equal((await moneyOf(h, k.keyId)).requests, 1, 'one ledger request');
  });

  t.test('ledger invariant after everything', async (t) => {
    await assertLedgerInvariant(t, h.services.pool);
  });
});
