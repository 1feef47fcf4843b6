// Signed media links over raw HTTP on both engines and both stores (a temp directory, an S3-protocol
// server): Accept-Ranges, single ranges answered 206 (first bytes, middle, suffix, open-ended), 416
// past the end, If-Range with a stale validator (200 whole), If-None-Match (304), HEAD, several
// ranges (200 whole), Content-Disposition.
import t, { type Test } from 'tap';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { request, type IncomingHttpHeaders } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FsMediaStore, type MediaStore } from '../../src/media/media-store.js';
import { signedMediaLink } from '../../src/media/signed-link.js';
import type { EngineName } from '../../src/server/engine.js';
import { eachEngine } from '../helpers/engines.js';
import { startTestGateway } from '../helpers/gateway.js';
import { startS3, type TestS3 } from '../helpers/s3-server.js';
import { startTcpProxy } from '../helpers/tcp-proxy.js';

interface RawReply {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/** One request with node:http (no client-side range or cache logic), the body read whole. */
function raw(url: string, method: string, headers: Record<string, string> = {}): Promise<RawReply> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method, headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

const SIZE = 10_000;
const KEY = 'video/vgen_rangetest-0123456789ab.mp4';
let s3: TestS3;
const dirs: string[] = [];
t.before(async () => {
  s3 = await startS3(t);
  await s3.createBucket('ranges');
});
t.teardown(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

const stores: Record<'fs' | 's3', () => MediaStore> = {
  fs: () => {
    const d = mkdtempSync(join(tmpdir(), 'inkgate-ranges-'));
    dirs.push(d);
    return new FsMediaStore(d);
  },
  s3: () => s3.store('ranges'),
};

async function setup(t: Test, engine: EngineName, kind: 'fs' | 's3') {
  const media = stores[kind]();
  const g = await startTestGateway(t, { server: { engine } }, { jobs: { media } });
  const data = randomBytes(SIZE);
  await media.put(KEY, data, 'video/mp4');
  const deps = g.gw.jobs.deps;
  const link = signedMediaLink(deps.mediaSecret, g.url, KEY, deps.clock(), 900).url;
  return { link, data };
}

for (const kind of ['fs', 's3'] as const) {
  eachEngine(
    `ranges and conditions over HTTP, ${kind} store`,
    async (t, engine) => {
      const { link, data } = await setup(t, engine, kind);

      const whole = await raw(link, 'GET');
      t.equal(whole.status, 200);
      t.equal(whole.headers['accept-ranges'], 'bytes');
      t.equal(whole.headers['content-type'], 'video/mp4');
      t.equal(whole.headers['content-disposition'], 'inline; filename="vgen_rangetest-0123456789ab.mp4"');
      t.equal(whole.headers['content-range'], undefined);
      const etag = whole.headers.etag!;
      t.match(etag, /^"[^"]+"$/, 'a strong ETag');
      t.ok(whole.body.equals(data), 'the whole file');

      const ranged = async (label: string, range: string, start: number, end: number, more: Record<string, string> = {}) => {
        const r = await raw(link, 'GET', { range, ...more });
        t.equal(r.status, 206, `${label}: 206`);
        t.equal(r.headers['content-range'], `bytes ${start}-${end}/${SIZE}`, `${label}: Content-Range`);
        t.equal(r.headers.etag, etag, `${label}: ETag`);
        t.equal(r.headers['accept-ranges'], 'bytes');
        t.ok(r.body.equals(data.subarray(start, end + 1)), `${label}: exactly bytes ${start}-${end}`);
      };
      await ranged('first bytes', 'bytes=0-99', 0, 99);
      await ranged('middle', 'bytes=4000-4999', 4000, 4999);
      await ranged('suffix', 'bytes=-500', 9500, 9999);
      await ranged('open-ended', 'bytes=9900-', 9900, 9999);
      await ranged('end past the size', 'bytes=9990-20000', 9990, 9999);
      await ranged('If-Range with the current ETag', 'bytes=0-9', 0, 9, { 'if-range': etag });

      const past = await raw(link, 'GET', { range: `bytes=${SIZE}-` });
      t.equal(past.status, 416, 'past the end: 416');
      t.equal(past.headers['content-range'], `bytes */${SIZE}`);
      t.equal(JSON.parse(past.body.toString()).error.code, 'range_not_satisfiable');

      const stale = await raw(link, 'GET', { range: 'bytes=0-99', 'if-range': '"some-older-version"' });
      t.equal(stale.status, 200, 'If-Range with a stale ETag: the whole file');
      t.ok(stale.body.equals(data));
      const dated = await raw(link, 'GET', { range: 'bytes=0-99', 'if-range': 'Wed, 21 Oct 2015 07:28:00 GMT' });
      t.equal(dated.status, 200, 'If-Range with a date (we send no Last-Modified): the whole file');

      const notModified = await raw(link, 'GET', { 'if-none-match': etag });
      t.equal(notModified.status, 304, 'If-None-Match with the ETag: 304');
      t.equal(notModified.body.length, 0, 'no body');
      t.equal(notModified.headers.etag, etag);
      t.equal((await raw(link, 'GET', { 'if-none-match': `"other", W/${etag}` })).status, 304, 'weak comparison inside a list');
      t.equal((await raw(link, 'GET', { 'if-none-match': '"other"' })).status, 200, 'another ETag: 200');

      const head = await raw(link, 'HEAD');
      t.equal(head.status, 200, 'HEAD');
      t.equal(head.headers['content-length'], String(SIZE), 'HEAD: the size a GET would send');
      t.equal(head.headers['accept-ranges'], 'bytes');
      t.equal(head.headers.etag, etag);
      t.equal(head.headers['content-type'], 'video/mp4');
      t.equal(head.body.length, 0);

      const multi = await raw(link, 'GET', { range: 'bytes=0-9,20-29' });
      t.equal(multi.status, 200, 'several ranges: the whole file');
      t.ok(multi.body.equals(data));
      t.equal((await raw(link, 'GET', { range: 'items=0-9' })).status, 200, 'another unit: ignored');
      t.equal((await raw(link, 'GET', { range: 'bytes=9-0' })).status, 200, 'a backwards range: ignored');
      t.equal(await raw(link, 'GET', { range: 'bytes=0-99' }).then((r) => r.headers['cache-control']), 'no-store', 'still never cached');
      t.equal(
        (await raw(link.replace(/sig=[^&]+/, 'sig=' + 'A'.repeat(43)), 'GET', { range: 'bytes=0-9' })).status,
        403,
        'a range on a bad signature is refused first',
      );
    },
    { timeout: 60_000 },
  );
}

/** Status, then how the body ended: 'end' (complete framing) or 'cut' (the connection closed first), and the bytes seen. */
function readUntilEndOrCut(url: string, onHead: () => void): Promise<{ status: number; ended: 'end' | 'cut'; bytes: number }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { agent: false }, (res) => {
      let bytes = 0;
      let settled = false;
      const done = (ended: 'end' | 'cut') => {
        if (settled) return;
        settled = true;
        resolve({ status: res.statusCode ?? 0, ended, bytes });
      };
      onHead();
      res.on('data', (c: Buffer) => (bytes += c.length));
      res.on('end', () => done('end'));
      res.on('error', () => done('cut'));
      res.on('close', () => done(res.complete ? 'end' : 'cut'));
    });
    req.on('error', reject);
    req.end();
  });
}

