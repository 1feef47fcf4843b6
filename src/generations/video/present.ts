// The video generation resource: the shared fields (../present.ts) with `progress`, `seed` and the
// `video {url, expires_at, content_type, duration_seconds, resolution, aspect_ratio, size_bytes}` result.
import type { SignedLink } from '../../media/signed-link.js';
import { linkFields, presentAccepted, presentGeneration, type ResourceShape } from '../present.js';
import type { GenerationRow } from '../store.js';

export const VIDEO_OBJECT = 'video.generation';

const SHAPE: ResourceShape = {
  object: VIDEO_OBJECT,
  resultField: 'video',
  progressAndSeed: true,
  result(row, link) {
    const video: Record<string, unknown> = { ...linkFields(link), content_type: row.media_content_type ?? 'video/mp4' };
    if (row.result_duration_s !== null) video.duration_seconds = row.result_duration_s;
    if (row.result_resolution !== null) video.resolution = row.result_resolution;
    if (row.result_aspect_ratio !== null) video.aspect_ratio = row.result_aspect_ratio;
    video.size_bytes = row.media_size_bytes ?? 0;
    return video;
  },
};

export const presentVideoAccepted = (row: GenerationRow): Record<string, unknown> => presentAccepted(VIDEO_OBJECT, row);
export const presentVideoGeneration = (row: GenerationRow, link: (key: string) => SignedLink): Record<string, unknown> => presentGeneration(SHAPE, row, link);
