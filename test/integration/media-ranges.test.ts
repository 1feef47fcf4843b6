// Signed media links over raw HTTP on both engines and both stores (a temp directory, an S3-protocol
// server): Accept-Ranges, single ranges answered 206 (first bytes, middle, suffix, open-ended), 416
// past the end, If-Range with a stale validator (200 whole), If-None-Match (304), HEAD, several
// ranges (200 whole), Content-Disposition; positions past Number.MAX_SAFE_INTEGER; every answer
// (200, 206, 403, 404, 416, GET and HEAD) framed by a fixed Content-Length, never chunked.
import t, { type Test } from 'tap';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { once } from 'node:events';
import { request, type IncomingHttpHeaders } from 'node:http';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
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
  return { link, data, deps, origin: g.url, media };
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

const HUGE = '99999999999999999999999';

/** The answer has a fixed length (`Content-Length`, no chunked framing) of `bytes`. */
function fixedLength(t: Test, r: RawReply, bytes: number, label: string): void {
  t.equal(r.headers['transfer-encoding'], undefined, `${label}: not chunked`);
  t.equal(r.headers['content-length'], String(bytes), `${label}: Content-Length ${bytes}`);
}

for (const kind of ['fs', 's3'] as const) {
  eachEngine(
    `positions past MAX_SAFE_INTEGER, and a fixed Content-Length on every answer (GET and HEAD), ${kind} store`,
    async (t, engine) => {
      const { link, data, deps, origin } = await setup(t, engine, kind);

      const firstPast = await raw(link, 'GET', { range: `bytes=${HUGE}-` });
      t.equal(firstPast.status, 416, 'a first byte past any size: 416');
      t.equal(firstPast.headers['content-range'], `bytes */${SIZE}`);
      t.equal(JSON.parse(firstPast.body.toString()).error.code, 'range_not_satisfiable');
      fixedLength(t, firstPast, firstPast.body.length, '416');
      t.equal((await raw(link, 'GET', { range: `bytes=${HUGE}-${HUGE}` })).status, 416, 'both past any size: 416');

      const lastPast = await raw(link, 'GET', { range: `bytes=0-${HUGE}` });
      t.equal(lastPast.status, 206, 'a last byte past any size is clamped: 206');
      t.equal(lastPast.headers['content-range'], `bytes 0-${SIZE - 1}/${SIZE}`);
      t.ok(lastPast.body.equals(data));
      fixedLength(t, lastPast, SIZE, '206 clamped');

      const longSuffix = await raw(link, 'GET', { range: `bytes=-${HUGE}` });
      t.equal(longSuffix.status, 206, 'a suffix longer than any file: the whole file as 206');
      t.equal(longSuffix.headers['content-range'], `bytes 0-${SIZE - 1}/${SIZE}`);
      t.ok(longSuffix.body.equals(data));

      const backwards = await raw(link, 'GET', { range: `bytes=${HUGE}-5` });
      t.equal(backwards.status, 200, 'backwards (compared exactly): ignored, the whole file');
      fixedLength(t, backwards, SIZE, '200 after an ignored Range');

      const whole = await raw(link, 'GET');
      t.equal(whole.status, 200);
      fixedLength(t, whole, SIZE, '200 whole file');
      t.ok(whole.body.equals(data));
      const part = await raw(link, 'GET', { range: 'bytes=100-199' });
      t.equal(part.status, 206);
      fixedLength(t, part, 100, '206');
      t.ok(part.body.equals(data.subarray(100, 200)));

      const badSig = link.replace(/sig=[^&]+/, 'sig=' + 'A'.repeat(43));
      const expired = signedMediaLink(deps.mediaSecret, origin, KEY, deps.clock() - 3_600_000, 900).url;
      const missing = signedMediaLink(deps.mediaSecret, origin, 'video/none.mp4', deps.clock(), 900).url;
      for (const [label, url, status, code] of [
        ['bad signature', badSig, 403, 'invalid_signature'],
        ['expired link', expired, 403, 'link_expired'],
        ['missing file', missing, 404, 'not_found'],
      ] as const) {
        const got = await raw(url, 'GET');
        t.equal(got.status, status, `${label}: ${status}`);
        t.equal(JSON.parse(got.body.toString()).error.code, code);
        t.equal(got.headers['content-type'], 'application/json');
        fixedLength(t, got, got.body.length, `${label} GET`);
        const head = await raw(url, 'HEAD');
        t.equal(head.status, status, `${label} HEAD: ${status}`);
        t.equal(head.body.length, 0);
        fixedLength(t, head, got.body.length, `${label} HEAD (the GET's length)`);
      }
      const head = await raw(link, 'HEAD');
      fixedLength(t, head, SIZE, 'HEAD of the file');
      const head416 = await raw(link, 'HEAD', { range: `bytes=${HUGE}-` });
      t.equal(head416.status, 200, 'HEAD ignores Range');
      fixedLength(t, head416, SIZE, 'HEAD with a Range');
    },
    { timeout: 60_000 },
  );
}

