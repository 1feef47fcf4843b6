// A video generation from submit to download against the Ark simulator: polling with back-off,
// queued -> running on the vendor's word, the result stored in the media store and served by a
// fresh signed link, settlement on delivered seconds, every failure refunded, retention, revocation.
import { readFileSync } from 'node:fs';
import t, { type Test } from 'tap';
import { revokeKey } from '../../src/accounts/accounts.js';
import { videoClipInk } from '../../src/catalog/pricing.js';
import { handleMediaRequest } from '../../src/media/media-host.js';
import { SAMPLE_MP4_PATH } from '../../simulators/ark/simulator.js';
import { resultKey, MAX_PERSIST_ATTEMPTS } from '../../src/generations/video/run.js';
import { mediaHostHandler } from '../../src/generations/routes.js';
import { KeyAuthenticator } from '../../src/auth/authenticate.js';
import { Router } from '../../src/server/router.js';
import { startServer } from '../../src/server/server.js';
import { silentLogger } from '../../src/util/log.js';
import { Client, request } from 'undici';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';
import { testEngines } from '../helpers/engines.js';
import { QUEUE_MS, RENDER_MS, rowOf, runToEnd, startVideoHarness, walletOf } from './video-harness.js';

const h = await startVideoHarness(t);
const pool = h.services.pool;
const fixture = readFileSync(SAMPLE_MP4_PATH);
const priceSet = h.config.pricing.videoPriceSet;
/** A subtest that ends with the ledger invariant over the whole schema. */
const check = (name: string, fn: (t: Test) => Promise<void>) =>
  t.test(name, async (t) => {
    await fn(t);
    await assertLedgerInvariant(t, pool);
  });

async function readStream(s: NodeJS.ReadableStream): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of s as AsyncIterable<Buffer>) chunks.push(c);
  return Buffer.concat(chunks);
}

