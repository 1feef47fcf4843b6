// Pricing math. Money is exact: every cost is computed in integer micro-Ink (1 Ink = 1,000,000
// micro-Ink; tokens x Ink-per-million-tokens is exactly micro-Ink) and rounded up to whole Ink
// once per request (video: once per clip), never per part. No floats touch a charge.
//
// Inputs are bounded so every intermediate stays a safe integer: rates <= 1,000,000 Ink per
// million tokens (catalogue schema), token counts <= MAX_TOKENS_PER_BUCKET, seconds <= 3,600.
// A value outside the bounds is a programming or vendor-receipt error and throws RangeError;
// callers treat that like an unusable usage receipt.
import {
  defaultCatalog,
  type ImageModel,
  type ImageSize,
  type TextModel,
  type TextRates,
  type VideoModel,
  type VideoPriceSet,
  type VideoResolution,
} from './models.js';

export const MICRO_INK_PER_INK = 1_000_000;
/** Tokens per usage bucket we are prepared to price (1e9 x 1e6 x 4 buckets < 2^53). */
export const MAX_TOKENS_PER_BUCKET = 1_000_000_000;
/** Longest clip we are prepared to price, in seconds. */
export const MAX_VIDEO_SECONDS = 3_600;
export const INK_PER_USD = 100;

/**
 * Vendor-reported text usage in four disjoint buckets (Messages-protocol style):
 * `inputTokens` is uncached input only. A Responses lane must subtract
 * `input_tokens_details.cached_tokens` from the vendor's `input_tokens` before calling us.
 */
export interface TextUsage {
  readonly inputTokens: number;
  readonly outputTokens: number;
  readonly cacheReadTokens: number;
  readonly cacheWriteTokens: number;
}

function tokens(name: string, count: number): number {
  if (!Number.isSafeInteger(count) || count < 0 || count > MAX_TOKENS_PER_BUCKET) {
    throw new RangeError(`pricing: ${name} must be an integer from 0 to ${MAX_TOKENS_PER_BUCKET}, got ${count}`);
  }
  return count;
}

/** Whole Ink for a non-negative integer micro-Ink amount, rounded up. Integer-only: exact. */
export function ceilMicroToInk(microInk: number): number {
  if (!Number.isSafeInteger(microInk) || microInk < 0) throw new RangeError(`pricing: micro-Ink must be a non-negative safe integer, got ${microInk}`);
  const rest = microInk % MICRO_INK_PER_INK;
  return (microInk - rest) / MICRO_INK_PER_INK + (rest > 0 ? 1 : 0);
}

function textModel(model: TextModel | string): TextModel {
  if (typeof model !== 'string') return model;
  const m = defaultCatalog().text(model);
  if (!m) throw new RangeError(`pricing: unknown text model ${JSON.stringify(model)}`);
  return m;
}

function videoModel(model: VideoModel | string): VideoModel {
  if (typeof model !== 'string') return model;
  const m = defaultCatalog().video(model);
  if (!m) throw new RangeError(`pricing: unknown video model ${JSON.stringify(model)}`);
  return m;
}

// ---------------------------------------------------------------------------------------------
// Text

/**
 * The prompt size the long-context tier is judged on: the whole prompt, i.e. uncached input plus
 * cache reads plus cache writes. The vendor decides its tier on the full context it processed,
 * cached or not, so we do too; counting only uncached input would let a mostly-cached 900k-token
 * prompt bill at the short-context rates.
 */
export function promptTokensOf(usage: TextUsage): number {
  return usage.inputTokens + usage.cacheReadTokens + usage.cacheWriteTokens;
}

/**
 * Converts Responses-protocol usage, where `input_tokens` INCLUDES the cached and cache-write parts
 * (`input_tokens_details.cached_tokens` / `.cache_write_tokens`), into our disjoint buckets.
 * Missing details are passed as 0 by the caller only when the vendor reported the total but no
 * breakdown (then every input token bills at the input rate). Throws RangeError when the parts
 * exceed the total: an inconsistent receipt is not a usable one.
 */
export function textUsageFromResponses(usage: { inputTokens: number; cachedTokens: number; cacheWriteTokens: number; outputTokens: number }): TextUsage {
  const uncached = tokens('inputTokens', usage.inputTokens) - tokens('cachedTokens', usage.cachedTokens) - tokens('cacheWriteTokens', usage.cacheWriteTokens);
  if (uncached < 0)
    throw new RangeError(`pricing: cached (${usage.cachedTokens}) + cache-write (${usage.cacheWriteTokens}) tokens exceed input_tokens (${usage.inputTokens})`);
  return { inputTokens: uncached, outputTokens: usage.outputTokens, cacheReadTokens: usage.cachedTokens, cacheWriteTokens: usage.cacheWriteTokens };
}

/** The rates that apply to a prompt of `promptTokens`: the long-context tier strictly above its threshold. */
export function textRatesFor(model: TextModel | string, promptTokens: number): TextRates {
  const m = textModel(model);
  return m.longContext !== null && promptTokens > m.longContext.aboveInputTokens ? m.longContext.rates : m.rates;
}

/** Exact cost in micro-Ink of a text call's usage; when the tier applies every bucket bills at it. */
export function textCostMicroInk(model: TextModel | string, usage: TextUsage): number {
  const input = tokens('inputTokens', usage.inputTokens);
  const output = tokens('outputTokens', usage.outputTokens);
  const cacheRead = tokens('cacheReadTokens', usage.cacheReadTokens);
  const cacheWrite = tokens('cacheWriteTokens', usage.cacheWriteTokens);
  const r = textRatesFor(model, input + cacheRead + cacheWrite);
  return input * r.input + output * r.output + cacheRead * r.cacheRead + cacheWrite * r.cacheWrite;
}

