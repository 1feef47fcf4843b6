// The media store on an S3-compatible bucket (AWS S3, Cloudflare R2, MinIO...), behind the same
// MediaStore interface as the filesystem store, so every gateway instance sharing the bucket serves
// every result. Uploads stream through @aws-sdk/lib-storage: one PutObject below partSizeBytes, a
// multipart upload above it, holding at most uploadQueueSize + 1 parts in memory; a failed source
// or part aborts the multipart upload, and S3 only makes an object visible on a complete one, so
// nothing appears under the final key; put reports the cause (the source's error first). A range is a ranged GET. Bounds: every call has a deadline
// of its own (timeoutMs, retries included); a connection idle for idleTimeoutMs is cut, which also
// ends a download whose reader stopped reading (it resumes with a Range); an upload part has
// uploadPartTimeoutMs. Credentials come only from the AWS SDK's default chain (AWS_ACCESS_KEY_ID /
// AWS_SECRET_ACCESS_KEY, AWS_PROFILE and the shared files, web identity, the instance role).
import {
  AbortMultipartUploadCommand,
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  S3Client,
  S3ServiceException,
  type GetObjectCommandOutput,
} from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import { Agent as HttpAgent } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import { Readable } from 'node:stream';
import { parseContentRange, rangeHeader, resolveRange, type ByteRange, type RangeSpec } from './byte-range.js';
import {
  checkContentType,
  emptyStream,
  InvalidMediaKeyError,
  isValidMediaKey,
  MediaTooLargeError,
  type MediaLocation,
  type MediaObject,
  type MediaStore,
} from './media-store.js';

export interface S3MediaStoreOptions {
  readonly bucket: string;
  readonly region: string;
  /** undefined: AWS S3 itself. */
  readonly endpoint?: string | undefined;
  /** Prepended to every key; empty or ending in '/'. */
  readonly prefix: string;
  readonly forcePathStyle: boolean;
  readonly timeoutMs: number;
  readonly idleTimeoutMs: number;
  readonly uploadPartTimeoutMs: number;
  readonly partSizeBytes: number;
  readonly uploadQueueSize: number;
  readonly maxSockets: number;
  readonly maxObjectBytes: number;
  /** Downloads answer 302 to a presigned GET (the store serves the bytes, ranges included). */
  readonly presignedRedirect?: boolean;
  /** TEST ONLY: fixed credentials (production uses the SDK's default chain). */
  readonly credentials?: { readonly accessKeyId: string; readonly secretAccessKey: string };
}

/** A store call that failed in a way an operator must fix or wait out; the message says which. */
export class MediaStoreError extends Error {
  constructor(
    message: string,
    /** The store's own error code (NoSuchBucket, AccessDenied...), or `timeout`. */
    readonly code: string,
    /** The store's HTTP status, when it answered. */
    readonly status?: number,
  ) {
    super(message);
    this.name = 'MediaStoreError';
  }
}

const CREDENTIAL_CODES = new Set(['InvalidAccessKeyId', 'SignatureDoesNotMatch', 'AccessDenied', 'InvalidToken', 'ExpiredToken', 'CredentialsProviderError']);
const MISSING_KEY_CODES = new Set(['NoSuchKey', 'NotFound']);
/** S3's cap on keys per DeleteObjects call. */
const DELETE_BATCH = 1000;

const codeOf = (error: unknown): string =>
  error instanceof S3ServiceException ? error.name : ((error as { name?: string; Code?: string } | null)?.Code ?? (error as Error | null)?.name ?? 'Error');
const statusOf = (e: unknown): number | undefined => (e as { $metadata?: { httpStatusCode?: number } } | null)?.$metadata?.httpStatusCode;

/**
 * The object's own ETag when it is a strong one; a store that sends none (or a weak one) gets one
 * made of the size and the modification time, which change whenever the object is written again.
 */
function etagOf(etag: string | undefined, sizeBytes: number, lastModified: Date | undefined): string {
  if (etag !== undefined && /^"[\x21\x23-\x7e]+"$/.test(etag)) return etag;
  return `"s${sizeBytes.toString(36)}-m${(lastModified?.getTime() ?? 0).toString(36)}"`;
}

export class S3MediaStore implements MediaStore {
  private readonly client: S3Client;
  private readonly where: string;
  readonly location: MediaLocation;

