// Picks the rate limiter: the shared Redis one when a URL is configured, else the in-process one.
import { DEFAULT_WINDOW_MS, MemoryRateLimiter } from './memory-rate-limiter.js';
import type { RateLimiter } from './rate-limiter.js';
import { RedisRateLimiter } from './redis-rate-limiter.js';

export interface CreateRateLimiterOptions {
  /** `config.redis.url`: a URL selects the shared Redis limiter, null the in-process one. */
  redisUrl: string | null;
  /** `config.redis` timeouts and prefix (defaults as in config/default.json). */
  redis?: { commandTimeoutMs: number; connectTimeoutMs: number; keyPrefix: string };
  windowMs?: number;
  /** In-process limiter only: most buckets kept at once. */
  maxBuckets?: number;
  /** Redis connection errors, once per outage (default: one stderr line). */
  onRedisError?: (err: Error) => void;
}

/**
 * Returns the Redis limiter when a URL is given (shared by every instance), otherwise the
 * in-process one (correct for a single instance only). The caller logs which one from `kind`.
 */
export function createRateLimiter(opts: CreateRateLimiterOptions): RateLimiter {
  const windowMs = opts.windowMs ?? DEFAULT_WINDOW_MS;
  if (opts.redisUrl !== null) {
    const r = opts.redis ?? { commandTimeoutMs: 200, connectTimeoutMs: 500, keyPrefix: 'inkgate:' };
    return RedisRateLimiter.connect({
      url: opts.redisUrl,
      commandTimeoutMs: r.commandTimeoutMs,
      connectTimeoutMs: r.connectTimeoutMs,
      keyPrefix: r.keyPrefix,
      windowMs,
      onError: opts.onRedisError,
    });
  }
  return new MemoryRateLimiter({ windowMs, maxBuckets: opts.maxBuckets });
}
