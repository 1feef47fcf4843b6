// The shape of config/models.json (snake_case, as operators write it): every entry's fields, types and
// bounds, and the closed lists they draw on. models.ts checks a file against it once and turns it
// into the model objects the program uses; the file's TypeScript type is derived from it.
import { type Static, Type } from '../util/typed-schema.js';

export const VIDEO_RESOLUTIONS = ['480p', '720p', '1080p'] as const;
export type VideoResolution = (typeof VIDEO_RESOLUTIONS)[number];
export const VIDEO_ASPECT_RATIOS = ['21:9', '16:9', '4:3', '1:1', '3:4', '9:16', 'adaptive'] as const;
export type VideoAspectRatio = (typeof VIDEO_ASPECT_RATIOS)[number];
export const VIDEO_PRICE_SETS = ['billing', 'catalogue'] as const;
/** Which published video price set the ledger charges from (`config.pricing.videoPriceSet`). */
export type VideoPriceSet = (typeof VIDEO_PRICE_SETS)[number];
export const IMAGE_SIZES = ['1K', '2K', '4K'] as const;
export type ImageSize = (typeof IMAGE_SIZES)[number];
export type TextProtocol = 'openai-responses' | 'anthropic-messages';
export type VendorName = 'ark' | 'anthropic' | 'openai' | 'gemini';

/** Upper bound on any text rate (Ink per million tokens): keeps every product a safe integer. */
export const MAX_INK_PER_MILLION_TOKENS = 1_000_000;

// ---------------------------------------------------------------------------------------------
// Schema of config/models.json (snake_case, as written by operators)

const Id = Type.String({ pattern: '^[a-z0-9][a-z0-9.-]{0,63}$' });
const Label = Type.String({ minLength: 1, maxLength: 80 });
const VendorModel = Type.String({ minLength: 1, maxLength: 200 });
/**
 * A price as an exact decimal string ("10.225"): at most six fractional digits, so it converts to
 * whole micro-Ink without ever passing through a float.
 */
const Decimal = Type.String({ pattern: '^(0|[1-9][0-9]{0,5})(\\.[0-9]{1,6})?$' });
const Resolution = Type.Union([Type.Literal('480p'), Type.Literal('720p'), Type.Literal('1080p')]);
const Aspect = Type.Union([
  Type.Literal('21:9'),
  Type.Literal('16:9'),
  Type.Literal('4:3'),
  Type.Literal('1:1'),
  Type.Literal('3:4'),
  Type.Literal('9:16'),
  Type.Literal('adaptive'),
]);
const Size = Type.Union([Type.Literal('1K'), Type.Literal('2K'), Type.Literal('4K')]);
const Count = (max: number) => Type.Integer({ minimum: 0, maximum: max });
const Strict = { additionalProperties: false } as const;

const ResolutionRates = Type.Object({ '480p': Type.Optional(Decimal), '720p': Type.Optional(Decimal), '1080p': Type.Optional(Decimal) }, Strict);

const VideoEntry = Type.Object(
  {
    id: Id,
    label: Label,
    listed: Type.Boolean(),
    vendor: Type.Literal('ark'),
    vendor_model: VendorModel,
    endpoint: Type.Literal('/v1/video/generations'),
    resolutions: Type.Array(Resolution, { minItems: 1, maxItems: 3, uniqueItems: true }),
    aspect_ratios: Type.Array(Aspect, { minItems: 1, maxItems: 7, uniqueItems: true }),
    resolution_ceiling_by_aspect: Type.Optional(Type.Object(Object.fromEntries(VIDEO_ASPECT_RATIOS.map((a) => [a, Type.Optional(Resolution)])), Strict)),
    duration_seconds: Type.Object({ min: Count(3600), max: Count(3600) }, Strict),
    references: Type.Object({ total: Count(1000), images: Count(1000), videos: Count(1000), audio: Count(1000) }, Strict),
    audio_needs_visual_reference: Type.Boolean(),
    ink_per_second: Type.Object({ billing: ResolutionRates, catalogue: ResolutionRates }, Strict),
  },
  Strict,
);

const Rate = Type.Integer({ minimum: 0, maximum: MAX_INK_PER_MILLION_TOKENS });
export const TextRatesEntry = Type.Object({ input: Rate, output: Rate, cache_read: Rate, cache_write: Rate }, Strict);

const TextEntry = Type.Object(
  {
    id: Id,
    aliases: Type.Array(Id, { maxItems: 8, uniqueItems: true }),
    label: Label,
    vendor_label: Label,
    listed: Type.Boolean(),
    vendor: Type.Union([Type.Literal('anthropic'), Type.Literal('openai')]),
    vendor_model: VendorModel,
    endpoint: Type.Union([Type.Literal('/v1/responses'), Type.Literal('/v1/messages')]),
    protocol: Type.Union([Type.Literal('openai-responses'), Type.Literal('anthropic-messages')]),
    ink_per_million_tokens: TextRatesEntry,
    long_context: Type.Optional(Type.Object({ above_input_tokens: Count(100_000_000), ink_per_million_tokens: TextRatesEntry }, Strict)),
    hold_output_floor_tokens: Count(10_000_000),
    constraints: Type.Object(
      {
        max_input_tokens: Type.Integer({ minimum: 1, maximum: 100_000_000 }),
        default_max_output_tokens: Type.Union([Type.Integer({ minimum: 1, maximum: 10_000_000 }), Type.Null()]),
        max_output_tokens: Type.Integer({ minimum: 1, maximum: 10_000_000 }),
        images: Type.Boolean(),
        streaming: Type.Boolean(),
      },
      Strict,
    ),
  },
  Strict,
);

const ImageEntry = Type.Object(
  {
    id: Id,
    aliases: Type.Array(Id, { maxItems: 8, uniqueItems: true }),
    label: Label,
    listed: Type.Boolean(),
    vendor: Type.Literal('gemini'),
    vendor_model: VendorModel,
    endpoint: Type.Literal('/v1/images/generations'),
    sizes: Type.Array(Size, { minItems: 1, maxItems: 3, uniqueItems: true }),
    default_size: Size,
    aspect_ratios: Type.Array(Type.String({ pattern: '^[0-9]{1,2}:[0-9]{1,2}$' }), { minItems: 1, maxItems: 32, uniqueItems: true }),
    default_aspect_ratio: Type.String({ minLength: 1 }),
    max_reference_images: Count(100),
    ink_per_image: Type.Object({ '1K': Type.Optional(Count(1_000_000)), '2K': Type.Optional(Count(1_000_000)), '4K': Type.Optional(Count(1_000_000)) }, Strict),
  },
  Strict,
);

export const ModelsFileSchema = Type.Object(
  {
    video: Type.Array(VideoEntry, { maxItems: 64 }),
    text: Type.Array(TextEntry, { maxItems: 64 }),
    image: Type.Array(ImageEntry, { maxItems: 64 }),
  },
  Strict,
);
export type ModelsFile = Static<typeof ModelsFileSchema>;
