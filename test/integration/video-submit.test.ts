// Submit over HTTP: body and header errors, the documented order of checks, tier, availability,
// reference URLs fetched once, admission (402s, daily cap, 2 per account under concurrency) and the
// vendor's refusals — every refusal leaves the wallet untouched.
import t, { type Test } from 'tap';
import { setAccountPlan } from '../../src/accounts/accounts.js';
import { pauseModel, resumeModel, setLane } from '../../src/deployment/state.js';
import { secondsUntilUtcMidnight } from '../../src/generations/plan-access.js';
import { videoClipInk } from '../../src/catalog/pricing.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';
import { runToEnd, startVideoHarness, walletOf } from './video-harness.js';

const h = await startVideoHarness(t);
const pool = h.services.pool;
const priceSet = h.config.pricing.videoPriceSet;
const check = (name: string, fn: (t: Test) => Promise<void>) =>
  t.test(name, async (t) => {
    await fn(t);
    await assertLedgerInvariant(t, pool);
  });
const ok = { model: 'clip-2.0-fast', prompt: 'a lighthouse at dusk' };
const generationsOf = async (accountId: string) =>
  (
    await pool.query<{ state: string; hold_state: string }>(
      'SELECT g.state, r.hold_state FROM generations g JOIN requests r ON r.id = g.request_id WHERE g.account_id = $1 ORDER BY g.created_at',
      [accountId],
    )
  ).rows;

check('body and header errors', async (t) => {
  const { key, accountId } = await h.funded(1_000);
  const raw = (body: string, headers: Record<string, string> = {}) =>
    h.tg.call('POST', '/v1/video/generations', { key, body, headers: { 'content-type': 'application/json', ...headers } });
  let r = await h.tg.call('POST', '/v1/video/generations', { key, body: JSON.stringify(ok), headers: { 'content-type': 'text/plain' } });
  t.equal(r.status, 415);
  t.equal(r.json.error.code, 'unsupported_media_type');
  r = await raw('{"model":');
  t.equal(r.json.error.code, 'invalid_json');
  r = await raw('[1,2]');
  t.equal(r.json.error.code, 'invalid_body');
  r = await raw(JSON.stringify({ ...ok, metadata: { pad: 'x'.repeat(70_000) } }));
  t.equal(r.status, 413);
  t.equal(r.json.error.code, 'payload_too_large');
  for (const bad of ['', 'has space', 'ü', 'a'.repeat(129), 'semi;colon']) {
    r = await h.submit(key, ok, { 'idempotency-key': bad });
    t.equal(r.json?.error?.code, 'invalid_idempotency_key', `Idempotency-Key ${JSON.stringify(bad.slice(0, 20))}`);
    t.equal(r.status, 400);
  }
  r = await h.submit(key, { ...ok, duration: 'auto' });
  t.same([r.status, r.json.error.code, r.json.error.param, r.json.error.type], [400, 'unsupported_parameter', 'duration', 'invalid_request_error']);
  r = await h.submit(key, { ...ok, resolution: '1080p' });
  t.same([r.json.error.code, r.json.error.param], ['unsupported_resolution', 'resolution']);
  r = await h.submit(key, {
    model: 'clip-2.5',
    prompt: 'x',
    reference_image_urls: ['https://cdn.example.com/a.png'],
    first_frame_url: 'https://cdn.example.com/b.png',
  });
  t.same([r.json.error.code, r.json.error.param], ['conflicting_references', 'reference_image_urls']);
  t.equal(r.json.error.request_id, r.headers['x-request-id']);
  t.same(await generationsOf(accountId), [], 'no row for a refused submit');
  t.equal((await walletOf(h, accountId)).balance, 1_000);
});

