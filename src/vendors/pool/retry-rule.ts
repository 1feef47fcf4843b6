// When a try may move to another deployment: only when the vendor certainly did not start work, so
// a request is never run (or charged) twice. Moved: the connection failed before the request was
// written, or the vendor answered 429, 529 or 503 before any body byte. Never moved: any other
// status (4xx is the client's or ours, other 5xx may have run), a timeout or a reset after the
// request was sent, anything after a byte reached the client (the proxy never asks then).
import { neverSent } from '../text-upstream.js';

export type MoveReason = 'connect' | 'status_429' | 'status_503' | 'status_529';

/** A send that threw: movable only when nothing was written (a pool closed at shutdown is not a vendor's failure). */
export function movableError(err: unknown): MoveReason | undefined {
  if ((err as { code?: unknown } | null)?.code === 'UND_ERR_CLOSED') return undefined;
  return neverSent(err) ? 'connect' : undefined;
}

/** A status line read before any body byte: movable when the vendor refused the work for capacity. */
export function movableStatus(status: number): MoveReason | undefined {
  if (status === 429) return 'status_429';
  if (status === 529) return 'status_529';
  if (status === 503) return 'status_503';
  return undefined;
}
