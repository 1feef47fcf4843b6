// FsMediaStore on a real temp directory, and the media host on top of it.
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, rmSync, utimesSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { FsMediaStore, InvalidMediaKeyError, MediaTooLargeError, isValidMediaKey } from '../../src/media/media-store.js';
import { handleMediaRequest, writeMediaResponse, type MediaSink, type Headers } from '../../src/media/media-host.js';
import { signMediaPath } from '../../src/media/signed-link.js';
import { mediaStoreContract } from '../helpers/media-store-contract.js';

const outer = mkdtempSync(join(tmpdir(), 'inkgate-media-'));
const root = join(outer, 'store');
t.teardown(() => rmSync(outer, { recursive: true, force: true }));
const store = new FsMediaStore(root, { maxObjectBytes: 4 * 1024 * 1024 });

async function readAll(s: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of s) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

const tempFiles = (): string[] => (existsSync(join(root, '.tmp')) ? readdirSync(join(root, '.tmp')) : []);

t.test('put / open / delete with a Buffer and with a stream', async (t) => {
  const data = randomBytes(200_000);
  t.same(await store.put('video/gen_1.mp4', data, 'video/mp4'), { sizeBytes: 200_000 });
  const o = await store.open('video/gen_1.mp4');
  t.ok(o);
  t.equal(o!.contentType, 'video/mp4');
  t.equal(o!.sizeBytes, 200_000);
  t.ok((await readAll(o!.stream)).equals(data), 'bytes round-trip');

  const parts = [Buffer.from('abc'), Buffer.from('def'), 'ghi'];
  t.same(await store.put('image/gen_2.png', Readable.from(parts), 'image/png; charset=binary'), { sizeBytes: 9 });
  const p = await store.open('image/gen_2.png');
  t.equal(p!.contentType, 'image/png; charset=binary');
  t.equal((await readAll(p!.stream)).toString(), 'abcdefghi');

  await store.put('empty', Buffer.alloc(0), 'application/octet-stream');
  const e = await store.open('empty');
  t.equal(e!.sizeBytes, 0);
  t.equal((await readAll(e!.stream)).length, 0);

  await store.put('video/gen_1.mp4', Buffer.from('replaced'), 'video/webm');
  const r = await store.open('video/gen_1.mp4');
  t.equal(r!.contentType, 'video/webm');
  t.equal((await readAll(r!.stream)).toString(), 'replaced');

  await store.delete('video/gen_1.mp4');
  t.equal(await store.open('video/gen_1.mp4'), undefined);
  await store.delete('video/gen_1.mp4'); // idempotent
  t.equal(await store.open('never/there'), undefined);
  t.same(tempFiles(), [], 'no temp files left');
});

t.test('a download that started survives a delete', async (t) => {
  await store.put('keep/me.bin', Buffer.alloc(100_000, 3), 'application/octet-stream');
  const o = await store.open('keep/me.bin');
  await store.delete('keep/me.bin');
  t.equal((await readAll(o!.stream)).length, 100_000);
});

t.test('atomic write: a failing source leaves nothing under the key, and keeps an older version intact', async (t) => {
  async function* failing(): AsyncGenerator<Buffer> {
    yield Buffer.alloc(50_000, 1);
    yield Buffer.alloc(50_000, 2);
    throw new Error('vendor connection reset');
  }
  await t.rejects(store.put('video/broken.mp4', Readable.from(failing()), 'video/mp4'), /vendor connection reset/);
  t.equal(await store.open('video/broken.mp4'), undefined, 'no half file under the key');
  t.notOk(existsSync(join(root, 'video/broken.mp4')));

  await store.put('video/old.mp4', Buffer.from('complete old version'), 'video/mp4');
  await t.rejects(store.put('video/old.mp4', Readable.from(failing()), 'video/mp4'));
  t.equal((await readAll((await store.open('video/old.mp4'))!.stream)).toString(), 'complete old version');

  async function* huge(): AsyncGenerator<Buffer> {
    for (let i = 0; i < 10; i++) yield Buffer.alloc(1024 * 1024);
  }
  await t.rejects(store.put('video/huge.mp4', Readable.from(huge()), 'video/mp4'), MediaTooLargeError);
  await t.rejects(store.put('video/huge.mp4', Buffer.alloc(5 * 1024 * 1024), 'video/mp4'), MediaTooLargeError);
  t.equal(await store.open('video/huge.mp4'), undefined);
  t.same(tempFiles(), [], 'temp files removed after failures');
});

