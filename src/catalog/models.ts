// The model catalogue: config/models.json, validated once against a typed schema (src/util/typed-schema.ts), turned into
// frozen, camelCase model objects with every price converted to exact integers (micro-Ink).
// Everything the gateway knows about a model (limits, vendor id, rates) is read from here, so a
// price change is a config change and the published figures are checked by tests, not typed twice.
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { Compile, type Static } from '../util/typed-schema.js';
import {
  type ImageSize,
  type ModelsFile,
  ModelsFileSchema,
  type TextProtocol,
  type TextRatesEntry,
  VIDEO_PRICE_SETS,
  VIDEO_RESOLUTIONS,
  IMAGE_SIZES,
  type VideoAspectRatio,
  type VideoPriceSet,
  type VideoResolution,
} from './models-schema.js';
import { PROJECT_ROOT } from '../config/config.js';

export const MODELS_FILE = resolve(PROJECT_ROOT, 'config', 'models.json');

export {
  IMAGE_SIZES,
  type ImageSize,
  type TextProtocol,
  type VendorName,
  VIDEO_ASPECT_RATIOS,
  VIDEO_RESOLUTIONS,
  type VideoAspectRatio,
  type VideoPriceSet,
  type VideoResolution,
} from './models-schema.js';

const MICRO = 1_000_000;

const validator = Compile(ModelsFileSchema);

// ---------------------------------------------------------------------------------------------
// The model objects the rest of the program uses

export interface VideoModel {
  readonly type: 'video';
  readonly id: string;
  readonly aliases: readonly string[];
  readonly label: string;
  readonly listed: boolean;
  readonly vendor: 'ark';
  readonly vendorModel: string;
  readonly endpoint: '/v1/video/generations';
  readonly resolutions: readonly VideoResolution[];
  readonly aspectRatios: readonly VideoAspectRatio[];
  /** Highest resolution allowed with an aspect ratio; null when the model has no such ceiling. */
  readonly resolutionCeilingByAspect: Readonly<Partial<Record<VideoAspectRatio, VideoResolution>>> | null;
  readonly durationSeconds: Readonly<{ min: number; max: number }>;
  readonly references: Readonly<{ total: number; images: number; videos: number; audio: number }>;
  /** clip-2.0 family: an audio reference needs an image or video reference beside it. */
  readonly audioNeedsVisualReference: boolean;
  /** Precise rates in integer micro-Ink per second, per price set, for exactly the offered resolutions. */
  readonly microInkPerSecond: Readonly<Record<VideoPriceSet, Readonly<Partial<Record<VideoResolution, number>>>>>;
}

/** Ink per million tokens; tokens x rate is exactly micro-Ink. */
export interface TextRates {
  readonly input: number;
  readonly output: number;
  readonly cacheRead: number;
  readonly cacheWrite: number;
}

export interface TextModel {
  readonly type: 'text';
  readonly id: string;
  readonly aliases: readonly string[];
  readonly label: string;
  readonly vendorLabel: string;
  readonly listed: boolean;
  readonly vendor: 'anthropic' | 'openai';
  readonly vendorModel: string;
  readonly endpoint: '/v1/responses' | '/v1/messages';
  readonly protocol: TextProtocol;
  readonly rates: TextRates;
  /** When the whole prompt is above `aboveInputTokens`, every bucket bills at `rates`. */
  readonly longContext: Readonly<{ aboveInputTokens: number; rates: TextRates }> | null;
  /** Reservation floor for the output part of a hold (Responses: 32,768); 0 when none. */
  readonly holdOutputFloorTokens: number;
  readonly constraints: Readonly<{
    maxInputTokens: number;
    /** null: the protocol requires the client to send a cap (Messages `max_tokens`). */
    defaultMaxOutputTokens: number | null;
    maxOutputTokens: number;
    images: boolean;
    streaming: boolean;
  }>;
}

export interface ImageModel {
  readonly type: 'image';
  readonly id: string;
  readonly aliases: readonly string[];
  readonly label: string;
  readonly listed: boolean;
  readonly vendor: 'gemini';
  readonly vendorModel: string;
  readonly endpoint: '/v1/images/generations';
  readonly sizes: readonly ImageSize[];
  readonly defaultSize: ImageSize;
  readonly aspectRatios: readonly string[];
  readonly defaultAspectRatio: string;
  readonly maxReferenceImages: number;
  /** Whole Ink per image, per offered size. */
  readonly inkPerImage: Readonly<Partial<Record<ImageSize, number>>>;
}

