// One request's tries across a vendor's pool, before any byte of an answer is used: pick a
// deployment, send, and move on only where the retry rule allows (retry-rule.ts), at most
// upstream.maxTries times and never past the request's deadline. The caller keeps the rest of its
// handling (holds, mapping the vendor's answer) exactly as for a single vendor URL.
import type { Dispatcher } from 'undici';
import { retryAfterSeconds } from '../vendor-http.js';
import type { VendorPool, PoolMember } from './pool.js';
import { movableError, movableStatus } from './retry-rule.js';

export type TryResult =
  /** The vendor's answer, body unread; the member stays in flight until the caller's `pool.end(member)`. */
  | { readonly kind: 'answer'; readonly member: number; readonly res: Dispatcher.ResponseData; readonly tries: number }
  /** A failure that may not move (sent, or the only deployment): the caller's to handle as before. */
  | { readonly kind: 'error'; readonly member: number; readonly error: unknown; readonly tries: number }
  /** Every deployment cooling down, full, or refused this request before starting work. */
  | { readonly kind: 'none'; readonly member: number; readonly retryAfterS: number; readonly tries: number };

export interface TryLimits {
  readonly maxTries: number;
  /** performance.now() after which no try starts; each try's wait for headers ends there too. */
  readonly deadlineMs: number;
}

export type Send<C> = (member: PoolMember<C>, timeoutMs: number) => Promise<Dispatcher.ResponseData>;

/** A refusal's body is not read: drained in the background (small: an error envelope), errors ignored. */
function discard(res: Dispatcher.ResponseData): void {
  res.body.dump({ limit: 64 * 1024 }).catch(() => undefined);
}

export async function tryDeployments<C>(pool: VendorPool<C>, limits: TryLimits, send: Send<C>): Promise<TryResult> {
  const several = pool.members.length > 1;
  let tried = 0;
  let tries = 0;
  let last = -1;
  for (;;) {
    const left = limits.deadlineMs - performance.now();
    const i = tries < limits.maxTries && left > 0 ? pool.pick(tried) : -1;
    if (i < 0) return { kind: 'none', member: last, retryAfterS: pool.retryAfterS(), tries };
    tried |= 1 << i;
    tries++;
    last = i;
    pool.begin(i);
    let res: Dispatcher.ResponseData;
    try {
      res = await send(pool.members[i]!, left);
    } catch (e) {
      pool.end(i);
      pool.failed(i);
      const why = several ? movableError(e) : undefined;
      if (why === undefined) return { kind: 'error', member: i, error: e, tries };
      pool.members[i]!.moved[why]++;
      continue;
    }
    const why = several ? movableStatus(res.statusCode) : undefined;
    if (why === undefined) {
      if (res.statusCode >= 500) pool.failed(i);
      else pool.answered(i);
      return { kind: 'answer', member: i, res, tries };
    }
    pool.end(i);
    const waitS = retryAfterSeconds(res.headers['retry-after']);
    if (waitS !== undefined && waitS > 0) pool.retryAfter(i, Math.min(waitS, 3600) * 1000);
    else pool.failed(i);
    pool.members[i]!.moved[why]++;
    discard(res);
  }
}
