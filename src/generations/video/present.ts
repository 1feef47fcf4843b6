// The video generation resource (spec "Video generation" table) from a stored row.
// submitting/creating are shown as `queued` (the vendor has not confirmed the task yet).
import { inkToUsd } from '../../catalog/pricing.js';
import type { SignedLink } from '../../media/signed-link.js';
import type { GenerationRow } from '../store.js';

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

/** The 202 body of an accepted submit; a replay renders the same row to the same bytes. */
export function presentAccepted(row: GenerationRow): Record<string, unknown> {
  return {
    id: row.id,
    object: 'video.generation',
    status: 'queued',
    model: row.model,
    created_at: row.created_at.toISOString(),
    ink_reserved: row.hold_ink,
    usd_payg_reserved: inkToUsd(row.hold_ink),
    request: row.request,
  };
}

/** The object in its current state. `link` makes the fresh signed link (only called for a live result). */
export function presentGeneration(row: GenerationRow, link: (key: string) => SignedLink): Record<string, unknown> {
  const status = publicStatus(row);
  const out: Record<string, unknown> = { id: row.id, object: 'video.generation', status };
  if ((status === 'queued' || status === 'running') && row.progress !== null) out.progress = row.progress;
  out.model = row.model;
  out.created_at = row.created_at.toISOString();
  if (row.completed_at !== null && (status === 'succeeded' || status === 'failed')) out.completed_at = row.completed_at.toISOString();
  if (status === 'succeeded' && !row.result_expired && row.media_key !== null) {
    const l = link(row.media_key);
    const video: Record<string, unknown> = {
      url: l.url,
      expires_at: new Date(l.expiresAtS * 1000).toISOString(),
      content_type: row.media_content_type ?? 'video/mp4',
    };
    if (row.result_duration_s !== null) video.duration_seconds = row.result_duration_s;
    if (row.result_resolution !== null) video.resolution = row.result_resolution;
    if (row.result_aspect_ratio !== null) video.aspect_ratio = row.result_aspect_ratio;
    video.size_bytes = row.media_size_bytes ?? 0;
    out.video = video;
  }
  if (row.result_seed !== null) out.seed = row.result_seed;
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
