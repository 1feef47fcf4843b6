// An image generation from submit to download against the Gemini simulator: the worker calls the
// vendor, stores the real PNG, settles the fixed price; every failure path refunds in full; links
// are fresh 15-minute signatures; retention deletes the file after 7 days (injected clock).
import t, { type Test } from 'tap';
import { handleMediaRequest } from '../../src/media/media-host.js';
import { imageResultKey, MAX_VENDOR_CALLS } from '../../src/generations/images/run.js';
import { imagePixelSize } from '../../src/generations/images/image-size.js';
import { GEMINI_PIXEL_SIZES } from '../../simulators/gemini/simulator.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';
import { rowOf, runToEnd, startImageHarness, walletOf } from './image-harness.js';

const h = await startImageHarness(t);
const pool = h.services.pool;
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

async function serve(url: string, atMs = h.now()) {
  const u = new URL(url);
  return handleMediaRequest({ path: u.pathname, query: u.search.slice(1) }, h.deps.media, h.deps.mediaSecret, Math.floor(atMs / 1000));
}

/** The media host's status for a link at a time (the file stream, if any, is closed). */
async function statusAt(url: string, atMs: number): Promise<number> {
  const r = await serve(url, atMs);
  if (r.status === 200) r.stream.destroy();
  return r.status;
}

