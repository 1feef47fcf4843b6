// Where generation results live. The interface is what the job runner and the media host use;
// FsMediaStore is the local-filesystem default (an S3-compatible store implements the same three
// calls: s3-media-store.ts). Writes go to a temp file that is fsynced and renamed into place, so a
// crash or a failed source stream never leaves a half file under the final name. The content type
// and a SHA-256 of the bytes (computed while writing: the strong ETag) travel inside the file as a
// short header, so the data, its type and its validator appear in one atomic rename.
import { createHash, randomUUID } from 'node:crypto';
import { constants } from 'node:fs';
import { access, mkdir, open, readdir, rename, rm, stat, type FileHandle } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { Readable } from 'node:stream';
import { resolveRange, type ByteRange, type RangeSpec } from './byte-range.js';

export interface MediaObject {
  /** The bytes (all of them, or the range asked for); the caller must consume or destroy it (it holds a file or a connection). */
  readonly stream: Readable;
  /** The whole object's size, whatever the stream carries. */
  readonly sizeBytes: number;
  readonly contentType: string;
  /** Strong validator, quoted as the ETag header carries it; changes whenever the bytes may have. */
  readonly etag: string;
  /** What the stream carries: undefined, the whole object; a range; or 'unsatisfiable' (the stream is empty). */
  readonly range: ByteRange | 'unsatisfiable' | undefined;
}

export interface MediaStore {
  put(key: string, data: Buffer | Readable, contentType: string): Promise<{ sizeBytes: number }>;
  /**
   * undefined when there is no object under `key`. With `range`, only those bytes are read (a
   * range is never a whole read); size, type and ETag come from the same read as the bytes.
   */
  open(key: string, range?: RangeSpec): Promise<MediaObject | undefined>;
  /** Idempotent: deleting a missing key is not an error. */
  delete(key: string): Promise<void>;
  /**
   * Deletes several keys in as few calls as the store allows (the retention sweep); returns the
   * keys now gone (a missing key counts as gone). Absent: the caller deletes one by one.
   */
  deleteMany?(keys: readonly string[]): Promise<Set<string>>;
  /**
   * Present when downloads are redirected to the store instead of streamed (S3 with
   * presignedRedirect): a URL the store itself authorises for `expiresInS`, answering with
   * `contentDisposition`; undefined when there is no object under `key`.
   */
  presignedGet?(key: string, expiresInS: number, contentDisposition: string): Promise<string | undefined>;
  /** Where results are kept, as /readyz names it: a directory of files, or an S3 bucket. */
  readonly location: MediaLocation;
  /** Readiness probe (rejects when it cannot serve): the bucket answers, or the directory is writable. */
  check?(): Promise<void>;
  /** Releases connections; absent when there is nothing to release. */
  close?(): Promise<void>;
}

/** A media store's place: files under `dir`, or objects under `prefix` in an S3 `bucket`. */
export type MediaLocation = { readonly kind: 'files'; readonly dir: string } | { readonly kind: 's3'; readonly bucket: string; readonly prefix: string };

export const MAX_MEDIA_KEY_CHARS = 256;
// Segments of [a-z0-9_.-], not starting with '.', so no '.', '..', hidden names or the temp dir.
const KEY_RE = /^[a-z0-9_-][a-z0-9_.-]*(?:\/[a-z0-9_-][a-z0-9_.-]*)*$/;

export class InvalidMediaKeyError extends Error {
  constructor(key: string) {
    super(`invalid media key ${JSON.stringify(key.slice(0, 80))}`);
    this.name = 'InvalidMediaKeyError';
  }
}

export class MediaTooLargeError extends Error {
  constructor(limitBytes: number) {
    super(`media object larger than ${limitBytes} bytes`);
    this.name = 'MediaTooLargeError';
  }
}

export function isValidMediaKey(key: string): boolean {
  return typeof key === 'string' && key.length > 0 && key.length <= MAX_MEDIA_KEY_CHARS && KEY_RE.test(key) && !key.includes('..');
}

