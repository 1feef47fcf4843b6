// The top-level fields of an image submit body (POST /v1/images/generations), once (the rule type and
// its checker are src/util/request-fields.ts, shared with the other bodies): validate.ts checks each
// field with its row (type, enum, bounds, the code a wrong value answers) and refuses any field not
// in this table; the API reference and /v1/openapi.json describe the body from it (the model enum
// comes from the catalogue). Rows are in the order validate.ts checks them. What depends on the
// chosen model (its sizes, aspect ratios, reference cap) is the model card's.
import { IMAGE_SIZES } from '../../catalog/models.js';
import { MAX_URL_CHARS } from '../../net/ssrf-guard.js';
import { fieldTable } from '../../util/request-fields.js';
import { MAX_METADATA_BYTES, MAX_SEED, MIN_SEED } from '../fields.js';

/** Gemini takes ~65k input tokens; 8,000 characters keeps a prompt far inside that with 14 references. */
export const MAX_IMAGE_PROMPT_CHARS = 8000;
export const MAX_IMAGE_REFERENCES = 14;

export const IMAGE_REQUEST_FIELDS = fieldTable({
  model: { types: ['string'], required: true, code: 'unknown_model', expect: 'an image model id', description: 'Image model id' },
  // Required: missing, empty or only white space answers missing_prompt, after every other field.
  prompt: {
    types: ['string'],
    required: true,
    code: 'invalid_type',
    expect: 'a string',
    description: 'What to make (and what to do with any references); not only white space',
    maxLength: MAX_IMAGE_PROMPT_CHARS,
  },
  size: {
    types: ['string'],
    code: 'invalid_enum',
    expect: 'a size',
    description: "The model's default when absent; its own list in GET /v1/models",
    enum: IMAGE_SIZES,
  },
  aspect_ratio: {
    types: ['string'],
    code: 'invalid_enum',
    expect: 'an aspect ratio',
    description: "The model's default when absent; its own list in GET /v1/models",
  },
  seed: { types: ['integer'], code: 'invalid_seed', expect: 'an integer', description: '-1 for a random seed', minimum: MIN_SEED, maximum: MAX_SEED },
  reference_image_urls: {
    types: ['array'],
    code: 'invalid_type',
    expect: 'an array of https URLs',
    description: "https URLs of reference images, at most the model's cap",
    maxItems: MAX_IMAGE_REFERENCES,
    items: { type: 'string', format: 'uri', maxLength: MAX_URL_CHARS },
  },
  metadata: { types: ['object'], code: 'invalid_type', expect: 'a JSON object', description: 'Stored and echoed', maxJsonBytes: MAX_METADATA_BYTES },
});
