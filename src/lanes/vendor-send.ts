// How a text request reaches the vendor's deployments: each member's path and headers (its own
// key), made once at start-up, and one POST tried across them under the pool's rule
// (vendors/pool/try-loop.ts). Both lanes' requests and the Messages token count go through it.
import type { HttpContext } from '../server/http-context.js';
import type { TextPool } from '../vendors/pool/text-pools.js';
import { type TryResult, tryDeployments } from '../vendors/pool/try-loop.js';

/** Per deployment (by member index): the vendor path and the lane's headers with that deployment's key. */
export interface MemberRequests {
  readonly paths: readonly string[];
  readonly headers: ReadonlyArray<Readonly<Record<string, string>>>;
}

/** What a lane gives every request to its vendor: the fixed headers, and the header a deployment's key goes in. */
export interface VendorHeaders {
  /** Fixed vendor headers (protocol version, content type), precomputed once; no key. */
  readonly vendorHeaders: Readonly<Record<string, string>>;
  /** The header carrying a deployment's key, added to vendorHeaders per deployment (memberRequests). */
  keyHeader(apiKey: string): readonly [string, string];
}

export function memberRequests(pool: TextPool, lane: VendorHeaders, vendorPath: string): MemberRequests {
  return {
    paths: pool.members.map((m) => m.client.basePath + vendorPath),
    headers: pool.members.map((member) => {
      const [name, value] = lane.keyHeader(member.client.apiKey);
      return Object.freeze({ ...lane.vendorHeaders, [name]: value });
    }),
  };
}

/**
 * One POST across a text vendor's deployments (vendors/pool/try-loop.ts): each try to a member's
 * path with its headers (and `extra` on top), its headers awaited no longer than the time left.
 */
export function postAcross(
  pool: TextPool,
  members: MemberRequests,
  limits: { maxTries: number; deadlineMs: number },
  body: string,
  extra?: Readonly<Record<string, string>>,
): Promise<TryResult> {
  return tryDeployments(pool, limits, (member, leftMs) =>
    member.client.pool.request({
      path: members.paths[member.index]!,
      method: 'POST',
      headers: extra ? { ...members.headers[member.index], ...extra } : members.headers[member.index],
      body,
      headersTimeout: Math.max(1, Math.ceil(leftMs)),
    }),
  );
}

/** What the tries leave on the request: their count and the deployment that answered (the access line's). */
export function noteTries(ctx: HttpContext, pool: TextPool, tried: TryResult): void {
  ctx.tries = tried.tries;
  if (tried.member >= 0) ctx.vendorDeployment = pool.members[tried.member]!.name;
}
