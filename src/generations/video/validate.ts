// Validation of a video submit body (docs/api/video.md: the body and its codes).
// Pure: no I/O (whether each URL is publicly fetchable is checked later, by submit.ts).
//
// Order of checks (our decision, documented in docs/api/video.md). The first failure answers:
//   1. `model`                                   unknown_model (missing, not a string, unknown)
//   2. unknown top-level fields, in body order   unsupported_parameter
//   3. `prompt`                                  invalid_type, too_long (> 4,000 characters)
//   4. `aspect_ratio`                            invalid_enum
//   5. `resolution`                              invalid_enum, then unsupported_resolution (model, then ceiling by aspect)
//   6. `duration`                                unsupported_parameter ("auto", -1), invalid_duration
//   7. `generate_audio`                          invalid_type
//   8. `seed`                                    invalid_seed
//   9. `first_frame_url`, `last_frame_url`       invalid_type, too_long, invalid_url
//  10. `reference_image_urls`, `_video_`, `_audio_` invalid_type (not an array), too_many (per-kind cap),
//                                               then each element: invalid_type, too_long, invalid_url
//  11. `metadata`                               invalid_type, too_long (> 4 KiB of JSON)
//  12. missing_first_frame, 13. conflicting_references, 14. reference_limit (total, then audio anchor),
//  15. missing_prompt.
// `null` is the same as leaving an optional field out; an empty reference list is the same as none.
// An error on a list element names the element in `param` (`reference_image_urls[2]`).
import type { Catalog, VideoAspectRatio, VideoModel, VideoResolution } from '../../catalog/models.js';
import { VIDEO_RESOLUTIONS } from '../../catalog/models.js';
import { checkField } from '../../util/request-fields.js';
import {
  bad,
  givenIn,
  parseMetadata,
  parseModelChoice,
  parsePrompt,
  parseSeed,
  parseUrlField,
  parseUrlList,
  refuseUnknownFields,
  requireModel,
  type CheckedUrl,
  type Validated,
  type ValidateOptions,
} from '../fields.js';
import { VIDEO_REQUEST_FIELDS as F } from './request-fields.js';

export const DEFAULT_ASPECT_RATIO: VideoAspectRatio = '16:9';
export const DEFAULT_RESOLUTION: VideoResolution = '720p';
export const DEFAULT_DURATION_S = 5;

/** The fields of the table (request-fields.ts); any other is refused. */
const KNOWN: ReadonlySet<string> = new Set(Object.keys(F));

/** The request as accepted: defaults filled, URLs normalised, lists in the order given. */
export interface NormalisedVideoRequest {
  model: string;
  prompt?: string;
  aspect_ratio: VideoAspectRatio;
  resolution: VideoResolution;
  duration: number;
  generate_audio: boolean;
  seed?: number;
  first_frame_url?: string;
  last_frame_url?: string;
  reference_image_urls?: string[];
  reference_video_urls?: string[];
  reference_audio_urls?: string[];
  metadata?: Record<string, unknown>;
}

export type ValidatedVideo = Validated<NormalisedVideoRequest, VideoModel>;

const REF_LISTS = [
  ['reference_image_urls', 'images'],
  ['reference_video_urls', 'videos'],
  ['reference_audio_urls', 'audio'],
] as const;

type Given = (field: string) => unknown;

/** Validates and normalises a submit body; throws the first ApiError in the documented order. */
export function validateVideoRequest(body: Record<string, unknown>, catalog: Catalog, opts: ValidateOptions = {}): ValidatedVideo {
  const model = requireModel(body.model, (id) => catalog.video(id), 'video model', 'one of the video model ids');
  refuseUnknownFields(body, KNOWN, (k) => `\`${k.slice(0, 100)}\` is not a parameter of video generation in v1.`);
  const given = givenIn(body);
  const request: NormalisedVideoRequest = {
    model: model.id,
    aspect_ratio: DEFAULT_ASPECT_RATIO,
    resolution: DEFAULT_RESOLUTION,
    duration: DEFAULT_DURATION_S,
    generate_audio: true,
  };
  const prompt = parsePrompt(given('prompt'), F.prompt);
  if (prompt !== undefined) request.prompt = prompt;
  shapeFields(model, given, request);
  const seed = parseSeed(given('seed'), F.seed);
  if (seed !== undefined) request.seed = seed;
  const urls = urlFields(model, given, request, opts.allowList);
  const meta = parseMetadata(given('metadata'), F.metadata);
  if (meta !== undefined) request.metadata = meta;
  crossFieldRules(model, request);
  return { request, model, urls };
}