const CONTENT_TYPE_RE = /^[A-Za-z0-9!#$&^_.+-]+\/[A-Za-z0-9!#$&^_.+-]+(?:\s*;[\x20-\x7e]*)?$/;
const MAX_CONTENT_TYPE_CHARS = 200;

/** Throws unless `contentType` is one media type we would send back as a header (no CR/LF, bounded). */
export function checkContentType(contentType: string): void {
  if (contentType.length > MAX_CONTENT_TYPE_CHARS || !CONTENT_TYPE_RE.test(contentType))
    throw new Error(`invalid content type ${JSON.stringify(contentType.slice(0, 80))}`);
}

/** An already-ended stream: what an unsatisfiable range carries. */
export const emptyStream = (): Readable => Readable.from([]);

// File header. Version 2: magic, the SHA-256 of the bytes (hex, written in place once the bytes are
// through), the content type. Version 1 files (no hash) are still read.
const MAGIC_V1 = 'INKMEDIA1\n';
const MAGIC = 'INKMEDIA2\n';
const HASH_HEX_CHARS = 64;
const HEADER_MAX_BYTES = MAGIC.length + HASH_HEX_CHARS + 1 + MAX_CONTENT_TYPE_CHARS + 1;
const TEMP_DIR = '.tmp';
const HASH_PLACEHOLDER = '0'.repeat(HASH_HEX_CHARS);

interface FileHeader {
  readonly contentType: string;
  readonly headerBytes: number;
  /** Hex SHA-256 of the bytes; undefined for a version 1 file. */
  readonly sha256: string | undefined;
}

function parseHeader(head: Buffer, key: string): FileHeader {
  const text = head.toString('latin1');
  if (text.startsWith(MAGIC)) {
    const hashEnd = MAGIC.length + HASH_HEX_CHARS;
    const nl = text.indexOf('\n', hashEnd + 1);
    if (text[hashEnd] === '\n' && nl !== -1)
      return { sha256: text.slice(MAGIC.length, hashEnd), contentType: text.slice(hashEnd + 1, nl), headerBytes: nl + 1 };
  } else if (text.startsWith(MAGIC_V1)) {
    const nl = text.indexOf('\n', MAGIC_V1.length);
    if (nl !== -1) return { sha256: undefined, contentType: text.slice(MAGIC_V1.length, nl), headerBytes: nl + 1 };
  }
  throw new Error(`media file ${key} has no header`);
}

/**
 * The strong ETag of a stored file: its size and the first 128 bits of the SHA-256 recorded at put
 * time. A version 1 file has no hash: size, inode and mtime instead, which change on every put
 * (a put is a rename of a new file), so the tag still changes whenever the bytes may have.
 */
function fileEtag(header: FileHeader, sizeBytes: number, stats: { ino: number; mtimeMs: number }): string {
  if (header.sha256 !== undefined) return `"${sizeBytes.toString(36)}-${header.sha256.slice(0, 32)}"`;
  return `"${sizeBytes.toString(36)}-i${stats.ino.toString(36)}-m${Math.floor(stats.mtimeMs).toString(36)}"`;
}

export interface FsMediaStoreOptions {
  /** Largest object put() accepts. Default 2 GiB. */
  readonly maxObjectBytes?: number;
}

async function writeAll(handle: FileHandle, buf: Buffer): Promise<void> {
  let off = 0;
  while (off < buf.length) {
    const { bytesWritten } = await handle.write(buf, off, buf.length - off);
    off += bytesWritten;
  }
}

const isErrno = (e: unknown, code: string): boolean => (e as { code?: unknown } | null)?.code === code;

export class FsMediaStore implements MediaStore {
  readonly rootDir: string;
  private readonly tempDir: string;
  private readonly maxObjectBytes: number;

  readonly location: MediaLocation;

  constructor(rootDir: string, opts: FsMediaStoreOptions = {}) {
    this.rootDir = rootDir;
    this.location = { kind: 'files', dir: resolve(rootDir) };
    this.tempDir = join(rootDir, TEMP_DIR);
    this.maxObjectBytes = opts.maxObjectBytes ?? 2 * 1024 ** 3;
  }

  /** Readiness: results can be written here (the directory, or before the first result the nearest one above it). */
  async check(): Promise<void> {
    for (let dir = this.rootDir; ; dir = dirname(dir)) {
      try {
        await access(dir, constants.W_OK);
        return;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'ENOENT' || dirname(dir) === dir) throw e;
      }
    }
  }

  private pathOf(key: string): string {
    if (!isValidMediaKey(key)) throw new InvalidMediaKeyError(key);
    return join(this.rootDir, key);
  }

  async put(key: string, data: Buffer | Readable, contentType: string): Promise<{ sizeBytes: number }> {
    const finalPath = this.pathOf(key);
    checkContentType(contentType);
    if (Buffer.isBuffer(data) && data.length > this.maxObjectBytes) throw new MediaTooLargeError(this.maxObjectBytes);
    await mkdir(this.tempDir, { recursive: true });
    const tempPath = join(this.tempDir, `${randomUUID()}.part`);
    const fh = await open(tempPath, 'wx', 0o640);
    let closed = false;
    let placed = false;
    try {
      await writeAll(fh, Buffer.from(MAGIC + HASH_PLACEHOLDER + '\n' + contentType + '\n', 'latin1'));
      const hash = createHash('sha256');
      let size = 0;
      if (Buffer.isBuffer(data)) {
        await writeAll(fh, data);
        hash.update(data);
        size = data.length;
      } else {
        for await (const chunk of data as AsyncIterable<Buffer | string>) {
          const buf = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
          size += buf.length;
          if (size > this.maxObjectBytes) throw new MediaTooLargeError(this.maxObjectBytes);
          await writeAll(fh, buf);
          hash.update(buf);
        }
      }
      // The hash goes over its placeholder, in place; the file is renamed only after this.
      await fh.write(Buffer.from(hash.digest('hex'), 'latin1'), 0, HASH_HEX_CHARS, MAGIC.length);
      await fh.sync();
      await fh.close();
      closed = true;
      await mkdir(dirname(finalPath), { recursive: true });
      await rename(tempPath, finalPath);
      placed = true;
      await this.syncDir(dirname(finalPath));
      return { sizeBytes: size };
    } finally {
      if (!closed) await fh.close().catch(() => undefined);
      if (!placed) await rm(tempPath, { force: true });
    }
  }

  async open(key: string, range?: RangeSpec): Promise<MediaObject | undefined> {
    const path = this.pathOf(key);
    let fh: FileHandle;
    try {
      fh = await open(path, 'r');
    } catch (e) {
      if (isErrno(e, 'ENOENT') || isErrno(e, 'ENOTDIR') || isErrno(e, 'EISDIR')) return undefined;
      throw e;
    }
    try {
      const st = await fh.stat();
      if (!st.isFile()) {
        await fh.close();
        return undefined;
      }
      const head = Buffer.alloc(HEADER_MAX_BYTES);
      const { bytesRead } = await fh.read(head, 0, HEADER_MAX_BYTES, 0);
      const h = parseHeader(head.subarray(0, bytesRead), key);
      const sizeBytes = st.size - h.headerBytes;
      const base = { sizeBytes, contentType: h.contentType, etag: fileEtag(h, sizeBytes, st) };
      const r = range === undefined ? undefined : resolveRange(range, sizeBytes);
      if (r === 'unsatisfiable') {
        await fh.close();
        return { ...base, stream: emptyStream(), range: r };
      }
      // The same handle serves the stream: a delete after open() cannot cut the download short.
      const stream =
        r === undefined
          ? fh.createReadStream({ start: h.headerBytes, autoClose: true })
          : fh.createReadStream({ start: h.headerBytes + r.start, end: h.headerBytes + r.end, autoClose: true });
      return { ...base, stream, range: r };
    } catch (e) {
      await fh.close().catch(() => undefined);
      throw e;
    }
  }

  async delete(key: string): Promise<void> {
    await rm(this.pathOf(key), { force: true });
  }

  /** Removes temp files older than `maxAgeMs` (left by a crash mid-put); returns how many. */
  async sweepTemp(nowMs: number, maxAgeMs: number): Promise<number> {
    let names: string[];
    try {
      names = await readdir(this.tempDir);
    } catch (e) {
      if (isErrno(e, 'ENOENT')) return 0;
      throw e;
    }
    let removed = 0;
    for (const name of names) {
      if (!name.endsWith('.part')) continue;
      const p = join(this.tempDir, name);
      const st = await stat(p).catch(() => undefined);
      if (st !== undefined && nowMs - st.mtimeMs > maxAgeMs) {
        await rm(p, { force: true });
        removed++;
      }
    }
    return removed;
  }

  /** fsync the directory so the rename itself survives a power cut (best effort). */
  private async syncDir(dir: string): Promise<void> {
    const dh = await open(dir, 'r').catch(() => undefined);
    if (dh === undefined) return;
    await dh.sync().catch(() => undefined);
    await dh.close().catch(() => undefined);
  }
}