export type CatalogModel = VideoModel | TextModel | ImageModel;

export interface Catalog {
  /** Every model in config order (video, text, image), listed or not. */
  readonly models: readonly CatalogModel[];
  /** Listed models only: what `GET /v1/models` shows. */
  readonly listed: readonly CatalogModel[];
  /** Id or alias to the canonical id; undefined when unknown. */
  resolveId(idOrAlias: string): string | undefined;
  /** Id or alias to the model; undefined when unknown. */
  get(idOrAlias: string): CatalogModel | undefined;
  video(idOrAlias: string): VideoModel | undefined;
  /** A text model, optionally only one that speaks `protocol` (a lane asks for its own). */
  text(idOrAlias: string, protocol?: TextProtocol): TextModel | undefined;
  image(idOrAlias: string): ImageModel | undefined;
  /** The first listed-or-not text model speaking `protocol` (the Responses lane's default model). */
  firstText(protocol: TextProtocol): TextModel | undefined;
}

/**
 * Parses an exact decimal string ("10.225") into integer micro-units without floats.
 * The schema has already bounded it to six integer and six fractional digits.
 */
export function decimalToMicro(decimal: string): number {
  const dot = decimal.indexOf('.');
  const whole = dot === -1 ? decimal : decimal.slice(0, dot);
  const frac = dot === -1 ? '' : decimal.slice(dot + 1);
  if (!/^[0-9]{1,6}$/.test(whole) || !/^[0-9]{0,6}$/.test(frac)) throw new RangeError(`not an exact decimal with at most 6 places: ${JSON.stringify(decimal)}`);
  return Number(whole) * MICRO + Number(frac.padEnd(6, '0'));
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value)) deepFreeze(v);
  }
  return value;
}

const textRates = (rates: Static<typeof TextRatesEntry>): TextRates => ({
  input: rates.input,
  output: rates.output,
  cacheRead: rates.cache_read,
  cacheWrite: rates.cache_write,
});

const PROTOCOL_ENDPOINT: Record<TextProtocol, string> = {
  'openai-responses': '/v1/responses',
  'anthropic-messages': '/v1/messages',
};

/**
 * Validates a parsed models file (schema, then the cross-field rules the schema cannot say) and
 * builds the frozen catalogue. Every problem is listed; a bad catalogue never half-loads.
 */
export function parseCatalog(raw: unknown, source = 'models.json'): Catalog {
  if (!validator.Check(raw)) {
    const problems = [...validator.Errors(raw)].slice(0, 50).map((e) => `${e.instancePath || '/'} ${e.message}`);
    throw new Error(`catalog: ${source} is invalid:\n  ${problems.join('\n  ')}`);
  }
  const file = raw as ModelsFile;
  const problems: string[] = [];
  const models: CatalogModel[] = [
    ...file.video.map((v, i) => videoModel(v, `/video/${i} (${v.id})`, problems)),
    ...file.text.map((t, i) => textModel(t, `/text/${i} (${t.id})`, problems)),
    ...file.image.map((m, i) => imageModel(m, `/image/${i} (${m.id})`, problems)),
  ];
  const byName = namesOf(models, problems);
  if (problems.length > 0) throw new Error(`catalog: ${source} is invalid:\n  ${problems.join('\n  ')}`);
  return catalogOf(models, byName);
}

/** The fields every product's entry maps the same way (a video entry has no aliases). */
function entryHead<V extends string, P extends string>(entry: {
  id: string;
  aliases?: readonly string[];
  label: string;
  listed: boolean;
  vendor: V;
  vendor_model: string;
  endpoint: P;
}) {
  return {
    id: entry.id,
    aliases: [...(entry.aliases ?? [])],
    label: entry.label,
    listed: entry.listed,
    vendor: entry.vendor,
    vendorModel: entry.vendor_model,
    endpoint: entry.endpoint,
  };
}

