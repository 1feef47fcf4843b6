// S3MediaStore against a real S3-protocol server (s3rver on 127.0.0.1:0, a temp directory, the
// bucket made through the S3 API): the media-store contract, multipart uploads and their abort,
// bounded memory, the key prefix, clear errors for a missing bucket and refused credentials, and
// every call bounded when the store stops answering. s3rver checks the access key id but not V4
// signatures, and answers a range on an empty object with an invented byte: the contract skips
// that one case here (real S3 answers 416).
import t, { type Test } from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import v8 from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Readable } from 'node:stream';
import { loadConfig } from '../../src/config/config.js';
import { configuredMediaStore } from '../../src/media/configured-store.js';
import { FsMediaStore, type MediaStore } from '../../src/media/media-store.js';
import { S3MediaStore } from '../../src/media/s3-media-store.js';
import { mediaStoreContract, readAll } from '../helpers/media-store-contract.js';
import { recordingProxy, startS3, type TestS3 } from '../helpers/s3-server.js';
import { startTestGateway } from '../helpers/gateway.js';
import { startTcpProxy } from '../helpers/tcp-proxy.js';

const MiB = 1024 * 1024;
let s3: TestS3;

t.before(async () => {
  s3 = await startS3(t);
  await s3.createBucket('inkgate-media');
});

const CONTRACT_MAX_BYTES = 6 * MiB;
mediaStoreContract(t, 's3', () => s3.store('inkgate-media', { maxObjectBytes: CONTRACT_MAX_BYTES }), {
  maxObjectBytes: CONTRACT_MAX_BYTES,
  emptyObjectRanges: false,
});

t.test('multipart: an upload above the part size goes in parts, reads back, and ranges reach into the last part', async (t) => {
  const proxy = await recordingProxy(t, s3.port);
  const store = s3.store('inkgate-media', { endpoint: proxy.endpoint });
  const parts = Array.from({ length: 12 }, (_, i) => Buffer.alloc(MiB, i + 1));
  t.same(await store.put('video/multi.mp4', Readable.from(parts), 'video/mp4'), { sizeBytes: 12 * MiB });
  t.same(
    proxy.seen,
    ['POST uploads', 'PUT partNumber&uploadId', 'PUT partNumber&uploadId', 'PUT partNumber&uploadId', 'POST uploadId'],
    'create, three parts of 5, 5 and 2 MiB, complete',
  );
  const o = (await store.open('video/multi.mp4'))!;
  t.equal(o.sizeBytes, 12 * MiB);
  t.equal(o.contentType, 'video/mp4', 'the type set when the upload was created');
  t.ok((await readAll(o.stream)).equals(Buffer.concat(parts)));
  const r = (await store.open('video/multi.mp4', { suffix: 10 }))!;
  t.same(r.range, { start: 12 * MiB - 10, end: 12 * MiB - 1 });
  t.ok((await readAll(r.stream)).equals(Buffer.alloc(10, 12)));
  proxy.seen.length = 0;
  await store.put('video/small.mp4', Buffer.alloc(1000), 'video/mp4');
  t.same(proxy.seen, ['PUT'], 'below the part size: one PutObject');
});

t.test('multipart: a source failing after two parts were sent leaves no object under the key, and the upload is aborted', async (t) => {
  const proxy = await recordingProxy(t, s3.port);
  const store = s3.store('inkgate-media', { endpoint: proxy.endpoint });
  async function* failing(): AsyncGenerator<Buffer> {
    for (let i = 0; i < 11; i++) yield Buffer.alloc(MiB, i);
    throw new Error('vendor connection reset');
  }
  await t.rejects(store.put('video/half.mp4', Readable.from(failing()), 'video/mp4'), /vendor connection reset/);
  t.notOk(proxy.seen.includes('POST uploadId'), 'never completed');
  t.ok(proxy.seen.includes('DELETE uploadId'), `the multipart upload is aborted: ${proxy.seen.join(', ')}`);
  t.equal(await store.open('video/half.mp4'), undefined);
});