  constructor(private readonly options: S3MediaStoreOptions) {
    this.location = { kind: 's3', bucket: options.bucket, prefix: options.prefix };
    const agent = { keepAlive: true, maxSockets: options.maxSockets };
    this.client = new S3Client({
      region: options.region,
      ...(options.endpoint !== undefined ? { endpoint: options.endpoint } : {}),
      forcePathStyle: options.forcePathStyle,
      ...(options.credentials !== undefined ? { credentials: options.credentials } : {}),
      maxAttempts: 2,
      // Checksums only where S3 requires them: the streamed trailing checksums the SDK adds by
      // default are not understood by every S3-compatible store (older MinIO, R2 on some calls).
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
      requestHandler: {
        connectionTimeout: Math.min(options.timeoutMs, 5_000),
        requestTimeout: options.uploadPartTimeoutMs,
        throwOnRequestTimeout: true,
        socketTimeout: options.idleTimeoutMs,
        httpAgent: new HttpAgent(agent),
        httpsAgent: new HttpsAgent(agent),
      },
    });
    this.where = `bucket ${JSON.stringify(options.bucket)}${options.endpoint !== undefined ? ` at ${options.endpoint}` : ''}`;
    if (options.presignedRedirect === true) this.presignedGet = (key, expiresInS, disposition) => this.presign(key, expiresInS, disposition);
  }

  readonly presignedGet?: (key: string, expiresInS: number, contentDisposition: string) => Promise<string | undefined>;

  /**
   * A presigned GET of an existing object (one HeadObject first, so a swept result is still our
   * 404, not the store's XML). The answer is never cached and carries our Content-Disposition.
   */
  private async presign(key: string, expiresInS: number, contentDisposition: string): Promise<string | undefined> {
    const Key = this.objectKey(key);
    try {
      await this.call(`head ${key}`, (abortSignal) => this.client.send(new HeadObjectCommand({ Bucket: this.options.bucket, Key }), { abortSignal }));
    } catch (e) {
      if (MISSING_KEY_CODES.has((e as MediaStoreError).code)) return undefined;
      throw e;
    }
    const cmd = new GetObjectCommand({
      Bucket: this.options.bucket,
      Key,
      ResponseContentDisposition: contentDisposition,
      ResponseCacheControl: 'private, no-store',
    });
    return getSignedUrl(this.client, cmd, { expiresIn: Math.max(1, Math.floor(expiresInS)) });
  }

  private objectKey(key: string): string {
    if (!isValidMediaKey(key)) throw new InvalidMediaKeyError(key);
    return this.options.prefix + key;
  }

  /** Runs one SDK call under the store's deadline (retries included), with its errors made readable. */
  private async call<T>(what: string, run: (signal: AbortSignal) => Promise<T>): Promise<T> {
    const ac = new AbortController();
    const timer = setTimeout(() => ac.abort(), this.options.timeoutMs);
    try {
      return await run(ac.signal);
    } catch (e) {
      throw this.explain(what, e, ac.signal.aborted);
    } finally {
      clearTimeout(timer);
    }
  }

  /** An error that says what to fix: the bucket is missing, the credentials are refused, the store does not answer. */
  private explain(what: string, error: unknown, timedOut: boolean): Error {
    if (error instanceof MediaTooLargeError || error instanceof MediaStoreError) return error;
    const code = codeOf(error);
    const status = statusOf(error);
    if (timedOut || code === 'TimeoutError' || code === 'AbortError')
      return new MediaStoreError(`media store: ${what} on ${this.where} got no answer in time`, 'timeout');
    // A HEAD has no body to name the error: a 404 on the bucket itself means the bucket.
    if (code === 'NoSuchBucket' || (what === 'head bucket' && status === 404))
      return new MediaStoreError(`media store: ${this.where} does not exist (${what})`, 'NoSuchBucket', status);
    if (CREDENTIAL_CODES.has(code) || status === 403) {
      const named = code === 'Unknown' ? 'Forbidden' : code; // a HEAD's 403 has no body to name it
      return new MediaStoreError(
        `media store: ${this.where} refused the credentials (${named}) for ${what}; check the AWS credentials and the bucket's policy`,
        named,
        status,
      );
    }
    return new MediaStoreError(`media store: ${what} on ${this.where} failed: ${code}: ${(error as Error)?.message ?? String(error)}`, code, status);
  }

