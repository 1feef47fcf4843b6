// What every asynchronous generation product needs besides Services: a clock, the media store, the
// shared signing secret, this instance's lease-owner name, the vendor clients, and the fetch options
// for client URLs and vendor results (tests add an allow-list for their 127.0.0.1 servers; production never does).
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { Services } from '../services.js';
import { vendorConfigured } from '../catalog/availability.js';
import { configuredMediaStore } from '../media/configured-store.js';
import type { MediaStore } from '../media/media-store.js';
import type { Resolver } from '../net/safe-fetch.js';
import type { Queryable } from '../store/pool.js';
import { ArkClient } from '../vendors/ark/client.js';
import { GeminiClient } from '../vendors/gemini/client.js';

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
  /** undefined when the video vendor is not configured (submits then answer 503). */
  readonly ark: ArkClient | undefined;
  /** The image vendor (Gemini); undefined when not configured (image submits then answer 503). */
  readonly gemini: GeminiClient | undefined;
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
  /** Replaces the client built from config.vendors.ark. */
  ark?: ArkClient;
  /** Replaces the client built from config.vendors.gemini. */
  gemini?: GeminiClient;
  publicBaseUrl?: string;
  downloadTimeoutMs?: number;
  owner?: string;
}

/** Reads the shared media-link secret, creating it on first start (every instance then reads the same one). */
export async function loadMediaSecret(q: Queryable): Promise<Buffer> {
  await q.query('INSERT INTO media_secret (singleton, secret) VALUES (true, $1) ON CONFLICT (singleton) DO NOTHING', [randomBytes(32)]);
  const r = await q.query<{ secret: Buffer }>('SELECT secret FROM media_secret WHERE singleton');
  const s = r.rows[0]?.secret;
  if (!Buffer.isBuffer(s) || s.length !== 32) throw new Error('media secret missing or malformed');
  return s;
}

const DEFAULT_DOWNLOAD_TIMEOUT_MS = 5 * 60_000;

export async function createGenerationDeps(services: Services, opts: GenerationDepsOptions = {}): Promise<GenerationDeps> {
  const cfg = services.config;
  const mediaSecret = await loadMediaSecret(services.pool);
  const media = opts.media ?? (await configuredMediaStore(cfg));
  // A client the caller passed is the caller's to close; one built here from config is ours.
  const own = <C>(given: C | undefined, vendor: 'ark' | 'gemini', build: () => C): { client: C | undefined; owned: boolean } =>
    given !== undefined || !vendorConfigured(cfg, vendor) ? { client: given, owned: false } : { client: build(), owned: true };
  const ark = own(
    opts.ark,
    'ark',
    () =>
      new ArkClient({
        baseUrl: cfg.vendors.ark.baseUrl!,
        apiKey: cfg.vendors.ark.apiKey!,
        connectTimeoutMs: cfg.upstream.connectTimeoutMs,
        // A create must be answered well inside the submit's lease, or recovery would race it.
        timeoutMs: Math.max(1000, Math.min(20_000, Math.floor(cfg.jobs.leaseMs / 2))),
      }),
  );
  const gemini = own(
    opts.gemini,
    'gemini',
    () =>
      new GeminiClient({
        baseUrl: cfg.vendors.gemini.baseUrl!,
        apiKey: cfg.vendors.gemini.apiKey!,
        connectTimeoutMs: cfg.upstream.connectTimeoutMs,
        // The call is the whole generation (a 4K image with thinking): the engine renews the lease meanwhile.
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
    ark: ark.client,
    gemini: gemini.client,
    publicBaseUrl: opts.publicBaseUrl,
    downloadTimeoutMs: opts.downloadTimeoutMs ?? DEFAULT_DOWNLOAD_TIMEOUT_MS,
    close: async () => {
      if (ark.owned) await ark.client?.close();
      if (gemini.owned) await gemini.client?.close();
      if (opts.media === undefined) await media.close?.();
    },
  };
}