/** A store that lends FsMediaStore's objects through a counter: how many bytes the gateway pulled, and when it stopped pulling. */
function observedStore(inner: MediaStore, stallMs: number): { store: MediaStore; pulled: () => number; stalled: Promise<void> } {
  let pulled = 0;
  let onStall!: () => void;
  const stalled = new Promise<void>((r) => (onStall = r));
  async function* counted(src: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
    for await (const chunk of src) {
      pulled += chunk.length;
      const timer = setTimeout(onStall, stallMs);
      yield chunk;
      clearTimeout(timer);
    }
  }
  const store: MediaStore = {
    location: inner.location,
    put: (key, data, type) => inner.put(key, data, type),
    delete: (key) => inner.delete(key),
    open: async (key, range) => {
      const obj = await inner.open(key, range);
      return obj === undefined ? undefined : { ...obj, stream: Readable.from(counted(obj.stream)) };
    },
  };
  return { store, pulled: () => pulled, stalled };
}

eachEngine(
  'a client that stops reading a fixed-length download: the gateway stops reading the file, and the body then arrives whole',
  async (t, engine) => {
    const dir = mkdtempSync(join(tmpdir(), 'inkgate-ranges-'));
    dirs.push(dir);
    // A pull still waiting this long while the client reads nothing means the gateway is held by backpressure.
    const seen = observedStore(new FsMediaStore(dir), 500);
    const g = await startTestGateway(t, { server: { engine } }, { jobs: { media: seen.store } });
    const big = randomBytes(48 * 1024 * 1024);
    await seen.store.put('video/big-sized.mp4', big, 'video/mp4');
    const deps = g.gw.jobs.deps;
    const url = new URL(signedMediaLink(deps.mediaSecret, g.url, 'video/big-sized.mp4', deps.clock(), 900).url);
    const sock = connect(Number(url.port), '127.0.0.1');
    t.teardown(() => sock.destroy());
    await once(sock, 'connect');
    sock.pause();
    sock.write(`GET ${url.pathname}${url.search} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`);
    await seen.stalled;
    t.ok(seen.pulled() < big.length, `the gateway stopped at ${seen.pulled()} of ${big.length} bytes while the client read nothing`);
    const chunks: Buffer[] = [];
    sock.on('data', (c: Buffer) => chunks.push(c));
    sock.resume();
    await once(sock, 'end');
    const all = Buffer.concat(chunks);
    const headEnd = all.indexOf('\r\n\r\n');
    const head = all.subarray(0, headEnd).toString('latin1').toLowerCase();
    t.match(head, /^http\/1\.1 200 ok\r\n/);
    t.match(head, new RegExp(`\r\ncontent-length: ${big.length}(\r\n|$)`), 'declared by its length');
    t.notMatch(head, /transfer-encoding/, 'not chunked');
    t.ok(all.subarray(headEnd + 4).equals(big), 'every byte, in order, after the pause');
  },
  { timeout: 120_000 },
);

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