  async put(key: string, data: Buffer | Readable, contentType: string): Promise<{ sizeBytes: number }> {
    const Key = this.objectKey(key);
    checkContentType(contentType);
    const max = this.options.maxObjectBytes;
    if (Buffer.isBuffer(data) && data.length > max) throw new MediaTooLargeError(max);
    let size = 0;
    let sourceError: unknown;
    // Counts (and caps) the bytes as lib-storage pulls them; remembers why the source failed, so
    // that error wins over the abort's own (a store that cannot abort still reports the cause).
    async function* counted(src: AsyncIterable<Buffer | string>): AsyncGenerator<Buffer> {
      try {
        for await (const chunk of src) {
          const buf = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
          size += buf.length;
          if (size > max) throw new MediaTooLargeError(max);
          yield buf;
        }
      } catch (e) {
        sourceError = e;
        throw e;
      }
    }
    const Body = Buffer.isBuffer(data) ? data : Readable.from(counted(data as AsyncIterable<Buffer | string>));
    const upload = new Upload({
      client: this.client,
      params: { Bucket: this.options.bucket, Key, Body, ContentType: contentType },
      partSize: this.options.partSizeBytes,
      queueSize: this.options.uploadQueueSize,
      // We abort a failed multipart upload ourselves: lib-storage's own abort, when it fails (a
      // store without AbortMultipartUpload, a store that stopped), throws in place of the cause.
      leavePartsOnError: true,
    });
    try {
      await upload.done();
    } catch (e) {
      if (upload.uploadId !== undefined) await this.abortUpload(key, Key, upload.uploadId);
      throw sourceError ?? this.explain(`put ${key}`, e, false);
    }
    return { sizeBytes: Buffer.isBuffer(data) ? data.length : size };
  }

  /**
   * Aborts a multipart upload (its parts go, no object appears). Best effort and bounded: the
   * object never appears either way, and left parts are the bucket lifecycle rule's to clear.
   */
  private async abortUpload(key: string, Key: string, UploadId: string): Promise<void> {
    await this.call(`abort upload of ${key}`, (abortSignal) =>
      this.client.send(new AbortMultipartUploadCommand({ Bucket: this.options.bucket, Key, UploadId }), { abortSignal }),
    ).catch(() => undefined);
  }

  async open(key: string, range?: RangeSpec): Promise<MediaObject | undefined> {
    const Key = this.objectKey(key);
    // `bytes=-0` is never satisfiable, and not every store answers it the same way: ask for the facts only.
    if (range !== undefined && 'suffix' in range && range.suffix === 0) return this.unsatisfiable(key, Key);
    const got = await this.get(key, Key, range === undefined ? undefined : rangeHeader(range));
    if (got === undefined || got === 'unsatisfiable') return got === undefined ? undefined : this.unsatisfiable(key, Key);
    const obj = this.toObject(got, range);
    if (range === undefined || !('suffix' in range) || typeof obj.range !== 'object') return obj;
    // Some S3-compatible servers read `bytes=-n` as `bytes=0-n`: check the answer against the size
    // it reports, and ask again with the explicit range (same ETag) when it is not the suffix.
    const want = resolveRange(range, obj.sizeBytes);
    if (want === 'unsatisfiable' || (want.start === obj.range.start && want.end === obj.range.end)) return obj;
    obj.stream.destroy();
    const again = await this.get(key, Key, rangeHeader(want), obj.etag);
    if (again === undefined || again === 'unsatisfiable') return again === undefined ? undefined : this.unsatisfiable(key, Key);
    return this.toObject(again, want);
  }

  /** A GET (ranged when `range` is given); undefined: no such key; 'unsatisfiable': the store answered 416. */
  private async get(key: string, Key: string, range: string | undefined, ifMatch?: string): Promise<GetObjectCommandOutput | 'unsatisfiable' | undefined> {
    try {
      return await this.call(`get ${key}`, (abortSignal) =>
        this.client.send(
          new GetObjectCommand({
            Bucket: this.options.bucket,
            Key,
            ...(range !== undefined ? { Range: range } : {}),
            ...(ifMatch !== undefined ? { IfMatch: ifMatch } : {}),
          }),
          { abortSignal },
        ),
      );
    } catch (e) {
      const err = e as MediaStoreError;
      // 412 on the second read: the object was replaced in between; to the reader it is gone.
      if (MISSING_KEY_CODES.has(err.code) || err.status === 412) return undefined;
      if (err.code === 'InvalidRange' || err.status === 416) return 'unsatisfiable';
      throw e;
    }
  }

