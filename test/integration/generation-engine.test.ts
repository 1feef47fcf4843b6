// The job runner with its own timers on a real clock, against the Gemini simulator: a slow vendor
// call holds one slot, not the instance (the other jobs are claimed and finish meanwhile). Also,
// on the same gateway, what a client sees of URLs that cannot be fetched (one message whatever the
// reason; the reason goes to the log) and of media links when the Host is one we will not echo.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { request } from 'undici';
import { solidPng } from '../../simulators/gemini/png.js';
import { startGeminiSimulator } from '../../simulators/gemini/simulator.js';
import { startTestGateway } from '../helpers/gateway.js';
import { recordingLogger } from '../helpers/log-lines.js';
import { startHttpsServer } from '../helpers/https-server.js';

const sim = await startGeminiSimulator();
t.teardown(() => sim.close());
const png = solidPng(4, 4, [1, 2, 3]);
const refs = await startHttpsServer((req, res) => {
  if ((req.url ?? '').startsWith('/ok')) res.writeHead(200, { 'content-type': 'image/png' }).end(req.method === 'HEAD' ? undefined : png);
  else res.writeHead(404).end();
});
t.teardown(() => refs.close());
const dataDir = mkdtempSync(join(tmpdir(), 'inkgate-engine-'));
t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));

const { log, lines: logged } = recordingLogger('debug');
// No DNS from a test: one name "resolves" to a private address, every other name does not resolve.
const resolver = async (host: string): Promise<string[]> => {
  if (host === 'intranet.example.com') return ['10.1.2.3'];
  throw Object.assign(new Error(`no DNS for ${host}`), { code: 'ENOTFOUND' });
};
const tg = await startTestGateway(
  t,
  {
    dataDir,
    vendors: { gemini: { baseUrl: sim.url, apiKey: sim.apiKey } },
    jobs: { tickMs: 50, batchSize: 4, maxRunningPerAccount: 10, leaseMs: 30_000, pollIntervalMs: 1_000, maxPollIntervalMs: 2_000, timeoutMs: 600_000 },
  },
  { log, jobs: { fetch: { allowList: new Set([`127.0.0.1:${refs.port}`]), ca: refs.ca, resolver }, owner: 'engine-test' } },
);
const { key, accountId } = await tg.newKey({ plan: 'pro', inkLimit: null });
await tg.gw.services.ledger.topUp(accountId, 1_000);

const submit = (prompt: string, extra: Record<string, unknown> = {}) =>
  tg.call('POST', '/v1/images/generations', { key, body: { model: 'image-1', prompt, ...extra } });
const get = (id: string, headers?: Record<string, string>) => tg.call('GET', `/v1/images/generations/${id}`, { key, headers });

/** The generation's state straight from the table (polling the API would meet the key's rate limit). */
async function stateOf(id: string): Promise<string> {
  return (await tg.gw.services.pool.query<{ state: string }>('SELECT state FROM generations WHERE id = $1', [id])).rows[0]!.state;
}

/** Waits until the generation is terminal (the engine runs on its own timers); fails after `boundMs`. */
async function finished(id: string, boundMs: number): Promise<any> {
  const deadline = Date.now() + boundMs;
  for (;;) {
    const state = await stateOf(id);
    if (state === 'succeeded' || state === 'failed') return (await get(id)).json;
    if (Date.now() > deadline) throw new Error(`${id} stayed ${state}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

t.test('a slow vendor call holds one slot: other jobs are claimed and finish meanwhile', async (t) => {
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  let entered!: () => void;
  const inside = new Promise<void>((r) => (entered = r));
  sim.beforeGenerate = async (call) => {
    if (!call.prompt.includes('slow lighthouse')) return;
    entered();
    await held;
  };
  t.teardown(() => {
    sim.beforeGenerate = undefined;
    release();
  });
  const slow = (await submit('a slow lighthouse')).json;
  await inside; // the engine's only row so far is inside the vendor call, and stays there
  const quick = await Promise.all([submit('a quick boat'), submit('a quick kite'), submit('a quick cloud')]);
  for (const q of quick) {
    t.equal(q.status, 202);
    const g = await finished(q.json.id, 60_000);
    t.equal(g.status, 'succeeded', `${q.json.id} finished while the slow call was held`);
  }
  t.equal(await stateOf(slow.id), 'running', 'the slow one is still in its vendor call');
  release();
  t.equal((await finished(slow.id, 60_000)).status, 'succeeded', 'and finishes once the vendor answers');
});

t.test('a URL that cannot be fetched gets one message whatever the reason; the reason is logged', async (t) => {
  const cases = [
    ['https://nowhere.example.com/a.png', /does not resolve/],
    ['https://intranet.example.com/a.png', /blocked address \(private\)/],
    [`https://127.0.0.1:${refs.port}/missing.png`, /answered 404/],
  ] as const;
  const messages: string[] = [];
  for (const [url, reason] of cases) {
    logged.length = 0;
    const r = await submit('a lighthouse', { reference_image_urls: [`https://127.0.0.1:${refs.port}/ok.png`, url] });
    t.same([r.status, r.json.error.code, r.json.error.param], [400, 'invalid_url', 'reference_image_urls[1]'], url);
    t.notMatch(r.json.error.message, /resolve|blocked|private|loopback|404|answered|TLS|CERT/i, `${url}: the message says nothing of the network`);
    messages.push(r.json.error.message);
    t.ok(
      logged.some((l) => l.msg === 'generations.url_refused' && l.level === 'info' && typeof l.request_id === 'string' && reason.test(String(l.detail))),
      `${url}: the reason is in the log`,
    );
  }
  t.equal(new Set(messages).size, 1, 'the same message for a name that does not resolve, one that resolves privately, and a 404');
});

t.test('a Host we will not echo keeps its port in media links', async (t) => {
  const id = (await submit('a harbour')).json.id;
  await finished(id, 60_000);
  const g = (await get(id, { host: `inkgate_gw:${tg.gw.port}` })).json;
  t.equal(g.status, 'succeeded');
  t.match(g.image.url, new RegExp(`^http://127\\.0\\.0\\.1:${tg.gw.port}/media/`), 'the listening address with the port called');
  const file = await request(g.image.url);
  t.equal(file.statusCode, 200, 'the link works');
  t.same(Buffer.from(await file.body.arrayBuffer()).subarray(0, 8), Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));
  const normal = (await get(id)).json;
  t.match(normal.image.url, new RegExp(`^http://127\\.0\\.0\\.1:${tg.gw.port}/media/`), 'a loopback Host is echoed as called');
});
