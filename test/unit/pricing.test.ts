// Pricing math against the published figures and worked checks (docs/api/billing.md,
// docs/api/models.md), typed in here; rates are read from config/models.json, so a changed
// rate that no longer reproduces a published figure fails here.
import t from 'tap';
import fc from 'fast-check';
import { defaultCatalog, IMAGE_SIZES, type TextModel, type VideoPriceSet, type VideoResolution } from '../../src/catalog/models.js';
import { loadConfig } from '../../src/config/config.js';
import {
  ceilMicroToInk,
  imageInk,
  inkToUsd,
  messagesHoldInk,
  promptTokensOf,
  responsesHoldInk,
  textChargeInk,
  textCostMicroInk,
  textRatesFor,
  textUsageFromResponses,
  videoClipInk,
  videoDisplayInkPerSecond,
  videoMicroInkPerSecond,
  videoSettleInk,
  type TextUsage,
} from '../../src/catalog/pricing.js';

const catalog = defaultCatalog();

/** The published per-second Ink and 5-second clip Ink (docs/api/billing.md). */
const PUBLISHED_VIDEO: Record<VideoPriceSet, Record<string, Partial<Record<VideoResolution, [number, number]>>>> = {
  billing: {
    'clip-2.5': { '480p': [10.2, 52], '720p': [22.9, 115], '1080p': [56.8, 284] },
    'clip-2.0': { '480p': [6.9, 35], '720p': [15.1, 76], '1080p': [37.6, 189] },
    'clip-2.0-fast': { '480p': [5.6, 29], '720p': [12.1, 61] },
  },
  catalogue: {
    'clip-2.5': { '480p': [11.6, 58], '720p': [26, 130], '1080p': [64, 320] },
    'clip-2.0': { '480p': [7.9, 40], '720p': [17, 86], '1080p': [42.1, 211] },
    'clip-2.0-fast': { '480p': [6.3, 32], '720p': [13.6, 69] },
  },
};

/** The published text prices: Ink per million tokens [input, output, cache read, cache write] (docs/api/models.md). */
const PUBLISHED_TEXT: Record<string, [number, number, number, number]> = {
  'text-6-astra': [375, 1875, 38, 469],
  'assistant-fable-5-1': [1063, 5313, 27, 2125],
  'assistant-opus-5': [532, 2657, 54, 1063],
  'assistant-sonnet-5': [213, 1063, 22, 425],
};
const PUBLISHED_ASTRA_LONG: [number, number, number, number] = [750, 2813, 75, 938];

const usage = (inputTokens: number, outputTokens: number, cacheReadTokens = 0, cacheWriteTokens = 0): TextUsage => ({
  inputTokens,
  outputTokens,
  cacheReadTokens,
  cacheWriteTokens,
});

const textModels = catalog.models.filter((m): m is TextModel => m.type === 'text');
const messagesModels = textModels.filter((m) => m.protocol === 'anthropic-messages');
const astra = catalog.text('text-6-astra')!;

t.test('published worked checks', async (t) => {
  t.equal(textChargeInk('text-6-astra', usage(10_000, 2_000)), 8, 'text-6-astra 10k in + 2k out = 8 Ink');
  t.equal(textChargeInk('assistant-opus-5', usage(10_000, 2_000)), 11, 'opus = 11 Ink');
  t.equal(textChargeInk('assistant-sonnet-5', usage(10_000, 2_000)), 5, 'sonnet = 5 Ink');
  t.equal(textChargeInk('assistant-fable-5-1', usage(10_000, 2_000)), 22, 'fable = 22 Ink');
  t.equal(textChargeInk('opus', usage(10_000, 2_000)), 11, 'aliases price the same');
  t.equal(videoDisplayInkPerSecond('clip-2.5', '1080p', 'billing'), 56.8, 'clip-2.5 1080p shows 56.8 Ink/s');
  t.equal(videoClipInk('clip-2.5', '1080p', 5, 'billing'), 284, '56.8 x 5 s = 284');
  t.equal(videoClipInk('clip-2.0-fast', '720p', 10, 'billing'), 121, 'clip-2.0-fast 10 s at 720p = 121');
});