  /** The object's facts with an empty stream: the answer to a range past its end. */
  private async unsatisfiable(key: string, Key: string): Promise<MediaObject | undefined> {
    try {
      const h = await this.call(`head ${key}`, (abortSignal) => this.client.send(new HeadObjectCommand({ Bucket: this.options.bucket, Key }), { abortSignal }));
      const sizeBytes = h.ContentLength ?? 0;
      return {
        stream: emptyStream(),
        sizeBytes,
        contentType: h.ContentType ?? 'application/octet-stream',
        etag: etagOf(h.ETag, sizeBytes, h.LastModified),
        range: 'unsatisfiable',
      };
    } catch (e) {
      if (MISSING_KEY_CODES.has((e as MediaStoreError).code)) return undefined;
      throw e;
    }
  }

  private toObject(got: GetObjectCommandOutput, range: RangeSpec | undefined): MediaObject {
    const stream = got.Body as Readable;
    const contentType = got.ContentType ?? 'application/octet-stream';
    const cr = parseContentRange(got.ContentRange);
    if (range !== undefined && cr !== undefined) {
      return { stream, sizeBytes: cr.sizeBytes, contentType, etag: etagOf(got.ETag, cr.sizeBytes, got.LastModified), range: { start: cr.start, end: cr.end } };
    }
    const sizeBytes = got.ContentLength ?? 0;
    const etag = etagOf(got.ETag, sizeBytes, got.LastModified);
    // The store sent the whole object for a range: it is the range if the range covers it all.
    let r: ByteRange | 'unsatisfiable' | undefined;
    if (range !== undefined) {
      const want = resolveRange(range, sizeBytes);
      r = want === 'unsatisfiable' || (want.start === 0 && want.end === sizeBytes - 1) ? want : undefined;
      if (r === 'unsatisfiable') stream.destroy();
    }
    return { stream: r === 'unsatisfiable' ? emptyStream() : stream, sizeBytes, contentType, etag, range: r };
  }

  async delete(key: string): Promise<void> {
    const Key = this.objectKey(key);
    // S3 answers a delete of a missing key with success: idempotent as the interface asks.
    await this.call(`delete ${key}`, (abortSignal) => this.client.send(new DeleteObjectCommand({ Bucket: this.options.bucket, Key }), { abortSignal }));
  }

  /**
   * DeleteObjects, up to 1000 keys a call (S3's cap), quiet: only failures are listed. A store that
   * refuses the batch call itself (some S3-compatible ones lack it) gets one delete per key; a
   * timeout or refused credentials do not fall back (the next sweep tries again).
   */
  async deleteMany(keys: readonly string[]): Promise<Set<string>> {
    const gone = new Set<string>();
    for (let i = 0; i < keys.length; i += DELETE_BATCH) {
      const batch = keys.slice(i, i + DELETE_BATCH);
      const objects = batch.map((k) => ({ Key: this.objectKey(k) }));
      try {
        const r = await this.call(`delete ${batch.length} objects`, (abortSignal) =>
          this.client.send(new DeleteObjectsCommand({ Bucket: this.options.bucket, Delete: { Objects: objects, Quiet: true } }), { abortSignal }),
        );
        const failed = new Set((r.Errors ?? []).map((e) => e.Key));
        for (const k of batch) if (!failed.has(this.options.prefix + k)) gone.add(k);
      } catch (e) {
        const code = (e as MediaStoreError).code;
        if (code === 'timeout' || CREDENTIAL_CODES.has(code) || code === 'Forbidden' || code === 'NoSuchBucket') throw e;
        for (const k of batch)
          await this.delete(k).then(
            () => gone.add(k),
            () => undefined,
          );
      }
    }
    return gone;
  }

  /** Readiness: the bucket exists and these credentials may use it. */
  async check(): Promise<void> {
    await this.call('head bucket', (abortSignal) => this.client.send(new HeadBucketCommand({ Bucket: this.options.bucket }), { abortSignal }));
  }

  async close(): Promise<void> {
    this.client.destroy();
  }
}
