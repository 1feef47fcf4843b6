// The top-level fields of a video submit body (POST /v1/video/generations), once (the rule type and
// its checker are src/util/request-fields.ts, shared with the other bodies): validate.ts checks
// each field with its row (type, enum, bounds, the code a wrong value answers) and refuses any field
// not in this table; the API reference and /v1/openapi.json describe the body from it (the model
// enum comes from the catalogue). Rows are in the order validate.ts checks them. What depends on
// the chosen model (its aspect ratios, resolutions, duration range, reference caps) is the model
// card's and stays in validate.ts.
import { VIDEO_ASPECT_RATIOS, VIDEO_RESOLUTIONS } from '../../catalog/models.js';
import { MAX_URL_CHARS } from '../../net/ssrf-guard.js';
import { fieldTable, type FieldRule } from '../../util/request-fields.js';
import { MAX_METADATA_BYTES, MAX_SEED, MIN_SEED } from '../fields.js';

export const MAX_PROMPT_CHARS = 4000;

const url = (description: string): FieldRule => ({
  types: ['string'],
  code: 'invalid_type',
  expect: 'a string (an https URL)',
  description,
  format: 'uri',
  maxLength: MAX_URL_CHARS,
});
const urlList = (description: string): FieldRule => ({
  types: ['array'],
  code: 'invalid_type',
  expect: 'an array of https URLs',
  description,
  items: { type: 'string', format: 'uri', maxLength: MAX_URL_CHARS },
});

export const VIDEO_REQUEST_FIELDS = fieldTable({
  model: { types: ['string'], required: true, code: 'unknown_model', expect: 'a video model id', description: 'Video model id' },
  prompt: {
    types: ['string'],
    code: 'invalid_type',
    expect: 'a string',
    description: 'Required unless a first frame or an image or video reference carries the intent',
    maxLength: MAX_PROMPT_CHARS,
  },
  aspect_ratio: {
    types: ['string'],
    code: 'invalid_enum',
    expect: 'an aspect ratio',
    description: "Default 16:9; the model's own list in GET /v1/models",
    enum: VIDEO_ASPECT_RATIOS,
  },
  resolution: {
    types: ['string'],
    code: 'invalid_enum',
    expect: 'a resolution',
    description: "Default 720p; the model's own list in GET /v1/models",
    enum: VIDEO_RESOLUTIONS,
  },
  duration: {
    types: ['integer'],
    code: 'invalid_duration',
    expect: 'a whole number of seconds',
    description: 'Whole seconds inside the model\'s range (default 5); "auto" and -1 are not offered',
  },
  generate_audio: { types: ['boolean'], code: 'invalid_type', expect: 'a boolean', description: 'Default true' },
  seed: { types: ['integer'], code: 'invalid_seed', expect: 'an integer', description: '-1 for a random seed', minimum: MIN_SEED, maximum: MAX_SEED },
  first_frame_url: url('https URL of the first frame'),
  last_frame_url: url('https URL of the last frame; needs first_frame_url'),
  reference_image_urls: urlList("https URLs of reference images, at most the model's cap; not with frames"),
  reference_video_urls: urlList("https URLs of reference videos, at most the model's cap; not with frames"),
  reference_audio_urls: urlList("https URLs of reference audio, at most the model's cap; not with frames"),
  metadata: { types: ['object'], code: 'invalid_type', expect: 'a JSON object', description: 'Stored and echoed', maxJsonBytes: MAX_METADATA_BYTES },
});
