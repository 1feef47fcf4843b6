// Public model cards (`GET /v1/models`, `GET /v1/models/{id}`), shaped as docs/api/models.md's card tables.
// Everything but `available` is computed once per price set when the builder is made; a request
// only copies the precomputed parts into a fresh top-level object with the live `available` flag.
import type { Catalog, CatalogModel, ImageModel, TextModel, TextRates, VideoModel, VideoPriceSet, VideoResolution } from './models.js';
import { imageInk, inkToUsd, videoClipInk, videoDisplayInkPerSecond } from './pricing.js';

export interface InkUsd {
  readonly ink: number;
  readonly usd_payg: number;
}

export interface VideoCard {
  id: string;
  object: 'model';
  type: 'video';
  label: string;
  endpoint: string;
  available: boolean;
  pricing: {
    unit: 'second';
    ink_per_second: Partial<Record<VideoResolution, number>>;
    usd_payg_per_second: Partial<Record<VideoResolution, number>>;
    ink_per_5_second_clip: Partial<Record<VideoResolution, number>>;
    note: string;
  };
  constraints: {
    resolutions: string[];
    aspect_ratios: string[];
    resolution_ceiling_by_aspect?: Record<string, string>;
    duration_seconds: { min: number; max: number };
    references: { total: number; images: number; videos: number; audio: number };
  };
}

export interface TextCard {
  id: string;
  object: 'model';
  type: 'text';
  aliases: string[];
  label: string;
  vendor_label: string;
  endpoint: string;
  protocol: string;
  available: boolean;
  pricing: {
    unit: '1M tokens';
    input: InkUsd;
    output: InkUsd;
    cache_read: InkUsd;
    cache_write: InkUsd;
    note: string;
    long_context?: { above_input_tokens: number; input: InkUsd; output: InkUsd; cache_read: InkUsd; cache_write: InkUsd };
  };
  constraints: {
    max_input_tokens: number;
    default_max_output_tokens: number | null;
    max_output_tokens: number;
    images: boolean;
    streaming: boolean;
  };
}

export interface ImageCard {
  id: string;
  object: 'model';
  type: 'image';
  aliases: string[];
  label: string;
  endpoint: string;
  available: boolean;
  pricing: {
    unit: 'image';
    ink_per_image: Record<string, number>;
    usd_payg_per_image: Record<string, number>;
    note: string;
  };
  constraints: {
    sizes: string[];
    default_size: string;
    aspect_ratios: string[];
    default_aspect_ratio: string;
    max_reference_images: number;
    images_per_request: 1;
  };
}

export type ModelCard = VideoCard | TextCard | ImageCard;
export interface ModelList {
  object: 'list';
  data: ModelCard[];
}

/** Whether a model can be used right now (lane certified and configured, model not paused). */
export type AvailabilityFn = (modelId: string) => boolean;

export const VIDEO_PRICING_NOTE =
  'Charged for the seconds delivered (never more than requested) at the requested resolution, rounded up to whole Ink once per clip; the requested duration is held at submit.';
export const MESSAGES_PRICING_NOTE =
  'Holds the prompt as cache writes plus max_tokens at the output rate; settles to the vendor-reported usage with each bucket at its own rate (cache writes at the 1-hour rate), rounded up to whole Ink once per request.';
export const RESPONSES_PRICING_NOTE =
  'Holds the prompt as cache writes plus max_output_tokens (at least 32,768) at the output rate of its tier; settles to the vendor-reported usage, rounded up to whole Ink once per request; a prompt (input, cache read and cache write together) above the long-context threshold bills every bucket at the long-context rates.';
export const IMAGE_PRICING_NOTE = 'One image per request at a fixed price per output size; the price is held at submit and refunded if the generation fails.';

const inkUsd = (ink: number): InkUsd => ({ ink, usd_payg: inkToUsd(ink) });

const ratesCard = (rates: TextRates) => ({
  input: inkUsd(rates.input),
  output: inkUsd(rates.output),
  cache_read: inkUsd(rates.cacheRead),
  cache_write: inkUsd(rates.cacheWrite),
});

/** Everything on a card except `available`, built once. */
type StaticCard = Omit<VideoCard, 'available'> | Omit<TextCard, 'available'> | Omit<ImageCard, 'available'>;

