// Hostile input, cross-account: another account's generation (video or image), request
// record and Idempotency-Key are invisible. Account B knows A's ids (as if leaked) and A's
// idempotency keys, and probes every route that takes an id, in every state A's generations pass
// through. Everything answers as if the thing did not exist: 404 for ids, and a fresh, unrelated
// 202 for an idempotency key (never A's replay, never a 422 or 409 that would reveal it exists).
// The video and image lifecycle files hold the single-state ownership checks; this one goes
// across states, products and the request record, and ends with the ledger invariant.
import t, { type Test } from 'tap';
import { setLane } from '../../src/deployment/state.js';
import { startArkSimulator } from '../../simulators/ark/simulator.js';
import { startGeminiSimulator } from '../../simulators/gemini/simulator.js';
import { startTestGateway, type Reply } from '../helpers/gateway.js';
import { testCert } from '../helpers/https-server.js';
import { holdNextCreate } from '../helpers/generations.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';

const RENDER_MS = 60_000;
const cert = testCert();
const ark = await startArkSimulator({ renderMs: RENDER_MS, queueMs: 15_000, tls: cert });
t.teardown(() => ark.close());
const gem = await startGeminiSimulator();
t.teardown(() => gem.close());
const g = await startTestGateway(
  t,
  {
    vendors: { ark: { baseUrl: ark.url, apiKey: ark.apiKey }, gemini: { baseUrl: gem.url, apiKey: gem.apiKey } },
    jobs: { pollIntervalMs: 5_000, maxPollIntervalMs: 20_000, timeoutMs: 600_000, leaseMs: 30_000 },
  },
  { jobs: { clock: ark.now, fetch: { allowList: new Set([ark.contentHostPort]), ca: cert.cert }, runner: { timers: false } } },
);
await setLane(g.db.pool, 'video', true);
await setLane(g.db.pool, 'images', true);
await g.gw.services.state.refresh();
const pool = g.db.pool;

async function funded() {
  const k = await g.newKey();
  await g.gw.services.ledger.topUp(k.accountId, 1_000, 'cross-account');
  return k;
}

const VIDEO = { model: 'clip-2.0-fast', prompt: 'mine' };
const IMAGE = { model: 'image-1', prompt: 'mine' };

/** Every read B can try on an id; each must be the plain "unknown" answer. */
async function probe(t: Test, key: string, id: string, state: string) {
  const paths = [`/v1/video/generations/${id}`, `/v1/video/generations/${id}/content`, `/v1/images/generations/${id}`, `/v1/images/generations/${id}/content`];
  for (const p of paths) {
    const r = await g.call('GET', p, { key });
    t.equal(r.status, 404, `${state}: GET ${p.replace(id, '{A}')} -> 404`);
    t.equal(r.json?.error?.code, 'generation_not_found', `${state}: generation_not_found, as for an id that never existed`);
    t.notOk(r.text.includes('"status"') || r.text.includes('ink_'), 'nothing of the record');
  }
}

/** The answer for an id that never existed, to compare shapes with. */
async function unknownAnswer(key: string, path: string): Promise<Reply> {
  return g.call('GET', path, { key });
}

t.test("another account's video and image: 404 on every read, in every state", async (t) => {
  const a = await funded();
  const b = await funded();
  const v = await g.call('POST', '/v1/video/generations', { key: a.key, body: VIDEO });
  const i = await g.call('POST', '/v1/images/generations', { key: a.key, body: IMAGE });
  t.equal(v.status, 202);
  t.equal(i.status, 202);
  await probe(t, b.key, v.json.id, 'video queued');
  await probe(t, b.key, i.json.id, 'image queued');
  await g.gw.jobs.runner.tick(); // the image is made; the video is polled
  ark.advance(RENDER_MS + 1_000);
  await g.gw.jobs.runner.tick(); // the video is downloaded and settled
  t.equal((await g.call('GET', `/v1/video/generations/${v.json.id}`, { key: a.key })).json.status, 'succeeded');
  t.equal((await g.call('GET', `/v1/images/generations/${i.json.id}`, { key: a.key })).json.status, 'succeeded');
  await probe(t, b.key, v.json.id, 'video succeeded');
  await probe(t, b.key, i.json.id, 'image succeeded');
  // The same shape as an id that never existed (message aside: it names nothing of A's).
  const never = await unknownAnswer(b.key, '/v1/video/generations/vgen_AAAAAAAAAAAAAAAAAAAAAAAA');
  const other = await g.call('GET', `/v1/video/generations/${v.json.id}`, { key: b.key });
  t.same(Object.keys(other.json.error).sort(), Object.keys(never.json.error).sort(), 'same envelope as a never-existing id');
  t.equal(other.json.error.message, never.json.error.message, 'same message as a never-existing id');
  // A failed one too (its /content answers result_unavailable to A only).
  const f = await g.call('POST', '/v1/images/generations', { key: a.key, body: { model: 'image-1', prompt: 'x [[sim:refuse]]' } });
  await g.gw.jobs.runner.tick();
  t.equal((await g.call('GET', `/v1/images/generations/${f.json.id}/content`, { key: a.key })).json.error.code, 'result_unavailable');
  await probe(t, b.key, f.json.id, 'image failed');
  // And A still sees all of its own.
  for (const [kind, id] of [
    ['video', v.json.id],
    ['images', i.json.id],
    ['images', f.json.id],
  ]) {
    t.equal((await g.call('GET', `/v1/${kind}/generations/${id}`, { key: a.key })).status, 200, `A reads its own ${id}`);
  }
  await assertLedgerInvariant(t, pool);
});