t.test('concurrent puts to one key: the key always holds one complete version', async (t) => {
  const a = Buffer.alloc(300_000, 0x61);
  const b = Buffer.alloc(300_000, 0x62);
  await Promise.all([store.put('race/x', a, 'text/plain'), store.put('race/x', b, 'text/plain')]);
  const got = await readAll((await store.open('race/x'))!.stream);
  t.ok(got.equals(a) || got.equals(b));
});

t.test('keys: traversal and odd spellings are refused by every call', async (t) => {
  const bad = [
    '',
    '../x',
    'a/../../x',
    '..',
    'a/..',
    '/abs',
    'A.mp4',
    'a\\b',
    '.hidden',
    '.tmp/x',
    'a//b',
    'a/',
    'a/./b',
    './a',
    'a b',
    'a%2e%2e/b',
    'a\0b',
    'é',
    'x'.repeat(257),
    'a..b',
  ];
  for (const k of bad) {
    t.notOk(isValidMediaKey(k), JSON.stringify(k));
    await t.rejects(store.put(k, Buffer.from('x'), 'text/plain'), InvalidMediaKeyError, `put ${JSON.stringify(k)}`);
    await t.rejects(store.open(k), InvalidMediaKeyError, `open ${JSON.stringify(k)}`);
    await t.rejects(store.delete(k), InvalidMediaKeyError, `delete ${JSON.stringify(k)}`);
  }
  t.same(readdirSync(outer), ['store'], 'nothing written beside the store');
  for (const k of ['a', 'video/gen_01hx.mp4', 'a-b_c.d/e', 'x'.repeat(256)]) t.ok(isValidMediaKey(k), k);
  await t.rejects(store.put('ok', Buffer.from('x'), 'text/plain\r\nx-evil: 1'), /content type/);
});

t.test('sweepTemp removes only old temp files', async (t) => {
  mkdirSync(join(root, '.tmp'), { recursive: true });
  writeFileSync(join(root, '.tmp', 'old.part'), 'x');
  writeFileSync(join(root, '.tmp', 'new.part'), 'x');
  const now = Date.now();
  utimesSync(join(root, '.tmp', 'old.part'), new Date(now - 7_200_000), new Date(now - 7_200_000));
  t.equal(await store.sweepTemp(now, 3_600_000), 1);
  t.same(tempFiles(), ['new.part']);
  rmSync(join(root, '.tmp', 'new.part'));
});

mediaStoreContract(t, 'fs', () => new FsMediaStore(join(outer, 'contract'), { maxObjectBytes: 4 * 1024 * 1024 }), {
  maxObjectBytes: 4 * 1024 * 1024,
  emptyObjectRanges: true,
});

t.test('a file written before the hash header (version 1) is still served, with ranges and an ETag', async (t) => {
  mkdirSync(join(root, 'legacy'), { recursive: true });
  writeFileSync(join(root, 'legacy', 'v1.mp4'), Buffer.concat([Buffer.from('INKMEDIA1\nvideo/mp4\n'), Buffer.from('0123456789')]));
  const o = (await store.open('legacy/v1.mp4'))!;
  t.equal(o.contentType, 'video/mp4');
  t.equal(o.sizeBytes, 10);
  t.match(o.etag, /^"a-i[0-9a-z]+-m[0-9a-z]+"$/, 'size, inode and mtime');
  t.equal((await readAll(o.stream)).toString(), '0123456789');
  const r = (await store.open('legacy/v1.mp4', { suffix: 3 }))!;
  t.same(r.range, { start: 7, end: 9 });
  t.equal((await readAll(r.stream)).toString(), '789');
  t.equal(r.etag, o.etag);
  writeFileSync(join(root, 'legacy', 'bad.mp4'), 'no header at all');
  await t.rejects(store.open('legacy/bad.mp4'), /no header/);
});