check('submit -> queued -> succeeded: a real PNG stored, linked, charged 3 Ink', async (t) => {
  const { key, accountId } = await h.funded(100);
  const r = await h.submit(key, { model: 'image-1', prompt: 'a lighthouse at dusk', metadata: { job: 'A-1', b: 2 } });
  t.equal(r.status, 202);
  const g = r.json;
  t.match(g.id, /^igen_[A-Za-z0-9]{24}$/);
  t.same(Object.keys(g), ['id', 'object', 'status', 'model', 'created_at', 'ink_reserved', 'usd_payg_reserved', 'request']);
  t.equal(g.object, 'image.generation');
  t.equal(g.status, 'queued');
  t.equal(g.ink_reserved, 3);
  t.equal(g.usd_payg_reserved, 0.03);
  t.same(g.request, { model: 'image-1', prompt: 'a lighthouse at dusk', size: '1K', aspect_ratio: '1:1', metadata: { job: 'A-1', b: 2 } });
  t.same(await walletOf(h, accountId), { balance: 97, held: 3, charged: 0 });
  t.equal(h.sim.calls.length, 0, 'the submit does not call the vendor');
  const queued = (await h.get(key, g.id)).json;
  t.equal(queued.status, 'queued');
  t.notOk('image' in queued);
  t.notOk('ink_charged' in queued, 'no charge fields before a terminal state');
  t.equal((await h.content(key, g.id)).json.error.code, 'generation_not_ready');
  t.equal((await h.content(key, g.id)).status, 409);

  t.equal(await h.engine.tick(), 1, 'the row is due at once');
  t.equal(h.sim.calls.length, 1);
  const sent = h.sim.calls[0]!;
  t.equal(sent.model, 'gemini-3-pro-image-preview', 'the vendor model id, not ours');
  t.same(sent.body.generationConfig, { responseModalities: ['TEXT', 'IMAGE'], imageConfig: { aspectRatio: '1:1', imageSize: '1K' } });
  t.same(Object.keys(sent.body).sort(), ['contents', 'generationConfig'], 'only allow-listed fields reach the vendor (no metadata)');

  const done = (await h.get(key, g.id)).json;
  t.equal(done.status, 'succeeded');
  t.same(Object.keys(done), [
    'id',
    'object',
    'status',
    'model',
    'created_at',
    'completed_at',
    'image',
    'ink_reserved',
    'usd_payg_reserved',
    'ink_charged',
    'usd_payg_charged',
    'request',
  ]);
  t.same(Object.keys(done.image), ['url', 'expires_at', 'content_type', 'width', 'height', 'size_bytes']);
  t.equal(done.image.content_type, 'image/png');
  t.equal(done.image.width, 1024);
  t.equal(done.image.height, 1024);
  t.equal(done.ink_charged, 3);
  const text = await h.services.metrics!.registry.metrics();
  const value = (name: string) =>
    Number(
      text
        .split('\n')
        .find((l) => l.startsWith(`${name}{`) && l.includes('product="images"') && l.includes('model="image-1"'))
        ?.split(' ')
        .pop() ?? NaN,
    );
  t.ok(value('inkgate_ink_held_total') >= 3, 'the hold is counted under the images product');
  t.ok(value('inkgate_ink_charged_total') >= 3, 'and the charge');
  t.equal(done.usd_payg_charged, 0.03);
  t.equal(Date.parse(done.image.expires_at), Math.floor(h.now() / 1000) * 1000 + 900_000, 'the link lasts 15 minutes');
  const link = new URL(done.image.url);
  t.equal(link.pathname, `/media/${imageResultKey(g.id, 'image/png')}`);
  const served = await serve(done.image.url);
  t.equal(served.status, 200);
  if (served.status === 200) {
    const bytes = await readStream(served.stream);
    t.equal(bytes.length, done.image.size_bytes);
    t.same(imagePixelSize(bytes), { width: 1024, height: 1024, contentType: 'image/png' }, 'a real PNG of the 1K class');
  }
  t.same(await walletOf(h, accountId), { balance: 97, held: 0, charged: 3 });
  const row = await rowOf(h, g.id);
  t.equal(row.hold_state, 'settled');
  t.equal(row.ledger_product, 'images');
  t.equal(Number(row.ledger_charged), 3);
  t.equal(row.ledger_usage.images, 1);
  t.ok(row.ledger_usage.thinking_tokens > 0, 'thinking tokens recorded with the settlement');
  t.ok(row.vendor_task_id.startsWith('sim'), 'the vendor responseId is recorded');

  // Reading again gives a fresh link; /content redirects to one; an old link dies after 15 minutes.
  h.advance(60_000);
  const again = (await h.get(key, g.id)).json;
  t.not(again.image.url, done.image.url, 'a later read signs a fresh link');
  const c = await h.content(key, g.id);
  t.equal(c.status, 302);
  const loc = new URL(String(c.headers.location));
  t.equal(loc.pathname, link.pathname);
  t.equal(Number(loc.searchParams.get('exp')), Math.floor(h.now() / 1000) + 900);
  t.equal(await statusAt(done.image.url, h.now() + 900_000), 403, 'the first link is refused after its 15 minutes');
  t.equal(await statusAt(loc.href, h.now() + 899_000), 200, 'the fresh one still works');
});

check("each size class and aspect ratio: the PNG has the vendor's pixels, the price is 3 / 4 / 10", async (t) => {
  const { key, accountId } = await h.funded(100);
  const cases = [
    ['2K', '16:9', 4],
    ['4K', '9:16', 10],
    ['1K', '21:9', 3],
  ] as const;
  const ids: string[] = [];
  for (const [size, aspect] of cases) {
    const r = await h.submit(key, { model: 'image-1', prompt: 'p', size, aspect_ratio: aspect });
    t.equal(r.status, 202);
    ids.push(r.json.id);
    await h.engine.tick();
  }
  for (const [i, [size, aspect, ink]] of cases.entries()) {
    const g = (await h.get(key, ids[i]!)).json;
    t.equal(g.status, 'succeeded', `${size} ${aspect}`);
    t.equal(g.ink_charged, ink);
    const [w, hh] = GEMINI_PIXEL_SIZES[aspect]![size];
    t.same([g.image.width, g.image.height], [w, hh]);
    const served = await serve(g.image.url);
    t.equal(served.status, 200, 'the signed link serves the image');
    if (served.status === 200) t.same(imagePixelSize(await readStream(served.stream))?.width, w);
  }
  t.same(await walletOf(h, accountId), { balance: 83, held: 0, charged: 17 });
});

