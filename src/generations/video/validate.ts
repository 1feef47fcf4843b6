// Validation of a video submit body (spec "POST /v1/video/generations", "Video submit codes").
// Pure: no I/O (whether each URL is publicly fetchable is checked later, by submit.ts).
//
// Order of checks (the spec leaves it open; docs/api/video.md documents it). The first failure answers:
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
import type { Catalog, VideoAspectRatio, VideoModel, VideoResolution } from '../../catalog/models.js';
import { VIDEO_ASPECT_RATIOS, VIDEO_RESOLUTIONS } from '../../catalog/models.js';
import { ApiError } from '../../errors.js';
import { checkFetchUrl, MAX_URL_CHARS, parseClientUrl } from '../../net/ssrf-guard.js';

export const MAX_PROMPT_CHARS = 4000;
export const MAX_METADATA_BYTES = 4096;
export const DEFAULT_ASPECT_RATIO: VideoAspectRatio = '16:9';
export const DEFAULT_RESOLUTION: VideoResolution = '720p';
export const DEFAULT_DURATION_S = 5;
export const MIN_SEED = -1;
export const MAX_SEED = 2_147_483_647;

export const VIDEO_FIELDS = [
  'model', 'prompt', 'aspect_ratio', 'resolution', 'duration', 'generate_audio', 'seed',
  'first_frame_url', 'last_frame_url', 'reference_image_urls', 'reference_video_urls', 'reference_audio_urls', 'metadata',
] as const;
const KNOWN: ReadonlySet<string> = new Set(VIDEO_FIELDS);

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

export interface CheckedUrl {
  /** The field, with its index for list elements (`reference_image_urls[2]`). */
  readonly param: string;
  readonly url: URL;
}

export interface ValidatedVideo {
  readonly request: NormalisedVideoRequest;
  readonly model: VideoModel;
  /** Every URL of the request, in field order: each must be fetched once before admission. */
  readonly urls: readonly CheckedUrl[];
}

export interface ValidateOptions {
  /** TEST ONLY: "host:port" pairs exempt from the public-host rule (as safeFetch's allowList). */
  readonly allowList?: ReadonlySet<string>;
}

const REF_LISTS = [
  ['reference_image_urls', 'images'],
  ['reference_video_urls', 'videos'],
  ['reference_audio_urls', 'audio'],
] as const;

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const bad = (code: ConstructorParameters<typeof ApiError>[0], param: string, message: string) => new ApiError(code, { param, message });

/** Characters as the user sees them: code points, not UTF-16 units. */
function charCount(s: string, stopAbove: number): number {
  if (s.length <= stopAbove) return s.length; // code points <= UTF-16 units
  let n = 0;
  for (const _ of s) if (++n > stopAbove) return n;
  return n;
}

/** A client URL: https, no credentials, <= 2,048 characters, public host (unless allow-listed for tests). */
/**
 * `param` names the field (`reference_image_urls`); `label` names the element in messages
 * (`reference_image_urls[2]`), so a client learns which URL without `param` leaving the field names.
 */