// ---- media host ----

const secret = randomBytes(32);
const NOW = 1_760_000_000;
function req(link: string): { path: string; query: string } {
  const i = link.indexOf('?');
  return { path: link.slice(0, i), query: link.slice(i + 1) };
}

t.test('media host: a valid link streams the object', async (t) => {
  const data = randomBytes(70_000);
  await store.put('video/gen_9.mp4', data, 'video/mp4');
  const r = await handleMediaRequest(req(signMediaPath(secret, '/media/video/gen_9.mp4', NOW + 900)), store, secret, NOW);
  if (r.status !== 200) return t.fail(`status ${r.status}`);
  t.equal(r.sizeBytes, 70_000);
  const etag = (await store.open('video/gen_9.mp4'))!;
  etag.stream.destroy();
  t.same(Object.fromEntries(r.headers), {
    'cache-control': 'private, no-store',
    'x-content-type-options': 'nosniff',
    'content-type': 'video/mp4',
    'content-length': '70000',
    'accept-ranges': 'bytes',
    etag: etag.etag,
    'content-disposition': 'inline; filename="gen_9.mp4"',
  });
  t.ok((await readAll(r.stream)).equals(data));
});

t.test('media host: refusals', async (t) => {
  const path = '/media/video/gen_9.mp4';
  const good = req(signMediaPath(secret, path, NOW + 900));
  const sig = new URLSearchParams(good.query).get('sig')!;
  const exp = String(NOW + 900);
  const expect = async (label: string, r: { path: string; query: string }, status: number, code: string, nowS = NOW): Promise<void> => {
    const res = await handleMediaRequest({ ...r, requestId: 'req_1' }, store, secret, nowS);
    t.equal(res.status, status, `${label}: status`);
    if ('body' in res) {
      t.equal(res.body.error.code, code, `${label}: code`);
      t.equal(res.body.error.request_id, 'req_1');
    } else if ('stream' in res) res.stream.destroy();
  };
  await expect('expired', good, 403, 'link_expired', NOW + 900);
  await expect('tampered path', { path: '/media/video/gen_8.mp4', query: good.query }, 403, 'invalid_signature');
  await expect('tampered exp', { path, query: `exp=${NOW + 100_000}&sig=${sig}` }, 403, 'invalid_signature');
  const flipped = sig.slice(0, 10) + (sig[10] === 'A' ? 'B' : 'A') + sig.slice(11);
  t.equal(flipped.length, sig.length);
  await expect('right-length bad sig', { path, query: `exp=${exp}&sig=${flipped}` }, 403, 'invalid_signature');
  await expect('wrong-length bad sig', { path, query: `exp=${exp}&sig=${sig.slice(0, 20)}` }, 403, 'invalid_signature');
  await expect('another secret', req(signMediaPath(randomBytes(32), path, NOW + 900)), 403, 'invalid_signature');
  await expect('no query', { path, query: '' }, 403, 'invalid_signature');
  await expect('no sig', { path, query: `exp=${exp}` }, 403, 'invalid_signature');
  await expect('two sigs', { path, query: `${good.query}&sig=${sig}` }, 403, 'invalid_signature');
  await expect('two nonces', { path, query: `${good.query}&n=${new URLSearchParams(good.query).get('n')}` }, 403, 'invalid_signature');
  await expect('nonce dropped', { path, query: good.query.replace(/&n=[^&]*/, '') }, 403, 'invalid_signature');
  await expect('huge query', { path, query: good.query + '&x=' + 'a'.repeat(600) }, 403, 'invalid_signature');
  await expect('signed, but no such object', req(signMediaPath(secret, '/media/video/none.mp4', NOW + 900)), 404, 'not_found');
  await expect('signed, outside the prefix', req(signMediaPath(secret, '/other/video/gen_9.mp4', NOW + 900)), 404, 'not_found');
  await expect('signed, invalid key', req(signMediaPath(secret, '/media/../store/video/gen_9.mp4', NOW + 900)), 404, 'not_found');
  await expect('still fine a second before expiry', good, 200, '', NOW + 899);
});