/** Whole Ink charged for a text call: the exact cost rounded up once. */
export function textChargeInk(model: TextModel | string, usage: TextUsage): number {
  return ceilMicroToInk(textCostMicroInk(model, usage));
}

/**
 * Messages hold: the prompt estimate counted as cache writes (the dearest prompt bucket) at its tier,
 * plus `max_tokens` at the output rate, rounded up once.
 */
export function messagesHoldInk(model: TextModel | string, promptTokensEstimate: number, maxTokens: number): number {
  const prompt = tokens('promptTokensEstimate', promptTokensEstimate);
  const out = tokens('maxTokens', maxTokens);
  const r = textRatesFor(model, prompt);
  return ceilMicroToInk(prompt * r.cacheWrite + out * r.output);
}

/**
 * Responses hold: the prompt estimate as cache writes at the tier the estimate falls in, plus the
 * output cap floored at the model's reservation floor (32,768) at that tier's output rate, rounded
 * up once. `maxOutputTokens` null/undefined means the model's default output cap.
 * `model` defaults to the catalogue's Responses model (text-6-astra).
 */
export function responsesHoldInk(
  promptTokensEstimate: number,
  maxOutputTokens: number | null | undefined,
  model: TextModel | string | undefined = undefined,
): number {
  const m = model === undefined ? defaultResponsesModel() : textModel(model);
  const prompt = tokens('promptTokensEstimate', promptTokensEstimate);
  const asked = maxOutputTokens ?? m.constraints.defaultMaxOutputTokens ?? m.constraints.maxOutputTokens;
  const out = Math.max(tokens('maxOutputTokens', asked), m.holdOutputFloorTokens);
  const r = textRatesFor(m, prompt);
  return ceilMicroToInk(prompt * r.cacheWrite + out * r.output);
}

function defaultResponsesModel(): TextModel {
  const m = defaultCatalog().firstText('openai-responses');
  if (!m) throw new RangeError('pricing: the catalogue has no openai-responses model');
  return m;
}

// ---------------------------------------------------------------------------------------------
// Video

/** The precise per-second rate in micro-Ink for a model, resolution and price set. */
export function videoMicroInkPerSecond(model: VideoModel | string, resolution: VideoResolution, priceSet: VideoPriceSet): number {
  const m = videoModel(model);
  const rate = m.microInkPerSecond[priceSet]?.[resolution];
  if (rate === undefined) throw new RangeError(`pricing: ${m.id} has no ${priceSet} rate for ${resolution}`);
  return rate;
}

function seconds(name: string, count: number): number {
  if (!Number.isSafeInteger(count) || count < 0 || count > MAX_VIDEO_SECONDS)
    throw new RangeError(`pricing: ${name} must be whole seconds from 0 to ${MAX_VIDEO_SECONDS}, got ${count}`);
  return count;
}

/** Whole Ink for a clip: seconds x the precise rate, rounded up once per clip (never per second). */
export function videoClipInk(model: VideoModel | string, resolution: VideoResolution, durationS: number, priceSet: VideoPriceSet): number {
  return ceilMicroToInk(seconds('seconds', durationS) * videoMicroInkPerSecond(model, resolution, priceSet));
}

/** Settlement for a delivered clip: delivered seconds, never more than requested, at the requested resolution. */
export function videoSettleInk(
  model: VideoModel | string,
  resolution: VideoResolution,
  requestedS: number,
  deliveredS: number,
  priceSet: VideoPriceSet,
): number {
  const billed = Math.min(seconds('requestedS', requestedS), seconds('deliveredS', deliveredS));
  return videoClipInk(model, resolution, billed, priceSet);
}

/** The per-second rate as the card shows it: Ink to one decimal, half up, computed on integers. */
export function videoDisplayInkPerSecond(model: VideoModel | string, resolution: VideoResolution, priceSet: VideoPriceSet): number {
  const micro = videoMicroInkPerSecond(model, resolution, priceSet);
  const rest = micro % 100_000;
  const tenths = (micro - rest) / 100_000 + (rest >= 50_000 ? 1 : 0);
  return tenths / 10;
}

// ---------------------------------------------------------------------------------------------
// Images

/** Whole Ink for one image at `size` (3 / 4 / 10 at 1K / 2K / 4K). `model` defaults to the catalogue's first image model. */
export function imageInk(size: ImageSize, model: ImageModel | string | undefined = undefined): number {
  const cat = defaultCatalog();
  const m = model === undefined ? cat.models.find((x): x is ImageModel => x.type === 'image') : typeof model === 'string' ? cat.image(model) : model;
  if (!m) throw new RangeError(`pricing: unknown image model ${JSON.stringify(model)}`);
  const ink = m.inkPerImage[size];
  if (ink === undefined) throw new RangeError(`pricing: ${m.id} does not offer size ${JSON.stringify(size)}`);
  return ink;
}

// ---------------------------------------------------------------------------------------------
// Display

/**
 * USD at 100 Ink per USD for a whole-Ink amount, as a number with exact cents (284 -> 2.84).
 * Dividing an integer by 100 yields the double nearest the decimal, which prints as that decimal.
 */
export function inkToUsd(ink: number | bigint): number {
  if (typeof ink === 'bigint') {
    if (ink > BigInt(Number.MAX_SAFE_INTEGER) || ink < -BigInt(Number.MAX_SAFE_INTEGER)) throw new RangeError(`pricing: ${ink} Ink is beyond exact display`);
    return Number(ink) / INK_PER_USD;
  }
  if (!Number.isSafeInteger(ink)) throw new RangeError(`pricing: inkToUsd takes whole Ink, got ${ink}`);
  return ink / INK_PER_USD;
}
