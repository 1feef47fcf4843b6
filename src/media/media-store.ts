// Where generation results live. The interface is what the job engine and the media host use;
// FsMediaStore is the local-filesystem default (an S3-compatible store implements the same three
// calls). Writes go to a temp file that is fsynced and renamed into place, so a crash or a failed
// source stream never leaves a half file under the final name. The content type travels inside
// the file as a one-line header, so the data and its type appear in one atomic rename.
import { randomUUID } from 'node:crypto';
import { mkdir, open, readdir, rename, rm, stat, type FileHandle } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { Readable } from 'node:stream';

export interface MediaObject {
  /** The bytes; the caller must consume or destroy it (it holds an open file). */
  readonly stream: Readable;
  readonly sizeBytes: number;
  readonly contentType: string;
}

export interface MediaStore {
  put(key: string, data: Buffer | Readable, contentType: string): Promise<{ sizeBytes: number }>;
  /** undefined when there is no object under `key`. */
  open(key: string): Promise<MediaObject | undefined>;
  /** Idempotent: deleting a missing key is not an error. */
  delete(key: string): Promise<void>;
}

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
const MAGIC = 'INKMEDIA1\n';
const HEADER_MAX_BYTES = MAGIC.length + MAX_CONTENT_TYPE_CHARS + 1;
const TEMP_DIR = '.tmp';

export interface FsMediaStoreOptions {
  /** Largest object put() accepts. Default 2 GiB. */
  readonly maxObjectBytes?: number;
}

async function writeAll(fh: FileHandle, buf: Buffer): Promise<void> {
  let off = 0;
  while (off < buf.length) {
    const { bytesWritten } = await fh.write(buf, off, buf.length - off);
    off += bytesWritten;
  }
}

const isErrno = (e: unknown, code: string): boolean => (e as { code?: unknown } | null)?.code === code;

export class FsMediaStore implements MediaStore {
  readonly rootDir: string;
  private readonly tempDir: string;
  private readonly maxObjectBytes: number;

  constructor(rootDir: string, opts: FsMediaStoreOptions = {}) {
    this.rootDir = rootDir;
    this.tempDir = join(rootDir, TEMP_DIR);
    this.maxObjectBytes = opts.maxObjectBytes ?? 2 * 1024 ** 3;
  }

  private pathOf(key: string): string {
    if (!isValidMediaKey(key)) throw new InvalidMediaKeyError(key);
    return join(this.rootDir, key);
  }

  async put(key: string, data: Buffer | Readable, contentType: string): Promise<{ sizeBytes: number }> {
    const finalPath = this.pathOf(key);
    if (contentType.length > MAX_CONTENT_TYPE_CHARS || !CONTENT_TYPE_RE.test(contentType)) throw new Error(`invalid content type ${JSON.stringify(contentType.slice(0, 80))}`);
    if (Buffer.isBuffer(data) && data.length > this.maxObjectBytes) throw new MediaTooLargeError(this.maxObjectBytes);
    await mkdir(this.tempDir, { recursive: true });
    const tempPath = join(this.tempDir, `${randomUUID()}.part`);
    const fh = await open(tempPath, 'wx', 0o640);
    let closed = false;
    let placed = false;
    try {
      await writeAll(fh, Buffer.from(MAGIC + contentType + '\n', 'latin1'));
      let size = 0;
      if (Buffer.isBuffer(data)) {
        await writeAll(fh, data);
        size = data.length;
      } else {
        for await (const chunk of data as AsyncIterable<Buffer | string>) {
          const buf = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
          size += buf.length;
          if (size > this.maxObjectBytes) throw new MediaTooLargeError(this.maxObjectBytes);
          await writeAll(fh, buf);
        }
      }
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

  async open(key: string): Promise<MediaObject | undefined> {
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
      const text = head.subarray(0, bytesRead).toString('latin1');
      const nl = text.indexOf('\n', MAGIC.length);
      if (!text.startsWith(MAGIC) || nl === -1) throw new Error(`media file ${key} has no header`);
      const contentType = text.slice(MAGIC.length, nl);
      const headerBytes = nl + 1;
      // The same handle serves the stream: a delete after open() cannot cut the download short.
      const stream = fh.createReadStream({ start: headerBytes, autoClose: true });
      return { stream, sizeBytes: st.size - headerBytes, contentType };
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
