// Validation of an image submit body (POST /v1/images/generations). Pure: no I/O (whether each
// reference URL is publicly fetchable is checked later, by submit.ts, as for video).
//
// Order of checks; the first failure answers (400, `param` names the field):
//   1. `model`                       unknown_model (missing, not a string, not an image model)
//   2. unknown top-level fields      unsupported_parameter (in body order; `n` among them: one image per request)
//   3. `prompt`                      invalid_type, too_long (> 8,000 characters)
//   4. `size`                        invalid_enum (1K, 2K, 4K; default 1K)
//   5. `aspect_ratio`                invalid_enum (the model's list; default 1:1)
//   6. `seed`                        invalid_seed (integer -1 to 2147483647; -1 = random)
//   7. `reference_image_urls`        invalid_type (not an array), too_many (> 14), then each element:
//                                    invalid_type, too_long (> 2,048), invalid_url (not https, credentials, private host)
//   8. `metadata`                    invalid_type (not an object), too_long (> 4 KiB of JSON)
//   9.                               missing_prompt (no prompt, or only white space)
// `null` is the same as leaving an optional field out; an empty reference list is the same as none.
import type { Catalog, ImageModel, ImageSize } from '../../catalog/models.js';
import { IMAGE_SIZES } from '../../catalog/models.js';
import { ApiError } from '../../errors.js';
import { MAX_METADATA_BYTES, MAX_SEED, MIN_SEED, parseUrlField, type CheckedUrl, type ValidateOptions } from '../video/validate.js';

/** Gemini takes ~65k input tokens; 8,000 characters keeps a prompt far inside that with 14 references. */
export const MAX_IMAGE_PROMPT_CHARS = 8000;
export const MAX_IMAGE_REFERENCES = 14;

export const IMAGE_FIELDS = ['model', 'prompt', 'size', 'aspect_ratio', 'reference_image_urls', 'seed', 'metadata'] as const;
const KNOWN: ReadonlySet<string> = new Set(IMAGE_FIELDS);

/** The request as accepted: defaults filled, URLs normalised, the list in the order given. */
export interface NormalisedImageRequest {
  model: string;
  prompt: string;
  size: ImageSize;
  aspect_ratio: string;
  seed?: number;
  reference_image_urls?: string[];
  metadata?: Record<string, unknown>;
}

export interface ValidatedImage {
  readonly request: NormalisedImageRequest;
  readonly model: ImageModel;
  /** Every reference URL, in order: each is fetched once before admission. */
  readonly urls: readonly CheckedUrl[];
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const bad = (code: ConstructorParameters<typeof ApiError>[0], param: string, message: string) => new ApiError(code, { param, message });

function charCount(s: string, stopAbove: number): number {
  if (s.length <= stopAbove) return s.length; // code points <= UTF-16 units
  let n = 0;
  for (const _ of s) if (++n > stopAbove) return n;
  return n;
}

export function validateImageRequest(body: Record<string, unknown>, catalog: Catalog, opts: ValidateOptions = {}): ValidatedImage {
  // 1. model
  const modelId = body.model;
  const model = typeof modelId === 'string' ? catalog.image(modelId) : undefined;
  if (model === undefined || !model.listed) {
    throw bad('unknown_model', 'model', typeof modelId === 'string'
      ? `Unknown image model ${JSON.stringify(modelId.slice(0, 100))}; use an image model id of GET /v1/models.`
      : '`model` is required: an image model id of GET /v1/models.');
  }
  // 2. unknown fields
  for (const k of Object.keys(body)) {
    if (!KNOWN.has(k)) {
      throw bad('unsupported_parameter', k, k === 'n'
        ? 'One request makes one image; `n` is not a parameter of image generation.'
        : `\`${k.slice(0, 100)}\` is not a parameter of image generation in v1.`);
    }
  }
  const given = (k: string): unknown => (body[k] === null ? undefined : body[k]);

  // 3. prompt
  const prompt = given('prompt');
  if (prompt !== undefined) {
    if (typeof prompt !== 'string') throw bad('invalid_type', 'prompt', '`prompt` must be a string.');
    if (charCount(prompt, MAX_IMAGE_PROMPT_CHARS) > MAX_IMAGE_PROMPT_CHARS) throw bad('too_long', 'prompt', `\`prompt\` is longer than ${MAX_IMAGE_PROMPT_CHARS} characters.`);
  }

  // 4. size
  let size = model.defaultSize;
  const sz = given('size');
  if (sz !== undefined) {
    if (typeof sz !== 'string' || !(IMAGE_SIZES as readonly string[]).includes(sz) || !model.sizes.includes(sz as ImageSize)) {
      throw bad('invalid_enum', 'size', `\`size\` must be one of ${model.sizes.join(', ')}.`);
    }
    size = sz as ImageSize;
  }

  // 5. aspect_ratio
  let aspect = model.defaultAspectRatio;
  const ar = given('aspect_ratio');
  if (ar !== undefined) {
    if (typeof ar !== 'string' || !model.aspectRatios.includes(ar)) {
      throw bad('invalid_enum', 'aspect_ratio', `\`aspect_ratio\` must be one of ${model.aspectRatios.join(', ')}.`);
    }
    aspect = ar;
  }
  const request: NormalisedImageRequest = { model: model.id, prompt: typeof prompt === 'string' ? prompt : '', size, aspect_ratio: aspect };

  // 6. seed
  const seed = given('seed');
  if (seed !== undefined) {
    if (typeof seed !== 'number' || !Number.isInteger(seed) || seed < MIN_SEED || seed > MAX_SEED) {
      throw bad('invalid_seed', 'seed', `\`seed\` must be an integer from ${MIN_SEED} to ${MAX_SEED}.`);
    }
    request.seed = seed;
  }

  // 7. reference_image_urls
  const urls: CheckedUrl[] = [];
  const refs = given('reference_image_urls');
  if (refs !== undefined) {
    const field = 'reference_image_urls';
    if (!Array.isArray(refs)) throw bad('invalid_type', field, `\`${field}\` must be an array of https URLs.`);
    const cap = Math.min(MAX_IMAGE_REFERENCES, model.maxReferenceImages);
    if (refs.length > cap) throw bad('too_many', field, `\`${field}\` holds ${refs.length} URLs; ${model.id} accepts at most ${cap}.`);
    if (refs.length > 0) {
      const list: string[] = [];
      refs.forEach((raw, i) => {
        const u = parseUrlField(raw, field, opts.allowList, `${field}[${i}]`);
        list.push(u.href);
        urls.push({ param: field, url: u });
      });
      request.reference_image_urls = list;
    }
  }

  // 8. metadata
  const meta = given('metadata');
  if (meta !== undefined) {
    if (!isObject(meta)) throw bad('invalid_type', 'metadata', '`metadata` must be a JSON object.');
    if (Buffer.byteLength(JSON.stringify(meta)) > MAX_METADATA_BYTES) throw bad('too_long', 'metadata', `\`metadata\` is larger than ${MAX_METADATA_BYTES} bytes of JSON.`);
    request.metadata = meta;
  }

  // 9. missing_prompt: an image always needs an instruction, references or not.
  if (request.prompt.trim() === '') throw bad('missing_prompt', 'prompt', '`prompt` is required: describe the image (and what to do with any references).');
  return { request, model, urls };
}
