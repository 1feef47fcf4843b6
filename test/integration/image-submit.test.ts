// Submitting image generations over HTTP: bad bodies and fields (nothing held), references checked
// before admission, Idempotency-Key retries, tier / Ink / key cap, and the admission decision:
// images have their own concurrency slots and their own daily count, apart from video.
import t, { type Test } from 'tap';
import { setAccountPlan } from '../../src/accounts/accounts.js';
import { admissionCounts } from '../../src/generations/store.js';
import { startArkSimulator } from '../../simulators/ark/simulator.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';
import { rowOf, runToEnd, START_MS, startImageHarness, walletOf } from './image-harness.js';

const ark = await startArkSimulator({ renderMs: 60_000 });
t.teardown(() => ark.close());
const h = await startImageHarness(t, { config: { vendors: { ark: { baseUrl: ark.url, apiKey: ark.apiKey } } } });
const pool = h.services.pool;
const ok = { model: 'image-1', prompt: 'a red kite over dunes' };
const check = (name: string, fn: (t: Test) => Promise<void>) =>
  t.test(name, async (t) => {
    await fn(t);
    await assertLedgerInvariant(t, pool);
  });
const generationsOf = async (accountId: string) => (await pool.query('SELECT id FROM generations WHERE account_id = $1', [accountId])).rows;

check('bad bodies and bad fields: 4xx with code and param, nothing held, nothing created', async (t) => {
  const { key, accountId } = await h.funded(100);
  const raw = async (body: string, ct = 'application/json') => h.tg.call('POST', '/v1/images/generations', { key, body, headers: { 'content-type': ct } });
  let r = await raw('{"model":');
  t.same([r.status, r.json.error.code], [400, 'invalid_json']);
  r = await raw('[1]');
  t.same([r.status, r.json.error.code], [400, 'invalid_body']);
  r = await raw(JSON.stringify(ok), 'text/plain');
  t.same([r.status, r.json.error.code], [415, 'unsupported_media_type']);
  r = await raw(JSON.stringify({ ...ok, prompt: 'x'.repeat(140_000) }));
  t.same([r.status, r.json.error.code], [413, 'payload_too_large']);
  // The largest valid body is accepted by the body limit (then answered by the fields).
  const biggest = {
    ...ok,
    prompt: '\u{1F600}'.repeat(8000),
    metadata: { m: 'x'.repeat(4000) },
    reference_image_urls: Array.from({ length: 14 }, () => 'https://10.1.2.3/' + 'a'.repeat(2025)),
  };
  r = await raw(JSON.stringify(biggest));
  t.same([r.status, r.json.error.code, r.json.error.param], [400, 'invalid_url', 'reference_image_urls[0]'], 'not 413: a maximal body is read and validated');
  const fields: Array<[Record<string, unknown>, string, string]> = [
    [{ prompt: 'x' }, 'unknown_model', 'model'],
    [{ ...ok, model: 'clip-2.5' }, 'unknown_model', 'model'],
    [{ ...ok, n: 2 }, 'unsupported_parameter', 'n'],
    [{ ...ok, prompt: ['x'] }, 'invalid_type', 'prompt'],
    [{ ...ok, prompt: 'x'.repeat(8001) }, 'too_long', 'prompt'],
    [{ ...ok, size: '3K' }, 'invalid_enum', 'size'],
    [{ ...ok, aspect_ratio: '1:2' }, 'invalid_enum', 'aspect_ratio'],
    [{ ...ok, seed: 'seven' }, 'invalid_seed', 'seed'],
    [{ ...ok, reference_image_urls: {} }, 'invalid_type', 'reference_image_urls'],
    [{ ...ok, reference_image_urls: Array.from({ length: 15 }, () => h.ref('/ok.png')) }, 'too_many', 'reference_image_urls'],
    [{ ...ok, reference_image_urls: [h.ref('/ok.png'), 1] }, 'invalid_type', 'reference_image_urls[1]'],
    [{ ...ok, reference_image_urls: ['ftp://cdn.example.com/a.png'] }, 'invalid_url', 'reference_image_urls[0]'],
    [{ ...ok, reference_image_urls: ['https://cdn.invalid/a.png'] }, 'invalid_url', 'reference_image_urls[0]'],
    [{ ...ok, metadata: 'tag' }, 'invalid_type', 'metadata'],
    [{ ...ok, metadata: { a: 'x'.repeat(5000) } }, 'too_long', 'metadata'],
    [{ model: 'image-1', prompt: ' ' }, 'missing_prompt', 'prompt'],
  ];
  for (const [body, code, param] of fields) {
    r = await h.submit(key, body);
    t.same([r.status, r.json.error.type, r.json.error.code, r.json.error.param], [400, 'invalid_request_error', code, param], `${code} ${param}`);
  }
  r = await h.submit(key, ok, { 'idempotency-key': 'bad key!' });
  t.same([r.status, r.json.error.code, r.json.error.param], [400, 'invalid_idempotency_key', 'Idempotency-Key']);
  t.same(await generationsOf(accountId), []);
  t.same(await walletOf(h, accountId), { balance: 100, held: 0, charged: 0 });
});