check('references are downloaded and sent inline, in order', async (t) => {
  const { key } = await h.funded(100);
  const refs = [h.ref('/ok-1.png'), h.ref('/no-head.png'), h.ref('/ok-1.png')];
  const r = await h.submit(key, { model: 'image-1', prompt: 'combine', reference_image_urls: refs });
  t.equal(r.status, 202, r.text);
  t.same(r.json.request.reference_image_urls, refs);
  const before = h.sim.calls.length;
  await h.engine.tick();
  const call = h.sim.calls[before]!;
  t.same(
    call.inline,
    refs.map(() => ({ mimeType: 'image/png', sizeBytes: h.refPng.length })),
  );
  const parts = (call.body.contents as any)[0].parts;
  t.same(Object.keys(parts[0]), ['text'], 'the prompt first, then the references');
  t.equal((await h.get(key, r.json.id)).json.status, 'succeeded');
});

/** Submits one prompt and runs it to the end; returns the final record. */
async function runPrompt(t: Test, prompt: string, extra: Record<string, unknown> = {}) {
  const { key, accountId } = await h.funded(100);
  const r = await h.submit(key, { model: 'image-1', prompt, size: '2K', ...extra });
  t.equal(r.status, 202, r.text);
  const done = await runToEnd(h, key, r.json.id);
  return { key, accountId, done, id: r.json.id as string };
}

async function assertRefunded(t: Test, accountId: string, id: string, done: Record<string, any>, code: string) {
  t.equal(done.status, 'failed');
  t.equal(done.error.code, code);
  t.equal(done.ink_charged, 0);
  t.equal(done.usd_payg_charged, 0);
  t.equal(done.ink_reserved, 4);
  t.notOk('image' in done);
  t.same(await walletOf(h, accountId), { balance: 100, held: 0, charged: 0 }, 'refunded in full');
  const row = await rowOf(h, id);
  t.equal(row.hold_state, 'refunded');
}

check('a safety refusal (IMAGE_SAFETY) fails with content_policy and refunds', async (t) => {
  const { accountId, done, id, key } = await runPrompt(t, 'forbidden [[sim:safety]]');
  await assertRefunded(t, accountId, id, done, 'content_policy');
  t.match(done.error.message, /IMAGE_SAFETY/);
  const c = await h.content(key, id);
  t.equal(c.status, 404);
  t.equal(c.json.error.code, 'result_unavailable');
});

check('a blocked prompt (promptFeedback.blockReason) fails with content_policy and refunds', async (t) => {
  const { accountId, done, id } = await runPrompt(t, 'forbidden [[sim:blocked]]');
  await assertRefunded(t, accountId, id, done, 'content_policy');
  t.match(done.error.message, /PROHIBITED_CONTENT/);
});

check('the vendor refuses (400): provider_failed, refunded', async (t) => {
  const { accountId, done, id } = await runPrompt(t, 'x [[sim:refuse]]');
  await assertRefunded(t, accountId, id, done, 'provider_failed');
});

check('the vendor answers text only: provider_failed, refunded', async (t) => {
  const { accountId, done, id } = await runPrompt(t, 'x [[sim:text-only]]');
  await assertRefunded(t, accountId, id, done, 'provider_failed');
});

check('the vendor answers garbage: provider_failed, refunded', async (t) => {
  const { accountId, done, id } = await runPrompt(t, 'x [[sim:garbage]]');
  await assertRefunded(t, accountId, id, done, 'provider_failed');
});

check('a reference that fails to download at run time: provider_failed, refunded, vendor never called', async (t) => {
  const before = h.sim.calls.length;
  const { accountId, done, id } = await runPrompt(t, 'x', { reference_image_urls: [h.ref('/gone-on-get.png')] });
  await assertRefunded(t, accountId, id, done, 'provider_failed');
  t.match(done.error.message, /reference_image_urls\[0\]/);
  t.equal(h.sim.calls.length, before);
});

