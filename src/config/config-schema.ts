// The configuration's shape: every setting, its type and its bounds, checked once at start-up by
// config.ts (which merges config/default.json, an INKGATE_CONFIG file and the environment first).
// The TypeScript type `Config` is derived from it, so the two cannot drift apart.
import { type Static, Type } from '../util/typed-schema.js';

const NullableString = Type.Union([Type.String({ minLength: 1 }), Type.Null()]);
const Ms = Type.Integer({ minimum: 1, maximum: 86_400_000 });
const PerMinute = Type.Integer({ minimum: 1, maximum: 1_000_000 });
const BodyBytes = Type.Integer({ minimum: 1024, maximum: 67_108_864 });
/** One place a vendor's API is served from (config/vendor-deployments.ts). */
const Deployment = Type.Object({
  /** Shown in metrics, logs and `inkgate vendor list`, and stored on a generation's row: keep it stable. */
  name: Type.String({ pattern: '^[A-Za-z0-9._:-]{1,64}$' }),
  baseUrl: Type.String({ minLength: 1 }),
  apiKey: Type.String({ minLength: 1 }),
  /** Share of the traffic against the others (default 1). */
  weight: Type.Optional(Type.Integer({ minimum: 1, maximum: 100 })),
  /** Requests in flight above which it is passed over (default: no cap of its own). */
  maxConcurrent: Type.Optional(Type.Union([Type.Integer({ minimum: 1, maximum: 100_000 }), Type.Null()])),
});
const VENDOR_FIELDS = { baseUrl: NullableString, apiKey: NullableString, deployments: Type.Array(Deployment, { maxItems: 16 }) };
const Vendor = Type.Object(VENDOR_FIELDS);

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
    /** The address clients reach this gateway at (https://api.example.com), for the links it prints; null: http://host:port. */
    publicUrl: NullableString,
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
    /** How long a key the store found not live is refused without a lookup (0: off), and how many such keys are remembered. */
    unknownKeyMs: Type.Integer({ minimum: 0, maximum: 300_000 }),
    unknownKeyEntries: Type.Integer({ minimum: 1, maximum: 1_000_000 }),
  }),
  limits: Type.Object({
    requestsPerMinute: PerMinute,
    publicRequestsPerMinute: PerMinute,
    /** Failed authentications (401s on keyed routes) per client address, shared like the other limits. */
    authFailuresPerMinute: PerMinute,
    /** POST /v1/messages/count_tokens per key, in a bucket of its own (counting never uses up the key's requestsPerMinute). */
    countTokensPerMinute: PerMinute,
    videoBodyBytes: BodyBytes,
    textBodyBytes: BodyBytes,
    publicBodyBytes: BodyBytes,
  }),
  pricing: Type.Object({
    videoPriceSet: Type.Union([Type.Literal('billing'), Type.Literal('catalogue')]),
  }),
  vendors: Type.Object({
    anthropic: Type.Object({ ...VENDOR_FIELDS, version: Type.String({ minLength: 1 }) }),
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
    /** Tries of one request across a vendor's deployments, the first included (docs/vendor-pools.md). */
    maxTries: Type.Integer({ minimum: 1, maximum: 16 }),
    /** A deployment failing (refused connection, 5xx) this many times in a row cools down. */
    cooldownFailures: Type.Integer({ minimum: 1, maximum: 1000 }),
    /** Its first cooldown; each failed half-open try doubles it, up to cooldownMaxMs. */
    cooldownMinMs: Ms,
    cooldownMaxMs: Ms,
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
    /** Responses over one WebSocket (GET /v1/responses with an upgrade): one turn per response.create event. */
    websocket: Type.Object({
      /** Sockets one key may hold open at once on this instance; one more is refused 429 at the upgrade. */
      maxSocketsPerKey: Type.Integer({ minimum: 1, maximum: 10_000 }),
      /** A socket with no turn running and no message for this long is closed (1000). */
      idleTimeoutMs: Type.Integer({ minimum: 1000, maximum: 3_600_000 }),
      /** A socket is closed (1000) once this old, after its running turn: clients open a new one. */
      maxLifeMs: Type.Integer({ minimum: 1000, maximum: 3_600_000 }),
    }),
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
  /** OpenTelemetry traces (src/tracing): off while `endpoint` is null; set by the standard OTEL_* variables. */
  tracing: Type.Object({
    /** Where spans go (OTLP over HTTP, JSON): the full URL, `/v1/traces` included. null: traces off, the SDK never loaded. */
    endpoint: Type.Union([Type.String({ pattern: '^https?://', maxLength: 2000 }), Type.Null()]),
    serviceName: Type.String({ minLength: 1, maxLength: 200 }),
    /** The standard sampler names (OTEL_TRACES_SAMPLER); a parent-based one follows an incoming traceparent's sampled flag. */
    sampler: Type.Union([
      Type.Literal('always_on'),
      Type.Literal('always_off'),
      Type.Literal('traceidratio'),
      Type.Literal('parentbased_always_on'),
      Type.Literal('parentbased_always_off'),
      Type.Literal('parentbased_traceidratio'),
    ]),
    /** The ratio of the traceidratio samplers (OTEL_TRACES_SAMPLER_ARG), 0 to 1; null: 1. */
    samplerArg: Type.Union([Type.Number({ minimum: 0, maximum: 1 }), Type.Null()]),
    /** One export call to the endpoint gives up after this (its spans are dropped, never retried forever). */
    exportTimeoutMs: Type.Integer({ minimum: 100, maximum: 60_000 }),
    /** At shutdown, the spans still queued get this long to leave. */
    shutdownTimeoutMs: Type.Integer({ minimum: 0, maximum: 60_000 }),
    /** Finished spans waiting for export; past it new spans are dropped (an endpoint away never grows the heap). */
    maxQueueSpans: Type.Integer({ minimum: 1, maximum: 1_000_000 }),
  }),
  ledger: Type.Object({
    /** This process's name in the lease table; null: host, pid and a random part (a restart under a fixed id recovers its old leases at once). */
    instanceId: Type.Union([Type.String({ pattern: '^[A-Za-z0-9._:@-]{1,200}$' }), Type.Null()]),
    /** 'write-behind': a settlement is answered from memory and written by the next journal flush; 'sync': the response ends after that flush. */
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
