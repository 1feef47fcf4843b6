// What every MediaStore must do, run against each implementation on its real backend (a temp
// directory, an S3-protocol server): put/open/delete, missing and bad keys, content types, strong
// ETags, byte ranges, and a source that fails halfway leaving no object.
import { randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import type { Test } from 'tap';
import type { RangeSpec } from '../../src/media/byte-range.js';
import { InvalidMediaKeyError, MediaTooLargeError, type MediaStore } from '../../src/media/media-store.js';

export async function readAll(s: Readable): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of s) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

export interface ContractOptions {
  /** The store's put cap (the too-large case writes just over it). */
  readonly maxObjectBytes: number;
  /** False where the backend answers a range on an empty object wrongly (s3rver invents a byte). */
  readonly emptyObjectRanges: boolean;
}

export function mediaStoreContract(t: Test, name: string, store: () => MediaStore, o: ContractOptions): void {
  t.test(`${name}: put / open / delete, content types, ETags`, async (t) => {
    const s = store();
    const data = randomBytes(200_000);
    t.same(await s.put('video/gen_1.mp4', data, 'video/mp4'), { sizeBytes: 200_000 });
    const a = (await s.open('video/gen_1.mp4'))!;
    t.equal(a.contentType, 'video/mp4');
    t.equal(a.sizeBytes, 200_000);
    t.equal(a.range, undefined, 'no range asked, none given');
    t.match(a.etag, /^"[^"]+"$/, 'a quoted strong ETag');
    t.ok((await readAll(a.stream)).equals(data), 'bytes round-trip');
    const again = (await s.open('video/gen_1.mp4'))!;
    again.stream.destroy();
    t.equal(again.etag, a.etag, 'the same object keeps its ETag');

    t.same(await s.put('image/gen_2.png', Readable.from([Buffer.from('abc'), Buffer.from('def'), 'ghi']), 'image/png; charset=binary'), { sizeBytes: 9 });
    const p = (await s.open('image/gen_2.png'))!;
    t.equal(p.contentType, 'image/png; charset=binary', 'parameters of the type are kept');
    t.equal((await readAll(p.stream)).toString(), 'abcdefghi');

    await s.put('video/gen_1.mp4', Buffer.from('replaced'), 'video/webm');
    const r = (await s.open('video/gen_1.mp4'))!;
    t.equal(r.contentType, 'video/webm');
    t.not(r.etag, a.etag, 'new bytes, new ETag');
    t.equal((await readAll(r.stream)).toString(), 'replaced');

    await s.put('empty', Buffer.alloc(0), 'application/octet-stream');
    const e = (await s.open('empty'))!;
    t.equal(e.sizeBytes, 0);
    t.equal((await readAll(e.stream)).length, 0);

    await s.delete('video/gen_1.mp4');
    t.equal(await s.open('video/gen_1.mp4'), undefined, 'gone after delete');
    await s.delete('video/gen_1.mp4');
    t.pass('a second delete is not an error');
    t.equal(await s.open('never/there'), undefined, 'a missing key is undefined');
    t.equal(await s.open('never/there', { start: 0, end: 9 }), undefined, 'a missing key with a range too');
  });

  t.test(`${name}: keys and content types are checked before any I/O`, async (t) => {
    const s = store();
    for (const k of ['', '../x', 'a/../../x', '/abs', 'A.mp4', 'a\\b', '.hidden', 'a//b', 'a/', 'a b', 'a%2e%2e/b', 'x'.repeat(257)]) {
      await t.rejects(s.put(k, Buffer.from('x'), 'text/plain'), InvalidMediaKeyError, `put ${JSON.stringify(k)}`);
      await t.rejects(s.open(k), InvalidMediaKeyError, `open ${JSON.stringify(k)}`);
      await t.rejects(s.delete(k), InvalidMediaKeyError, `delete ${JSON.stringify(k)}`);
    }
    await t.rejects(s.put('ok', Buffer.from('x'), 'text/plain\r\nx-evil: 1'), /content type/);
    await t.rejects(s.put('ok', Buffer.from('x'), 'no-slash'), /content type/);
    t.equal(await s.open('ok'), undefined, 'a refused put stores nothing');
  });

  t.test(`${name}: byte ranges read only the bytes asked for`, async (t) => {
    const s = store();
    const data = randomBytes(10_000);
    await s.put('video/ranged.mp4', data, 'video/mp4');
    const whole = (await s.open('video/ranged.mp4'))!;
    whole.stream.destroy();
    const cases: Array<[string, RangeSpec, number, number]> = [
      ['first bytes', { start: 0, end: 99 }, 0, 99],
      ['middle', { start: 1000, end: 1999 }, 1000, 1999],
      ['suffix', { suffix: 500 }, 9500, 9999],
      ['open-ended', { start: 9900 }, 9900, 9999],
      ['end past the size is clamped', { start: 9990, end: 20_000 }, 9990, 9999],
      ['suffix longer than the object', { suffix: 50_000 }, 0, 9999],
      ['one byte', { start: 5000, end: 5000 }, 5000, 5000],
    ];
    for (const [label, spec, start, end] of cases) {
      const r = (await s.open('video/ranged.mp4', spec))!;
      t.same(r.range, { start, end }, `${label}: range`);
      t.equal(r.sizeBytes, 10_000, `${label}: the whole size`);
      t.equal(r.etag, whole.etag, `${label}: the object's ETag`);
      t.equal(r.contentType, 'video/mp4');
      t.ok((await readAll(r.stream)).equals(data.subarray(start, end + 1)), `${label}: exactly those bytes`);
    }
    for (const [label, spec] of [
      ['past the end', { start: 10_000 }],
      ['far past the end', { start: 5_000_000, end: 5_000_010 }],
      ['empty suffix', { suffix: 0 }],
    ] as const) {
      const r = (await s.open('video/ranged.mp4', spec))!;
      t.equal(r.range, 'unsatisfiable', `${label}: unsatisfiable`);
      t.equal(r.sizeBytes, 10_000, `${label}: still says the size`);
      t.equal(r.etag, whole.etag);
      t.equal((await readAll(r.stream)).length, 0, `${label}: no bytes`);
    }
    if (o.emptyObjectRanges) {
      await s.put('empty-ranged', Buffer.alloc(0), 'text/plain');
      const r = (await s.open('empty-ranged', { start: 0 }))!;
      r.stream.destroy();
      t.equal(r.range, 'unsatisfiable', 'no range of an empty object is satisfiable');
    }
  });

  t.test(`${name}: a source that fails halfway leaves no object, and an older version intact`, async (t) => {
    const s = store();
    async function* failing(): AsyncGenerator<Buffer> {
      yield Buffer.alloc(50_000, 1);
      yield Buffer.alloc(50_000, 2);
      throw new Error('vendor connection reset');
    }
    await t.rejects(s.put('video/broken.mp4', Readable.from(failing()), 'video/mp4'), /vendor connection reset/, 'the source error is what put reports');
    t.equal(await s.open('video/broken.mp4'), undefined, 'nothing under the key');
    await s.put('video/old.mp4', Buffer.from('complete old version'), 'video/mp4');
    await t.rejects(s.put('video/old.mp4', Readable.from(failing()), 'video/mp4'));
    t.equal((await readAll((await s.open('video/old.mp4'))!.stream)).toString(), 'complete old version');

    const over = o.maxObjectBytes + 1;
    async function* huge(): AsyncGenerator<Buffer> {
      for (let sent = 0; sent < over; sent += 1024 * 1024) yield Buffer.alloc(Math.min(1024 * 1024, over - sent));
    }
    await t.rejects(s.put('video/huge.mp4', Readable.from(huge()), 'video/mp4'), MediaTooLargeError);
    await t.rejects(s.put('video/huge.mp4', Buffer.alloc(over), 'video/mp4'), MediaTooLargeError);
    t.equal(await s.open('video/huge.mp4'), undefined, 'nothing stored past the cap');
  });
}