// A full collection before each sample, so the figure is live memory, not garbage not yet collected.
v8.setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/**
 * Puts a 200 MiB stream of fresh chunks (as a vendor download would be) and samples live memory
 * (after a collection) every 4 MiB pulled: it must stay bounded by what is in flight, not grow with
 * the object. RSS is reported beside it.
 */
async function boundedUpload(t: Test, store: MediaStore, key: string): Promise<void> {
  const total = 200 * MiB;
  const chunk = 256 * 1024;
  gc();
  const before = process.memoryUsage();
  let peak = 0;
  let peakRss = 0;
  const source = Readable.from(
    (function* () {
      for (let made = 0; made < total; made += chunk) {
        if (made % (4 * MiB) === 0) {
          gc();
          const m = process.memoryUsage();
          peak = Math.max(peak, m.arrayBuffers - before.arrayBuffers);
          peakRss = Math.max(peakRss, m.rss - before.rss);
        }
        yield Buffer.alloc(chunk, made / chunk);
      }
    })(),
  );
  t.same(await store.put(key, source, 'video/mp4'), { sizeBytes: total });
  t.ok(
    peak < 48 * MiB,
    `live buffers grew at most ${(peak / MiB).toFixed(1)} MiB during a ${total / MiB} MiB upload (RSS grew at most ${(peakRss / MiB).toFixed(1)} MiB)`,
  );
  const tail = (await store.open(key, { start: total - 4 }))!;
  t.ok((await readAll(tail.stream)).equals(Buffer.alloc(4, total / chunk - 1)), 'the last bytes read back');
  await store.delete(key);
}

t.test('an upload streams: live memory stays bounded by the parts in flight, not the object (S3)', async (t) => {
  await boundedUpload(t, s3.store('inkgate-media', { uploadQueueSize: 1, maxObjectBytes: 256 * MiB }), 'video/streamed.mp4');
});

t.test('an upload streams: live memory stays bounded, not the object (files)', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'inkgate-bounded-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  await boundedUpload(t, new FsMediaStore(dir, { maxObjectBytes: 256 * MiB }), 'video/streamed.mp4');
});

t.test('the prefix: keys live under it in the bucket', async (t) => {
  const prefixed = s3.store('inkgate-media', { prefix: 'tenant-a/media/' });
  await prefixed.put('image/p.png', Buffer.from('png'), 'image/png');
  const root = s3.store('inkgate-media', { prefix: '' });
  t.equal((await readAll((await root.open('tenant-a/media/image/p.png'))!.stream)).toString(), 'png');
  t.equal(await root.open('image/p.png'), undefined, 'not at the bucket root');
});

t.test('a missing bucket and refused credentials give errors that say so', async (t) => {
  const missing = s3.store('no-such-bucket');
  await t.rejects(missing.check(), { name: 'MediaStoreError', code: 'NoSuchBucket', message: /"no-such-bucket" .* does not exist/ });
  await t.rejects(missing.put('x', Buffer.from('x'), 'text/plain'), /does not exist/);
  await t.rejects(missing.open('x'), /does not exist/);
  const stranger = s3.store('inkgate-media', { credentials: { accessKeyId: 'NOT-A-KEY', secretAccessKey: 'nope' } });
  await t.rejects(stranger.check(), { name: 'MediaStoreError', message: /refused the credentials/ });
  await t.rejects(stranger.open('video/multi.mp4'), { name: 'MediaStoreError', code: 'InvalidAccessKeyId', message: /refused the credentials/ });
  await t.rejects(stranger.put('x', Buffer.from('x'), 'text/plain'), /refused the credentials/);
  await s3.store('inkgate-media').check();
  t.pass('the right bucket and key pass the check');
});