t.test('both published video price sets are reproduced from the configured precise rates', async (t) => {
  for (const set of ['billing', 'catalogue'] as const) {
    for (const [id, table] of Object.entries(PUBLISHED_VIDEO[set])) {
      const model = catalog.video(id)!;
      t.same([...model.resolutions].sort(), Object.keys(table).sort(), `${set} ${id}: priced resolutions are the offered ones`);
      for (const [res, [perSecond, clip]] of Object.entries(table) as [VideoResolution, [number, number]][]) {
        t.equal(videoDisplayInkPerSecond(model, res, set), perSecond, `${set} ${id} ${res}: shows ${perSecond} Ink/s`);
        t.equal(videoClipInk(model, res, 5, set), clip, `${set} ${id} ${res}: 5-second clip ${clip} Ink`);
      }
    }
  }
  // The two sets really differ, so the switch matters.
  t.not(videoClipInk('clip-2.5', '480p', 5, 'billing'), videoClipInk('clip-2.5', '480p', 5, 'catalogue'));
});

t.test('the catalogue price set is selected by config.pricing.videoPriceSet alone', async (t) => {
  const byDefault = loadConfig({});
  t.equal(byDefault.pricing.videoPriceSet, 'billing', 'the billing table is the default');
  const byEnv = loadConfig({ INKGATE_VIDEO_PRICE_SET: 'catalogue' });
  const byOverride = loadConfig({}, { pricing: { videoPriceSet: 'catalogue' } });
  for (const cfg of [byEnv, byOverride]) {
    t.equal(cfg.pricing.videoPriceSet, 'catalogue');
    t.equal(videoClipInk('clip-2.5', '1080p', 5, cfg.pricing.videoPriceSet), 320);
    t.equal(videoClipInk('clip-2.0-fast', '720p', 5, cfg.pricing.videoPriceSet), 69);
  }
  t.throws(() => loadConfig({ INKGATE_VIDEO_PRICE_SET: 'cheap' }), /videoPriceSet|pricing/, 'an unknown set is refused at start-up');
});

t.test('video precise rates are more precise than the display', async (t) => {
  // 5 x 10.2 = 51, yet the published clip is 52: the configured rate is above 10.2 and shows as 10.2.
  const micro = videoMicroInkPerSecond('clip-2.5', '480p', 'billing');
  t.ok(micro > 10_200_000 && micro < 10_250_000, `clip-2.5 480p rate ${micro} micro-Ink/s lies in (10.2, 10.25)`);
  t.equal(videoClipInk('clip-2.5', '480p', 30, 'billing'), ceilMicroToInk(30 * micro), 'rounded once per clip');
  t.ok(videoClipInk('clip-2.5', '480p', 30, 'billing') < 30 * Math.ceil(micro / 1e6), 'never rounded per second');
});

t.test('video settles on delivered seconds, never more than requested', async (t) => {
  const clip30 = videoClipInk('clip-2.5', '720p', 30, 'billing');
  const clip29 = videoClipInk('clip-2.5', '720p', 29, 'billing');
  t.equal(videoSettleInk('clip-2.5', '720p', 30, 29, 'billing'), clip29, '30 s asked, 29 delivered: charged for 29');
  t.ok(clip29 < clip30);
  t.equal(videoSettleInk('clip-2.5', '720p', 30, 31, 'billing'), clip30, 'more delivered than asked: capped at the request');
  t.equal(videoSettleInk('clip-2.5', '720p', 30, 0, 'billing'), 0, 'nothing delivered: nothing charged');
  t.throws(() => videoSettleInk('clip-2.5', '720p', 30, 4.5, 'billing'), RangeError, 'fractional seconds are refused');
  t.throws(() => videoClipInk('clip-2.5', '720p', -1, 'billing'), RangeError);
  t.throws(() => videoClipInk('clip-2.0-fast', '1080p', 5, 'billing'), RangeError, 'a resolution the model does not offer');
  t.throws(() => videoClipInk('clip-9', '720p', 5, 'billing'), RangeError, 'an unknown model');
});

t.test('text rates come from the catalogue and match the published table', async (t) => {
  for (const [id, [input, output, cacheRead, cacheWrite]] of Object.entries(PUBLISHED_TEXT)) {
    // 100,000 tokens: below every tier threshold, so the base rates apply.
    t.equal(textCostMicroInk(id, usage(100_000, 0)), input * 100_000, `${id} input`);
    t.equal(textCostMicroInk(id, usage(0, 100_000)), output * 100_000, `${id} output`);
    t.equal(textCostMicroInk(id, usage(0, 0, 100_000)), cacheRead * 100_000, `${id} cache read`);
    t.equal(textCostMicroInk(id, usage(0, 0, 0, 100_000)), cacheWrite * 100_000, `${id} cache write (1-hour rate)`);
  }
  const [li, lo, lr, lw] = PUBLISHED_ASTRA_LONG;
  const base = 300_000; // above 272,000: every bucket at the long-context rates
  t.equal(textCostMicroInk(astra, usage(base, 1_000)), base * li + 1_000 * lo);
  t.equal(textCostMicroInk(astra, usage(base, 0, 1_000, 1_000)), base * li + 1_000 * lr + 1_000 * lw);
});