check('vendor unavailable twice, then it works: retried with back-off, charged once', async (t) => {
  const { key, accountId } = await h.funded(100);
  const r = await h.submit(key, { model: 'image-1', prompt: 'busy [[sim:unavailable=2]]' });
  const id = r.json.id;
  await h.engine.tick();
  let row = await rowOf(h, id);
  t.equal(row.state, 'queued', 'back to queued after a 503');
  t.equal(row.poll_errors, 1);
  t.ok(row.next_poll_at.getTime() > h.now(), 'not due again at once');
  t.equal(await h.engine.tick(), 0, 'nothing due before the back-off');
  const done = await runToEnd(h, key, id);
  t.equal(done.status, 'succeeded');
  t.equal(done.ink_charged, 3);
  row = await rowOf(h, id);
  t.equal(row.polls, 3, 'three vendor calls');
  t.same(await walletOf(h, accountId), { balance: 97, held: 0, charged: 3 });
});

check('vendor unavailable for good: fails after the call budget, refunded', async (t) => {
  const { accountId, done, id } = await runPrompt(t, 'x [[sim:unavailable]]');
  await assertRefunded(t, accountId, id, done, 'provider_failed');
  t.equal((await rowOf(h, id)).polls, MAX_VENDOR_CALLS);
});

check('rate-limited past the job deadline: timeout, refunded', async (t) => {
  const { key, accountId } = await h.funded(100);
  const r = await h.submit(key, { model: 'image-1', prompt: 'x [[sim:ratelimit]]', size: '2K' });
  await h.engine.tick();
  t.equal((await rowOf(h, r.json.id)).state, 'queued');
  const done = await runToEnd(h, key, r.json.id, h.config.jobs.timeoutMs / 2);
  await assertRefunded(t, accountId, r.json.id, done, 'timeout');
});

check('a worker that died mid-call: the row is claimed again after its lease and the call is made again', async (t) => {
  const { key, accountId } = await h.funded(100);
  const r = await h.submit(key, { model: 'image-1', prompt: 'crash test' });
  const id = r.json.id;
  // Simulate the dead worker: the row is `running` under another owner's lease, one call spent.
  await pool.query(`UPDATE generations SET state = 'running', polls = 1, lease_owner = 'dead-instance', lease_expires_at = $2 WHERE id = $1`, [
    id,
    new Date(h.now() + 30_000),
  ]);
  t.equal(await h.engine.tick(), 0, 'a live lease is not taken');
  t.equal(await h.step(30_000), 1, 'a lapsed lease is');
  const done = (await h.get(key, id)).json;
  t.equal(done.status, 'succeeded');
  t.equal((await rowOf(h, id)).polls, 2);
  t.same(await walletOf(h, accountId), { balance: 97, held: 0, charged: 3 });
});

check('a submit that died before handing the row over: refunded when no Idempotency-Key binds it', async (t) => {
  const { key, accountId } = await h.funded(100);
  const r = await h.submit(key, { model: 'image-1', prompt: 'orphan' });
  const id = r.json.id;
  await pool.query(`UPDATE generations SET state = 'submitting', lease_owner = 'dead-instance', lease_expires_at = $2, next_poll_at = $2 WHERE id = $1`, [
    id,
    new Date(h.now() + 30_000),
  ]);
  await h.step(30_000);
  const done = (await h.get(key, id)).json;
  t.equal(done.status, 'failed');
  t.equal(done.error.code, 'provider_failed');
  t.same(await walletOf(h, accountId), { balance: 100, held: 0, charged: 0 });
});

