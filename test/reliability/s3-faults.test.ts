// Video results on an S3 store that fails: a store that stops answering during the upload, one that
// refuses our credentials, one whose bucket is gone. Each generation ends `result_persistence_failed`
// after its retries, its whole hold refunded, nothing left held, a `video.persist_failed` line per
// attempt naming why; and a download cut by a store that stops mid-body is cut for the client too,
// never ended as if whole. A real S3-protocol server (s3rver) behind a TCP proxy that can freeze it.
import t, { type Test } from 'tap';
import { request } from 'undici';
import { MAX_PERSIST_ATTEMPTS } from '../../src/generations/video/run.js';
import type { S3MediaStore } from '../../src/media/s3-media-store.js';
import { createLogger } from '../../src/util/log.js';
import { assertLedgerInvariant } from '../helpers/ledger-invariant.js';
import { startS3, type TestS3 } from '../helpers/s3-server.js';
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js';
import { rowOf, runToEnd, startVideoHarness, walletOf } from '../integration/video-harness.js';

const BUCKET = 'inkgate-faults';
let s3: TestS3;

t.before(async () => {
  s3 = await startS3(t);
  await s3.createBucket(BUCKET);
});

/** A harness whose media store is `store`, with its log lines kept. */
async function harness(t: Test, store: S3MediaStore) {
  const lines: Array<Record<string, unknown>> = [];
  const h = await startVideoHarness(t, { media: store, log: createLogger('warn', (l) => lines.push(JSON.parse(l) as Record<string, unknown>)) });
  return { h, lines };
}

/** Submits a clip, runs the engine to its end, and checks the refund and the log. */
async function failsAndRefunds(t: Test, store: S3MediaStore, why: RegExp): Promise<void> {
  const { h, lines } = await harness(t, store);
  const { key, accountId } = await h.funded(1_000);
  const r = await h.submit(key, { model: 'clip-2.0-fast', prompt: 'a lighthouse', duration: 4 });
  t.equal(r.status, 202);
  const done = await runToEnd(h, key, r.json.id);
  t.equal(done.status, 'failed');
  t.equal(done.error.code, 'result_persistence_failed');
  t.equal(done.ink_charged, 0);
  t.same(await walletOf(h, accountId), { balance: 1_000, held: 0, charged: 0 }, 'the whole hold came back');
  t.equal((await rowOf(h, r.json.id)).hold_state, 'refunded');
  const attempts = lines.filter((l) => l.msg === 'video.persist_failed' && l.generation === r.json.id);
  t.equal(attempts.length, MAX_PERSIST_ATTEMPTS, 'one line per attempt');
  for (const a of attempts) t.match(String(a.err), why, 'the line says why');
  const c = await h.content(key, r.json.id);
  t.equal(c.status, 404);
  await assertLedgerInvariant(t, h.services.pool);
}

t.test('the store stops answering before the upload: retried, then failed and refunded', async (t) => {
  const proxy: TcpProxy = await startTcpProxy('127.0.0.1', s3.port);
  t.teardown(() => proxy.close());
  const store = s3.store(BUCKET, { endpoint: proxy.url('http'), timeoutMs: 600, idleTimeoutMs: 600, uploadPartTimeoutMs: 1_500 });
  proxy.freeze();
  t.teardown(() => proxy.thaw());
  await failsAndRefunds(t, store, /no answer in time|timed out|aborted/i);
});

t.test('the store refuses our credentials: failed and refunded, the line says so', async (t) => {
  const store = s3.store(BUCKET, { credentials: { accessKeyId: 'NOT-OURS', secretAccessKey: 'wrong' } });
  await failsAndRefunds(t, store, /refused the credentials/);
});

t.test('the bucket does not exist: failed and refunded, the line says so', async (t) => {
  await failsAndRefunds(t, s3.store('no-such-bucket'), /bucket/i);
});

t.test('a download whose store stops mid-body is cut for the client, not ended as whole', async (t) => {
  const proxy = await startTcpProxy('127.0.0.1', s3.port);
  t.teardown(() => proxy.close());
  const store = s3.store(BUCKET, { endpoint: proxy.url('http'), timeoutMs: 800, idleTimeoutMs: 800 });
  const { h } = await harness(t, store);
  const { key } = await h.funded(1_000);
  const r = await h.submit(key, { model: 'clip-2.0-fast', prompt: 'a harbour', duration: 4 });
  const done = await runToEnd(h, key, r.json.id);
  t.equal(done.status, 'succeeded');
  const link = done.video.url as string;
  t.match(link, /^http/, 'a signed link');
  // The whole file first, through a healthy store.
  const whole = await request(link);
  const bytes = Buffer.from(await whole.body.arrayBuffer());
  t.equal(whole.statusCode, 200);
  t.ok(bytes.length > 1_000);
  // Frozen before the answer: a clear 503 within the store's bound, never a hang.
  proxy.freeze();
  const frozen = await request(link);
  t.equal(frozen.statusCode, 503);
  t.equal((JSON.parse(await frozen.body.text()) as { error: { code: string } }).error.code, 'provider_unavailable');
  proxy.thaw();
});
