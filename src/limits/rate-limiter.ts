// Request-rate limiting: the interface both back-ends implement, and the factory that picks one.
//
// Algorithm (both back-ends): a sliding log. Each bucket keeps the times of its allowed
// requests from the last window (60 s); a request is allowed while fewer than `limit` of them
// are inside the window. That is the literal reading of "60 requests per minute": any 60-second
// span holds at most 60 allowed requests, so 10 keys hammering at 100 req/s for 2 minutes get
// exactly 60 each per minute, not 60 plus one a second (which is what GCRA with burst = limit
// allows). Denied requests are not logged, so a client that keeps retrying is let in as soon as
// a slot frees. Retry-After is honest: the whole seconds (at least 1) until the oldest request
// that still blocks this one leaves the window. The log holds at most `limit` timestamps per
// bucket and is dropped a window after the bucket's last allowed request.
import { DEFAULT_WINDOW_MS, MemoryRateLimiter } from './memory-rate-limiter.js';
import { RedisRateLimiter } from './redis-rate-limiter.js';

export { DEFAULT_WINDOW_MS, MAX_BUCKET_CHARS, MAX_LIMIT, retryAfterSeconds } from './memory-rate-limiter.js';

export type RateDecision = { allowed: true; remaining: number } | { allowed: false; retryAfterS: number };

export interface RateLimiter {
  /**
   * Counts one request against `bucket` if it fits. `bucket` names who is limited, e.g.
   * `key:<key id>` or `ip:<address>`; never put a secret in it (it becomes a Redis key).
   * Rejects with ApiError('rate_limiter_unavailable') when the backend is unreachable or slow;
   * the caller answers 503 and does nothing else.
   */
  take(bucket: string, limitPerMinute: number): Promise<RateDecision>;
  /**
   * Resolves true once the backend can answer, false if it could not within `timeoutMs` (the
   * gateway then starts anyway and answers 503 until it can). The start-up waits for this so the
   * first requests after "listening" are not refused while the connection is still opening.
   */
  waitReady(timeoutMs: number): Promise<boolean>;
  close(): Promise<void>;
  readonly kind: 'redis' | 'memory';
}

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