check('references are fetched before admission: an unreachable one is invalid_url with its index', async (t) => {
  const { key, accountId } = await h.funded(100);
  const r = await h.submit(key, { ...ok, reference_image_urls: [h.ref('/ok.png'), h.ref('/missing.png')] });
  t.same([r.status, r.json.error.code, r.json.error.param], [400, 'invalid_url', 'reference_image_urls[1]']);
  const off = await h.submit(key, { ...ok, reference_image_urls: ['https://127.0.0.1:9/x.png'] });
  t.same([off.json.error.code, off.json.error.param], ['invalid_url', 'reference_image_urls[0]'], 'a loopback URL off the test allow-list');
  t.same(await generationsOf(accountId), []);
  t.same(await walletOf(h, accountId), { balance: 100, held: 0, charged: 0 });
});

check('Idempotency-Key: a retry replays the same generation; one hold, one vendor call', async (t) => {
  const { key, accountId } = await h.funded(100);
  const body = { ...ok, size: '4K', metadata: { z: 1, a: 2 } };
  const first = await h.submit(key, body, { 'idempotency-key': 'img-1' });
  t.equal(first.status, 202);
  t.equal(first.headers['idempotent-replayed'], undefined);
  const again = await h.submit(key, { metadata: { a: 2, z: 1 }, size: '4K', ...ok }, { 'idempotency-key': 'img-1' });
  t.equal(again.status, 202);
  t.equal(again.headers['idempotent-replayed'], 'true');
  t.equal(again.text, first.text, 'byte for byte the first 202 (keys in any order mean the same body)');
  const calls = h.sim.calls.length;
  await h.engine.tick();
  t.equal(h.sim.calls.length, calls + 1, 'one vendor call');
  const late = await h.submit(key, body, { 'idempotency-key': 'img-1' });
  t.equal(late.json.id, first.json.id, 'a retry after it finished still names the same generation');
  t.equal(late.json.status, 'queued', 'the replay is the original 202 body');
  t.equal((await h.get(key, first.json.id)).json.status, 'succeeded');
  // Another body under the same key: still the original 202 (docs/api/video.md: a new intent needs a new key).
  const other = await h.submit(key, { ...body, prompt: 'another', size: '1K' }, { 'idempotency-key': 'img-1' });
  t.equal(other.status, 202);
  t.equal(other.headers['idempotent-replayed'], 'true');
  t.equal(other.json.id, first.json.id, 'the first request is what the key means');
  t.same(await walletOf(h, accountId), { balance: 90, held: 0, charged: 10 });
  // The video endpoint has its own key space: the same key there admits a new video generation.
  const video = await h.tg.call('POST', '/v1/video/generations', {
    key,
    body: { model: 'clip-2.0-fast', prompt: 'x', duration: 4, resolution: '480p' },
    headers: { 'idempotency-key': 'img-1' },
  });
  t.equal(video.status, 202, 'a new submit, not the image replayed');
  t.equal(video.headers['idempotent-replayed'], undefined);
  t.match(video.json.id, /^vgen_/);
  t.same(await walletOf(h, accountId), { balance: 90 - video.json.ink_reserved, held: video.json.ink_reserved, charged: 10 });
  t.equal((await generationsOf(accountId)).length, 2);
});

check('Idempotency-Key: a refused submit (402) binds nothing, so the same key works after a top-up', async (t) => {
  const { key, accountId } = await h.funded(2);
  const r = await h.submit(key, ok, { 'idempotency-key': 'retry-after-topup' });
  t.same([r.status, r.json.error.code], [402, 'insufficient_ink']);
  t.match(r.json.error.message, /3 Ink/);
  await h.services.ledger.topUp(accountId, 10);
  const again = await h.submit(key, ok, { 'idempotency-key': 'retry-after-topup' });
  t.equal(again.status, 202);
  t.equal(again.headers['idempotent-replayed'], undefined);
  t.same(await walletOf(h, accountId), { balance: 9, held: 3, charged: 0 });
  await runToEnd(h, key, again.json.id);
});

check('tier, Ink and key cap: 403 / 402 before anything is created', async (t) => {
  // A grant only (no pay-as-you-go top-up) on a plan without generations: gated.
  const free = await h.funded(0);
  await h.services.ledger.grant(free.accountId, 100);
  await setAccountPlan(pool, free.accountId, 'free');
  let r = await h.submit(free.key, ok);
  t.same([r.status, r.json.error.code], [403, 'tier_gated']);
  t.same(await walletOf(h, free.accountId), { balance: 100, held: 0, charged: 0 });
  const capped = await h.funded(100, 'pro', 5);
  r = await h.submit(capped.key, { ...ok, size: '2K' });
  t.equal(r.status, 202);
  r = await h.submit(capped.key, { ...ok, size: '2K' });
  t.same([r.status, r.json.error.code], [402, 'key_ink_limit_reached']);
  const [only] = await generationsOf(capped.accountId);
  t.equal((await rowOf(h, only.id)).hold_ink, 4);
  await runToEnd(h, capped.key, only.id);
  t.equal((await generationsOf(capped.accountId)).length, 1);
  t.same(await generationsOf(free.accountId), []);
});

