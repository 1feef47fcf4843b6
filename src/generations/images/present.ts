// The image generation resource: the shared fields (../present.ts) with the
// `image {url, expires_at, content_type, width, height, size_bytes}` result.
import type { SignedLink } from '../../media/signed-link.js';
import { linkFields, presentAccepted, presentGeneration, type ResourceShape } from '../present.js';
import type { GenerationRow } from '../store.js';

export const IMAGE_OBJECT = 'image.generation';

const SHAPE: ResourceShape = {
  object: IMAGE_OBJECT,
  resultField: 'image',
  progressAndSeed: false,
  result: (row, link) => ({
    ...linkFields(link),
    content_type: row.media_content_type ?? 'image/png',
    width: row.result_width,
    height: row.result_height,
    size_bytes: row.media_size_bytes ?? 0,
  }),
};

export const presentImageAccepted = (row: GenerationRow): Record<string, unknown> => presentAccepted(IMAGE_OBJECT, row);
export const presentImageGeneration = (row: GenerationRow, link: (key: string) => SignedLink): Record<string, unknown> => presentGeneration(SHAPE, row, link);