check('tier: a plan without video and no pay-as-you-go Ink answers 403 tier_gated (after validation), nothing held', async (t) => {
  // Ink from a grant only (no top-up), then the plan drops to one without video.
  const { key, accountId } = await h.funded(0);
  await h.services.ledger.grant(accountId, 1_000);
  await setAccountPlan(pool, accountId, 'free');
  const creates = h.sim.creates.length;
  let r = await h.submit(key, { model: 'nope' });
  t.equal(r.json.error.code, 'unknown_model', 'validation answers first');
  r = await h.submit(key, ok);
  t.equal(r.status, 403);
  t.same([r.json.error.type, r.json.error.code], ['permission_error', 'tier_gated']);
  t.equal(h.sim.creates.length, creates);
  t.same(await walletOf(h, accountId), { balance: 1_000, held: 0, charged: 0 });
});

check('tier: pay-as-you-go Ink opens video on a plan without it, up to jobs.paygDailyCap a day', async (t) => {
  const { key, accountId } = await h.funded(1_000); // a completed top-up
  await setAccountPlan(pool, accountId, 'free');
  const r = await h.submit(key, ok);
  t.equal(r.status, 202, 'a free plan with pay-as-you-go Ink may generate');
  const cap = h.config.jobs.paygDailyCap;
  const { rows } = await pool.query("SELECT count(*)::int AS n FROM generations WHERE account_id = $1 AND state <> 'voided'", [accountId]);
  t.equal(rows[0].n, 1);
  t.ok(cap >= 1, `pay-as-you-go daily cap ${cap}`);
});

check('lane off or model paused: 503 provider_unavailable with Retry-After, wallet untouched', async (t) => {
  const { key, accountId } = await h.funded(1_000);
  await setLane(pool, 'video', false);
  await h.services.state.refresh();
  let r = await h.submit(key, ok);
  t.equal(r.status, 503);
  t.equal(r.json.error.code, 'provider_unavailable');
  t.match(r.json.error.message, /inkgate lane enable video.*npm run demo/, 'the message says what opens the lane');
  t.ok(Number(r.headers['retry-after']) >= 1);
  await setLane(pool, 'video', true);
  await pauseModel(pool, 'clip-2.0-fast', 120);
  await h.services.state.refresh();
  r = await h.submit(key, ok);
  t.equal(r.status, 503);
  t.equal(r.headers['retry-after'], '120');
  t.equal((await h.submit(key, { ...ok, model: 'clip-2.0' })).status, 202, 'another model is not paused');
  await resumeModel(pool, 'clip-2.0-fast');
  await h.services.state.refresh();
  t.equal((await walletOf(h, accountId)).held, videoClipInk('clip-2.0', '720p', 5, priceSet), 'only the accepted one holds Ink');
});

check('video vendor not configured: 503', async (t) => {
  const h2 = await startVideoHarness(t, { arkConfigured: false });
  const { key, accountId } = await h2.funded(1_000);
  const r = await h2.submit(key, ok);
  t.equal(r.status, 503);
  t.equal(r.json.error.code, 'provider_unavailable');
  t.equal(r.headers['retry-after'], '300');
  t.same(await walletOf(h2, accountId), { balance: 1_000, held: 0, charged: 0 });
  await assertLedgerInvariant(t, h2.services.pool);
});

check('vendor refuses (4xx): 502 provider_error, hold released, row voided, slot freed', async (t) => {
  const { key, accountId } = await h.funded(1_000);
  const creates = h.sim.creates.length;
  const r = await h.submit(key, { ...ok, prompt: 'x [[sim:refuse]]' });
  t.equal(r.status, 502);
  t.same([r.json.error.type, r.json.error.code], ['provider_error', 'provider_error']);
  t.match(r.json.error.message, /InputTextSensitiveContentDetected|refused/);
  t.equal(h.sim.creates.length, creates + 1, 'the vendor was asked once');
  t.same(await walletOf(h, accountId), { balance: 1_000, held: 0, charged: 0 }, 'nothing charged, nothing held');
  t.same(await generationsOf(accountId), [{ state: 'voided', hold_state: 'released' }]);
  const a = await h.submit(key, ok);
  const b = await h.submit(key, ok);
  t.same([a.status, b.status], [202, 202], 'a voided submit holds no concurrency slot');
});

