// A real S3-protocol server for tests (s3rver: requests are signed and checked, objects kept in a
// temp directory), on 127.0.0.1:0, with its bucket created through the S3 API, and a helper to
// build an S3MediaStore on it.
import { CreateBucketCommand, S3Client } from '@aws-sdk/client-s3';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, request as httpRequest, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Test } from 'tap';
import { S3MediaStore, type S3MediaStoreOptions } from '../../src/media/s3-media-store.js';

/** s3rver's one account (it refuses any other key pair). */
export const S3_CREDENTIALS = { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' } as const;

interface S3rverInstance {
  readonly store: S3rverStore;
  run(): Promise<{ port: number }>;
  close(): Promise<void>;
  httpServer?: Server;
}
type S3rverClass = new (o: Record<string, unknown>) => S3rverInstance;
const requireHere = createRequire(import.meta.url);
const S3rver = requireHere('s3rver') as S3rverClass;

// Two races of s3rver's file store, fixed here so tests see what a real store does:
// - it answers a PUT (object or part) once its bytes went through its hashing stream, before its
//   file stream has written them, so a GET or a CompleteMultipartUpload right after can read a
//   short file. Each put now answers once the file it opened is closed: its file streams are
//   tracked (fs-extra is s3rver's alone in this tree) and its two put methods wait for theirs;
// - DeleteObjects deletes its keys concurrently, each then removing its emptied directories, and
//   one can find a directory another just removed (a 500). Once the object's files are gone, a
//   directory already removed or refilled is not an error.
type WriteStreamFn = (path: string, o?: unknown) => NodeJS.WritableStream;
const fsExtra = createRequire(requireHere.resolve('s3rver'))('fs-extra') as { createWriteStream: WriteStreamFn };
const writing = new Map<string, Promise<void>>();
const plainCreateWriteStream = fsExtra.createWriteStream;
fsExtra.createWriteStream = (path, o) => {
  const ws = plainCreateWriteStream(path, o);
  writing.set(String(path), new Promise<void>((resolve) => ws.once('close', () => resolve())));
  return ws;
};
async function written(path: string): Promise<void> {
  const w = writing.get(path);
  writing.delete(path);
  await w;
}

interface S3rverStore {
  getResourcePath(bucket: string, key: string | undefined, resource: string): string;
  deleteObject(bucket: string, key: string): Promise<unknown>;
  putObject(object: { bucket: string; key: string }): Promise<unknown>;
  putPart(bucket: string, uploadId: string, partNumber: string | number, content: unknown): Promise<unknown>;
}

function fixRaces(store: S3rverStore): void {
  const deleteObject = store.deleteObject.bind(store);
  store.deleteObject = (bucket, key) =>
    deleteObject(bucket, key).catch((e: unknown) => {
      const code = (e as { code?: string }).code;
      if (code !== 'ENOENT' && code !== 'ENOTEMPTY') throw e;
    });
  const putObject = store.putObject.bind(store);
  const putPart = store.putPart.bind(store);
  store.putObject = async (object) => {
    const r = await putObject(object);
    await written(store.getResourcePath(object.bucket, object.key, 'object'));
    return r;
  };
  store.putPart = async (bucket, uploadId, partNumber, content) => {
    const r = await putPart(bucket, uploadId, partNumber, content);
    await written(join(store.getResourcePath(bucket, undefined, 'uploads'), uploadId, String(partNumber)));
    return r;
  };
}

export interface TestS3 {
  readonly endpoint: string;
  readonly port: number;
  /** The directory s3rver keeps buckets in. */
  readonly dir: string;
  createBucket(name: string): Promise<void>;
  /** An S3MediaStore on this server; `over` replaces any option. Closed at the test's end. */
  store(bucket: string, over?: Partial<S3MediaStoreOptions>): S3MediaStore;
}

/** Defaults a test store uses: the smallest parts S3 allows, short bounds. */
export const TEST_STORE_DEFAULTS = Object.freeze({
  region: 'us-east-1',
  prefix: 'media/',
  forcePathStyle: true,
  timeoutMs: 5_000,
  idleTimeoutMs: 5_000,
  uploadPartTimeoutMs: 20_000,
  partSizeBytes: 5 * 1024 * 1024,
  uploadQueueSize: 1,
  maxSockets: 16,
  maxObjectBytes: 64 * 1024 * 1024,
});

export async function startS3(t: Test): Promise<TestS3> {
  const dir = mkdtempSync(join(tmpdir(), 'inkgate-s3-'));
  const server = new S3rver({ port: 0, address: '127.0.0.1', directory: dir, silent: true });
  fixRaces(server.store);
  const { port } = await server.run();
  const endpoint = `http://127.0.0.1:${port}`;
  const stores: S3MediaStore[] = [];
  const admin = new S3Client({ region: 'us-east-1', endpoint, forcePathStyle: true, credentials: { ...S3_CREDENTIALS } });
  t.teardown(async () => {
    for (const s of stores) await s.close();
    admin.destroy();
    server.httpServer?.closeAllConnections();
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return {
    endpoint,
    port,
    dir,
    createBucket: async (name) => void (await admin.send(new CreateBucketCommand({ Bucket: name }))),
    store: (bucket, over = {}) => {
      const s = new S3MediaStore({ ...TEST_STORE_DEFAULTS, bucket, endpoint, credentials: { ...S3_CREDENTIALS }, ...over });
      stores.push(s);
      return s;
    },
  };
}

/**
 * An HTTP proxy on 127.0.0.1:0 in front of the S3 server at `port` that records each request as
 * `METHOD params` (the query's parameter names, sorted, without the SDK's x-id): what a store sent.
 */
export async function recordingProxy(t: Test, port: number): Promise<{ endpoint: string; seen: string[] }> {
  const seen: string[] = [];
  const server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    // One entry per operation: the SDK's own retry of it (attempt=2) is not a second call of ours.
    const attempt = /attempt=(\d+)/.exec(String(req.headers['amz-sdk-request'] ?? ''))?.[1];
    if (attempt === undefined || attempt === '1')
      seen.push(
        `${req.method} ${[...url.searchParams.keys()]
          .filter((k) => k !== 'x-id')
          .sort()
          .join('&')}`.trim(),
      );
    const up = httpRequest({ host: '127.0.0.1', port, method: req.method, path: req.url, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode ?? 502, r.headers);
      r.pipe(res);
    });
    up.on('error', () => res.destroy());
    req.pipe(up);
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  t.teardown(
    () =>
      new Promise<void>((ok) => {
        server.closeAllConnections();
        server.close(() => ok());
      }),
  );
  return { endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

/**
 * Puts s3rver's key pair in the standard AWS variables for the rest of the test (the CLI and child
 * gateways take credentials from the SDK's chain, as in production), and restores them after.
 */
export function useS3CredentialsInEnv(t: Test): void {
  const saved = { id: process.env.AWS_ACCESS_KEY_ID, secret: process.env.AWS_SECRET_ACCESS_KEY };
  process.env.AWS_ACCESS_KEY_ID = S3_CREDENTIALS.accessKeyId;
  process.env.AWS_SECRET_ACCESS_KEY = S3_CREDENTIALS.secretAccessKey;
  t.teardown(() => {
    for (const [k, v] of [
      ['AWS_ACCESS_KEY_ID', saved.id],
      ['AWS_SECRET_ACCESS_KEY', saved.secret],
    ] as const) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  });
}