/** A video entry of the file as a model; what is wrong with it is pushed onto `problems`. */
function videoModel(entry: ModelsFile['video'][number], location: string, problems: string[]): VideoModel {
  const microInkPerSecond = {} as Record<VideoPriceSet, Partial<Record<VideoResolution, number>>>;
  for (const set of VIDEO_PRICE_SETS) {
    const table = entry.ink_per_second[set];
    const out: Partial<Record<VideoResolution, number>> = {};
    for (const res of VIDEO_RESOLUTIONS) {
      const dec = table[res];
      const offered = entry.resolutions.includes(res);
      if (offered && dec === undefined) problems.push(`${location} ink_per_second.${set} lacks offered resolution ${res}`);
      if (!offered && dec !== undefined) problems.push(`${location} ink_per_second.${set} prices ${res}, which is not offered`);
      if (offered && dec !== undefined) {
        const micro = decimalToMicro(dec);
        if (micro <= 0) problems.push(`${location} ink_per_second.${set}.${res} must be above 0`);
        out[res] = micro;
      }
    }
    microInkPerSecond[set] = out;
  }
  const ceiling = entry.resolution_ceiling_by_aspect;
  if (ceiling) {
    for (const [aspect, res] of Object.entries(ceiling)) {
      if (!entry.aspect_ratios.includes(aspect as VideoAspectRatio)) problems.push(`${location} ceiling names aspect ${aspect}, which is not offered`);
      if (res !== undefined && !entry.resolutions.includes(res)) problems.push(`${location} ceiling for ${aspect} is ${res}, which is not offered`);
    }
  }
  if (entry.duration_seconds.min < 1 || entry.duration_seconds.min > entry.duration_seconds.max)
    problems.push(`${location} duration_seconds needs 1 <= min <= max`);
  const refs = entry.references;
  if (refs.images > refs.total || refs.videos > refs.total || refs.audio > refs.total) problems.push(`${location} a per-kind reference cap is above the total`);
  return {
    type: 'video',
    ...entryHead(entry),
    resolutions: VIDEO_RESOLUTIONS.filter((r) => entry.resolutions.includes(r)),
    aspectRatios: [...entry.aspect_ratios],
    resolutionCeilingByAspect: ceiling && Object.keys(ceiling).length > 0 ? { ...ceiling } : null,
    durationSeconds: { ...entry.duration_seconds },
    references: { ...refs },
    audioNeedsVisualReference: entry.audio_needs_visual_reference,
    microInkPerSecond,
  };
}

/** A text entry of the file as a model; what is wrong with it is pushed onto `problems`. */
function textModel(entry: ModelsFile['text'][number], location: string, problems: string[]): TextModel {
  if (PROTOCOL_ENDPOINT[entry.protocol] !== entry.endpoint)
    problems.push(`${location} protocol ${entry.protocol} is served on ${PROTOCOL_ENDPOINT[entry.protocol]}, not ${entry.endpoint}`);
  const rates = textRates(entry.ink_per_million_tokens);
  // Holds count the whole prompt at the cache-write rate; that covers any split of the prompt
  // into input / cache read / cache write only if cache write is the dearest prompt bucket.
  const checkHoldable = (tierRates: TextRates, where: string) => {
    if (tierRates.cacheWrite < tierRates.input || tierRates.cacheWrite < tierRates.cacheRead)
      problems.push(`${location} ${where}: cache_write must be the highest prompt rate (holds count the prompt as cache writes)`);
  };
  checkHoldable(rates, 'ink_per_million_tokens');
  let longContext: TextModel['longContext'] = null;
  if (entry.long_context) {
    const lr = textRates(entry.long_context.ink_per_million_tokens);
    checkHoldable(lr, 'long_context');
    if (lr.input < rates.input || lr.output < rates.output || lr.cacheRead < rates.cacheRead || lr.cacheWrite < rates.cacheWrite) {
      problems.push(`${location} long_context rates must not be below the base rates (a hold priced at the lower tier must cover the charge)`);
    }
    if (entry.long_context.above_input_tokens >= entry.constraints.max_input_tokens)
      problems.push(`${location} long_context.above_input_tokens must be below max_input_tokens`);
    longContext = { aboveInputTokens: entry.long_context.above_input_tokens, rates: lr };
  }
  const c = entry.constraints;
  if (c.default_max_output_tokens !== null && c.default_max_output_tokens > c.max_output_tokens)
    problems.push(`${location} default_max_output_tokens above max_output_tokens`);
  if (entry.hold_output_floor_tokens > c.max_output_tokens) problems.push(`${location} hold_output_floor_tokens above max_output_tokens`);
  return {
    type: 'text',
    ...entryHead(entry),
    vendorLabel: entry.vendor_label,
    protocol: entry.protocol,
    rates,
    longContext,
    holdOutputFloorTokens: entry.hold_output_floor_tokens,
    constraints: {
      maxInputTokens: c.max_input_tokens,
      defaultMaxOutputTokens: c.default_max_output_tokens,
      maxOutputTokens: c.max_output_tokens,
      images: c.images,
      streaming: c.streaming,
    },
  };
}

