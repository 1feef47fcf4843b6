// The generation vendors' pools (Ark for video, Gemini for images; made by from-config.ts): the one
// call of a job that may move between deployments (a video's task create,
// an image's generateContent) under the same retry rule and try limits as the text lanes. Once a
// vendor task exists, everything about it (polls, cancel, the download) goes to the deployment
// that created it: memberFor() finds it by the name stored on the generation row.
import type { Dispatcher } from 'undici';
import type { PoolMember, VendorPool } from './pool.js';
import { tryDeployments } from './try-loop.js';

/** How one pooled call is sent and read, and what its failures become (the vendor client's own errors). */
export interface PooledCall<C, T> {
  /** The request, answer unread; throws the transport's error as is. */
  send(client: C, timeoutMs: number): Promise<Dispatcher.ResponseData>;
  /** The answering try's body: the value, or the client's error. */
  read(client: C, res: Dispatcher.ResponseData): Promise<T>;
  /** A failure before any answer that may not move (sent, or the only deployment). */
  unreachable(err: unknown): Error;
  /** Every deployment cooling down, full, or refusing before starting work. */
  none(retryAfterS: number): Error;
}

export interface Pooled<T> {
  readonly value: T;
  /** The deployment that answered: the one a created task belongs to. */
  readonly deployment: string;
  readonly tries: number;
}

/** One call across the pool, at most `maxTries` tries within `timeoutMs` (the wait one try had). */
export async function callPooled<C, T>(pool: VendorPool<C>, maxTries: number, timeoutMs: number, call: PooledCall<C, T>): Promise<Pooled<T>> {
  const r = await tryDeployments(pool, { maxTries, deadlineMs: performance.now() + timeoutMs }, (m, left) => call.send(m.client, left));
  if (r.kind === 'none') throw call.none(r.retryAfterS);
  if (r.kind === 'error') throw call.unreachable(r.error);
  const member = pool.members[r.member]!;
  try {
    return { value: await call.read(member.client, r.res), deployment: member.name, tries: r.tries };
  } finally {
    pool.end(r.member);
  }
}

/**
 * The member a stored vendor task belongs to. A row with no name (from before pooled jobs) is the
 * first deployment's, as it was then. A name no longer configured: undefined (the caller fails the
 * job and releases its hold: another deployment does not know the task).
 */
export function memberFor<C>(pool: VendorPool<C>, name: string | null): PoolMember<C> | undefined {
  return name === null ? pool.members[0] : pool.byName(name);
}
