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
// An error on a list element names the element in `param` (`reference_image_urls[2]`).
import type { Catalog, ImageModel, ImageSize } from '../../catalog/models.js';
import {
  bad,
  givenIn,
  parseMetadata,
  parseModelChoice,
  parsePrompt,
  parseSeed,
  parseUrlList,
  refuseUnknownFields,
  requireModel,
  type CheckedUrl,
  type Validated,
  type ValidateOptions,
} from '../fields.js';
import { IMAGE_REQUEST_FIELDS as F, MAX_IMAGE_PROMPT_CHARS } from './request-fields.js';

export { MAX_IMAGE_PROMPT_CHARS };

/** The fields of the table (request-fields.ts); any other is refused. */
const KNOWN: ReadonlySet<string> = new Set(Object.keys(F));

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

export type ValidatedImage = Validated<NormalisedImageRequest, ImageModel>;

export function validateImageRequest(body: Record<string, unknown>, catalog: Catalog, opts: ValidateOptions = {}): ValidatedImage {
  const model = requireModel(body.model, (id) => catalog.image(id), 'image model', 'an image model id');
  refuseUnknownFields(body, KNOWN, (field) =>
    field === 'n'
      ? 'One request makes one image; `n` is not a parameter of image generation.'
      : `\`${field.slice(0, 100)}\` is not a parameter of image generation in v1.`,
  );
  const given = givenIn(body);
  const prompt = parsePrompt(given('prompt'), F.prompt);

  const size = parseModelChoice(given('size'), 'size', F.size, model.sizes) ?? model.defaultSize;
  const aspect = parseModelChoice(given('aspect_ratio'), 'aspect_ratio', F.aspect_ratio, model.aspectRatios) ?? model.defaultAspectRatio;
  const request: NormalisedImageRequest = { model: model.id, prompt: prompt ?? '', size, aspect_ratio: aspect };

  const seed = parseSeed(given('seed'), F.seed);
  if (seed !== undefined) request.seed = seed;
  const urls: CheckedUrl[] = [];
  // The row's maxItems bounds the model's own cap.
  const refs = parseUrlList(
    given('reference_image_urls'),
    'reference_image_urls',
    F.reference_image_urls,
    model.maxReferenceImages,
    model.id,
    opts.allowList,
    urls,
  );
  if (refs !== undefined) request.reference_image_urls = refs;
  const meta = parseMetadata(given('metadata'), F.metadata);
  if (meta !== undefined) request.metadata = meta;

  // An image always needs an instruction, references or not (the table's required prompt).
  if (F.prompt.required && request.prompt.trim() === '')
    throw bad('missing_prompt', 'prompt', '`prompt` is required: describe the image (and what to do with any references).');
  return { request, model, urls };
}