check('submit -> queued -> running -> succeeded: stored, linked, settled', async (t) => {
  const { key, accountId } = await h.funded(5_000);
  const body = { model: 'clip-2.0-fast', prompt: 'a red fox in snow', duration: 10, metadata: { order: 'A-17', z: 1, a: 2 } };
  const r = await h.submit(key, body);
  t.equal(r.status, 202);
  const g = r.json;
  t.match(g.id, /^vgen_[A-Za-z0-9]{24}$/);
  t.same(Object.keys(g), ['id', 'object', 'status', 'model', 'created_at', 'ink_reserved', 'usd_payg_reserved', 'request']);
  t.equal(g.object, 'video.generation');
  t.equal(g.status, 'queued');
  t.equal(g.ink_reserved, 121, 'clip-2.0-fast, 10 s at 720p: 121 Ink (the published worked check)');
  t.equal(g.ink_reserved, videoClipInk('clip-2.0-fast', '720p', 10, priceSet));
  t.equal(g.usd_payg_reserved, 1.21);
  t.same(g.request, {
    model: 'clip-2.0-fast',
    prompt: 'a red fox in snow',
    aspect_ratio: '16:9',
    resolution: '720p',
    duration: 10,
    generate_audio: true,
    metadata: { order: 'A-17', z: 1, a: 2 },
  });
  t.same(Object.keys(g.request.metadata), ['order', 'z', 'a'], 'metadata echoed in the order sent');
  t.equal(h.sim.creates.length, 1, 'one vendor task');
  const sent = h.sim.creates[0]!;
  t.same(
    Object.keys(sent).sort(),
    ['content', 'duration', 'generate_audio', 'model', 'ratio', 'resolution', 'watermark'],
    'only allow-listed fields reach the vendor',
  );
  t.equal(sent.model, h.services.catalog.video('clip-2.0-fast')!.vendorModel, 'the vendor model id, not ours');
  t.same(sent.content, [{ type: 'text', text: 'a red fox in snow' }]);
  t.same(await walletOf(h, accountId), { balance: 5_000 - 121, held: 121, charged: 0 });

  // Not due before pollIntervalMs: nothing happens.
  t.equal(await h.engine.tick(), 0, 'no row is due before the first poll interval');
  t.equal(await h.step(5_000), 1, 'first poll');
  let row = await rowOf(h, g.id);
  t.equal(row.state, 'queued', 'vendor still queued');
  t.equal(row.next_poll_at.getTime() - h.sim.now() <= 10_000 && row.next_poll_at.getTime() - h.sim.now() > 9_000, true, 'back-off: the second poll 10 s later');
  t.equal((await h.get(key, g.id)).json.status, 'queued');

  await h.step(QUEUE_MS); // vendor now running
  row = await rowOf(h, g.id);
  t.equal(row.state, 'running', "queued -> running on the vendor's word");
  const running = (await h.get(key, g.id)).json;
  t.equal(running.status, 'running');
  t.notOk('completed_at' in running);
  t.notOk('ink_charged' in running, 'no charge fields before a terminal state');
  t.notOk('video' in running);

  const done = await runToEnd(h, key, g.id);
  t.equal(done.status, 'succeeded');
  t.same(Object.keys(done), [
    'id',
    'object',
    'status',
    'model',
    'created_at',
    'completed_at',
    'video',
    'seed',
    'ink_reserved',
    'usd_payg_reserved',
    'ink_charged',
    'usd_payg_charged',
    'request',
  ]);
  t.notOk('progress' in done, 'no progress once finished');
  t.equal(done.ink_charged, 121, '10 s delivered of 10: the whole hold');
  t.equal(done.usd_payg_charged, 1.21);
  t.match(done.video, { content_type: 'video/mp4', duration_seconds: 10, resolution: '720p', aspect_ratio: '16:9', size_bytes: fixture.length });
  t.equal(typeof done.seed, 'number');
  const exp = Date.parse(done.video.expires_at);
  t.ok(Math.abs(exp - (h.sim.now() + 900_000)) < 2_000, 'the link is valid 15 minutes');
  const link = new URL(done.video.url);
  t.equal(link.pathname, `/media/${resultKey(g.id)}`);
  t.equal(link.origin, h.tg.url, 'links go to the gateway itself when INKGATE_MEDIA_URL is unset');
  const served = await handleMediaRequest(
    { path: link.pathname, query: link.search.slice(1) },
    h.deps.media,
    h.deps.mediaSecret,
    Math.floor(h.sim.now() / 1000),
  );
  t.equal(served.status, 200);
  if (served.status === 200) t.ok((await readStream(served.stream)).equals(fixture), "the signed link serves the vendor's MP4, byte for byte");
  t.same(await walletOf(h, accountId), { balance: 5_000 - 121, held: 0, charged: 121 });
  row = await rowOf(h, g.id);
  t.equal(row.hold_state, 'settled');
  t.equal(row.ledger_charged, 121);
  t.equal(row.lease_owner, null, 'no lease left behind');

  // Every read signs a fresh link.
  h.advance(60_000);
  const again = (await h.get(key, g.id)).json;
  t.not(again.video.url, done.video.url, 'a later read gives a fresh link');
  const sameSecond = (await h.get(key, g.id)).json;
  t.not(sameSecond.video.url, again.video.url, 'so does a read in the same second (a nonce in every link)');
  t.ok(Date.parse(again.video.expires_at) > exp);
  const c = await h.content(key, g.id);
  t.equal(c.status, 302);
  const headContent = await h.tg.call('HEAD', `/v1/video/generations/${g.id}/content`, { key });
  t.equal(headContent.status, 302, 'HEAD /content: the same redirect');
  t.equal(headContent.text, '');
  t.match(headContent.headers.location, /\/media\//);
  const loc = new URL(c.headers.location as string);
  t.equal(loc.pathname, link.pathname);
  t.ok(Number(loc.searchParams.get('exp')) * 1000 >= h.sim.now() + 899_000, '/content redirects to a fresh 15-minute link');
  const viaContent = await handleMediaRequest(
    { path: loc.pathname, query: loc.search.slice(1) },
    h.deps.media,
    h.deps.mediaSecret,
    Math.floor(h.sim.now() / 1000),
  );
  t.equal(viaContent.status, 200);
  if (viaContent.status === 200) viaContent.stream.destroy();
  const stale = await handleMediaRequest(
    { path: link.pathname, query: link.search.slice(1) },
    h.deps.media,
    h.deps.mediaSecret,
    Math.floor(h.sim.now() / 1000) + 900,
  );
  t.not(stale.status, 200, 'a link is refused after its 15 minutes');
  if (stale.status === 200) stale.stream.destroy();
  t.equal(h.sim.downloads(), 1, 'the vendor file was downloaded once');
});

for (const engine of testEngines)
  check(`the media host serves a signed link over HTTP (${engine}), and only a signed one`, async (t) => {
    // A server with only the media host on its `other` hook: what the lead wires into the gateway.
    const srv = await startServer({
      engine,
      listen: { ...h.config.server, host: '127.0.0.1', port: 0 },
      router: new Router([]),
      state: h.services.state,
      limiter: h.services.limiter,
      db: pool,
      keys: new KeyAuthenticator(pool),
      requestsPerMinute: 60,
      publicRequestsPerMinute: 60,
      log: silentLogger,
      other: mediaHostHandler(h.deps),
    });
    t.teardown(() => srv.close());
    const { key } = await h.funded(1_000);
    const r = await h.submit(key, { model: 'clip-2.0-fast', prompt: 'x' });
    const done = await runToEnd(h, key, r.json.id);
    const link = new URL(done.video.url);
    const base = `http://127.0.0.1:${srv.port}`;
    const got = await request(base + link.pathname + link.search);
    const bytes = Buffer.from(await got.body.arrayBuffer());
    t.equal(got.statusCode, 200);
    t.equal(got.headers['content-type'], 'video/mp4');
    t.ok(bytes.equals(fixture), 'the MP4, byte for byte');
    // HEAD: the same status and headers with the file's size, no body; the connection stays usable.
    const client = new Client(base, { pipelining: 1 });
    t.teardown(() => client.close());
    const head = await client.request({ method: 'HEAD', path: link.pathname + link.search });
    t.equal(await head.body.text(), '');
    t.equal(head.statusCode, 200);
    t.equal(head.headers['content-type'], 'video/mp4');
    t.equal(Number(head.headers['content-length']), fixture.length, "HEAD declares the MP4's size");
    const after = await client.request({ method: 'GET', path: link.pathname + link.search });
    t.ok(Buffer.from(await after.body.arrayBuffer()).equals(fixture), 'a GET on the same connection after it');
    // The signature's first character changed (to B where it already was A: a replace by the same character would forge nothing).
    const tampered = link.search.replace(/sig=(.)/, (_m, c: string) => (c === 'A' ? 'sig=B' : 'sig=A'));
    const headForged = await client.request({ method: 'HEAD', path: link.pathname + tampered });
    t.equal(await headForged.body.text(), '');
    t.equal(headForged.statusCode, 403);
    const forged = await request(base + link.pathname + tampered);
    await forged.body.text();
    t.equal(forged.statusCode, 403, 'a tampered signature is refused');
    const other = await request(`${base}/elsewhere`);
    await other.body.text();
    t.equal(other.statusCode, 404, 'other paths are not the media host');
  });

check('settles on delivered seconds: 30 requested, 29 delivered is charged 29 s', async (t) => {
  const { key, accountId } = await h.funded(5_000);
  const r = await h.submit(key, { model: 'clip-2.5', prompt: 'waves [[sim:delivered=29]]', duration: 30, resolution: '480p' });
  t.equal(r.status, 202);
  const hold = videoClipInk('clip-2.5', '480p', 30, priceSet);
  t.equal(r.json.ink_reserved, hold);
  const done = await runToEnd(h, key, r.json.id);
  t.equal(done.status, 'succeeded');
  const charge = videoClipInk('clip-2.5', '480p', 29, priceSet);
  t.ok(charge < hold);
  t.equal(done.ink_charged, charge, 'charged for 29 s at the requested resolution, rounded up once');
  t.equal(done.video.duration_seconds, 29);
  t.same(await walletOf(h, accountId), { balance: 5_000 - charge, held: 0, charged: charge });
  const row = await rowOf(h, r.json.id);
  t.match(row.ledger_usage, { seconds_requested: 30, seconds_delivered: 29, seconds_billed: 29 });
});

check('never more than requested; a missing duration bills the requested seconds', async (t) => {
  const { key } = await h.funded(5_000);
  const more = await h.submit(key, { model: 'clip-2.0', prompt: 'x [[sim:delivered=12]]', duration: 8 });
  const none = await h.submit(key, { model: 'clip-2.0', prompt: 'x [[sim:no-duration]]', duration: 6 });
  const a = await runToEnd(h, key, more.json.id);
  const b = await runToEnd(h, key, none.json.id);
  t.equal(a.ink_charged, more.json.ink_reserved, '12 s delivered of 8 requested: charged 8');
  t.equal(b.ink_charged, none.json.ink_reserved, 'no duration reported: charged the requested 6 s');
  t.notOk('duration_seconds' in b.video, 'duration_seconds only when the vendor reports it');
});

for (const [directive, label] of [
  ['fail', 'failed'],
  ['cancelled', 'cancelled'],
  ['expired', 'expired'],
] as const) {
  check(`vendor task ${label} -> failed provider_failed, whole hold refunded`, async (t) => {
    const { key, accountId } = await h.funded(1_000);
    const r = await h.submit(key, { model: 'clip-2.0-fast', prompt: `x [[sim:${directive}]]` });
    t.equal(r.status, 202);
    const done = await runToEnd(h, key, r.json.id);
    t.equal(done.status, 'failed');
    t.same(Object.keys(done), [
      'id',
      'object',
      'status',
      'model',
      'created_at',
      'completed_at',
      'ink_reserved',
      'usd_payg_reserved',
      'ink_charged',
      'usd_payg_charged',
      'request',
      'error',
    ]);
    t.equal(done.ink_charged, 0);
    t.equal(done.usd_payg_charged, 0);
    t.equal(done.error.code, 'provider_failed');
    t.type(done.error.message, 'string');
    t.same(await walletOf(h, accountId), { balance: 1_000, held: 0, charged: 0 });
    t.equal((await rowOf(h, r.json.id)).hold_state, 'refunded');
    const c = await h.content(key, r.json.id);
    t.equal(c.status, 404);
    t.equal(c.json.error.code, 'result_unavailable');
  });
}

check('no result within jobs.timeoutMs -> failed timeout, refunded', async (t) => {
  const { key, accountId } = await h.funded(1_000);
  const r = await h.submit(key, { model: 'clip-2.0-fast', prompt: 'x [[sim:never]]' });
  let g = await runToEnd(h, key, r.json.id, 20_000, 5).catch(() => undefined);
  t.equal(g, undefined, 'still running well before the timeout');
  t.equal((await h.get(key, r.json.id)).json.status, 'running');
  g = await runToEnd(h, key, r.json.id, 60_000, 20);
  t.equal(g!.status, 'failed');
  t.equal(g!.error.code, 'timeout');
  t.ok(Date.parse(g!.completed_at) - Date.parse(g!.created_at) >= h.config.jobs.timeoutMs);
  t.same(await walletOf(h, accountId), { balance: 1_000, held: 0, charged: 0 });
});

check('a result that cannot be downloaded -> failed result_persistence_failed after retries, refunded', async (t) => {
  const { key, accountId } = await h.funded(1_000);
  const before = h.sim.downloads();
  const r = await h.submit(key, { model: 'clip-2.0-fast', prompt: 'x [[sim:bad-download]]' });
  const done = await runToEnd(h, key, r.json.id);
  t.equal(done.status, 'failed');
  t.equal(done.error.code, 'result_persistence_failed');
  t.equal(done.ink_charged, 0);
  t.equal((await rowOf(h, r.json.id)).persist_attempts, MAX_PERSIST_ATTEMPTS - 1, `${MAX_PERSIST_ATTEMPTS} attempts, the last one fails the generation`);
  t.equal(h.sim.downloads(), before, 'nothing was served');
  t.same(await walletOf(h, accountId), { balance: 1_000, held: 0, charged: 0 });
  t.equal(await h.deps.media.open(resultKey(r.json.id)), undefined, 'nothing stored');
});

check('a vendor poll error is retried, not fatal', async (t) => {
  const { key } = await h.funded(1_000);
  const r = await h.submit(key, { model: 'clip-2.0-fast', prompt: 'x [[sim:get-error=2]]' });
  const done = await runToEnd(h, key, r.json.id);
  t.equal(done.status, 'succeeded');
  t.equal((await rowOf(h, r.json.id)).poll_errors, 2);
});

check('GET and /content: ownership and readiness', async (t) => {
  const { key } = await h.funded(1_000);
  const other = await h.funded(1_000);
  const r = await h.submit(key, { model: 'clip-2.0-fast', prompt: 'x' });
  const id = r.json.id;
  const notMine = await h.get(other.key, id);
  t.equal(notMine.status, 404);
  t.equal(notMine.json.error.code, 'generation_not_found');
  t.equal((await h.content(other.key, id)).json.error.code, 'generation_not_found');
  t.equal((await h.get(key, 'vgen_doesnotexist000000000000')).json.error.code, 'generation_not_found');
  t.equal((await h.get(key, 'not-an-id')).status, 404);
  const early = await h.content(key, id);
  t.equal(early.status, 409);
  t.equal(early.json.error.code, 'generation_not_ready');
  await runToEnd(h, key, id);
});

check('a result the vendor serves from its own API origin (http, 127.0.0.1) is downloaded, without the public-https rules', async (t) => {
  // An on-premises or fake Ark: results on the configured base URL's origin, over http.
  const h3 = await startVideoHarness(t, { sim: { tls: undefined } });
  t.match(h3.sim.contentHostPort, /^127\.0\.0\.1:/);
  const { key } = await h3.funded(1_000);
  const r = await h3.submit(key, { model: 'clip-2.0-fast', prompt: 'x' });
  const done = await runToEnd(h3, key, r.json.id);
  t.equal(done.status, 'succeeded');
  const link = new URL(done.video.url);
  const served = await handleMediaRequest(
    { path: link.pathname, query: link.search.slice(1) },
    h3.deps.media,
    h3.deps.mediaSecret,
    Math.floor(h3.sim.now() / 1000),
  );
  t.equal(served.status, 200);
  if (served.status === 200) t.ok((await readStream(served.stream)).equals(fixture), "the vendor's MP4, byte for byte");
  // Any other origin still goes through safeFetch: an http URL elsewhere is refused.
  const other = new URL(`http://127.0.0.1:1/x.mp4`);
  t.equal(
    await h3.deps.ark!.members[0]!.client.downloadOwnResult(other, { maxBytes: 10, timeoutMs: 1000, accept: 'video/*' }),
    undefined,
    'not its origin: not downloaded here',
  );
  await assertLedgerInvariant(t, h3.services.pool);
});

check('progress is shown while queued or running when the vendor reports it', async (t) => {
  const h2 = await startVideoHarness(t, { sim: { reportProgress: true } });
  const { key } = await h2.funded(1_000);
  const r = await h2.submit(key, { model: 'clip-2.0-fast', prompt: 'x' });
  t.notOk('progress' in (await h2.get(key, r.json.id)).json, 'no progress before the vendor said any');
  await h2.step(QUEUE_MS + (RENDER_MS - QUEUE_MS) / 2);
  const mid = (await h2.get(key, r.json.id)).json;
  t.equal(mid.status, 'running');
  t.type(mid.progress, 'number');
  t.ok(mid.progress > 0 && mid.progress < 100, `progress ${mid.progress}`);
  const done = await runToEnd(h2, key, r.json.id);
  t.notOk('progress' in done);
  await assertLedgerInvariant(t, h2.services.pool);
});

check('retention: the file goes, the record stays with result_expired, /content answers 410', async (t) => {
  const { key } = await h.funded(1_000);
  const r = await h.submit(key, { model: 'clip-2.0-fast', prompt: 'x' });
  const done = await runToEnd(h, key, r.json.id);
  t.equal(done.status, 'succeeded');
  const k = resultKey(r.json.id);
  h.advance(6 * 86_400_000);
  t.equal((await h.engine.sweep()).expired, 0, 'not before 7 days');
  t.ok(await h.deps.media.open(k).then((o) => (o?.stream.destroy(), o !== undefined)));
  h.advance(86_400_000);
  t.ok((await h.engine.sweep()).expired >= 1);
  t.equal(await h.deps.media.open(k), undefined, 'the file is gone');
  const g = (await h.get(key, r.json.id)).json;
  t.equal(g.status, 'succeeded');
  t.equal(g.result_expired, true);
  t.notOk('video' in g, 'no link to a deleted file');
  t.equal(g.ink_charged, done.ink_charged, 'the record remains');
  const c = await h.content(key, r.json.id);
  t.equal(c.status, 410);
  t.equal(c.json.error.code, 'result_expired');
});

check('retention: past 7 days the result is gone at once, before the sweep runs', async (t) => {
  const { key } = await h.funded(1_000);
  const r = await h.submit(key, { model: 'clip-2.0-fast', prompt: 'x' });
  const done = await runToEnd(h, key, r.json.id);
  t.equal(done.status, 'succeeded');
  h.advance(7 * 86_400_000 - 60_000);
  const before = (await h.get(key, r.json.id)).json;
  t.ok('video' in before, 'a minute before the 7 days: still there');
  const retentionEndMs = Date.parse(done.completed_at) + 7 * 86_400_000;
  t.equal(Date.parse(before.video.expires_at), Math.floor(retentionEndMs / 1000) * 1000, 'its link expires with the retention, not 15 minutes later');
  t.equal((await h.content(key, r.json.id)).status, 302);
  h.advance(60_000); // exactly 7 days after completion, no sweep in between
  const link = new URL(before.video.url);
  const late = await handleMediaRequest({ path: link.pathname, query: link.search.slice(1) }, h.deps.media, h.deps.mediaSecret, Math.floor(h.sim.now() / 1000));
  if (late.status === 200) late.stream.destroy();
  t.equal(late.status, 403, 'a link read before the end no longer serves the file (still on disk until the sweep)');
  const g = (await h.get(key, r.json.id)).json;
  t.equal(g.status, 'succeeded');
  t.equal(g.result_expired, true);
  t.notOk('video' in g, 'no link');
  const c = await h.content(key, r.json.id);
  t.equal(c.status, 410);
  t.equal(c.json.error.code, 'result_expired');
});

check('revoking the key stops new calls; the running generation finishes and settles', async (t) => {
  const { key, keyId, accountId } = await h.funded(1_000);
  const r = await h.submit(key, { model: 'clip-2.0-fast', prompt: 'x' });
  await h.step(QUEUE_MS + 5_000);
  await revokeKey(pool, keyId);
  const refused = await h.submit(key, { model: 'clip-2.0-fast', prompt: 'y' });
  t.equal(refused.status, 401);
  t.equal(refused.json.error.code, 'invalid_api_key');
  t.equal((await h.get(key, r.json.id)).status, 401);
  for (let i = 0; i < 20 && (await rowOf(h, r.json.id)).state !== 'succeeded'; i++) await h.step(10_000);
  const row = await rowOf(h, r.json.id);
  t.equal(row.state, 'succeeded');
  t.equal(row.hold_state, 'settled');
  t.same(await walletOf(h, accountId), { balance: 1_000 - r.json.ink_reserved, held: 0, charged: r.json.ink_reserved });
});