function videoStatic(model: VideoModel, priceSet: VideoPriceSet): Omit<VideoCard, 'available'> {
  const inkPerSecond: Partial<Record<VideoResolution, number>> = {};
  const usdPerSecond: Partial<Record<VideoResolution, number>> = {};
  const clip: Partial<Record<VideoResolution, number>> = {};
  for (const res of model.resolutions) {
    const display = videoDisplayInkPerSecond(model, res, priceSet);
    inkPerSecond[res] = display;
    // The displayed Ink figure divided by 100, computed from integer tenths so it prints exactly.
    usdPerSecond[res] = Math.round(display * 10) / 1000;
    clip[res] = videoClipInk(model, res, 5, priceSet);
  }
  // The cards' field order (docs/api/models.md): a ceiling, when the model has one, sits between aspect_ratios and duration_seconds.
  const constraints: VideoCard['constraints'] = {
    resolutions: [...model.resolutions],
    aspect_ratios: [...model.aspectRatios],
    ...(model.resolutionCeilingByAspect !== null ? { resolution_ceiling_by_aspect: { ...(model.resolutionCeilingByAspect as Record<string, string>) } } : {}),
    duration_seconds: { ...model.durationSeconds },
    references: { ...model.references },
  };
  return {
    id: model.id,
    object: 'model',
    type: 'video',
    label: model.label,
    endpoint: model.endpoint,
    pricing: { unit: 'second', ink_per_second: inkPerSecond, usd_payg_per_second: usdPerSecond, ink_per_5_second_clip: clip, note: VIDEO_PRICING_NOTE },
    constraints,
  };
}

function textStatic(model: TextModel): Omit<TextCard, 'available'> {
  const pricing: TextCard['pricing'] = {
    unit: '1M tokens',
    ...ratesCard(model.rates),
    note: model.protocol === 'openai-responses' ? RESPONSES_PRICING_NOTE : MESSAGES_PRICING_NOTE,
  };
  if (model.longContext !== null) pricing.long_context = { above_input_tokens: model.longContext.aboveInputTokens, ...ratesCard(model.longContext.rates) };
  const c = model.constraints;
  return {
    id: model.id,
    object: 'model',
    type: 'text',
    aliases: [...model.aliases],
    label: model.label,
    vendor_label: model.vendorLabel,
    endpoint: model.endpoint,
    protocol: model.protocol,
    pricing,
    constraints: {
      max_input_tokens: c.maxInputTokens,
      default_max_output_tokens: c.defaultMaxOutputTokens,
      max_output_tokens: c.maxOutputTokens,
      images: c.images,
      streaming: c.streaming,
    },
  };
}

function imageStatic(model: ImageModel): Omit<ImageCard, 'available'> {
  const ink: Record<string, number> = {};
  const usd: Record<string, number> = {};
  for (const size of model.sizes) {
    ink[size] = imageInk(size, model);
    usd[size] = inkToUsd(ink[size]);
  }
  return {
    id: model.id,
    object: 'model',
    type: 'image',
    aliases: [...model.aliases],
    label: model.label,
    endpoint: model.endpoint,
    pricing: { unit: 'image', ink_per_image: ink, usd_payg_per_image: usd, note: IMAGE_PRICING_NOTE },
    constraints: {
      sizes: [...model.sizes],
      default_size: model.defaultSize,
      aspect_ratios: [...model.aspectRatios],
      default_aspect_ratio: model.defaultAspectRatio,
      max_reference_images: model.maxReferenceImages,
      images_per_request: 1,
    },
  };
}

function staticCard(model: CatalogModel, priceSet: VideoPriceSet): StaticCard {
  switch (model.type) {
    case 'video':
      return videoStatic(model, priceSet);
    case 'text':
      return textStatic(model);
    case 'image':
      return imageStatic(model);
  }
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value)) deepFreeze(v);
  }
  return value;
}

/** Places `available` where docs/api/models.md's tables put it (after endpoint / protocol), on a fresh object. */
function withAvailable(card: StaticCard, available: boolean): ModelCard {
  const { pricing, constraints, ...head } = card;
  return { ...head, available, pricing, constraints } as ModelCard;
}

/** Builds one card (not precomputed; for tests and one-off use). */
export function modelCard(model: CatalogModel, priceSet: VideoPriceSet, available: boolean): ModelCard {
  return withAvailable(staticCard(model, priceSet), available);
}

export interface CardBuilder {
  /** `{object: 'list', data}` of the listed models, in catalogue order. */
  list(available: AvailabilityFn): ModelList;
  /** The card for an id or alias of a listed model; undefined answers 404 `model_not_found`. */
  get(idOrAlias: string, available: AvailabilityFn): ModelCard | undefined;
}

/**
 * Precomputes every listed model's card for the deployment's video price set. The returned cards
 * share frozen `pricing` / `constraints` objects; callers serialise them, never mutate them.
 */
export function createCardBuilder(catalog: Catalog, priceSet: VideoPriceSet): CardBuilder {
  const statics = new Map<string, StaticCard>();
  for (const m of catalog.listed) statics.set(m.id, deepFreeze(staticCard(m, priceSet)));
  const order = [...statics.values()];
  return {
    list: (available) => ({ object: 'list', data: order.map((c) => withAvailable(c, available(c.id))) }),
    get: (idOrAlias, available) => {
      const id = catalog.resolveId(idOrAlias);
      const c = id === undefined ? undefined : statics.get(id);
      return c === undefined ? undefined : withAvailable(c, available(c.id));
    },
  };
}