check('concurrency: images have their own slots, apart from video', async (t) => {
  const { key, accountId } = await h.funded(5_000);
  const max = h.config.jobs.maxRunningPerAccount;
  const imgs: string[] = [];
  for (let i = 0; i < max; i++) {
    const r = await h.submit(key, ok);
    t.equal(r.status, 202);
    imgs.push(r.json.id);
  }
  let r = await h.submit(key, ok);
  t.same([r.status, r.json.error.code, r.headers['retry-after']], [429, 'concurrency_limit', '15']);
  t.match(r.json.error.message, /image generations/);
  // Video slots are untouched by images in flight...
  for (let i = 0; i < max; i++) {
    const v = await h.tg.call('POST', '/v1/video/generations', { key, body: { model: 'clip-2.0-fast', prompt: 'x', resolution: '480p', duration: 4 } });
    t.equal(v.status, 202, 'a video is admitted while images fill their slots');
  }
  const v = await h.tg.call('POST', '/v1/video/generations', { key, body: { model: 'clip-2.0-fast', prompt: 'x', resolution: '480p', duration: 4 } });
  t.same([v.status, v.json.error.code], [429, 'concurrency_limit'], 'video has its own limit');
  const day = Math.floor(h.now() / 86_400_000) * 86_400_000;
  t.same(await admissionCounts(pool, accountId, day, 'image'), { active: max, today: max });
  t.same(await admissionCounts(pool, accountId, day, 'video'), { active: max, today: max });
  // ...and when the images finish, images are admitted again although the videos still run.
  await h.engine.tick();
  for (const id of imgs) t.equal((await h.get(key, id)).json.status, 'succeeded');
  r = await h.submit(key, ok);
  t.equal(r.status, 202, 'image admitted with both video slots busy');
  await h.engine.tick();
});

check('daily cap: images count apart from video against the plan cap; 429 until 00:00 UTC', async (t) => {
  await pool.query(`INSERT INTO plans (id, label, paid, video_allowed, daily_generation_cap, period_grant_ink) VALUES ('tiny-img', 'Tiny', true, true, 2, 0)`);
  const { key, accountId } = await h.funded(1_000, 'tiny-img');
  for (let i = 0; i < 2; i++) {
    const r = await h.submit(key, ok);
    t.equal(r.status, 202);
    await runToEnd(h, key, r.json.id);
  }
  const r = await h.submit(key, ok);
  t.same([r.status, r.json.error.code], [429, 'daily_cap_reached']);
  const secondsToMidnight = Math.ceil((Math.floor(h.now() / 86_400_000) * 86_400_000 + 86_400_000 - h.now()) / 1000);
  t.equal(Number(r.headers['retry-after']), secondsToMidnight);
  t.ok(h.now() > START_MS);
  const v = await h.tg.call('POST', '/v1/video/generations', { key, body: { model: 'clip-2.0-fast', prompt: 'x', resolution: '480p', duration: 4 } });
  t.equal(v.status, 202, 'the video count is its own');
  h.advance(secondsToMidnight * 1000);
  const next = await h.submit(key, ok);
  t.equal(next.status, 202, 'a new UTC day');
  await h.engine.tick();
  t.equal((await h.get(key, next.json.id)).json.status, 'succeeded');
  t.equal((await generationsOf(accountId)).length, 4);
});

check('the catalogue card of image-1 shows the per-image prices', async (t) => {
  const r = await h.tg.call('GET', '/v1/models/image-1');
  t.equal(r.status, 200);
  t.equal(r.json.type, 'image');
  t.same(r.json.pricing.ink_per_image, { '1K': 3, '2K': 4, '4K': 10 });
  t.same(r.json.pricing.usd_payg_per_image, { '1K': 0.03, '2K': 0.04, '4K': 0.1 });
});

t.test('image vendor not configured: 503 provider_unavailable after validation, nothing held', async (t) => {
  const off = await startImageHarness(t, { geminiConfigured: false });
  const { key, accountId } = await off.funded(100);
  const bad = await off.submit(key, { ...ok, size: '5K' });
  t.equal(bad.json.error.code, 'invalid_enum', 'validation first');
  const r = await off.submit(key, ok);
  t.same([r.status, r.json.error.code], [503, 'provider_unavailable']);
  t.match(r.json.error.message, /INKGATE_GEMINI_BASE_URL.*inkgate lane enable images.*npm run demo/, 'the message says what opens the lane');
  t.ok(Number(r.headers['retry-after']) > 0);
  t.same(await walletOf(off, accountId), { balance: 100, held: 0, charged: 0 });
  await assertLedgerInvariant(t, off.services.pool);
});
