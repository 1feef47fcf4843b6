// The closing usage frame of a streamed text reply, per key (api_keys.usage_frame: event, comment,
// none) and per request (X-Service-Usage-Frame), on the raw wire of both text lanes: the frame is
// there in the asked form or absent, the charge settles either way, failure frames stay, and a bad
// value is refused (CLI: nothing changed; header: 400 naming it, nothing held).
import t, { type Test } from 'tap';
import { request } from 'undici';
import { runCli } from '../../src/admin/cli.js';
import { responsesCharge as usageCharge } from '../helpers/responses-harness.js';
import { loadConfig } from '../../src/config/config.js';
import { setLane } from '../../src/deployment/state.js';
import type { EngineName } from '../../src/server/engine.js';
import { startAnthropicSimulator } from '../../simulators/anthropic/simulator.js';
import { startOpenAISimulator } from '../../simulators/openai/simulator.js';
import { eachEngine } from '../helpers/engines.js';
import { startTestGateway, writtenRequest, type TestGateway } from '../helpers/gateway.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';
import { messagesStreamCharge } from '../helpers/messages-stack.js';
import { parseSse, sseComments, type SseEvent } from '../helpers/sse.js';

const ANTHROPIC_KEY = 'sk-ant-frame';
const OPENAI_KEY = 'sk-oai-frame';
/** Above the simulators' default replies, below a [[sim:tokens=100]] one (the capped case). */
const CAP_CHARS = 200;

async function setup(t: Test, engine?: EngineName) {
  const anthropic = await startAnthropicSimulator({ apiKey: ANTHROPIC_KEY });
  const openai = await startOpenAISimulator({ apiKey: OPENAI_KEY });
  t.teardown(() => Promise.all([anthropic.close(), openai.close()]));
  // Keys remembered for a minute: an edit must reach the gateway by its notification, not by expiry.
  const g = await startTestGateway(t, {
    auth: { keyCacheMs: 60_000, keyCacheEntries: 100 },
    responses: { visibleOutputCapChars: CAP_CHARS },
    vendors: { anthropic: { baseUrl: anthropic.url, apiKey: ANTHROPIC_KEY }, openai: { baseUrl: openai.url, apiKey: OPENAI_KEY } },
    ...(engine ? { server: { engine } } : {}),
  });
  await setLane(g.db.pool, 'messages', true);
  await setLane(g.db.pool, 'responses', true);
  await g.gw.services.state.refresh();
  const cfg = loadConfig({}, { db: { url: g.db.url, schema: g.db.schema } });
  /** The command as typed, without --json: its exit status and what it printed where. */
  const plain = async (...argv: string[]) => {
    let out = '';
    let err = '';
    const code = await runCli(
      argv,
      (s) => void (out += s),
      (s) => void (err += s),
      cfg,
    );
    return { code, out, err };
  };
  /** With --json: one JSON document on stdout, the answer or (on a failure) `{ error }`. */
  const cli = async (...argv: string[]) => {
    const r = await plain(...argv, '--json');
    const doc = r.out === '' ? undefined : JSON.parse(r.out);
    return { code: r.code, err: r.err, json: r.code === 0 ? doc : undefined, error: r.code === 0 ? undefined : doc?.error };
  };
  const acc = (await cli('account', 'create', '--name', 'Frames', '--plan', 'pro')).json;
  t.equal((await cli('topup', '--account', acc.id, '--usd', '500')).code, 0);
  /** A key made by the operator's CLI, with `--usage-frame` when given. */
  const key = async (name: string, frame?: string): Promise<{ id: string; key: string; usage_frame: string }> => {
    const r = await cli('key', 'create', '--account', acc.id, '--name', name, ...(frame ? ['--usage-frame', frame] : []));
    if (r.code !== 0) throw new Error(JSON.stringify(r.error));
    return r.json;
  };
  return { g, anthropic, openai, cli, plain, key, accountId: acc.id as string };
}

const me = async (g: TestGateway, key: string) => (await g.call('GET', '/v1/me', { key })).json;

interface RawStream {
  status: number;
  requestId: string;
  text: string;
  events: SseEvent[];
  /** The `service.usage` comment lines' payloads. */
  usageComments: any[];
}