t.test('long-context tier: strictly above 272,000 prompt tokens, whole prompt counted', async (t) => {
  t.equal(textChargeInk(astra, usage(272_000, 0)), 102, '272,000 x 375 = 102 Ink (base tier)');
  t.equal(textChargeInk(astra, usage(272_001, 0)), 205, '272,001 x 750 = 204.00075, rounded up to 205 (long tier)');
  t.equal(textRatesFor(astra, 272_000), astra.rates);
  t.equal(textRatesFor(astra, 272_001), astra.longContext!.rates);
  // Cached and cache-write tokens are part of the prompt the tier is judged on.
  const mixed = usage(200_000, 10, 72_000, 1);
  t.equal(promptTokensOf(mixed), 272_001);
  t.equal(textCostMicroInk(astra, mixed), 200_000 * 750 + 10 * 2813 + 72_000 * 75 + 1 * 938, 'every bucket at the long rates');
  t.equal(textCostMicroInk(astra, usage(200_000, 10, 72_000, 0)), 200_000 * 375 + 10 * 1875 + 72_000 * 38, 'exactly 272,000: base rates');
  // Messages models have no tier.
  t.equal(textCostMicroInk('sonnet', usage(300_000, 0)), 300_000 * 213);
});

t.test('responses usage converts to disjoint buckets', async (t) => {
  t.same(textUsageFromResponses({ inputTokens: 1000, cachedTokens: 600, cacheWriteTokens: 100, outputTokens: 5 }), usage(300, 5, 600, 100));
  t.throws(() => textUsageFromResponses({ inputTokens: 10, cachedTokens: 11, cacheWriteTokens: 0, outputTokens: 0 }), RangeError);
});

t.test('holds', async (t) => {
  t.equal(messagesHoldInk('assistant-opus-5', 10_000, 2_000), 16, '10k x 1,063 + 2k x 2,657 = 15.944 -> 16');
  t.equal(messagesHoldInk('sonnet', 0, 1), 1, 'one output token still holds 1 Ink');
  t.equal(responsesHoldInk(10_000, 1_000), 67, 'output floored at 32,768: 4.69 + 61.44 -> 67');
  t.equal(responsesHoldInk(10_000, null), 67, 'no max_output_tokens: the default 32,768');
  t.equal(responsesHoldInk(10_000, 100_000), Math.ceil((10_000 * 469 + 100_000 * 1875) / 1e6), 'above the floor: the asked cap');
  t.equal(responsesHoldInk(300_000, 100_000), 563, 'long tier by the estimate: 281.4 + 281.3 -> 563');
  t.equal(responsesHoldInk(272_000, 0), Math.ceil((272_000 * 469 + 32_768 * 1875) / 1e6), 'exactly 272,000: base tier');
  t.equal(responsesHoldInk(10_000, 1_000, 'astra'), 67, 'explicit model');
  t.throws(() => messagesHoldInk('opus', -1, 10), RangeError);
  t.throws(() => messagesHoldInk('opus', 1.5, 10), RangeError);
});

t.test('images', async (t) => {
  t.same(
    IMAGE_SIZES.map((s) => imageInk(s)),
    [3, 4, 10],
  );
  t.same(
    IMAGE_SIZES.map((s) => inkToUsd(imageInk(s))),
    [0.03, 0.04, 0.1],
  );
  t.throws(() => imageInk('8K' as never), RangeError);
});

t.test('inkToUsd has exact cents', async (t) => {
  t.equal(inkToUsd(284), 2.84);
  t.equal(inkToUsd(1), 0.01);
  t.equal(inkToUsd(0), 0);
  t.equal(inkToUsd(123_456_789n), 1_234_567.89);
  t.throws(() => inkToUsd(1.5), RangeError);
  fc.assert(
    fc.property(fc.integer({ min: 0, max: 2 ** 50 }), (ink) => {
      const s = String(ink).padStart(3, '0');
      const decimal = `${s.slice(0, -2)}.${s.slice(-2)}`.replace(/\.?0+$/, '');
      return String(inkToUsd(ink)) === (decimal === '' ? '0' : decimal);
    }),
  );
});

t.test('ceilMicroToInk is exact for every safe integer', async (t) => {
  fc.assert(
    fc.property(fc.maxSafeNat(), (m) => {
      const exact = (BigInt(m) + 999_999n) / 1_000_000n;
      return BigInt(ceilMicroToInk(m)) === exact;
    }),
    { numRuns: 2000 },
  );
  // Edges near 2^53, where the remainder is a single micro-Ink.
  t.equal(ceilMicroToInk(9_007_199_254_000_001), 9_007_199_255);
  t.equal(ceilMicroToInk(9_007_199_254_000_000), 9_007_199_254);
  t.equal(ceilMicroToInk(0), 0);
  t.equal(ceilMicroToInk(1), 1);
});

