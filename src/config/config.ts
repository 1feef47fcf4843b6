// Configuration: environment > INKGATE_CONFIG file > config/default.json, validated once and frozen.
// This folder is the only place that reads process.env.
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import Type, { type Static } from 'typebox';
import { Compile } from 'typebox/compile';

const NullableString = Type.Union([Type.String({ minLength: 1 }), Type.Null()]);
const Ms = Type.Integer({ minimum: 1, maximum: 86_400_000 });
const Vendor = Type.Object({ baseUrl: NullableString, apiKey: NullableString });

export const ConfigSchema = Type.Object({
  server: Type.Object({
    host: Type.String({ minLength: 1 }),
    port: Type.Integer({ minimum: 0, maximum: 65535 }),
    /** Read the caller's address from a PROXY protocol v2 header (the balancer must send one on every connection). */
    proxyProtocol: Type.Boolean(),
    /** Addresses or CIDR blocks whose X-Forwarded-For is believed; empty: the peer address is the caller's. */
    trustedProxies: Type.Array(Type.String({ minLength: 1, maxLength: 64 }), { maxItems: 256 }),
    /**
     * The HTTP engine (server/engine.ts): `auto` takes uWebSockets.js where a native build loads on
     * this Node and node:http otherwise; `uws` is a start-up error where none loads.
     */
    engine: Type.Union([Type.Literal('auto'), Type.Literal('uws'), Type.Literal('node')]),
    /** node engine: an idle kept-alive connection is closed after this long. */
    keepAliveTimeoutMs: Type.Integer({ minimum: 100, maximum: 600_000 }),
    /** node engine: a request head must arrive within this (answered 408, then closed). */
    headersTimeoutMs: Type.Integer({ minimum: 100, maximum: 600_000 }),
    /** node engine: a whole request, head and body, must arrive within this. */
    requestTimeoutMs: Type.Integer({ minimum: 100, maximum: 3_600_000 }),
    /** node engine: a longer request head is answered 431. */
    maxHeaderBytes: Type.Integer({ minimum: 1024, maximum: 1_048_576 }),
  }),
  /** The admin listener: /metrics, /healthz, /readyz. Never the public port. */
  admin: Type.Object({
    host: Type.String({ minLength: 1 }),
    /** 0: any free port (tests). */
    port: Type.Integer({ minimum: 0, maximum: 65535 }),
    /** /readyz fails when Postgres or Redis take longer than this to answer. */
    readyTimeoutMs: Type.Integer({ minimum: 10, maximum: 60_000 }),
    /** On SIGTERM /readyz fails this long before the public port stops admitting (the balancer's notice). */
    drainDelayMs: Type.Integer({ minimum: 0, maximum: 600_000 }),
    /** Store-wide figures (open holds, generations by state) are read at most this often per instance. */
    storeScrapeMs: Type.Integer({ minimum: 0, maximum: 600_000 }),
  }),
  log: Type.Object({
    level: Type.Union([Type.Literal('debug'), Type.Literal('info'), Type.Literal('warn'), Type.Literal('error'), Type.Literal('silent')]),
    /** One `info` line per finished request on the public port (server/access-log.ts). */
    access: Type.Boolean(),
  }),
  dataDir: Type.String({ minLength: 1 }),
  mediaUrl: NullableString,
  db: Type.Object({
    url: NullableString,
    /** Postgres schema the gateway's tables live in (tests use one per file). */
    schema: Type.String({ pattern: '^[a-z_][a-z0-9_]{0,62}$' }),
    poolMax: Type.Integer({ minimum: 1, maximum: 500 }),
    connectionTimeoutMs: Ms,
    queryTimeoutMs: Ms,
    lockTimeoutMs: Ms,
    statementTimeoutMs: Ms,
  }),
  redis: Type.Object({
    url: NullableString,
    commandTimeoutMs: Ms,
    connectTimeoutMs: Ms,
    keyPrefix: Type.String(),
  }),
  auth: Type.Object({
    /** How long an authenticated key is remembered for routes whose reserve re-checks the key (0: off). */
    keyCacheMs: Type.Integer({ minimum: 0, maximum: 60_000 }),
    keyCacheEntries: Type.Integer({ minimum: 1, maximum: 1_000_000 }),
  }),
  limits: Type.Object({
    requestsPerMinute: Type.Integer({ minimum: 1, maximum: 1_000_000 }),
    publicRequestsPerMinute: Type.Integer({ minimum: 1, maximum: 1_000_000 }),
    /** POST /v1/messages/count_tokens per key, in a bucket of its own (counting never uses up the key's requestsPerMinute). */
    countTokensPerMinute: Type.Integer({ minimum: 1, maximum: 1_000_000 }),
    videoBodyBytes: Type.Integer({ minimum: 1024, maximum: 67_108_864 }),
    textBodyBytes: Type.Integer({ minimum: 1024, maximum: 67_108_864 }),
    publicBodyBytes: Type.Integer({ minimum: 1024, maximum: 67_108_864 }),
  }),
  pricing: Type.Object({
    videoPriceSet: Type.Union([Type.Literal('billing'), Type.Literal('catalogue')]),
  }),
  vendors: Type.Object({
    anthropic: Type.Object({ baseUrl: NullableString, apiKey: NullableString, version: Type.String({ minLength: 1 }) }),
    openai: Vendor,
    ark: Vendor,
    gemini: Vendor,
  }),
  upstream: Type.Object({
    connectTimeoutMs: Ms,
    headersTimeoutMs: Ms,
    /** A non-streaming text call's wait for the vendor's answer (its headers come with the whole reply). */
    nonStreamTimeoutMs: Ms,
    /** A token count's whole call (headers and body): a count is small and comes at once. */
    countTokensTimeoutMs: Ms,
    idleTimeoutMs: Ms,
    streamTotalMs: Ms,
    connections: Type.Integer({ minimum: 1, maximum: 10_000 }),
  }),
  jobs: Type.Object({
    /** First poll of a vendor task after this long, then backing off up to maxPollIntervalMs. */
    pollIntervalMs: Ms,
    maxPollIntervalMs: Ms,
    /** A generation with no result this long after submit fails with `timeout` (refunded). */
    timeoutMs: Ms,
    /** A claimed job is another instance's to take once its lease lapses (crash recovery). */
    leaseMs: Ms,
    batchSize: Type.Integer({ minimum: 1, maximum: 1000 }),
    tickMs: Ms,
    sweepIntervalMs: Ms,
    maxRunningPerAccount: Type.Integer({ minimum: 1, maximum: 1000 }),
    /** Daily generations for an account whose plan has none but which bought pay-as-you-go Ink. */
    paygDailyCap: Type.Integer({ minimum: 0, maximum: 100_000 }),
    /** One image call to the vendor (the whole generation, thinking included) gives up after this. */
    imageCallTimeoutMs: Ms,
    /** A duplicate submit waits this long for the submit that holds its Idempotency-Key, then 409. */
    idempotencyWaitMs: Type.Integer({ minimum: 0, maximum: 600_000 }),
  }),
  media: Type.Object({
    linkTtlS: Type.Integer({ minimum: 1, maximum: 86_400 }),
    retentionDays: Type.Integer({ minimum: 1, maximum: 3650 }),
    maxResultBytes: Type.Integer({ minimum: 1024, maximum: 17_179_869_184 }),
    referenceMaxBytes: Type.Integer({ minimum: 1024, maximum: 1_073_741_824 }),
    referenceTimeoutMs: Ms,
    referenceMaxRedirects: Type.Integer({ minimum: 0, maximum: 10 }),
    /** Where results are kept: `fs` under dataDir/media, or `s3` (an S3-compatible bucket: media/s3-media-store.ts). */
    store: Type.Union([Type.Literal('fs'), Type.Literal('s3')]),
    s3: Type.Object({
      /** Required when store is `s3`. */
      bucket: Type.Union([Type.String({ pattern: '^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$' }), Type.Null()]),
      /** null: AWS S3 itself (from the region); else the service's URL (R2, MinIO...). */
      endpoint: NullableString,
      region: Type.String({ minLength: 1, maxLength: 64 }),
      /** Prepended to every media key (a trailing `/` is added when missing); empty: the bucket's root. */
      prefix: Type.String({ pattern: '^$|^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*/?$', maxLength: 200 }),
      /** Address the bucket in the path (MinIO, most self-hosted stores) instead of the host name. */
      forcePathStyle: Type.Boolean(),
      /** Every call (a read until its head, a delete, a probe), retries included, gives up after this. */
      timeoutMs: Ms,
      /** A connection with no byte moving this long is cut (an upload part, a download stalled by its reader). */
      idleTimeoutMs: Ms,
      /** One upload part (or a whole small upload), sending included. */
      uploadPartTimeoutMs: Ms,
      /** Uploads above this go in parts of this size (S3's minimum part is 5 MiB). */
      partSizeBytes: Type.Integer({ minimum: 5_242_880, maximum: 268_435_456 }),
      /** Parts of one upload in flight at once: an upload holds at most (this + 1) parts in memory. */
      uploadQueueSize: Type.Integer({ minimum: 1, maximum: 16 }),
      /** Sockets to the store (reads and uploads together). */
      maxSockets: Type.Integer({ minimum: 1, maximum: 4096 }),
      /** Downloads answer 302 to a presigned GET on the store instead of being streamed by the gateway. */
      presignedRedirect: Type.Boolean(),
    }),
  }),
  responses: Type.Object({
    /** The service stops a Responses reply whose visible text passes this many characters; the charge is then the hold. */
    visibleOutputCapChars: Type.Integer({ minimum: 1, maximum: 10_000_000 }),
  }),
  console: Type.Object({
    /** Origin printed in sign-in links (https://console.example.com); null: http://host:port of this server. */
    url: NullableString,
    /** A sign-in link works once, for this long. */
    linkTtlMs: Type.Integer({ minimum: 1000, maximum: 900_000 }),
    /** A console session ends this long after sign-in (sign-out ends it at once). */
    sessionTtlMs: Type.Integer({ minimum: 60_000, maximum: 2_592_000_000 }),
    /** A playground call is cut after this long (headers and body together). */
    playgroundTimeoutMs: Ms,
  }),
  demo: Type.Object({
    createAccount: Type.Boolean(),
    paygUsd: Type.Integer({ minimum: 0, maximum: 1_000_000 }),
    grantInk: Type.Integer({ minimum: 0, maximum: 100_000_000 }),
  }),
  ledger: Type.Object({
    /** This process's name in the lease table; null: host, pid and a random part (a restart under a fixed id recovers its old leases at once). */
    instanceId: Type.Union([Type.String({ pattern: '^[A-Za-z0-9._:@-]{1,200}$' }), Type.Null()]),
    /** 'write-behind': a settlement is answered from memory and written by the next group commit; 'sync': the response ends after that commit. */
    durability: Type.Union([Type.Literal('write-behind'), Type.Literal('sync')]),
    /** Group commit: the journal is written at most this long after a record joined it. */
    flushMs: Type.Integer({ minimum: 1, maximum: 10_000 }),
    /** Most request records in one flush (one transaction). */
    flushMaxRecords: Type.Integer({ minimum: 1, maximum: 100_000 }),
    /** Most records waiting for a flush; past it new admissions answer 503 (Postgres away too long). */
    journalMaxRecords: Type.Integer({ minimum: 1, maximum: 10_000_000 }),
    lease: Type.Object({
      /** Off: every hold is a durable move of its own (the exact path). */
      enabled: Type.Boolean(),
      /** A lease is sized to this long of the key's recent holds... */
      targetMs: Ms,
      /** ...and at least this many holds of the size that asked for it... */
      minHolds: Type.Integer({ minimum: 1, maximum: 10_000 }),
      /** ...and at most this much Ink. */
      maxInk: Type.Integer({ minimum: 1, maximum: 1_000_000_000_000 }),
      /** At most this share (per mille) of the unleased wallet, and of the key's headroom, goes into one lease. */
      walletPermille: Type.Integer({ minimum: 1, maximum: 1000 }),
      keyPermille: Type.Integer({ minimum: 1, maximum: 1000 }),
      /** A lease never takes the unleased wallet below this; under it holds are exact durable moves. */
      floorInk: Type.Integer({ minimum: 0, maximum: 1_000_000_000_000 }),
      /** A lease is refilled in the background once its spare Ink is below this share (per mille) of its last size. */
      refillBelowPermille: Type.Integer({ minimum: 0, maximum: 1000 }),
      /** A lease with no hold for this long is returned. */
      idleMs: Ms,
      /** A lease's expiry, renewed by the heartbeat; past it (and recoverGraceMs) anyone may recover it. */
      ttlMs: Ms,
      heartbeatMs: Ms,
      /** The owner stops holding from a lease this long before its expiry (monotonic clock from the last renewal). */
      deadlineMarginMs: Ms,
      /** After a lease was refused at the edge, the key stays on the exact path this long. */
      edgeRetryMs: Ms,
      /** A refusal at the edge waits this long for recalled leases to give their spare Ink back before answering. */
      recallWaitMs: Ms,
      recoverGraceMs: Ms,
    }),
  }),
});