t.test("another account's request record: no route shows it, and B's wallet view shows none of A's holds", async (t) => {
  const a = await funded();
  const b = await funded();
  const v = await g.call('POST', '/v1/video/generations', { key: a.key, body: VIDEO });
  t.equal(v.status, 202);
  const reqId = v.headers['x-request-id'] as string;
  const rec = (await pool.query('SELECT id, hold_state FROM requests WHERE id = $1', [reqId])).rows[0];
  t.same(rec, { id: reqId, hold_state: 'open' }, "A's request record exists, with an open hold");
  for (const p of [
    `/v1/requests/${reqId}`,
    `/v1/requests?id=${reqId}`,
    `/v1/me/requests`,
    `/v1/video/generations/${reqId}`,
    `/v1/images/generations/${reqId}`,
  ]) {
    const r = await g.call('GET', p, { key: b.key });
    t.equal(r.status, 404, `GET ${p.replace(reqId, '{A req}')} -> 404`);
    t.notOk(r.text.includes('hold') || r.text.includes(a.accountId), 'nothing of the record');
  }
  const me = (await g.call('GET', '/v1/me', { key: b.key })).json;
  t.equal(me.user_id, b.accountId);
  t.same([me.key.ink_reserved, me.key.ink_charged, me.ink.balance], [0, 0, 1_000], "none of A's hold shows on B");
  const meA = (await g.call('GET', '/v1/me', { key: a.key })).json;
  t.equal(meA.key.ink_reserved, v.json.ink_reserved, 'A sees its own hold');
  ark.advance(RENDER_MS + 1_000);
  await g.gw.jobs.runner.tick();
  await assertLedgerInvariant(t, pool);
});

for (const kind of ['video', 'images'] as const) {
  t.test(`${kind}: another account's Idempotency-Key is invisible: same body, other body, while in flight`, async (t) => {
    const a = await funded();
    const b = await funded();
    const path = `/v1/${kind}/generations`;
    const body = kind === 'video' ? VIDEO : IMAGE;
    const idem = { 'idempotency-key': `shared-${kind}` };
    const ra = await g.call('POST', path, { key: a.key, body, headers: idem });
    t.equal(ra.status, 202);
    // Same key, same body: a new generation of B's own, not A's replay.
    const same = await g.call('POST', path, { key: b.key, body, headers: idem });
    t.equal(same.status, 202);
    t.not(same.json.id, ra.json.id, 'a generation of its own');
    t.equal(same.headers['idempotent-replayed'], undefined, 'not a replay');
    t.equal(same.json.request.prompt, body.prompt);
    // Same key, another body, another account: a new submit, not a replay of A's.
    const c = await funded();
    const diff = await g.call('POST', path, { key: c.key, body: { ...body, prompt: 'something else' }, headers: idem });
    t.equal(diff.status, 202, 'a different body under the same key on another account is simply a new submit');
    t.not(diff.json.id, ra.json.id);
    // A's own retry still replays A's generation, byte for byte.
    const again = await g.call('POST', path, { key: a.key, body, headers: idem });
    t.equal(again.headers['idempotent-replayed'], 'true');
    t.equal(again.text, ra.text, "A's replay is A's original body");
    if (kind === 'video') {
      // While A's submit is still in flight (held inside the vendor create), B's use of the key is not 409.
      const inflight = { 'idempotency-key': 'shared-inflight' };
      const create = holdNextCreate(ark);
      const d = await funded();
      const pending = g.call('POST', path, { key: d.key, body, headers: inflight });
      await create.entered;
      const e = await funded();
      const during = await g.call('POST', path, { key: e.key, body, headers: inflight });
      create.release();
      const first = await pending;
      t.equal(first.status, 202);
      t.equal(during.status, 202, 'not 409 idempotency_key_in_use: the other account key is not visible');
      t.not(during.json.id, first.json.id);
    }
    // B reading A's generation by the id from A's replay: still 404.
    t.equal((await g.call('GET', `${path}/${ra.json.id}`, { key: b.key })).status, 404);
    const holds = (
      await pool.query(`SELECT account_id, count(*)::int AS n FROM requests WHERE account_id = ANY($1) GROUP BY account_id`, [
        [a.accountId, b.accountId, c.accountId],
      ])
    ).rows;
    t.same(
      holds.map((h) => h.n),
      [1, 1, 1],
      'one hold per account: no account paid for another',
    );
    ark.advance(RENDER_MS + 1_000);
    await g.gw.jobs.runner.tick();
    await assertLedgerInvariant(t, pool);
  });
}