check('vendor unavailable or rate-limiting: 503 with Retry-After, hold released', async (t) => {
  const { key, accountId } = await h.funded(1_000);
  let r = await h.submit(key, { ...ok, prompt: 'x [[sim:unavailable]]' });
  t.equal(r.status, 503);
  t.equal(r.json.error.code, 'provider_unavailable');
  t.equal(r.headers['retry-after'], '30');
  r = await h.submit(key, { ...ok, prompt: 'x [[sim:ratelimit]]' });
  t.equal(r.status, 503);
  t.equal(r.headers['retry-after'], '7', "the vendor's Retry-After is passed on");
  t.same(await walletOf(h, accountId), { balance: 1_000, held: 0, charged: 0 });
  t.same(
    (await generationsOf(accountId)).map((g) => g.hold_state),
    ['released', 'released'],
  );
});

check('the vendor never sees prompt flags that would change the render', async (t) => {
  const { key } = await h.funded(1_000);
  const r = await h.submit(key, { ...ok, prompt: 'a cat --rs 1080p --dur 12 --wm true, a--rs stays' });
  t.equal(r.status, 202);
  t.equal(r.json.request.prompt, 'a cat --rs 1080p --dur 12 --wm true, a--rs stays', 'the request echo is what the client sent');
  const sent = h.sim.creates.at(-1)!.content as Array<{ text?: string }>;
  t.equal(sent[0]!.text, 'a cat rs 1080p dur 12 wm true, a--rs stays');
});

check('every reference URL is fetched once at submit (HEAD, else GET), not kept', async (t) => {
  const { key, accountId } = await h.funded(5_000);
  const before = h.refs.requests.length;
  const urls = [h.ref('/ok/1.png'), h.ref('/no-head/2.png'), h.ref('/ok/1.png')];
  const r = await h.submit(key, { model: 'clip-2.0', reference_image_urls: urls });
  t.equal(r.status, 202, 'no prompt needed: image references carry the intent');
  t.same(r.json.request.reference_image_urls, urls, 'the list in the order given, duplicates kept');
  const seen = h.refs.requests.slice(before).map((q) => `${q.method} ${q.url}`);
  t.same(seen.sort(), ['GET /no-head/2.png', 'HEAD /no-head/2.png', 'HEAD /ok/1.png'], 'each distinct URL once; GET only where HEAD is refused');
  const sent = h.sim.creates.at(-1)!.content as Array<Record<string, unknown>>;
  t.same(
    sent.map((c) => c.role),
    ['reference_image', 'reference_image', 'reference_image'],
  );
  t.same(
    sent.map((c) => (c.image_url as { url: string }).url),
    urls,
    'the vendor gets the URLs in order',
  );

  const creates = h.sim.creates.length;
  const bad = await h.submit(key, { model: 'clip-2.0', prompt: 'x', reference_image_urls: [h.ref('/ok/3.png'), h.ref('/missing.png')] });
  t.equal(bad.status, 400);
  t.same([bad.json.error.code, bad.json.error.param], ['invalid_url', 'reference_image_urls[1]']);
  t.notMatch(bad.json.error.message, /404|answered/, 'what the server answered stays in the log');
  t.equal(h.sim.creates.length, creates, 'no vendor task');
  const notAllowed = await h.submit(key, { model: 'clip-2.5', first_frame_url: 'https://127.0.0.1:9/x.png' });
  t.same([notAllowed.json.error.code, notAllowed.json.error.param], ['invalid_url', 'first_frame_url'], 'a loopback URL off the test allow-list is refused');
  t.equal((await walletOf(h, accountId)).held, r.json.ink_reserved, 'only the accepted submit holds Ink');
});

