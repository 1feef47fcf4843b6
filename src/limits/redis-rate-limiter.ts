// Shared sliding-log limiter in Redis: one Lua script per request, atomic across every gateway
// instance (algorithm and its reasons: rate-limiter.ts).
//
// Failure policy is fail closed: any Redis error, timeout or disconnection rejects `take` with
// ApiError('rate_limiter_unavailable') (503, Retry-After 5) within the client's commandTimeout
// (200 ms by default), and the request goes no further.
//
// "Nothing else happens" also covers what Redis does later: a take that was sent just before
// Redis paused sits in the socket and would run when Redis resumes, counting a request the
// client was already told 503. Each call therefore carries a deadline on Redis's clock (our
// monotonic clock + an offset learnt from the server time every reply carries); the script
// does nothing once that deadline has passed.
import { createHash } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import type { Redis } from 'ioredis';
import { ApiError } from '../errors.js';
import { DEFAULT_WINDOW_MS, checkTakeArgs, checkWindowMs, retryAfterSeconds } from './memory-rate-limiter.js';
import type { RateDecision, RateLimiter } from './rate-limiter.js';
import { closeRedisClient, createRedisClient, type RedisClientConfig } from './redis-client.js';

/**
 * KEYS[1]: the bucket's log, a list of allowed-request times (ms on Redis's clock), oldest first.
 * ARGV: limit, window ms, deadline ms on Redis's clock (0: none).
 * Returns {1, remaining, now} allowed, {0, wait ms, now} denied, {2, 0, now} past deadline.
 *
 * Time comes from Redis (TIME), never from the callers, so instances with skewed clocks agree.
 * Expired entries are popped from the head: each entry is pushed once and popped once, so the
 * cost per call is constant on average, and a bucket idle for a whole window is deleted in one
 * step. The list never holds more than `limit` entries, and the key always has a TTL of one
 * window after its newest entry (PEXPIRE in the same script as the RPUSH that creates it).
 */
export const TAKE_LUA = `
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local deadline = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if deadline > 0 and now > deadline then
  return {2, 0, now}
end
local cutoff = now - window
local head = redis.call('LINDEX', key, 0)
if head and tonumber(head) <= cutoff then
  if tonumber(redis.call('LINDEX', key, -1)) <= cutoff then
    redis.call('DEL', key)
  else
    repeat
      redis.call('LPOP', key)
      head = redis.call('LINDEX', key, 0)
    until (not head) or tonumber(head) > cutoff
  end
end
local len = redis.call('LLEN', key)
if len < limit then
  redis.call('RPUSH', key, now)
  redis.call('PEXPIRE', key, window)
  return {1, limit - len - 1, now}
end
local pivot = tonumber(redis.call('LINDEX', key, len - limit))
return {0, pivot + window - now, now}
`;
export const TAKE_SHA = createHash('sha1').update(TAKE_LUA).digest('hex');

/** Key of a bucket's log, before the client's keyPrefix (e.g. `inkgate:`). */
export const bucketKey = (bucket: string): string => `rl:${bucket}`;

/** Replies slower than this round trip do not update the clock offset (too imprecise). */
const OFFSET_SAMPLE_MAX_RTT_MS = 20;
/** Takes waiting on Redis at once; beyond this we answer 503 at once rather than queue. */
export const DEFAULT_MAX_IN_FLIGHT = 10_000;

export interface RedisRateLimiterOptions {
  /** A client from createRedisClient (so it has the timeouts). */
  client: Redis;
  /** Whether close() closes the client (false when it is shared with other counters). */
  ownsClient: boolean;
  windowMs?: number;
  maxInFlight?: number;
}

const unavailable = (cause?: unknown): ApiError => new ApiError('rate_limiter_unavailable', { cause });

const isNoScript = (err: unknown): boolean => err instanceof Error && err.message.startsWith('NOSCRIPT');