t.test('a store that stops answering: every call fails within its bound instead of hanging', async (t) => {
  const proxy = await startTcpProxy('127.0.0.1', s3.port);
  t.teardown(() => proxy.close());
  const store = s3.store('inkgate-media', { endpoint: proxy.url('http'), timeoutMs: 800, idleTimeoutMs: 800, uploadPartTimeoutMs: 3_000 });
  await store.put('video/frozen.mp4', randomBytes(300_000), 'video/mp4');
  const reading = (await store.open('video/frozen.mp4'))!;
  proxy.freeze();
  const timedOut = { name: 'MediaStoreError', code: 'timeout', message: /got no answer in time/ };
  await t.rejects(store.open('video/frozen.mp4'), timedOut, 'open');
  await t.rejects(store.delete('video/frozen.mp4'), timedOut, 'delete');
  await t.rejects(store.check(), timedOut, 'readiness probe');
  await t.rejects(store.put('video/other.mp4', Buffer.from('x'), 'video/mp4'), { name: 'MediaStoreError' }, 'put');
  await t.rejects(readAll(reading.stream), /timed out|aborted|socket/i, 'a download under way is cut once idle');
  proxy.thaw();
});

t.test('config: INKGATE_MEDIA_STORE=s3 and the INKGATE_S3_* variables build an S3 store', async (t) => {
  t.throws(() => loadConfig({ INKGATE_MEDIA_STORE: 's3' }), /INKGATE_S3_BUCKET/);
  t.throws(() => loadConfig({ INKGATE_MEDIA_STORE: 'gcs' }), /invalid configuration/);
  const withCredentials = () => loadConfig({ INKGATE_MEDIA_STORE: 's3', INKGATE_S3_BUCKET: 'b-1', INKGATE_S3_ENDPOINT: 'http://user:s3cret@127.0.0.1:9000' });
  t.throws(withCredentials, /media\.s3\.endpoint must carry no credentials/);
  const refusal = (() => {
    try {
      withCredentials();
    } catch (e) {
      return (e as Error).message;
    }
    return '';
  })();
  t.notMatch(refusal, /s3cret|user:/, 'the refusal does not repeat the credentials');
  const cfg = loadConfig({
    INKGATE_MEDIA_STORE: 's3',
    INKGATE_S3_BUCKET: 'inkgate-media',
    INKGATE_S3_ENDPOINT: s3.endpoint,
    INKGATE_S3_REGION: 'auto',
    INKGATE_S3_PREFIX: 'prod/media',
    INKGATE_S3_FORCE_PATH_STYLE: '1',
    INKGATE_S3_PRESIGNED_REDIRECT: '1',
  });
  t.match(cfg.media, {
    store: 's3',
    s3: { bucket: 'inkgate-media', endpoint: s3.endpoint, region: 'auto', prefix: 'prod/media/', forcePathStyle: true, presignedRedirect: true },
  });
  const store = await configuredMediaStore(cfg);
  t.teardown(() => store.close?.());
  t.ok(store instanceof S3MediaStore);
  t.type(store.presignedGet, 'function', 'downloads redirect');
  const streaming = await configuredMediaStore(loadConfig({ INKGATE_MEDIA_STORE: 's3', INKGATE_S3_BUCKET: 'inkgate-media', INKGATE_S3_ENDPOINT: s3.endpoint }));
  t.teardown(() => streaming.close?.());
  t.equal(streaming.presignedGet, undefined, 'by default the gateway streams');
  t.ok((await configuredMediaStore(loadConfig({}))) instanceof FsMediaStore, 'fs stays the default');
});

t.test('readiness reports the S3 store, and is not ready while its bucket is missing', async (t) => {
  const ok = await startTestGateway(t, {}, { jobs: { media: s3.store('inkgate-media') } });
  t.match(await ok.gw.ops.readiness.check(), { ready: true, mediaStore: 'ok', mediaStoreIn: { kind: 's3', bucket: 'inkgate-media' } });
  const missing = await startTestGateway(t, {}, { jobs: { media: s3.store('no-such-bucket') } });
  t.match(await missing.gw.ops.readiness.check(), { ready: false, mediaStore: 'failed', postgres: 'ok' });
  const local = await startTestGateway(t);
  t.match(await local.gw.ops.readiness.check(), { ready: true, mediaStore: 'ok', mediaStoreIn: { kind: 'files', dir: /^\/.*\/media$/ } });
});
