// Failed authentications per client address: a budget of its own, `limits.authFailuresPerMinute`,
// counted in the rate limiter every instance shares (Redis when configured, else in-process), in the
// bucket `authfail:<address>` (docs/api/rate-limits.md#failed-authentication-per-client-address).
//
// Only failures that cost a store lookup are counted (a key unknown, revoked or expired: `counts`),
// so a good key pays nothing for this, no store and no Redis round trip; nor do the 401s given
// from memory (no key, a malformed one, one the negative cache holds), which cost nothing either.
// When a failure finds the budget spent, the address is remembered here as refused until its
// Retry-After, and from then on this instance answers its requests 429 before any lookup, from
// memory. Another instance learns it from its own next failure for that address (one lookup, then
// the shared count says no). While the limiter cannot answer (Redis down) a failure is not counted
// and keeps its 401: a bad key is the client's mistake, never a 5xx.
//
// IPv6 callers are counted per /64 (the block one subscriber usually holds, so a new address in it
// does not buy a new budget); an IPv4-mapped address counts as the IPv4 address.
import { isIP } from 'node:net';
import { performance } from 'node:perf_hooks';
import { ApiError } from '../errors.js';
import type { RateLimiter } from './rate-limiter.js';
import { ExpiringKeys } from '../util/expiring-keys.js';

/** Addresses remembered as over their budget at once; the oldest is forgotten first (it costs one more lookup). */
const DEFAULT_MAX_REFUSED = 10_000;

export interface AuthFailureBudgetOptions {
  readonly limiter: RateLimiter;
  /** `limits.authFailuresPerMinute`. */
  readonly perMinute: number;
  /** Which failures count: those that cost a store lookup (auth/authenticate.ts's isLookedUpRefusal). */
  readonly counts: (error: unknown) => boolean;
  readonly maxRefused?: number;
  /** Monotonic milliseconds; tests step a clock of their own. */
  readonly nowMs?: () => number;
  /** Called for each request refused as over the budget (the metrics count it). */
  readonly onRefused?: () => void;
}

const overBudget = (retryAfterS: number): ApiError =>
  new ApiError('rate_limit_exceeded', {
    retryAfterS,
    message: 'Too many failed authentications from this address; retry after Retry-After with a valid key.',
  });

/** The bucket an address's failures count in: the address, an IPv6 one's /64. */
export function failureBucket(address: string): string {
  return 'authfail:' + addressBlock(address);
}

function addressBlock(address: string): string {
  if (isIP(address) !== 6) return address;
  const lower = address.toLowerCase().split('%')[0]!;
  const mapped = /^::ffff:(\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})$/.exec(lower);
  if (mapped) return mapped[1]!;
  const halves = lower.split('::');
  const head = halves[0] === '' ? [] : halves[0]!.split(':');
  const groups = [...head];
  if (halves.length === 2) {
    const tail = halves[1] === '' ? [] : halves[1]!.split(':');
    // A dotted IPv4 tail stands for two groups.
    const tailGroups = tail.length + (tail.some((g) => g.includes('.')) ? 1 : 0);
    for (let i = head.length + tailGroups; i < 8; i++) groups.push('0');
    groups.push(...tail);
  }
  return (
    groups
      .slice(0, 4)
      .map((g) => Number.parseInt(g, 16).toString(16))
      .join(':') + '::/64'
  );
}

export class AuthFailureBudget {
  /** Failure buckets over their budget, each refused until its Retry-After is up. */
  private readonly refused: ExpiringKeys;
  private readonly limiter: RateLimiter;
  private readonly perMinute: number;
  private readonly counts: (error: unknown) => boolean;
  private readonly onRefused: (() => void) | undefined;

  constructor(options: AuthFailureBudgetOptions) {
    this.limiter = options.limiter;
    this.perMinute = options.perMinute;
    this.counts = options.counts;
    this.refused = new ExpiringKeys(options.maxRefused ?? DEFAULT_MAX_REFUSED, options.nowMs ?? (() => performance.now()));
    this.onRefused = options.onRefused;
  }

  /**
   * Runs `attempt` (the key check) for a request from `address()`: refused 429 at once while the
   * address is known to be over its budget; a 401 that cost a lookup is counted, and becomes the
   * 429 when it is the one that went over. Anything else the attempt throws passes unchanged.
   */
  async guard<T>(address: () => string, attempt: () => Promise<T>): Promise<T> {
    // The address is resolved only when it matters: a good key with no address refused costs nothing.
    const bucket = this.refused.size === 0 ? undefined : failureBucket(address());
    if (bucket !== undefined) this.refuseIfKnown(bucket);
    try {
      return await attempt();
    } catch (e) {
      if (!this.counts(e)) throw e;
      throw await this.failed(bucket ?? failureBucket(address()), e as ApiError);
    }
  }

  /** Throws the 429 while `bucket` is remembered as over its budget. */
  private refuseIfKnown(bucket: string): void {
    const waitMs = this.refused.leftMs(bucket);
    if (waitMs === 0) return;
    this.onRefused?.();
    throw overBudget(Math.max(1, Math.ceil(waitMs / 1000)));
  }

  /** Counts one failure; the error to answer: the failure itself, or the 429 when the budget is spent. */
  private async failed(bucket: string, failure: ApiError): Promise<ApiError> {
    let decision;
    try {
      decision = await this.limiter.take(bucket, this.perMinute);
    } catch {
      return failure;
    }
    if (decision.allowed) return failure;
    this.refused.add(bucket, decision.retryAfterS * 1000);
    this.onRefused?.();
    return overBudget(decision.retryAfterS);
  }
}