t.test('writeMediaResponse honours backpressure and sends the exact bytes', async (t) => {
  const data = randomBytes(1_000_000);
  await store.put('video/big.mp4', data, 'video/mp4');
  const r = await handleMediaRequest(req(signMediaPath(secret, '/media/video/big.mp4', NOW + 900)), store, secret, NOW);
  const got: Buffer[] = [];
  let head: { status: number; headers: Headers; sizeBytes: number } | undefined;
  let ended = false;
  let waits = 0;
  let n = 0;
  const sink: MediaSink = {
    aborted: false,
    head: (status, headers, sizeBytes) => (head = { status, headers, sizeBytes }),
    write: (c) => {
      got.push(Buffer.from(c));
      return ++n % 2 === 0;
    },
    drained: () => {
      waits++;
      return new Promise((res) => setImmediate(res));
    },
    end: () => (ended = true),
    cut: () => t.fail('the whole file was sent'),
    json: () => t.fail('not an error'),
    headOnly: false,
    endHead: () => t.fail('not a HEAD'),
  };
  await writeMediaResponse(r, sink);
  t.equal(head?.status, 200);
  t.equal(head?.sizeBytes, data.length, 'the head declares the length');
  t.ok(ended);
  t.ok(waits > 0, `waited for drain ${waits} times`);
  t.ok(Buffer.concat(got).equals(data));

  const errSink: { body?: string } & MediaSink = {
    aborted: false,
    head: () => t.fail('an error is not streamed'),
    write: () => true,
    drained: async () => undefined,
    end: () => t.fail('an error is not streamed'),
    cut: () => t.fail('an error is not streamed'),
    json(_status, _h, body) {
      errSink.body = body;
    },
    headOnly: false,
    endHead: () => t.fail('not a HEAD'),
  };
  await writeMediaResponse(await handleMediaRequest({ path: '/media/x', query: '' }, store, secret, NOW), errSink);
  t.equal(JSON.parse(errSink.body!).error.code, 'invalid_signature');

  // A store that gives fewer bytes than it declared: the body is cut, never ended cleanly.
  let cut = false;
  const shortSink: MediaSink = { ...sink, head: () => undefined, write: () => true, end: () => t.fail('not a clean end'), cut: () => (cut = true) };
  await writeMediaResponse({ status: 200, sizeBytes: 10, headers: [], stream: Readable.from([Buffer.alloc(6)]) }, shortSink);
  t.ok(cut, 'a short body is cut');

  // HEAD: the status, headers and size a GET would send, no body, the file closed unread.
  const heads: Array<{ status: number; sizeBytes: number }> = [];
  const headSink: MediaSink = {
    aborted: false,
    head: () => t.fail('HEAD sends no streamed head'),
    write: () => t.fail('HEAD writes no body') as never,
    drained: async () => undefined,
    end: () => t.fail('HEAD has no body to end'),
    cut: () => t.fail('HEAD has no body to cut'),
    json: (status, _h, body) => void heads.push({ status, sizeBytes: Buffer.byteLength(body) }),
    headOnly: true,
    endHead: (status, _h, sizeBytes) => void heads.push({ status, sizeBytes }),
  };
  const ok = await handleMediaRequest(req(signMediaPath(secret, '/media/video/big.mp4', NOW + 900)), store, secret, NOW);
  await writeMediaResponse(ok, headSink);
  t.ok(ok.status === 200 && ok.stream.destroyed, 'the opened file is closed');
  await writeMediaResponse(await handleMediaRequest({ path: '/media/x', query: '' }, store, secret, NOW), headSink);
  t.same(heads, [
    { status: 200, sizeBytes: data.length },
    { status: 403, sizeBytes: heads[1]?.sizeBytes },
  ]);
  t.ok(heads[1]!.sizeBytes > 0);
});