/** A prompt of at most `total` tokens split into three buckets. */
const promptSplit = (total: number) =>
  fc.tuple(fc.integer({ min: 0, max: total }), fc.nat({ max: 1_000_000 }), fc.nat({ max: 1_000_000 })).map(([used, a, b]) => {
    const lo = Math.min(a, b) / 1_000_000;
    const hi = Math.max(a, b) / 1_000_000;
    const input = Math.floor(used * lo);
    const cacheRead = Math.floor(used * hi) - input;
    return { inputTokens: input, cacheReadTokens: cacheRead, cacheWriteTokens: used - input - cacheRead };
  });

t.test('property: a Messages charge never exceeds its hold', async (t) => {
  fc.assert(
    fc.property(
      fc.constantFrom(...messagesModels),
      fc.integer({ min: 0, max: 200_000 }).chain((estimate) =>
        fc.tuple(
          fc.constant(estimate),
          promptSplit(estimate),
          fc.integer({ min: 1, max: 64_000 }).chain((max) => fc.tuple(fc.constant(max), fc.integer({ min: 0, max }))),
        ),
      ),
      (model, [estimate, prompt, [maxTokens, output]]) => {
        const charge = textChargeInk(model, { ...prompt, outputTokens: output });
        return charge <= messagesHoldInk(model, estimate, maxTokens);
      },
    ),
    { numRuns: 3000 },
  );
  t.pass('held for every sampled usage within the hold assumptions');
});

t.test('property: a Responses charge never exceeds its hold (tier boundary included)', async (t) => {
  const estimates = fc.oneof(fc.integer({ min: 0, max: 922_000 }), fc.integer({ min: 271_000, max: 273_000 }));
  fc.assert(
    fc.property(
      estimates.chain((estimate) =>
        fc.tuple(
          fc.constant(estimate),
          promptSplit(estimate),
          fc.option(fc.integer({ min: 1, max: 128_000 }), { nil: null }).chain((max) => fc.tuple(fc.constant(max), fc.integer({ min: 0, max: max ?? 32_768 }))),
        ),
      ),
      ([estimate, prompt, [maxOut, output]]) => {
        const charge = textChargeInk(astra, { ...prompt, outputTokens: output });
        return charge <= responsesHoldInk(estimate, maxOut);
      },
    ),
    { numRuns: 3000 },
  );
  t.pass('held for every sampled usage within the hold assumptions');
});

t.test('property: rounding happens once', async (t) => {
  const bucket = fc.integer({ min: 0, max: 2_000_000 });
  fc.assert(
    fc.property(fc.constantFrom(...textModels), bucket, bucket, bucket, bucket, (model, i, o, r, w) => {
      const u = usage(i, o, r, w);
      const whole = textChargeInk(model, u);
      const rates = textRatesFor(model, i + r + w);
      // Exact reference in BigInt, independent of the implementation.
      const exact =
        BigInt(i) * BigInt(rates.input) + BigInt(o) * BigInt(rates.output) + BigInt(r) * BigInt(rates.cacheRead) + BigInt(w) * BigInt(rates.cacheWrite);
      const ceilOnce = Number((exact + 999_999n) / 1_000_000n);
      const partsRounded = [i * rates.input, o * rates.output, r * rates.cacheRead, w * rates.cacheWrite].reduce((s, p) => s + ceilMicroToInk(p), 0);
      return whole === ceilOnce && partsRounded >= whole;
    }),
    { numRuns: 3000 },
  );
  fc.assert(
    fc.property(
      fc.constantFrom(...catalog.models.filter((m) => m.type === 'video')),
      fc.constantFrom<VideoPriceSet>('billing', 'catalogue'),
      fc.integer({ min: 0, max: 30 }),
      fc.integer({ min: 0, max: 40 }),
      (model, set, requested, delivered) => {
        if (model.type !== 'video') return false;
        return model.resolutions.every((res) => {
          const perSecondRounded = requested * Math.ceil(videoMicroInkPerSecond(model, res, set) / 1e6);
          const clip = videoClipInk(model, res, requested, set);
          const settle = videoSettleInk(model, res, requested, delivered, set);
          return clip <= perSecondRounded && settle <= clip && clip === ceilMicroToInk(requested * videoMicroInkPerSecond(model, res, set));
        });
      },
    ),
    { numRuns: 1000 },
  );
  t.pass('whole-request rounding never exceeds rounding the parts');
});