export type Config = Static<typeof ConfigSchema>;
type Env = Readonly<Record<string, string | undefined>>;

const here = dirname(fileURLToPath(import.meta.url));
/** Project root: src/config -> ../.. (also right for dist/config). */
export const PROJECT_ROOT = resolve(here, '..', '..');
const DEFAULT_FILE = resolve(PROJECT_ROOT, 'config', 'default.json');

const validator = Compile(ConfigSchema);

export type DeepPartial<T> = { [K in keyof T]?: T[K] extends object ? (T[K] extends unknown[] ? T[K] : DeepPartial<T[K]>) : T[K] };

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function merge(base: Record<string, unknown>, over: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...base };
  for (const [k, v] of Object.entries(over)) {
    if (v === undefined) continue;
    out[k] = isPlainObject(v) && isPlainObject(out[k]) ? merge(out[k] as Record<string, unknown>, v) : v;
  }
  return out;
}

function deepFreeze<T>(o: T): T {
  if (isPlainObject(o)) {
    for (const v of Object.values(o)) deepFreeze(v);
    Object.freeze(o);
  }
  return o;
}

const int = (name: string, v: string | undefined): number | undefined => {
  if (v === undefined || v === '') return undefined;
  const n = Number(v);
  if (!Number.isInteger(n)) throw new Error(`config: ${name} must be an integer, got ${JSON.stringify(v)}`);
  return n;
};
const str = (v: string | undefined): string | undefined => (v === undefined || v === '' ? undefined : v);
const list = (v: string | undefined): string[] | undefined =>
  v === undefined || v.trim() === ''
    ? undefined
    : v
        .split(',')
        .map((x) => x.trim())
        .filter((x) => x !== '');