/** Checks 4 to 7: aspect ratio, resolution (and the model's ceiling for the aspect), duration, audio. */
function shapeFields(model: VideoModel, given: Given, request: NormalisedVideoRequest): void {
  const aspect = parseModelChoice(given('aspect_ratio'), 'aspect_ratio', F.aspect_ratio, model.aspectRatios);
  if (aspect !== undefined) request.aspect_ratio = aspect;
  const res = given('resolution');
  if (res !== undefined) {
    checkField('resolution', F.resolution, res, () => `\`resolution\` must be one of ${F.resolution.enum.join(', ')}.`);
    request.resolution = res as VideoResolution;
  }
  if (!model.resolutions.includes(request.resolution)) {
    throw bad('unsupported_resolution', 'resolution', `${model.id} does not offer ${request.resolution}; it offers ${model.resolutions.join(', ')}.`);
  }
  const ceiling = model.resolutionCeilingByAspect?.[request.aspect_ratio];
  if (ceiling !== undefined && VIDEO_RESOLUTIONS.indexOf(request.resolution) > VIDEO_RESOLUTIONS.indexOf(ceiling)) {
    throw bad('unsupported_resolution', 'resolution', `${model.id} offers at most ${ceiling} with aspect ratio ${request.aspect_ratio}.`);
  }
  const dur = given('duration');
  if (dur !== undefined) {
    if (dur === 'auto' || dur === -1)
      throw bad('unsupported_parameter', 'duration', 'Automatic duration ("auto" or -1) is not offered in v1; send whole seconds.');
    const { min, max } = model.durationSeconds;
    const range = () => `\`duration\` must be a whole number of seconds from ${min} to ${max} for ${model.id}.`;
    checkField('duration', F.duration, dur, range);
    if ((dur as number) < min || (dur as number) > max) throw bad(F.duration.code, 'duration', range());
    request.duration = dur as number;
  }
  const audio = given('generate_audio');
  if (audio !== undefined) {
    checkField('generate_audio', F.generate_audio, audio);
    request.generate_audio = audio as boolean;
  }
}

/** Checks 9 and 10: the frames, then the reference lists; every URL in field order. */
function urlFields(model: VideoModel, given: Given, request: NormalisedVideoRequest, allowList: ReadonlySet<string> | undefined): CheckedUrl[] {
  const urls: CheckedUrl[] = [];
  for (const f of ['first_frame_url', 'last_frame_url'] as const) {
    const v = given(f);
    if (v === undefined) continue;
    checkField(f, F[f], v);
    const u = parseUrlField(v, f, allowList);
    request[f] = u.href;
    urls.push({ param: f, url: u });
  }
  for (const [field, kind] of REF_LISTS) {
    const list = parseUrlList(given(field), field, F[field], model.references[kind], model.id, allowList, urls);
    if (list !== undefined) request[field] = list;
  }
  return urls;
}

/** Checks 12 to 15: the rules across fields. */
function crossFieldRules(model: VideoModel, request: NormalisedVideoRequest): void {
  if (request.last_frame_url !== undefined && request.first_frame_url === undefined) {
    throw bad('missing_first_frame', 'last_frame_url', '`last_frame_url` requires `first_frame_url`.');
  }
  const firstList = REF_LISTS.find(([f]) => request[f] !== undefined)?.[0];
  if (firstList !== undefined && request.first_frame_url !== undefined) {
    throw bad('conflicting_references', firstList, 'Frames (`first_frame_url`, `last_frame_url`) and `reference_*` lists cannot be combined in one request.');
  }
  let total = 0;
  for (const [field] of REF_LISTS) {
    total += request[field]?.length ?? 0;
    if (total > model.references.total) {
      throw bad('reference_limit', field, `${model.id} accepts at most ${model.references.total} references in total; this request has ${countRefs(request)}.`);
    }
  }
  if (
    model.audioNeedsVisualReference &&
    request.reference_audio_urls !== undefined &&
    request.reference_image_urls === undefined &&
    request.reference_video_urls === undefined
  ) {
    throw bad('reference_limit', 'reference_audio_urls', `${model.id} needs an image or video reference beside an audio reference.`);
  }
  const hasPrompt = request.prompt !== undefined && request.prompt.trim() !== '';
  if (!hasPrompt && request.first_frame_url === undefined && request.reference_image_urls === undefined && request.reference_video_urls === undefined) {
    throw bad('missing_prompt', 'prompt', '`prompt` is required unless a first frame or an image or video reference carries the intent.');
  }
}

function countRefs(request: NormalisedVideoRequest): number {
  return (request.reference_image_urls?.length ?? 0) + (request.reference_video_urls?.length ?? 0) + (request.reference_audio_urls?.length ?? 0);
}
