// The generation resource every product shares, from a stored row: the status machine
// (submitting/creating are shown as `queued`: the vendor has not confirmed the work yet), the money
// fields, the request echo and the error. Each product adds its result object (`video`, `image`)
// with a fresh signed link on every read.
import { inkToUsd } from '../catalog/pricing.js';
import type { SignedLink } from '../media/signed-link.js';
import type { GenerationRow } from './store.js';

export type PublicStatus = 'queued' | 'running' | 'succeeded' | 'failed';

export function publicStatus(row: GenerationRow): PublicStatus {
  switch (row.state) {
    case 'running':
      return 'running';
    case 'succeeded':
      return 'succeeded';
    case 'failed':
      return 'failed';
    default:
      return 'queued';
  }
}

/** What a product shows besides the shared fields. */
export interface ResourceShape {
  /** `video.generation`, `image.generation`. */
  readonly object: string;
  /** Name of the result object (`video`, `image`). */
  readonly resultField: string;
  /** The result object of a live result; `link` is its fresh signed link. */
  result(row: GenerationRow, link: SignedLink): Record<string, unknown>;
  /** Shows `progress` while queued or running, and the vendor's `seed` (video does; images do not). */
  readonly progressAndSeed: boolean;
}

/** The 202 body of an accepted submit; a replay renders the same row to the same bytes. */
export function presentAccepted(object: string, row: GenerationRow): Record<string, unknown> {
  return {
    id: row.id,
    object,
    status: 'queued',
    model: row.model,
    created_at: row.created_at.toISOString(),
    ink_reserved: row.hold_ink,
    usd_payg_reserved: inkToUsd(row.hold_ink),
    request: row.request,
  };
}

/** The object in its current state. `link` makes the fresh signed link (only called for a live result). */
export function presentGeneration(shape: ResourceShape, row: GenerationRow, link: (key: string) => SignedLink): Record<string, unknown> {
  const status = publicStatus(row);
  const out: Record<string, unknown> = { id: row.id, object: shape.object, status };
  if (shape.progressAndSeed && (status === 'queued' || status === 'running') && row.progress !== null) out.progress = row.progress;
  out.model = row.model;
  out.created_at = row.created_at.toISOString();
  if (row.completed_at !== null && (status === 'succeeded' || status === 'failed')) out.completed_at = row.completed_at.toISOString();
  if (status === 'succeeded' && !row.result_expired && row.media_key !== null) out[shape.resultField] = shape.result(row, link(row.media_key));
  if (shape.progressAndSeed && row.result_seed !== null) out.seed = row.result_seed;
  out.ink_reserved = row.hold_ink;
  out.usd_payg_reserved = inkToUsd(row.hold_ink);
  if (status === 'succeeded' || status === 'failed') {
    const charged = status === 'failed' ? 0 : (row.charged_ink ?? 0);
    out.ink_charged = charged;
    out.usd_payg_charged = inkToUsd(charged);
  }
  out.request = row.request;
  if (status === 'failed') out.error = { code: row.error_code ?? 'provider_failed', message: row.error_message ?? 'The generation failed.' };
  if (row.result_expired) out.result_expired = true;
  return out;
}

/** `url` and `expires_at` of a signed link, as every result object starts. */
export const linkFields = (l: SignedLink): { url: string; expires_at: string } => ({ url: l.url, expires_at: new Date(l.expiresAtS * 1000).toISOString() });