check('402: insufficient Ink and the key cap, before anything is created', async (t) => {
  const poor = await h.funded(50);
  const creates = h.sim.creates.length;
  let r = await h.submit(poor.key, { ...ok, duration: 10 });
  t.equal(r.status, 402);
  t.same([r.json.error.type, r.json.error.code], ['insufficient_ink_error', 'insufficient_ink']);
  t.match(r.json.error.message, /121 Ink/);
  t.match(r.json.error.message, /50 Ink/);
  const capped = await h.funded(5_000, 'pro', 100);
  r = await h.submit(capped.key, { ...ok, duration: 10 });
  t.equal(r.status, 402);
  t.equal(r.json.error.code, 'key_ink_limit_reached');
  t.equal(h.sim.creates.length, creates);
  t.same(await generationsOf(poor.accountId), []);
  t.same(await walletOf(h, poor.accountId), { balance: 50, held: 0, charged: 0 });
});

check('daily cap: 429 daily_cap_reached until 00:00 UTC', async (t) => {
  await pool.query(`INSERT INTO plans (id, label, paid, video_allowed, daily_generation_cap, period_grant_ink) VALUES ('tiny', 'Tiny', true, true, 2, 0)`);
  const { key, accountId } = await h.funded(2_000, 'pro');
  await setAccountPlan(pool, accountId, 'tiny');
  const first = await h.submit(key, { ...ok, prompt: 'x [[sim:fail]]' });
  t.equal(first.status, 202);
  await runToEnd(h, key, first.json.id);
  t.equal((await h.get(key, first.json.id)).json.status, 'failed');
  t.equal((await h.submit(key, ok)).status, 202);
  const r = await h.submit(key, ok);
  t.equal(r.status, 429);
  t.same([r.json.error.type, r.json.error.code], ['rate_limit_error', 'daily_cap_reached']);
  const wait = Number(r.headers['retry-after']);
  const expected = secondsUntilUtcMidnight(h.sim.now());
  t.ok(Math.abs(wait - expected) <= 2, `Retry-After ${wait} = seconds until 00:00 UTC (${expected})`);
  h.advance(wait * 1000 + 1000);
  // The running one still counts toward concurrency, not toward the new day.
  t.equal((await h.submit(key, ok)).status, 202, 'a new UTC day starts a new count');
});

check('at most 2 queued/running per account: 10 simultaneous submits admit exactly 2', async (t) => {
  const { key, accountId } = await h.funded(10_000);
  const creates = h.sim.creates.length;
  const replies = await Promise.all(Array.from({ length: 10 }, () => h.submit(key, ok)));
  const accepted = replies.filter((r) => r.status === 202);
  const limited = replies.filter((r) => r.status === 429);
  t.equal(accepted.length, 2, 'exactly 2 accepted');
  t.equal(limited.length, 8);
  for (const r of limited) {
    t.equal(r.json.error.code, 'concurrency_limit');
    t.equal(r.headers['retry-after'], '15');
  }
  t.equal(h.sim.creates.length, creates + 2, 'two vendor tasks');
  const hold = videoClipInk('clip-2.0-fast', '720p', 5, priceSet);
  t.same(await walletOf(h, accountId), { balance: 10_000 - 2 * hold, held: 2 * hold, charged: 0 }, 'two holds, no overspend');
  t.equal((await h.submit(key, ok)).status, 429);
  await runToEnd(h, key, accepted[0]!.json.id);
  await runToEnd(h, key, accepted[1]!.json.id);
  t.equal((await h.submit(key, ok)).status, 202, 'a finished generation frees its slot');
  t.equal((await generationsOf(accountId)).length, 3);
});

check('admission under concurrency across two accounts of one wallet-sized budget does not overspend', async (t) => {
  // 10 submits on 5 accounts (2 slots each) at once, each wallet holding exactly one clip.
  const hold = videoClipInk('clip-2.0-fast', '720p', 5, priceSet);
  const accounts = await Promise.all(Array.from({ length: 5 }, () => h.funded(hold)));
  const replies = await Promise.all(accounts.flatMap((a) => [h.submit(a.key, ok), h.submit(a.key, ok)]));
  t.equal(replies.filter((r) => r.status === 202).length, 5, 'one per wallet');
  t.equal(replies.filter((r) => r.status === 402).length, 5);
  for (const a of accounts) t.same(await walletOf(h, a.accountId), { balance: 0, held: hold, charged: 0 });
});
