// What every asynchronous generation product needs besides Services: a clock, the media store, the
// shared signing secret, this instance's lease-owner name, the vendor pools (one client per
// deployment, vendors/pool/job-pools.ts), and the fetch options
// for client URLs and vendor results (tests add an allow-list for their 127.0.0.1 servers; production never does).
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { Services } from '../services.js';
import { configuredMediaStore } from '../media/configured-store.js';
import type { MediaStore } from '../media/media-store.js';
import type { Resolver } from '../net/safe-fetch.js';
import type { Queryable } from '../store/pool.js';
import { ArkClient } from '../vendors/ark/client.js';
import { GeminiClient } from '../vendors/gemini/client.js';
import { createVendorPool } from '../vendors/pool/from-config.js';
import type { VendorPool } from '../vendors/pool/pool.js';

export interface FetchDeps {
  /** TEST ONLY: "host:port" pairs exempt from the public-address rule (see safeFetch). */
  readonly allowList?: ReadonlySet<string>;
  readonly resolver?: Resolver;
  /** TEST ONLY: trust anchor (PEM) of a local HTTPS server. */
  readonly ca?: string;
}

export interface GenerationDeps {
  /** Milliseconds since the epoch; every time the job code writes or compares comes from here. */
  readonly clock: () => number;
  readonly media: MediaStore;
  readonly mediaSecret: Buffer;
  /** Lease owner name of this instance. */
  readonly owner: string;
  readonly fetch: FetchDeps;
  /** The video vendor's deployments; undefined when it is not configured (submits then answer 503). */
  readonly ark: VendorPool<ArkClient> | undefined;
  /** The image vendor's (Gemini) deployments; undefined when not configured (image submits then answer 503). */
  readonly gemini: VendorPool<GeminiClient> | undefined;
  /** Origin of signed links when config.mediaUrl is unset (else the request's Host is used). */
  readonly publicBaseUrl: string | undefined;
  /** Whole download of one vendor result. */
  readonly downloadTimeoutMs: number;
  close(): Promise<void>;
}

export interface GenerationDepsOptions {
  clock?: () => number;
  media?: MediaStore;
  fetch?: FetchDeps;
  publicBaseUrl?: string;
  downloadTimeoutMs?: number;
  owner?: string;
}

/** Reads the shared media-link secret, creating it on first start (every instance then reads the same one). */
export async function loadMediaSecret(database: Queryable): Promise<Buffer> {
  await database.query('INSERT INTO media_secret (singleton, secret) VALUES (true, $1) ON CONFLICT (singleton) DO NOTHING', [randomBytes(32)]);
  const r = await database.query<{ secret: Buffer }>('SELECT secret FROM media_secret WHERE singleton');
  const s = r.rows[0]?.secret;
  if (!Buffer.isBuffer(s) || s.length !== 32) throw new Error('media secret missing or malformed');
  return s;
}

const DEFAULT_DOWNLOAD_TIMEOUT_MS = 5 * 60_000;

/** One Ark call's whole wait (a task create's tries share it): well inside a lease, at most 20 s. */
export const arkCallTimeoutMs = (leaseMs: number): number => Math.max(1000, Math.min(20_000, Math.floor(leaseMs / 2)));

export async function createGenerationDeps(services: Services, opts: GenerationDepsOptions = {}): Promise<GenerationDeps> {
  const cfg = services.config;
  const mediaSecret = await loadMediaSecret(services.pool);
  const media = opts.media ?? (await configuredMediaStore(cfg));
  const ark = createVendorPool(
    'ark',
    cfg,
    services.log,
    (deployment) =>
      new ArkClient({
        baseUrl: deployment.baseUrl,
        apiKey: deployment.apiKey,
        connectTimeoutMs: cfg.upstream.connectTimeoutMs,
        // A create must be answered well inside the submit's lease, or recovery would race it.
        timeoutMs: arkCallTimeoutMs(cfg.jobs.leaseMs),
      }),
  );
  const gemini = createVendorPool(
    'gemini',
    cfg,
    services.log,
    (deployment) =>
      new GeminiClient({
        baseUrl: deployment.baseUrl,
        apiKey: deployment.apiKey,
        connectTimeoutMs: cfg.upstream.connectTimeoutMs,
        // The call is the whole generation (a 4K image with thinking): the job runner renews the lease meanwhile.
        timeoutMs: cfg.jobs.imageCallTimeoutMs,
        // The image comes back base64-encoded inside the JSON (4/3 of its size), beside thought parts.
        maxResponseBytes: Math.min(2 ** 31 - 1, Math.ceil((cfg.media.maxResultBytes * 4) / 3) + 4 * 1024 * 1024),
      }),
  );
  return {
    clock: opts.clock ?? Date.now,
    media,
    mediaSecret,
    owner: opts.owner ?? `${hostname().slice(0, 60)}:${process.pid}:${randomBytes(4).toString('hex')}`,
    fetch: opts.fetch ?? {},
    ark,
    gemini,
    publicBaseUrl: opts.publicBaseUrl,
    downloadTimeoutMs: opts.downloadTimeoutMs ?? DEFAULT_DOWNLOAD_TIMEOUT_MS,
    close: async () => {
      await Promise.all([...(ark?.members ?? []), ...(gemini?.members ?? [])].map((m) => m.client.close()));
      if (opts.media === undefined) await media.close?.();
    },
  };
}
