// In-process sliding-log limiter: the default when REDIS_URL is unset (one instance only).
// Same algorithm as the Redis script (see rate-limiter.ts), same answers for the same times.
//
// Memory is bounded: at most `maxBuckets` buckets, each a ring of at most `limit` timestamps
// that grows only as far as the bucket's traffic needs. Buckets are kept in least-recently-used
// order (a Map re-inserted on every take); each take reaps up to REAP_PER_TAKE fully expired
// buckets from the cold end, so idle buckets disappear without a timer. When the cap is reached
// with every bucket still live, the least recently used one is forgotten (it gets a fresh
// allowance): the cap is a memory guard, sized well above any real number of active keys.
import { performance } from 'node:perf_hooks';
import type { RateDecision, RateLimiter } from './rate-limiter.js';

// The arithmetic shared with the Redis limiter lives here (the reference implementation), so
// rate-limiter.ts can import both back-ends without an import cycle.

/** The window every limit is counted over; a constructor option only so tests can shorten it. */
export const DEFAULT_WINDOW_MS = 60_000;
/** Longest bucket name accepted: a limit on what a caller can make us store. */
export const MAX_BUCKET_CHARS = 512;
/** Upper bound on a per-window limit (config allows up to 1,000,000 per minute). */
export const MAX_LIMIT = 1_000_000;

/** Whole seconds to wait for `waitMs`, at least 1 and at most one window (a clock step back
 * must not produce an hour-long Retry-After). */
export function retryAfterSeconds(waitMs: number, windowMs: number): number {
  return Math.max(1, Math.ceil(Math.min(waitMs, windowMs) / 1000));
}

/** Programming errors, not client errors: a bad bucket or limit is a bug in the caller. */
export function checkTakeArgs(bucket: string, limit: number): void {
  if (typeof bucket !== 'string' || bucket.length === 0 || bucket.length > MAX_BUCKET_CHARS) {
    throw new TypeError(`rate limiter: bucket must be 1 to ${MAX_BUCKET_CHARS} characters`);
  }
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIMIT) {
    throw new TypeError(`rate limiter: limit must be an integer from 1 to ${MAX_LIMIT}, got ${limit}`);
  }
}

export function checkWindowMs(windowMs: number): number {
  if (!Number.isInteger(windowMs) || windowMs < 1 || windowMs > 86_400_000) {
    throw new TypeError(`rate limiter: windowMs must be an integer from 1 to 86400000, got ${windowMs}`);
  }
  return windowMs;
}

export const DEFAULT_MAX_BUCKETS = 100_000;
const REAP_PER_TAKE = 2;
const INITIAL_RING = 8;

/** Timestamps of allowed requests, oldest first, in a growable ring. */
class Log {
  times: Float64Array;
  head = 0;
  len = 0;

  constructor(limit: number) {
    this.times = new Float64Array(Math.min(limit, INITIAL_RING));
  }

  at(index: number): number {
    return this.times[(this.head + index) % this.times.length]!;
  }

  newest(): number {
    return this.at(this.len - 1);
  }

  dropUpTo(cutoff: number): void {
    while (this.len > 0 && this.times[this.head]! <= cutoff) {
      this.head = (this.head + 1) % this.times.length;
      this.len--;
    }
  }

  push(timeMs: number, limit: number): void {
    if (this.len === this.times.length) this.grow(limit);
    this.times[(this.head + this.len) % this.times.length] = timeMs;
    this.len++;
  }

  private grow(limit: number): void {
    const next = new Float64Array(Math.max(this.len + 1, Math.min(limit, this.times.length * 2)));
    for (let i = 0; i < this.len; i++) next[i] = this.at(i);
    this.times = next;
    this.head = 0;
  }
}

export interface MemoryRateLimiterOptions {
  windowMs?: number;
  maxBuckets?: number;
  /** Milliseconds on a monotonic clock; tests inject their own. */
  now?: () => number;
}

export class MemoryRateLimiter implements RateLimiter {
  readonly kind = 'memory' as const;
  readonly windowMs: number;
  readonly maxBuckets: number;
  private readonly now: () => number;
  private readonly buckets = new Map<string, Log>();

  constructor(opts: MemoryRateLimiterOptions = {}) {
    this.windowMs = checkWindowMs(opts.windowMs ?? DEFAULT_WINDOW_MS);
    this.maxBuckets = opts.maxBuckets ?? DEFAULT_MAX_BUCKETS;
    if (!Number.isInteger(this.maxBuckets) || this.maxBuckets < 1) {
      throw new TypeError(`rate limiter: maxBuckets must be a positive integer, got ${this.maxBuckets}`);
    }
    this.now = opts.now ?? (() => performance.now());
  }

  /** Number of buckets currently held (for tests and metrics). */
  get size(): number {
    return this.buckets.size;
  }

  /** Always ready: the log is in this process. */
  waitReady(): Promise<boolean> {
    return Promise.resolve(true);
  }

  take(bucket: string, limitPerMinute: number): Promise<RateDecision> {
    return Promise.resolve(this.takeSync(bucket, limitPerMinute));
  }

  takeSync(bucket: string, limit: number): RateDecision {
    checkTakeArgs(bucket, limit);
    const now = this.now();
    const cutoff = now - this.windowMs;
    let log = this.buckets.get(bucket);
    // Taken out and re-inserted last: the Map's order is least recently used first.
    if (log !== undefined) this.buckets.delete(bucket);
    this.reap(cutoff);
    if (log === undefined) log = new Log(limit);
    this.buckets.set(bucket, log);

    log.dropUpTo(cutoff);
    if (log.len < limit) {
      log.push(now, limit);
      return { allowed: true, remaining: limit - log.len };
    }
    // The (len - limit)th oldest entry is the one whose expiry brings the count below limit.
    const waitMs = log.at(log.len - limit) + this.windowMs - now;
    return { allowed: false, retryAfterS: retryAfterSeconds(waitMs, this.windowMs) };
  }

  async close(): Promise<void> {
    this.buckets.clear();
  }

  /** Drops expired buckets from the cold end, then makes room for one more under the cap. */
  private reap(cutoff: number): void {
    let reaped = 0;
    for (const [name, log] of this.buckets) {
      if (reaped >= REAP_PER_TAKE) break;
      if (log.len > 0 && log.newest() > cutoff) break; // the coldest bucket is still live
      this.buckets.delete(name);
      reaped++;
    }
    while (this.buckets.size >= this.maxBuckets) {
      const coldest = this.buckets.keys().next().value as string;
      this.buckets.delete(coldest);
    }
  }
}