/** An image entry of the file as a model; what is wrong with it is pushed onto `problems`. */
function imageModel(entry: ModelsFile['image'][number], location: string, problems: string[]): ImageModel {
  const inkPerImage: Partial<Record<ImageSize, number>> = {};
  for (const size of IMAGE_SIZES) {
    const ink = entry.ink_per_image[size];
    const offered = entry.sizes.includes(size);
    if (offered && ink === undefined) problems.push(`${location} ink_per_image lacks offered size ${size}`);
    if (!offered && ink !== undefined) problems.push(`${location} ink_per_image prices ${size}, which is not offered`);
    if (offered && ink !== undefined) inkPerImage[size] = ink;
  }
  if (!entry.sizes.includes(entry.default_size)) problems.push(`${location} default_size is not offered`);
  if (!entry.aspect_ratios.includes(entry.default_aspect_ratio)) problems.push(`${location} default_aspect_ratio is not offered`);
  return {
    type: 'image',
    ...entryHead(entry),
    sizes: IMAGE_SIZES.filter((s) => entry.sizes.includes(s)),
    defaultSize: entry.default_size,
    aspectRatios: [...entry.aspect_ratios],
    defaultAspectRatio: entry.default_aspect_ratio,
    maxReferenceImages: entry.max_reference_images,
    inkPerImage,
  };
}

/** One namespace for ids and aliases across every product: `GET /v1/models/{id}` resolves both. */
function namesOf(models: readonly CatalogModel[], problems: string[]): Map<string, CatalogModel> {
  const byName = new Map<string, CatalogModel>();
  for (const m of models) {
    for (const name of [m.id, ...m.aliases]) {
      const prior = byName.get(name);
      if (prior) problems.push(`name ${JSON.stringify(name)} is used by both ${prior.id} and ${m.id}`);
      else byName.set(name, m);
    }
  }
  return byName;
}

/** The frozen catalogue over checked models. */
function catalogOf(models: CatalogModel[], byName: ReadonlyMap<string, CatalogModel>): Catalog {
  deepFreeze(models);
  const listed = Object.freeze(models.filter((m) => m.listed));
  const get = (name: string): CatalogModel | undefined => byName.get(name);
  return Object.freeze({
    models: Object.freeze(models),
    listed,
    resolveId: (name: string) => byName.get(name)?.id,
    get,
    video: (name: string) => {
      const m = get(name);
      return m?.type === 'video' ? m : undefined;
    },
    text: (name: string, protocol?: TextProtocol) => {
      const m = get(name);
      return m?.type === 'text' && (protocol === undefined || m.protocol === protocol) ? m : undefined;
    },
    image: (name: string) => {
      const m = get(name);
      return m?.type === 'image' ? m : undefined;
    },
    firstText: (protocol: TextProtocol) => models.find((m): m is TextModel => m.type === 'text' && m.protocol === protocol),
  });
}

/** Reads and validates a models file (default: config/models.json). */
export function loadCatalog(path: string = MODELS_FILE): Catalog {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new Error(`catalog: cannot read ${path}: ${(err as Error).message}`);
  }
  return parseCatalog(raw, path);
}

let shared: Catalog | undefined;
/** The catalogue from config/models.json, loaded and validated on first use, then shared. */
export function defaultCatalog(): Catalog {
  shared ??= loadCatalog();
  return shared;
}
