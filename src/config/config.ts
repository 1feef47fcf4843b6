// Configuration: environment > INKGATE_CONFIG file > config/default.json, validated once against
// config-schema.ts and frozen. This folder is the only place that reads process.env.
import { existsSync, readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Compile } from '../util/typed-schema.js';
import { type Config, ConfigSchema } from './config-schema.js';
import { resolveVendorDeployments, splitList, VENDORS } from './vendor-deployments.js';
import { plainHttpUrl } from './http-url.js';

export type { Config } from './config-schema.js';
export { deploymentsOf, vendorBaseUrl, type VendorDeployment, type VendorId } from './vendor-deployments.js';
type Env = Readonly<Record<string, string | undefined>>;

/**
 * Project root: the nearest folder above this file that holds package.json. From the sources that
 * is src/config/../..; from the compiled tree (dist/src/config) one level more.
 */
export const PROJECT_ROOT = ((): string => {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let up = 0; up < 4 && !existsSync(resolve(dir, 'package.json')); up++) dir = dirname(dir);
  return dir;
})();
const DEFAULT_FILE = resolve(PROJECT_ROOT, 'config', 'default.json');

/** This product's version, from its package.json (the OpenAPI document and the traces' service.version). */
export const packageVersion = (): string => String((JSON.parse(readFileSync(resolve(PROJECT_ROOT, 'package.json'), 'utf8')) as { version: unknown }).version);

const validator = Compile(ConfigSchema);

export type DeepPartial<T> = { [K in keyof T]?: T[K] extends object ? (T[K] extends unknown[] ? T[K] : DeepPartial<T[K]>) : T[K] };

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function merge(base: Record<string, unknown>, over: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...base };
  for (const [k, v] of Object.entries(over)) {
    if (v === undefined) continue;
    out[k] = isPlainObject(v) && isPlainObject(out[k]) ? merge(out[k] as Record<string, unknown>, v) : v;
  }
  return out;
}

function deepFreeze<T>(value: T): T {
  if (isPlainObject(value)) {
    for (const v of Object.values(value)) deepFreeze(v);
    Object.freeze(value);
  }
  return value;
}

const int = (name: string, value: string | undefined): number | undefined => {
  if (value === undefined || value === '') return undefined;
  const n = Number(value);
  if (!Number.isInteger(n)) throw new Error(`config: ${name} must be an integer, got ${JSON.stringify(value)}`);
  return n;
};
const str = (v: string | undefined): string | undefined => (v === undefined || v === '' ? undefined : v);
const list = (v: string | undefined): string[] | undefined => (v === undefined || v.trim() === '' ? undefined : splitList(v));
const num = (name: string, value: string | undefined): number | undefined => {
  if (value === undefined || value.trim() === '') return undefined;
  const n = Number(value);
  if (!Number.isFinite(n)) throw new Error(`config: ${name} must be a number, got ${JSON.stringify(value)}`);
  return n;
};
/**
 * The traces endpoint as the OpenTelemetry specification derives it: the signal's own variable as
 * written, else the general one with `/v1/traces` appended to its path.
 */
const tracesEndpoint = (env: Env): string | undefined => {
  const own = str(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim());
  if (own !== undefined) return own;
  const base = str(env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim());
  return base === undefined ? undefined : base.replace(/\/+$/, '') + '/v1/traces';
};
const bool = (v: string | undefined): boolean | undefined => (v === undefined || v === '' ? undefined : v === '1' || v === 'true');

/** The environment's part of the configuration (these names are part of the interface: docs/configuration.md). */
function fromEnv(env: Env): Record<string, unknown> {
  // A base URL in the environment replaces the file's deployments (the environment wins).
  const vendor = (vendorName: string) => {
    const baseUrl = str(env[`INKGATE_${vendorName}_BASE_URL`]);
    return { baseUrl, apiKey: str(env[`INKGATE_${vendorName}_API_KEY`]), deployments: baseUrl === undefined ? undefined : [] };
  };
  return {
    server: {
      host: str(env.INKGATE_HOST),
      port: int('INKGATE_PORT', env.INKGATE_PORT),
      proxyProtocol: bool(env.INKGATE_PROXY_PROTOCOL),
      trustedProxies: list(env.INKGATE_TRUSTED_PROXIES),
      engine: str(env.INKGATE_SERVER_ENGINE),
      publicUrl: str(env.INKGATE_PUBLIC_URL),
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
    tracing: {
      endpoint: tracesEndpoint(env),
      serviceName: str(env.OTEL_SERVICE_NAME),
      sampler: str(env.OTEL_TRACES_SAMPLER?.trim().toLowerCase()),
      samplerArg: num('OTEL_TRACES_SAMPLER_ARG', env.OTEL_TRACES_SAMPLER_ARG),
    },
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

/**
 * Only the OpenTelemetry variables of `env` (OTEL_*): the bench's gateways take these from the
 * operator and nothing else, so a run can measure traces on.
 */
export function tracingEnvironment(env: Env = process.env): Env {
  return Object.fromEntries(Object.entries(env).filter(([k]) => k.startsWith('OTEL_')));
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
  if (cfg.server.publicUrl !== null) cfg.server.publicUrl = linkBaseUrl('server.publicUrl (INKGATE_PUBLIC_URL)', cfg.server.publicUrl);
  if (cfg.console.url !== null) cfg.console.url = linkBaseUrl('console.url (INKGATE_CONSOLE_URL)', cfg.console.url);
  checkMediaStore(cfg.media);
  for (const v of VENDORS) resolveVendorDeployments(v, cfg.vendors[v]);
  if (cfg.upstream.cooldownMaxMs < cfg.upstream.cooldownMinMs) throw new Error('config: upstream.cooldownMaxMs must be at least upstream.cooldownMinMs');
  return deepFreeze(cfg);
}

/**
 * A base URL printed links start with: http(s), no credentials, query or fragment (a path, e.g. a
 * proxy's prefix, is kept); returned without its trailing slash, so a path joins with one `/`.
 */
function linkBaseUrl(name: string, raw: string): string {
  const url = plainHttpUrl(name, raw);
  return url.origin + url.pathname.replace(/\/+$/, '');
}

/** The S3 settings a bucket store cannot start without; the prefix gets its trailing `/`. */
function checkMediaStore(media: Config['media']): void {
  const s3 = media.s3;
  if (s3.prefix !== '' && !s3.prefix.endsWith('/')) s3.prefix += '/';
  if (media.store !== 's3') return;
  if (s3.bucket === null) throw new Error('config: media.store is s3 but media.s3.bucket (INKGATE_S3_BUCKET) is not set');
  if (s3.endpoint !== null) plainHttpUrl('media.s3.endpoint', s3.endpoint, ' (credentials come from the AWS variables)');
}
