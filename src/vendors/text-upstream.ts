// One undici Pool per vendor origin, made at start-up. Every wait is bounded: connect, headers,
// and the idle time between body chunks; the total length of a stream is bounded by the proxy.
import { Pool } from 'undici';
import type { Config } from '../config/config.js';

export interface Upstream {
  readonly origin: string;
  /** Path prefix of the base URL (e.g. "/v1" when the base URL ends in /v1), without a trailing slash. */
  readonly basePath: string;
  readonly pool: Pool;
  readonly apiKey: string;
}

export function createUpstream(baseUrl: string, apiKey: string, cfg: Config['upstream']): Upstream {
  const u = new URL(baseUrl);
  const pool = new Pool(u.origin, {
    connections: cfg.connections,
    connect: { timeout: cfg.connectTimeoutMs },
    headersTimeout: cfg.headersTimeoutMs,
    bodyTimeout: cfg.idleTimeoutMs,
    keepAliveTimeout: 10_000,
    pipelining: 1,
  });
  return { origin: u.origin, basePath: u.pathname.replace(/\/+$/, ''), pool, apiKey };
}

/** Errors raised before the request could have reached the vendor: nothing ran, the hold can go back. */
// UND_ERR_CLOSED: the pool was closed before the request was dispatched (a shutdown): nothing was sent.
const NOT_SENT = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_CLOSED']);

export function neverSent(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && NOT_SENT.has(code);
}
