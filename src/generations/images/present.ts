// The image generation resource from a stored row. Same status machine and money fields as video
// (submitting/creating are shown as `queued`); the result is `image {url, expires_at, content_type,
// width, height, size_bytes}` with a fresh 15-minute signed link on every read.
import { inkToUsd } from '../../catalog/pricing.js';
import type { GenerationRow } from '../store.js';
import type { SignedLink } from '../../media/signed-link.js';
import { publicStatus } from '../video/present.js';

export const IMAGE_OBJECT = 'image.generation';

/** The 202 body of an accepted submit; a replay renders the same row to the same bytes. */
export function presentImageAccepted(row: GenerationRow): Record<string, unknown> {
  return {
    id: row.id,
    object: IMAGE_OBJECT,
    status: 'queued',
    model: row.model,
    created_at: row.created_at.toISOString(),
    ink_reserved: row.hold_ink,
    usd_payg_reserved: inkToUsd(row.hold_ink),
    request: row.request,
  };
}

/** The object in its current state. `link` makes the fresh signed link (only called for a live result). */
export function presentImageGeneration(row: GenerationRow, link: (key: string) => SignedLink): Record<string, unknown> {
  const status = publicStatus(row);
  const out: Record<string, unknown> = { id: row.id, object: IMAGE_OBJECT, status, model: row.model, created_at: row.created_at.toISOString() };
  if (row.completed_at !== null && (status === 'succeeded' || status === 'failed')) out.completed_at = row.completed_at.toISOString();
  if (status === 'succeeded' && !row.result_expired && row.media_key !== null) {
    const l = link(row.media_key);
    out.image = {
      url: l.url,
      expires_at: new Date(l.expiresAtS * 1000).toISOString(),
      content_type: row.media_content_type ?? 'image/png',
      width: row.result_width,
      height: row.result_height,
      size_bytes: Number(row.media_size_bytes ?? 0),
    };
  }
  out.ink_reserved = Number(row.hold_ink);
  out.usd_payg_reserved = inkToUsd(Number(row.hold_ink));
  if (status === 'succeeded' || status === 'failed') {
    const charged = status === 'failed' ? 0 : Number(row.charged_ink ?? 0);
    out.ink_charged = charged;
    out.usd_payg_charged = inkToUsd(charged);
  }
  out.request = row.request;
  if (status === 'failed') out.error = { code: row.error_code ?? 'provider_failed', message: row.error_message ?? 'The generation failed.' };
  if (row.result_expired) out.result_expired = true;
  return out;
}