const bool = (v: string | undefined): boolean | undefined => (v === undefined || v === '' ? undefined : v === '1' || v === 'true');

/** The environment's part of the configuration (these names are part of the interface: docs/configuration.md). */
function fromEnv(env: Env): Record<string, unknown> {
  const vendor = (p: string) => ({ baseUrl: str(env[`INKGATE_${p}_BASE_URL`]), apiKey: str(env[`INKGATE_${p}_API_KEY`]) });
  return {
    server: {
      host: str(env.INKGATE_HOST),
      port: int('INKGATE_PORT', env.INKGATE_PORT),
      proxyProtocol: bool(env.INKGATE_PROXY_PROTOCOL),
      trustedProxies: list(env.INKGATE_TRUSTED_PROXIES),
      engine: str(env.INKGATE_SERVER_ENGINE),
    },
    admin: {
      host: str(env.INKGATE_ADMIN_HOST),
      port: int('INKGATE_ADMIN_PORT', env.INKGATE_ADMIN_PORT),
      drainDelayMs: int('INKGATE_DRAIN_DELAY_MS', env.INKGATE_DRAIN_DELAY_MS),
    },
    log: { level: str(env.INKGATE_LOG_LEVEL), access: bool(env.INKGATE_ACCESS_LOG) },
    dataDir: str(env.INKGATE_DATA_DIR),
    mediaUrl: str(env.INKGATE_MEDIA_URL),
    media: {
      store: str(env.INKGATE_MEDIA_STORE),
      s3: {
        bucket: str(env.INKGATE_S3_BUCKET),
        endpoint: str(env.INKGATE_S3_ENDPOINT),
        region: str(env.INKGATE_S3_REGION),
        prefix: env.INKGATE_S3_PREFIX,
        forcePathStyle: bool(env.INKGATE_S3_FORCE_PATH_STYLE),
        presignedRedirect: bool(env.INKGATE_S3_PRESIGNED_REDIRECT),
      },
    },
    console: { url: str(env.INKGATE_CONSOLE_URL) },
    db: { url: str(env.DATABASE_URL) },
    redis: { url: str(env.REDIS_URL) },
    pricing: { videoPriceSet: str(env.INKGATE_VIDEO_PRICE_SET) },
    vendors: { anthropic: vendor('ANTHROPIC'), openai: vendor('OPENAI'), ark: vendor('ARK'), gemini: vendor('GEMINI') },
    ledger: { instanceId: str(env.INKGATE_INSTANCE_ID), durability: str(env.INKGATE_LEDGER_DURABILITY) },
  };
}