async function stream(
  g: TestGateway,
  path: '/v1/messages' | '/v1/responses',
  key: string,
  prompt: string,
  headers: Record<string, string> = {},
): Promise<RawStream> {
  const body =
    path === '/v1/messages'
      ? { model: 'sonnet', max_tokens: 300, stream: true, messages: [{ role: 'user', content: prompt }] }
      : { model: 'astra', max_output_tokens: 1000, stream: true, input: prompt };
  const r = await request(g.url + path, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  const text = await r.body.text();
  const usageComments = sseComments(text)
    .filter((c) => c.startsWith('service.usage '))
    .map((c) => JSON.parse(c.slice('service.usage '.length)));
  return { status: r.statusCode, requestId: String(r.headers['x-service-request-id']), text, events: parseSse(text), usageComments };
}

const messagesCharge = (events: SseEvent[]): number => messagesStreamCharge(events);

function responsesCharge(events: SseEvent[]): number {
  return usageCharge(JSON.parse(events.find((e) => e.event === 'response.completed')!.data).response.usage);
}

/**
 * Asserts the Messages stream ended in `form` and that its charge settled: the key's spend grew by
 * the receipt's price, nothing is still held, and the request record says the same.
 */
async function assertMessagesForm(
  t: Test,
  g: TestGateway,
  key: string,
  s: RawStream,
  form: 'event' | 'comment' | 'none',
  chargedBefore: number,
): Promise<void> {
  t.equal(s.status, 200);
  const names = s.events.map((e) => e.event);
  const charge = messagesCharge(s.events);
  const payload = { type: 'service.usage', ink_charged: charge, usd_payg_charged: charge / 100, request_id: s.requestId };
  if (form === 'event') {
    t.same(names.slice(-2), ['message_stop', 'service.usage'], 'event: the named event follows message_stop');
    t.same(JSON.parse(s.events.at(-1)!.data), payload);
    t.equal(s.usageComments.length, 0, 'event: no comment');
  } else {
    t.equal(names.at(-1), 'message_stop', `${form}: message_stop is the last event`);
    t.notOk(names.includes('service.usage'), `${form}: no service.usage event`);
  }
  if (form === 'comment') {
    t.same(s.usageComments, [payload], 'comment: one usage comment with the charge');
    t.ok(s.text.endsWith(`: service.usage ${JSON.stringify(payload)}\n\n`), 'comment: the comment closes the stream');
  }
  if (form === 'none') {
    t.notOk(s.text.includes('service.usage'), 'none: no frame in any form');
    t.ok(s.text.endsWith('event: message_stop\ndata: {"type":"message_stop"}\n\n'), "none: the stream ends with the vendor's message_stop");
  }
  const m = await me(g, key);
  t.equal(m.key.ink_charged - chargedBefore, charge, `${form}: the charge settled (GET /v1/me)`);
  t.equal(m.key.ink_reserved, 0, `${form}: nothing held`);
  t.equal((await writtenRequest(g, s.requestId))?.charged_ink, charge, `${form}: the request record`);
}

eachEngine('Messages: each key setting on the raw wire, the charge settled every time', async (t, engine) => {
  const { g, key } = await setup(t, engine);
  const keys = { event: await key('default'), comment: await key('comment', 'comment'), none: await key('none', 'none') };
  t.equal(keys.event.usage_frame, 'event', 'a key without --usage-frame gets event');
  t.equal(keys.comment.usage_frame, 'comment');
  for (const form of ['event', 'comment', 'none'] as const) {
    const k = keys[form].key;
    const s = await stream(g, '/v1/messages', k, `frame ${form}`);
    await assertMessagesForm(t, g, k, s, form, 0);
  }
  // A non-streaming reply is the same under every setting: the charge in its header.
  const plain = await g.call('POST', '/v1/messages', {
    key: keys.none.key,
    body: { model: 'sonnet', max_tokens: 50, messages: [{ role: 'user', content: 'hi' }] },
  });
  t.equal(plain.status, 200);
  t.ok(Number(plain.headers['x-service-ink-charged']) > 0, 'none: X-Service-Ink-Charged still on a non-streaming reply');
  await assertLedgerInvariant(t, g.db.pool);
});

t.test('Messages: X-Service-Usage-Frame overrides the key, both ways, for that request only', async (t) => {
  const { g, key } = await setup(t);
  const plain = await key('plain');
  const quiet = await key('quiet', 'none');
  let charged = 0;
  const check = async (k: { key: string }, header: string | undefined, form: 'event' | 'comment' | 'none') => {
    const before = (await me(g, k.key)).key.ink_charged;
    const s = await stream(g, '/v1/messages', k.key, 'override', header === undefined ? {} : { 'X-Service-Usage-Frame': header });
    await assertMessagesForm(t, g, k.key, s, form, before);
    charged++;
  };
  await check(plain, 'comment', 'comment');
  await check(plain, 'none', 'none');
  await check(plain, undefined, 'event');
  await check(quiet, 'event', 'event');
  await check(quiet, 'Comment', 'comment');
  await check(quiet, undefined, 'none');
  t.equal(charged, 6);
  await assertLedgerInvariant(t, g.db.pool);
});

t.test('Responses: the usage comment unless none; a named event is never sent there', async (t) => {
  const { g, key } = await setup(t);
  const keys = { event: await key('r-event'), comment: await key('r-comment', 'comment'), none: await key('r-none', 'none') };
  const cases: Array<[keyof typeof keys, string | undefined, boolean]> = [
    ['event', undefined, true],
    ['comment', undefined, true],
    ['none', undefined, false],
    ['event', 'none', false],
    ['none', 'event', true],
    ['none', 'comment', true],
  ];
  for (const [which, header, commented] of cases) {
    const k = keys[which].key;
    const before = (await me(g, k)).key.ink_charged;
    const s = await stream(g, '/v1/responses', k, 'hello', header === undefined ? {} : { 'X-Service-Usage-Frame': header });
    const label = `key ${which}, header ${header ?? '(none)'}`;
    t.equal(s.status, 200, label);
    t.equal(s.events.at(-1)!.event, 'response.completed', `${label}: the terminal event is the last event`);
    t.notOk(
      s.events.some((e) => e.event === 'service.usage'),
      `${label}: no named usage event`,
    );
    const charge = responsesCharge(s.events);
    if (commented)
      t.same(
        s.usageComments,
        [{ type: 'service.usage', ink_charged: charge, usd_payg_charged: charge / 100, request_id: s.requestId }],
        `${label}: the usage comment`,
      );
    else t.notOk(s.text.includes('service.usage'), `${label}: no usage comment`);
    const m = await me(g, k);
    t.equal(m.key.ink_charged - before, charge, `${label}: charged`);
    t.equal(m.key.ink_reserved, 0);
  }
  // The service's own output cap ends the stream with response.incomplete: its comment follows the setting too.
  for (const [header, commented] of [
    ['none', false],
    ['event', true],
  ] as const) {
    const k = keys.event.key;
    const before = (await me(g, k)).key.ink_charged;
    const s = await stream(g, '/v1/responses', k, 'long reply [[sim:tokens=100]] [[sim:pace=1]]', { 'X-Service-Usage-Frame': header });
    t.equal(s.events.at(-1)!.event, 'response.incomplete', `capped, ${header}: stopped at the cap`);
    t.equal(s.usageComments.length, commented ? 1 : 0, `capped, ${header}: ${commented ? 'one' : 'no'} usage comment`);
    const rec = await writtenRequest(g, s.requestId);
    t.equal((await me(g, k)).key.ink_charged - before, rec?.charged_ink, `capped, ${header}: charged the hold`);
    t.equal(rec?.charged_ink, rec?.hold_ink);
  }
  await assertLedgerInvariant(t, g.db.pool);
});

t.test('failure frames are sent whatever the setting', async (t) => {
  const { g, key } = await setup(t);
  const quiet = await key('quiet', 'none');
  for (const [directive, code] of [
    ['[[sim:cut-before-stop]]', 'incomplete_stream'],
    ['[[sim:cut-before-delta]]', 'usage_unknown'],
  ] as const) {
    for (const header of [undefined, 'comment']) {
      const s = await stream(g, '/v1/messages', quiet.key, `hi ${directive}`, header ? { 'X-Service-Usage-Frame': header } : {});
      const last = s.events.at(-1)!;
      t.equal(last.event, 'error', `${code}, header ${header ?? '(none)'}: the error event ends the stream`);
      t.equal(JSON.parse(last.data).error.code, code);
      t.notOk(s.text.includes('service.usage'), 'and no usage frame follows it');
    }
  }
  await assertLedgerInvariant(t, g.db.pool);
});

eachEngine('an unknown X-Service-Usage-Frame is a 400 naming the header, refused before any hold', async (t, engine) => {
  const { g, key, anthropic, openai } = await setup(t, engine);
  const k = await key('strict');
  const sent = anthropic.requests.length + openai.requests.length;
  const bodies = {
    '/v1/messages': { model: 'sonnet', max_tokens: 50, messages: [{ role: 'user', content: 'hi' }] },
    '/v1/responses': { model: 'astra', input: 'hi' },
  };
  for (const [path, body] of Object.entries(bodies)) {
    for (const [value, stream] of [
      ['events', true],
      ['', true],
      ['json', false],
    ] as const) {
      const r = await g.call('POST', path, { key: k.key, body: { ...body, stream }, headers: { 'X-Service-Usage-Frame': value } });
      t.equal(r.status, 400, `${path} ${JSON.stringify(value)}`);
      t.equal(r.json.error.type, 'invalid_request_error');
      t.equal(r.json.error.code, 'invalid_enum');
      t.equal(r.json.error.param, 'X-Service-Usage-Frame');
      t.match(r.json.error.message, /event, comment or none/);
    }
  }
  t.equal(anthropic.requests.length + openai.requests.length, sent, 'nothing reached a vendor');
  const m = await me(g, k.key);
  t.equal(m.key.ink_reserved, 0, 'nothing held');
  t.equal(m.key.ink_charged, 0);
  const rows = await g.db.pool.query('SELECT count(*)::int AS n FROM requests WHERE key_id = $1', [k.id]);
  t.equal(rows.rows[0].n, 0, 'no request record');
  await assertLedgerInvariant(t, g.db.pool);
});

t.test("CLI: key set changes a running gateway's remembered key; bad values change nothing", async (t) => {
  const { g, key, cli, plain, accountId } = await setup(t);
  const k = await key('edited');
  // Remembered by the gateway (the key cache) in the default form.
  await assertMessagesForm(t, g, k.key, await stream(g, '/v1/messages', k.key, 'before'), 'event', 0);
  const row = async () => (await g.db.pool.query('SELECT usage_frame, ink_limit FROM api_keys WHERE id = $1', [k.id])).rows[0];

  const heard = g.gw.services.escrow.nextKeyChange(k.id);
  const set = await cli('key', 'set', k.id, '--usage-frame', 'comment');
  t.equal(set.code, 0, set.err);
  t.same(set.json, { id: k.id, usage_frame: 'comment', in_force: true });
  await heard;
  let charged = (await me(g, k.key)).key.ink_charged;
  await assertMessagesForm(t, g, k.key, await stream(g, '/v1/messages', k.key, 'after'), 'comment', charged);

  const both = g.gw.services.escrow.nextKeyChange(k.id);
  const set2 = await cli('key', 'set', k.id, '--usage-frame', 'none', '--ink-limit', '90000');
  t.equal(set2.code, 0, set2.err);
  t.same(set2.json, { id: k.id, ink_limit: 90000, usage_frame: 'none', in_force: true });
  await both;
  t.same(await row(), { usage_frame: 'none', ink_limit: 90000 });
  t.equal((await me(g, k.key)).key.ink_limit, 90000);
  charged = (await me(g, k.key)).key.ink_charged;
  await assertMessagesForm(t, g, k.key, await stream(g, '/v1/messages', k.key, 'quiet'), 'none', charged);
  // key set-limit still works, and leaves the frame alone.
  t.equal((await cli('key', 'set-limit', k.id, '--ink-limit', 'none')).code, 0);
  t.same(await row(), { usage_frame: 'none', ink_limit: null });
  t.equal((await cli('key', 'list', '--account', accountId)).json[0].usage_frame, 'none', 'key list shows the setting');

  // Refused: a bad value (alone, or beside a good flag), no change asked for, an unknown key.
  for (const argv of [
    ['key', 'set', k.id, '--usage-frame', 'named'],
    ['key', 'set', k.id, '--usage-frame', 'EVENT '],
    ['key', 'set', k.id, '--ink-limit', '5', '--usage-frame', 'loud'],
  ]) {
    const r = await plain(...argv);
    t.equal(r.code, 2, `${argv.join(' ')}: a usage error`);
    t.match(r.err, /^inkgate: --usage-frame must be event, comment or none/, r.err.trim());
    t.equal(r.err.trim().split('\n').length, 1, 'one line');
  }
  const bare = await plain('key', 'set', k.id);
  t.equal(bare.code, 2);
  t.match(bare.err, /key set needs --ink-limit or --usage-frame/);
  const unknown = await plain('key', 'set', 'key_nope', '--usage-frame', 'comment');
  t.equal(unknown.code, 1);
  t.match(unknown.err, /unknown key key_nope/);
  t.same(await row(), { usage_frame: 'none', ink_limit: null }, 'nothing changed');

  const before = (await cli('key', 'list', '--account', accountId)).json.length;
  const bad = await plain('key', 'create', '--account', accountId, '--name', 'loud', '--usage-frame', 'loud');
  t.equal(bad.code, 2);
  t.match(bad.err, /^inkgate: --usage-frame must be event, comment or none, not "loud"/);
  // With --json the same refusal is one document on stdout, nothing on stderr.
  const badJson = await cli('key', 'create', '--account', accountId, '--name', 'loud', '--usage-frame', 'loud');
  t.equal(badJson.code, 2);
  t.match(badJson.error?.message, /^--usage-frame must be event, comment or none, not "loud"/);
  t.equal(badJson.err, '', 'nothing on stderr');
  const bareCreate = await plain('key', 'create', '--account', accountId, '--name', 'bare', '--usage-frame');
  t.equal(bareCreate.code, 2);
  t.match(bareCreate.err, /--usage-frame needs a value/);
  t.equal((await cli('key', 'list', '--account', accountId)).json.length, before, 'no key was created');
  await assertLedgerInvariant(t, g.db.pool);
});