eachEngine(
  'a store that stops answering: 503 before the body, a cut connection (never a clean short end) during it',
  async (t, engine) => {
    const proxy = await startTcpProxy('127.0.0.1', s3.port);
    t.teardown(() => proxy.close());
    const media = s3.store('ranges', { endpoint: proxy.url('http'), timeoutMs: 1_500, idleTimeoutMs: 1_000 });
    const g = await startTestGateway(t, { server: { engine } }, { jobs: { media } });
    const deps = g.gw.jobs.deps;
    const big = 24 * 1024 * 1024;
    await s3.store('ranges').put('video/big.mp4', Buffer.alloc(big, 7), 'video/mp4'); // stored directly, with the usual bounds
    const link = signedMediaLink(deps.mediaSecret, g.url, 'video/big.mp4', deps.clock(), 900).url;

    proxy.freeze();
    const before = await raw(link, 'GET');
    t.equal(before.status, 503, 'the store did not answer the open: 503');
    t.equal(JSON.parse(before.body.toString()).error.code, 'provider_unavailable');
    t.equal(before.headers['retry-after'], '5');
    proxy.thaw();

    const during = await readUntilEndOrCut(link, () => proxy.freeze());
    t.equal(during.status, 200);
    t.ok(during.bytes < big, `part of the body arrived (${during.bytes} of ${big} bytes)`);
    t.equal(during.ended, 'cut', 'the connection was cut: the client knows the body is incomplete');
    proxy.thaw();
  },
  { timeout: 60_000 },
);

eachEngine(
  'INKGATE_S3_PRESIGNED_REDIRECT: a checked link answers 302 to a presigned GET that serves ranges itself',
  async (t, engine) => {
    const media = s3.store('ranges', { presignedRedirect: true });
    const g = await startTestGateway(t, { server: { engine } }, { jobs: { media } });
    const deps = g.gw.jobs.deps;
    const data = randomBytes(SIZE);
    await media.put(KEY, data, 'video/mp4');
    const link = signedMediaLink(deps.mediaSecret, g.url, KEY, deps.clock(), 900).url;

    const r = await raw(link, 'GET', { range: 'bytes=0-9' });
    t.equal(r.status, 302);
    t.equal(r.body.length, 0);
    const location = new URL(String(r.headers.location));
    t.equal(location.origin, s3.endpoint, 'to the store');
    t.equal(location.pathname, `/ranges/media/${KEY}`);
    const expires = Number(location.searchParams.get('X-Amz-Expires'));
    t.ok(expires > 0 && expires <= 900, `valid no longer than the link (${expires} s)`);
    t.equal(location.searchParams.get('response-content-disposition'), 'inline; filename="vgen_rangetest-0123456789ab.mp4"');
    t.ok(location.searchParams.has('X-Amz-Signature'), 'presigned');

    const whole = await raw(location.href, 'GET');
    t.equal(whole.status, 200);
    t.ok(whole.body.equals(data), 'the store serves the bytes');
    const part = await raw(location.href, 'GET', { range: 'bytes=100-199' });
    t.equal(part.status, 206, 'and ranges');
    t.ok(part.body.equals(data.subarray(100, 200)));

    const head = await raw(link, 'HEAD');
    t.equal(head.status, 302, 'HEAD is redirected too');
    const gone = await raw(signedMediaLink(deps.mediaSecret, g.url, 'video/none.mp4', deps.clock(), 900).url, 'GET');
    t.equal(gone.status, 404, 'a missing object is still our 404');
    t.equal(JSON.parse(gone.body.toString()).error.code, 'not_found');
    t.equal((await raw(link.replace(/sig=[^&]+/, 'sig=' + 'A'.repeat(43)), 'GET')).status, 403, 'no redirect without a valid signature');
  },
  { timeout: 60_000 },
);