export class RedisRateLimiter implements RateLimiter {
  readonly kind = 'redis' as const;
  readonly client: Redis;
  readonly windowMs: number;
  private readonly ownsClient: boolean;
  private readonly maxInFlight: number;
  private readonly commandTimeoutMs: number;
  private inFlight = 0;
  /** Redis ms minus performance.now(); null until the first quick reply. */
  private offsetMs: number | null = null;

  /** Opens its own client with the given timeouts and owns it. */
  static connect(cfg: RedisClientConfig & { windowMs?: number; maxInFlight?: number }): RedisRateLimiter {
    return new RedisRateLimiter({
      client: createRedisClient(cfg),
      ownsClient: true,
      windowMs: cfg.windowMs,
      maxInFlight: cfg.maxInFlight,
    });
  }

  constructor(opts: RedisRateLimiterOptions) {
    this.client = opts.client;
    this.ownsClient = opts.ownsClient;
    this.windowMs = checkWindowMs(opts.windowMs ?? DEFAULT_WINDOW_MS);
    this.maxInFlight = opts.maxInFlight ?? DEFAULT_MAX_IN_FLIGHT;
    const timeout = this.client.options.commandTimeout;
    // Without a command timeout there is no deadline to give the script (and calls could hang:
    // createRedisClient always sets one).
    this.commandTimeoutMs = typeof timeout === 'number' && timeout > 0 ? timeout : 0;
  }

  waitReady(timeoutMs: number): Promise<boolean> {
    if (this.client.status === 'ready') return Promise.resolve(true);
    return new Promise((resolve) => {
      const done = (ready: boolean) => {
        clearTimeout(timer);
        this.client.off('ready', onReady);
        resolve(ready);
      };
      const onReady = () => done(true);
      const timer = setTimeout(() => done(false), timeoutMs);
      this.client.on('ready', onReady);
    });
  }

  async take(bucket: string, limitPerMinute: number): Promise<RateDecision> {
    checkTakeArgs(bucket, limitPerMinute);
    // Not ready (connecting, reconnecting, closed): answer now, the offline queue is off anyway.
    if (this.client.status !== 'ready' || this.inFlight >= this.maxInFlight) throw unavailable();
    this.inFlight++;
    const sentAt = performance.now();
    const deadline = this.offsetMs === null || this.commandTimeoutMs === 0 ? 0 : Math.floor(sentAt + this.offsetMs) + this.commandTimeoutMs;
    const key = bucketKey(bucket);
    let reply: unknown;
    try {
      try {
        reply = await this.client.evalsha(TAKE_SHA, 1, key, limitPerMinute, this.windowMs, deadline);
      } catch (err) {
        // Script cache empty (Redis restarted or failed over): send the body once; it is cached again.
        if (!isNoScript(err)) throw err;
        reply = await this.client.eval(TAKE_LUA, 1, key, limitPerMinute, this.windowMs, deadline);
      }
    } catch (err) {
      throw unavailable(err);
    } finally {
      this.inFlight--;
    }
    return this.decide(reply, sentAt);
  }

  private decide(reply: unknown, sentAt: number): RateDecision {
    if (!Array.isArray(reply) || reply.length !== 3) throw unavailable(new Error('rate limit script: unexpected reply'));
    const status = Number(reply[0]);
    const value = Number(reply[1]);
    const redisNowMs = Number(reply[2]);
    const receivedAt = performance.now();
    if (receivedAt - sentAt <= OFFSET_SAMPLE_MAX_RTT_MS) this.offsetMs = redisNowMs - (sentAt + receivedAt) / 2;
    if (status === 1) return { allowed: true, remaining: value };
    if (status === 0) return { allowed: false, retryAfterS: retryAfterSeconds(value, this.windowMs) };
    // Past its deadline but we were still waiting: our offset was off (a clock stepped). The
    // offset is corrected from this reply; this one request gets the 503 it nearly had anyway.
    throw unavailable(new Error('rate limit script: deadline passed'));
  }

  async close(): Promise<void> {
    if (this.ownsClient) await closeRedisClient(this.client);
  }
}
