// Request-rate limiting: the interface both back-ends implement.
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
// The back-ends import this file; the factory that picks one is create-rate-limiter.ts.

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
