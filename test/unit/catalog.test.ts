// The catalogue file and the public cards, field by field against docs/api/models.md's card tables.
import t, { type Test } from 'tap';
import { readFileSync } from 'node:fs';
import { createCardBuilder, modelCard, type ImageCard, type TextCard, type VideoCard } from '../../src/catalog/cards.js';
import { decimalToMicro, defaultCatalog, loadCatalog, MODELS_FILE, parseCatalog, type VideoPriceSet } from '../../src/catalog/models.js';
import { loadConfig } from '../../src/config/config.js';

const catalog = defaultCatalog();
const allOn = () => true;
const rawModels = () => JSON.parse(readFileSync(MODELS_FILE, 'utf8')) as Record<string, Record<string, unknown>[]>;

/** The published per-second Ink and the 5-second clip (docs/api/billing.md). */
const PUBLISHED: Record<VideoPriceSet, Record<string, Record<string, [number, number]>>> = {
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

/** The published video model cards: catalogue values per model (docs/api/models.md). */
const VIDEO_VALUES = {
  'clip-2.5': {
    label: 'Clip 2.5',
    resolutions: ['480p', '720p', '1080p'],
    duration: { min: 4, max: 30 },
    refs: { total: 50, images: 30, videos: 10, audio: 10 },
  },
  'clip-2.0': { label: 'Clip 2.0', resolutions: ['480p', '720p', '1080p'], duration: { min: 4, max: 15 }, refs: { total: 12, images: 9, videos: 3, audio: 3 } },
  'clip-2.0-fast': {
    label: 'Clip 2.0 Fast',
    resolutions: ['480p', '720p'],
    duration: { min: 4, max: 15 },
    refs: { total: 12, images: 9, videos: 3, audio: 3 },
  },
} as const;
const ASPECTS = ['21:9', '16:9', '4:3', '1:1', '3:4', '9:16', 'adaptive'];

const TEXT_VALUES = {
  'text-6-astra': { aliases: ['astra'], endpoint: '/v1/responses', protocol: 'openai-responses', prices: [375, 1875, 38, 469] },
  'assistant-fable-5-1': { aliases: ['fable'], endpoint: '/v1/messages', protocol: 'anthropic-messages', prices: [1063, 5313, 27, 2125] },
  'assistant-opus-5': { aliases: ['opus'], endpoint: '/v1/messages', protocol: 'anthropic-messages', prices: [532, 2657, 54, 1063] },
  'assistant-sonnet-5': { aliases: ['sonnet'], endpoint: '/v1/messages', protocol: 'anthropic-messages', prices: [213, 1063, 22, 425] },
} as const;

const isInkUsd = (t: Test, v: unknown, ink: number, where: string) => {
  t.same(v, { ink, usd_payg: ink / 100 }, `${where} is {ink, usd_payg}`);
  t.equal(typeof (v as { usd_payg: unknown }).usd_payg, 'number');
};

t.test('the catalogue loads and resolves ids and aliases', async (t) => {
  t.same(
    catalog.models.map((m) => m.id),
    ['clip-2.5', 'clip-2.0', 'clip-2.0-fast', 'text-6-astra', 'assistant-fable-5-1', 'assistant-opus-5', 'assistant-sonnet-5', 'image-1'],
  );
  for (const [alias, id] of [
    ['astra', 'text-6-astra'],
    ['fable', 'assistant-fable-5-1'],
    ['opus', 'assistant-opus-5'],
    ['sonnet', 'assistant-sonnet-5'],
  ]) {
    t.equal(catalog.resolveId(alias), id, `${alias} resolves`);
    t.equal(catalog.text(alias)?.id, id);
    t.equal(catalog.get(alias), catalog.get(id), 'the same frozen object');
  }
  t.equal(catalog.resolveId('clip-2.5'), 'clip-2.5');
  t.equal(catalog.get('clip-9'), undefined);
  t.equal(catalog.video('astra'), undefined, 'a text model is not a video model');
  t.equal(catalog.text('astra', 'anthropic-messages'), undefined, 'the Messages lane does not serve astra');
  t.equal(catalog.text('opus', 'anthropic-messages')?.id, 'assistant-opus-5');
  t.equal(catalog.firstText('openai-responses')?.id, 'text-6-astra');
  t.equal(catalog.image('image-1')?.vendorModel, 'gemini-3-pro-image-preview');
  t.ok(Object.isFrozen(catalog.get('clip-2.5')) && Object.isFrozen(catalog.video('clip-2.5')!.microInkPerSecond.billing), 'frozen deep');
  t.equal(defaultCatalog(), catalog, 'loaded once and shared');
  for (const m of catalog.models) t.ok(m.vendorModel.length > 0, `${m.id} has a vendor model id`);
  t.match(catalog.text('opus')!.vendorModel, /^claude-/);
  t.match(catalog.video('clip-2.0')!.vendorModel, /seedance/);
});

t.test('video cards: every field of the published table, both price sets', async (t) => {
  for (const set of ['billing', 'catalogue'] as const) {
    const cards = createCardBuilder(catalog, set);
    for (const [id, want] of Object.entries(VIDEO_VALUES)) {
      const card = cards.get(id, allOn) as VideoCard;
      t.same(Object.keys(card), ['id', 'object', 'type', 'label', 'endpoint', 'available', 'pricing', 'constraints'], `${id} top-level fields`);
      t.equal(card.id, id);
      t.equal(card.object, 'model');
      t.equal(card.type, 'video');
      t.equal(card.label, want.label);
      t.equal(card.endpoint, '/v1/video/generations');
      t.equal(card.available, true);
      t.same(Object.keys(card.pricing), ['unit', 'ink_per_second', 'usd_payg_per_second', 'ink_per_5_second_clip', 'note']);
      t.equal(card.pricing.unit, 'second');
      t.type(card.pricing.note, 'string');
      t.ok(card.pricing.note.length > 20);
      const published = PUBLISHED[set][id]!;
      t.same(Object.keys(card.pricing.ink_per_second), want.resolutions, `${set} ${id}: keyed by offered resolution`);
      for (const [res, [perSecond, clip]] of Object.entries(published)) {
        const r = res as keyof typeof card.pricing.ink_per_second;
        t.equal(card.pricing.ink_per_second[r], perSecond, `${set} ${id} ${res} Ink/s`);
        // Expected as the decimal itself ("0.229"), not the float quotient 22.9 / 100 = 0.22899999999999998.
        t.equal(card.pricing.usd_payg_per_second[r], Number(`${perSecond}e-2`), `${set} ${id} ${res} USD/s = Ink/100`);
        t.equal(card.pricing.ink_per_5_second_clip[r], clip, `${set} ${id} ${res} 5-second clip`);
      }
      t.same(card.constraints.resolutions, want.resolutions);
      t.same(card.constraints.aspect_ratios, ASPECTS);
      t.same(card.constraints.duration_seconds, want.duration);
      t.same(card.constraints.references, want.refs);
      if (id === 'clip-2.5') {
        t.same(Object.keys(card.constraints), ['resolutions', 'aspect_ratios', 'resolution_ceiling_by_aspect', 'duration_seconds', 'references']);
        t.same(card.constraints.resolution_ceiling_by_aspect, { '9:16': '720p', adaptive: '720p' });
      } else {
        t.notOk('resolution_ceiling_by_aspect' in card.constraints, `${id} has no ceiling field`);
        t.same(Object.keys(card.constraints), ['resolutions', 'aspect_ratios', 'duration_seconds', 'references']);
      }
    }
  }
  // The JSON text of a USD figure is the decimal itself.
  const json = JSON.stringify(createCardBuilder(catalog, 'billing').get('clip-2.5', allOn));
  t.match(json, /"usd_payg_per_second":\{"480p":0\.102,"720p":0\.229,"1080p":0\.568\}/);
});

t.test('text cards: every field of the published table', async (t) => {
  const cards = createCardBuilder(catalog, 'billing');
  for (const [id, want] of Object.entries(TEXT_VALUES)) {
    const card = cards.get(id, allOn) as TextCard;
    t.same(
      Object.keys(card),
      ['id', 'object', 'type', 'aliases', 'label', 'vendor_label', 'endpoint', 'protocol', 'available', 'pricing', 'constraints'],
      `${id} fields`,
    );
    t.equal(card.object, 'model');
    t.equal(card.type, 'text');
    t.same(card.aliases, want.aliases);
    t.type(card.label, 'string');
    t.type(card.vendor_label, 'string');
    t.ok(card.label.length > 0 && card.vendor_label.length > 0);
    t.equal(card.endpoint, want.endpoint);
    t.equal(card.protocol, want.protocol);
    t.equal(card.available, true);
    t.equal(card.pricing.unit, '1M tokens');
    const [input, output, cacheRead, cacheWrite] = want.prices;
    isInkUsd(t, card.pricing.input, input, `${id} input`);
    isInkUsd(t, card.pricing.output, output, `${id} output`);
    isInkUsd(t, card.pricing.cache_read, cacheRead, `${id} cache_read`);
    isInkUsd(t, card.pricing.cache_write, cacheWrite, `${id} cache_write`);
    t.type(card.pricing.note, 'string');
    t.same(Object.keys(card.constraints), ['max_input_tokens', 'default_max_output_tokens', 'max_output_tokens', 'images', 'streaming']);
    t.type(card.constraints.images, 'boolean');
    t.type(card.constraints.streaming, 'boolean');
    if (id === 'text-6-astra') {
      t.same(card.constraints, { max_input_tokens: 922000, default_max_output_tokens: 32768, max_output_tokens: 128000, images: false, streaming: true });
      const lc = card.pricing.long_context!;
      t.equal(lc.above_input_tokens, 272000);
      isInkUsd(t, lc.input, 750, 'long input');
      isInkUsd(t, lc.output, 2813, 'long output');
      isInkUsd(t, lc.cache_read, 75, 'long cache_read');
      isInkUsd(t, lc.cache_write, 938, 'long cache_write');
      t.match(card.pricing.note, /32,768/);
    } else {
      t.notOk('long_context' in card.pricing, `${id} has no long-context tier`);
      t.same(card.constraints, { max_input_tokens: 200000, default_max_output_tokens: null, max_output_tokens: 64000, images: false, streaming: true });
      t.match(card.pricing.note, /max_tokens/);
    }
  }
  t.equal(cards.get('astra', allOn)?.id, 'text-6-astra', 'the card of an alias is the canonical card');
  t.equal(cards.get('sonnet', allOn)?.id, 'assistant-sonnet-5');
  t.equal(cards.get('gpt-6', allOn), undefined, 'a vendor id is not a public id');
});

t.test('image card', async (t) => {
  const card = createCardBuilder(catalog, 'billing').get('image-1', allOn) as ImageCard;
  t.equal(card.type, 'image');
  t.equal(card.endpoint, '/v1/images/generations');
  t.same(card.pricing.ink_per_image, { '1K': 3, '2K': 4, '4K': 10 });
  t.same(card.pricing.usd_payg_per_image, { '1K': 0.03, '2K': 0.04, '4K': 0.1 });
  t.same(card.constraints.sizes, ['1K', '2K', '4K']);
  t.equal(card.constraints.max_reference_images, 14);
  t.ok(card.constraints.aspect_ratios.includes('16:9') && card.constraints.aspect_ratios.includes('21:9'));
});

t.test('availability comes from the caller, per model, on every call', async (t) => {
  const cards = createCardBuilder(catalog, 'billing');
  const asked: string[] = [];
  let textOn = false;
  const available = (id: string) => {
    asked.push(id);
    return catalog.get(id)!.type === 'video' || textOn;
  };
  const list = cards.list(available);
  t.equal(list.object, 'list');
  t.same(
    list.data.map((c) => c.id),
    catalog.listed.map((m) => m.id),
  );
  t.same(
    asked,
    catalog.listed.map((m) => m.id),
    'asked once per model, by canonical id',
  );
  t.same(
    list.data.map((c) => c.available),
    [true, true, true, false, false, false, false, false],
  );
  textOn = true;
  t.equal(cards.get('opus', available)?.available, true, 'a later call sees the new state');
  t.equal(cards.list(available).data[0]!.pricing, list.data[0]!.pricing, 'pricing is precomputed and shared');
  t.ok(Object.isFrozen(list.data[0]!.pricing));
  t.equal(modelCard(catalog.get('clip-2.0')!, 'catalogue', false).available, false);
});

t.test('the deployment price set comes from config alone', async (t) => {
  const cfg = loadConfig({}, { pricing: { videoPriceSet: 'catalogue' } });
  const card = createCardBuilder(catalog, cfg.pricing.videoPriceSet).get('clip-2.0', allOn) as VideoCard;
  t.same(card.pricing.ink_per_5_second_clip, { '480p': 40, '720p': 86, '1080p': 211 });
  t.same(card.pricing.ink_per_second, { '480p': 7.9, '720p': 17, '1080p': 42.1 });
  const dflt = createCardBuilder(catalog, loadConfig({}).pricing.videoPriceSet).get('clip-2.0', allOn) as VideoCard;
  t.same(dflt.pricing.ink_per_5_second_clip, { '480p': 35, '720p': 76, '1080p': 189 });
});

t.test('unlisted models have no card but still resolve for the ledger', async (t) => {
  const raw = rawModels();
  raw.image![0]!.listed = false;
  const cat = parseCatalog(raw);
  const cards = createCardBuilder(cat, 'billing');
  t.equal(cards.get('image-1', allOn), undefined);
  t.notOk(cards.list(allOn).data.some((c) => c.id === 'image-1'));
  t.equal(cat.image('image-1')?.id, 'image-1');
});

t.test('decimal rates convert exactly', async (t) => {
  t.equal(decimalToMicro('10.225'), 10_225_000);
  t.equal(decimalToMicro('26'), 26_000_000);
  t.equal(decimalToMicro('0.000001'), 1);
  t.equal(decimalToMicro('999999.999999'), 999_999_999_999);
  t.throws(() => decimalToMicro('1.1234567'), RangeError);
  t.throws(() => decimalToMicro('-1'), RangeError);
  t.throws(() => decimalToMicro('1e3'), RangeError);
});

t.test('a bad catalogue is refused with every problem named', async (t) => {
  const bad = (mutate: (raw: Record<string, Record<string, unknown>[]>) => void, pattern: RegExp, what: string) => {
    const raw = rawModels();
    mutate(raw);
    t.throws(() => parseCatalog(raw, 'test.json'), pattern, what);
  };
  const video = (raw: Record<string, Record<string, unknown>[]>, i = 0) => raw.video![i]! as Record<string, any>;
  const text = (raw: Record<string, Record<string, unknown>[]>, i = 0) => raw.text![i]! as Record<string, any>;
  bad((r) => (video(r).ink_per_second.billing['480p'] = 10.2), /ink_per_second/, 'a rate as a float, not a decimal string');
  bad((r) => (video(r).ink_per_second.billing['480p'] = '10.2250001'), /ink_per_second/, 'more than six decimals');
  bad((r) => delete video(r).ink_per_second.catalogue['720p'], /lacks offered resolution 720p/, 'a missing rate');
  bad((r) => (video(r, 2).ink_per_second.billing['1080p'] = '40'), /not offered/, 'a rate for a resolution not offered');
  bad((r) => (video(r).resolution_ceiling_by_aspect = { '9:16': '4k' }), /resolution_ceiling_by_aspect/, 'a bad ceiling');
  bad((r) => (text(r, 1).aliases = ['astra']), /"astra" is used by both/, 'a duplicate alias');
  bad((r) => (text(r).ink_per_million_tokens.cache_write = 100), /cache_write must be the highest/, 'a hold that would not cover the charge');
  bad((r) => (text(r).long_context.ink_per_million_tokens.output = 1000), /long_context rates must not be below/, 'a cheaper long tier');
  bad((r) => (text(r).endpoint = '/v1/messages'), /is served on \/v1\/responses/, 'protocol and endpoint disagree');
  bad((r) => (text(r).ink_per_million_tokens.input = 37.5), /ink_per_million_tokens/, 'a fractional token rate');
  bad((r) => (text(r).surprise = true), /surprise|additional|unexpected/i, 'an unknown field');
  bad((r) => (r.image![0]!.default_size = '8K'), /default_size/, 'a bad default size');
  t.throws(() => loadCatalog('/nonexistent/models.json'), /cannot read/);
});