check('a submit that died before handing the row over: run when an Idempotency-Key binds it', async (t) => {
  const { key, accountId } = await h.funded(100);
  const r = await h.submit(key, { model: 'image-1', prompt: 'bound orphan' }, { 'idempotency-key': 'orphan-1' });
  const id = r.json.id;
  await pool.query(`UPDATE generations SET state = 'submitting', lease_owner = 'dead-instance', lease_expires_at = $2, next_poll_at = $2 WHERE id = $1`, [
    id,
    new Date(h.now() + 30_000),
  ]);
  await h.step(30_000);
  t.equal((await h.get(key, id)).json.status, 'succeeded');
  t.same(await walletOf(h, accountId), { balance: 97, held: 0, charged: 3 });
});

check('the gateway serves the signed link over HTTP: the PNG with its content type, no API key needed', async (t) => {
  const { key } = await h.funded(100);
  const r = await h.submit(key, { model: 'image-1', prompt: 'over the wire', aspect_ratio: '4:3' });
  await h.engine.tick();
  const c = await h.content(key, r.json.id);
  t.equal(c.status, 302);
  const loc = new URL(String(c.headers.location));
  const got = await h.tg.call('GET', loc.pathname + loc.search);
  t.equal(got.status, 200);
  t.equal(got.headers['content-type'], 'image/png');
  const res = await fetch(h.tg.url + loc.pathname + loc.search);
  const bytes = Buffer.from(await res.arrayBuffer());
  t.same(imagePixelSize(bytes), { width: 1200, height: 896, contentType: 'image/png' });
  const sig = loc.searchParams.get('sig')!;
  const forgedUrl = new URL(loc.href);
  forgedUrl.searchParams.set('sig', (sig[0] === 'A' ? 'B' : 'A') + sig.slice(1));
  const forged = await h.tg.call('GET', forgedUrl.pathname + forgedUrl.search);
  t.equal(forged.status, 403);
});

check('retention: after 7 days the file is deleted, GET says result_expired, /content answers 410', async (t) => {
  const { key } = await h.funded(100);
  const r = await h.submit(key, { model: 'image-1', prompt: 'keep me' });
  await h.engine.tick();
  const done = (await h.get(key, r.json.id)).json;
  t.equal(done.status, 'succeeded');
  const mediaKey = imageResultKey(r.json.id, 'image/png');
  h.advance(7 * 86_400_000 - 60_000);
  await h.engine.sweep();
  t.equal((await h.get(key, r.json.id)).json.status, 'succeeded');
  t.notOk((await h.get(key, r.json.id)).json.result_expired, 'not before 7 days');
  h.advance(60_000);
  const rep = await h.engine.sweep();
  t.ok(rep.expired >= 1);
  const after = (await h.get(key, r.json.id)).json;
  t.equal(after.result_expired, true);
  t.notOk('image' in after, 'no link to a deleted file');
  t.equal(after.ink_charged, 3, 'the record and its charge stay');
  const c = await h.content(key, r.json.id);
  t.equal(c.status, 410);
  t.equal(c.json.error.code, 'result_expired');
  t.equal(await h.deps.media.open(mediaKey), undefined, 'the file is gone');
});

check("another account's generation is a 404, as is an unknown or malformed id, and a video id", async (t) => {
  const a = await h.funded(100);
  const b = await h.funded(100);
  const r = await h.submit(a.key, { model: 'image-1', prompt: 'mine' });
  await h.engine.tick();
  for (const path of [r.json.id, 'igen_doesnotexist', 'nope', 'vgen_abc']) {
    const g = await h.get(b.key, path);
    t.equal(g.status, 404, path);
    t.equal(g.json.error.code, 'generation_not_found');
  }
  const c = await h.content(b.key, r.json.id);
  t.equal(c.status, 404);
  t.equal(c.json.error.code, 'generation_not_found');
  t.equal((await h.get(a.key, r.json.id)).status, 200);
  t.equal((await h.tg.call('GET', `/v1/video/generations/${r.json.id}`, { key: a.key })).status, 404, 'the video route does not show images');
});