/**
 * Every environment variable the configuration reads (found by reading a recording environment,
 * so the list cannot drift from fromEnv). The compose file's test checks its variables against it.
 */
export function knownEnvironmentVariables(): string[] {
  const seen = new Set<string>(['INKGATE_CONFIG']);
  const recorder = new Proxy({} as Env, { get: (_t, k) => (typeof k === 'string' && seen.add(k), undefined) });
  fromEnv(recorder);
  return [...seen].sort();
}

export function readJsonFile(path: string): Record<string, unknown> {
  const v: unknown = JSON.parse(readFileSync(path, 'utf8'));
  if (!isPlainObject(v)) throw new Error(`config: ${path} must hold a JSON object`);
  return v;
}

/**
 * Builds the frozen configuration. `overrides` (tests, the demo) win over everything else.
 * Throws with every validation failure listed: a bad config never half-starts the gateway.
 */
export function loadConfig(env: Env = process.env, overrides: DeepPartial<Config> = {}): Config {
  let merged = readJsonFile(DEFAULT_FILE);
  const file = str(env.INKGATE_CONFIG);
  if (file) merged = merge(merged, readJsonFile(resolve(file)));
  merged = merge(merged, fromEnv(env));
  merged = merge(merged, overrides as Record<string, unknown>);
  if (!validator.Check(merged)) {
    const problems = [...validator.Errors(merged)].map((e) => `${e.instancePath || '/'} ${e.message}`);
    throw new Error(`config: invalid configuration:\n  ${problems.join('\n  ')}`);
  }
  const cfg = merged as Config;
  cfg.dataDir = resolve(cfg.dataDir);
  checkMediaStore(cfg.media);
  for (const v of VENDORS) {
    const base = cfg.vendors[v].baseUrl;
    if (base !== null) cfg.vendors[v].baseUrl = vendorBaseUrl(v, base);
  }
  return deepFreeze(cfg);
}