export function parseUrlField(raw: unknown, param: string, allowList: ReadonlySet<string> | undefined, label = param): URL {
  if (typeof raw !== 'string') throw bad('invalid_type', param, `\`${label}\` must be a string (an https URL).`);
  if (raw.length > MAX_URL_CHARS) throw bad('too_long', param, `\`${label}\` is longer than ${MAX_URL_CHARS} characters.`);
  if (allowList !== undefined && allowList.size > 0) {
    let u: URL | undefined;
    try {
      u = new URL(raw);
    } catch {
      u = undefined;
    }
    const host = u?.hostname.startsWith('[') ? u.hostname.slice(1, -1) : u?.hostname;
    if (u !== undefined && allowList.has(`${host}:${u.port === '' ? 443 : u.port}`)) {
      const authority = raw.slice(raw.indexOf('//') + 2).split(/[/\\?#]/, 1)[0] ?? '';
      if (authority.includes('@')) throw bad('invalid_url', param, `\`${label}\`: the URL must not carry credentials`);
      checkFetchUrl(u, param, true);
      return u;
    }
  }
  return parseClientUrl(raw, param);
}

/** Validates and normalises a submit body; throws the first ApiError in the documented order. */
export function validateVideoRequest(body: Record<string, unknown>, catalog: Catalog, opts: ValidateOptions = {}): ValidatedVideo {
  // 1. model
  const modelId = body.model;
  const model = typeof modelId === 'string' ? catalog.video(modelId) : undefined;
  if (model === undefined || !model.listed) {
    throw bad('unknown_model', 'model', typeof modelId === 'string'
      ? `Unknown video model ${JSON.stringify(modelId.slice(0, 100))}; use one of the video model ids of GET /v1/models.`
      : '`model` is required: one of the video model ids of GET /v1/models.');
  }
  // 2. unknown fields
  for (const k of Object.keys(body)) {
    if (!KNOWN.has(k)) throw bad('unsupported_parameter', k, `\`${k.slice(0, 100)}\` is not a parameter of video generation in v1.`);
  }
  const given = (k: string): unknown => (body[k] === null ? undefined : body[k]);
  const request: NormalisedVideoRequest = {
    model: model.id,
    aspect_ratio: DEFAULT_ASPECT_RATIO,
    resolution: DEFAULT_RESOLUTION,
    duration: DEFAULT_DURATION_S,
    generate_audio: true,
  };

  // 3. prompt
  const prompt = given('prompt');
  if (prompt !== undefined) {
    if (typeof prompt !== 'string') throw bad('invalid_type', 'prompt', '`prompt` must be a string.');
    if (charCount(prompt, MAX_PROMPT_CHARS) > MAX_PROMPT_CHARS) throw bad('too_long', 'prompt', `\`prompt\` is longer than ${MAX_PROMPT_CHARS} characters.`);
    request.prompt = prompt;
  }

  // 4. aspect_ratio
  const aspect = given('aspect_ratio');
  if (aspect !== undefined) {
    if (typeof aspect !== 'string' || !(VIDEO_ASPECT_RATIOS as readonly string[]).includes(aspect) || !model.aspectRatios.includes(aspect as VideoAspectRatio)) {
      throw bad('invalid_enum', 'aspect_ratio', `\`aspect_ratio\` must be one of ${model.aspectRatios.join(', ')}.`);
    }
    request.aspect_ratio = aspect as VideoAspectRatio;
  }

  // 5. resolution
  const res = given('resolution');
  if (res !== undefined) {
    if (typeof res !== 'string' || !(VIDEO_RESOLUTIONS as readonly string[]).includes(res)) {
      throw bad('invalid_enum', 'resolution', `\`resolution\` must be one of ${VIDEO_RESOLUTIONS.join(', ')}.`);
    }
    request.resolution = res as VideoResolution;
  }
  if (!model.resolutions.includes(request.resolution)) {
    throw bad('unsupported_resolution', 'resolution', `${model.id} does not offer ${request.resolution}; it offers ${model.resolutions.join(', ')}.`);
  }
  const ceiling = model.resolutionCeilingByAspect?.[request.aspect_ratio];
  if (ceiling !== undefined && VIDEO_RESOLUTIONS.indexOf(request.resolution) > VIDEO_RESOLUTIONS.indexOf(ceiling)) {
    throw bad('unsupported_resolution', 'resolution', `${model.id} offers at most ${ceiling} with aspect ratio ${request.aspect_ratio}.`);
  }

  // 6. duration
  const dur = given('duration');
  if (dur !== undefined) {
    if (dur === 'auto' || dur === -1) throw bad('unsupported_parameter', 'duration', 'Automatic duration ("auto" or -1) is not offered in v1; send whole seconds.');
    const { min, max } = model.durationSeconds;
    if (typeof dur !== 'number' || !Number.isInteger(dur) || dur < min || dur > max) {
      throw bad('invalid_duration', 'duration', `\`duration\` must be a whole number of seconds from ${min} to ${max} for ${model.id}.`);
    }
    request.duration = dur;
  }

  // 7. generate_audio
  const audio = given('generate_audio');
  if (audio !== undefined) {
    if (typeof audio !== 'boolean') throw bad('invalid_type', 'generate_audio', '`generate_audio` must be a boolean.');
    request.generate_audio = audio;
  }

  // 8. seed
  const seed = given('seed');
  if (seed !== undefined) {
    if (typeof seed !== 'number' || !Number.isInteger(seed) || seed < MIN_SEED || seed > MAX_SEED) {
      throw bad('invalid_seed', 'seed', `\`seed\` must be an integer from ${MIN_SEED} to ${MAX_SEED}.`);
    }
    request.seed = seed;
  }

  // 9. frames
  const urls: CheckedUrl[] = [];
  for (const f of ['first_frame_url', 'last_frame_url'] as const) {
    const v = given(f);
    if (v === undefined) continue;
    const u = parseUrlField(v, f, opts.allowList);
    request[f] = u.href;
    urls.push({ param: f, url: u });
  }

  // 10. reference lists
  for (const [field, kind] of REF_LISTS) {
    const v = given(field);
    if (v === undefined) continue;
    if (!Array.isArray(v)) throw bad('invalid_type', field, `\`${field}\` must be an array of https URLs.`);
    const cap = model.references[kind];
    if (v.length > cap) throw bad('too_many', field, `\`${field}\` holds ${v.length} URLs; ${model.id} accepts at most ${cap}.`);
    if (v.length === 0) continue;
    const list: string[] = [];
    v.forEach((raw, i) => {
      const u = parseUrlField(raw, field, opts.allowList, `${field}[${i}]`);
      list.push(u.href);
      urls.push({ param: field, url: u });
    });
    request[field] = list;
  }

  // 11. metadata
  const meta = given('metadata');
  if (meta !== undefined) {
    if (!isObject(meta)) throw bad('invalid_type', 'metadata', '`metadata` must be a JSON object.');
    if (Buffer.byteLength(JSON.stringify(meta)) > MAX_METADATA_BYTES) throw bad('too_long', 'metadata', `\`metadata\` is larger than ${MAX_METADATA_BYTES} bytes of JSON.`);
    request.metadata = meta;
  }

  // 12-15: rules across fields
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
  if (model.audioNeedsVisualReference && request.reference_audio_urls !== undefined && request.reference_image_urls === undefined && request.reference_video_urls === undefined) {
    throw bad('reference_limit', 'reference_audio_urls', `${model.id} needs an image or video reference beside an audio reference.`);
  }
  const hasPrompt = request.prompt !== undefined && request.prompt.trim() !== '';
  if (!hasPrompt && request.first_frame_url === undefined && request.reference_image_urls === undefined && request.reference_video_urls === undefined) {
    throw bad('missing_prompt', 'prompt', '`prompt` is required unless a first frame or an image or video reference carries the intent.');
  }
  return { request, model, urls };
}

function countRefs(r: NormalisedVideoRequest): number {
  return (r.reference_image_urls?.length ?? 0) + (r.reference_video_urls?.length ?? 0) + (r.reference_audio_urls?.length ?? 0);
}