const VENDORS = ['anthropic', 'openai', 'ark', 'gemini'] as const;

/** The S3 settings a bucket store cannot start without; the prefix gets its trailing `/`. */
function checkMediaStore(media: Config['media']): void {
  const s3 = media.s3;
  if (s3.prefix !== '' && !s3.prefix.endsWith('/')) s3.prefix += '/';
  if (media.store !== 's3') return;
  if (s3.bucket === null) throw new Error('config: media.store is s3 but media.s3.bucket (INKGATE_S3_BUCKET) is not set');
  if (s3.endpoint !== null) {
    let url: URL;
    try {
      url = new URL(s3.endpoint);
    } catch {
      throw new Error(`config: media.s3.endpoint is not a URL: ${JSON.stringify(s3.endpoint)}`);
    }
    if ((url.protocol !== 'http:' && url.protocol !== 'https:') || url.username !== '' || url.password !== '' || url.search !== '') {
      throw new Error('config: media.s3.endpoint must be an http(s) URL without credentials or query (credentials come from the AWS variables)');
    }
  }
}

/**
 * The API path each vendor's base URL ends in, as its own SDKs write it: Anthropic's base is the
 * bare host (its clients add /v1/messages), OpenAI's ends in /v1, Gemini's REST base in /v1beta,
 * Ark's in /api/v3.
 */
const VENDOR_API_PATHS: Readonly<Record<(typeof VENDORS)[number], string>> = Object.freeze({ anthropic: '', openai: '/v1', ark: '/api/v3', gemini: '/v1beta' });

/**
 * A vendor base URL in the form our clients join paths to. Operators write it either way (with or
 * without the API path; a copied SDK setting or a bare host), and a wrong guess reached the vendor
 * as a 404 that the text lanes report as the client's 400 upstream_rejected. So: trailing slashes
 * go; a bare host gets the vendor's API path; an Anthropic base ending in /v1 loses it. Any other
 * path (a proxy's prefix) is kept as written.
 */
export function vendorBaseUrl(vendor: (typeof VENDORS)[number], raw: string): string {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new Error(`config: vendors.${vendor}.baseUrl is not a URL: ${JSON.stringify(raw)}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error(`config: vendors.${vendor}.baseUrl must be http(s): ${JSON.stringify(raw)}`);
  if (url.search !== '' || url.hash !== '') throw new Error(`config: vendors.${vendor}.baseUrl must have no query or fragment: ${JSON.stringify(raw)}`);
  if (url.username !== '' || url.password !== '') throw new Error(`config: vendors.${vendor}.baseUrl must carry no credentials (the key has its own setting)`);
  let path = url.pathname.replace(/\/+$/, '');
  const apiPath = VENDOR_API_PATHS[vendor];
  if (vendor === 'anthropic' && path.endsWith('/v1')) path = path.slice(0, -3);
  else if (path === '') path = apiPath;
  return url.origin + path;
}
