// Image submit validation: every bad input answers a shared code with its `param`, the defaults,
// the normalised request, and the documented order of checks. Plus the pieces under it: the PNG
// encoder, the header reader and the Gemini answer parser (against the vendor's recorded JSON).
import { readFileSync } from 'node:fs';
import { inflateSync } from 'node:zlib';
import t from 'tap';
import { defaultCatalog } from '../../src/catalog/models.js';
import { ApiError } from '../../src/errors.js';
import { imagePixelSize } from '../../src/generations/images/image-size.js';
import { MAX_IMAGE_PROMPT_CHARS, validateImageRequest } from '../../src/generations/images/validate.js';
import { imageInk } from '../../src/catalog/pricing.js';
import { geminiRequestBody, parseImageResponse } from '../../src/vendors/gemini/client.js';
import { crc32, solidPng } from '../../simulators/gemini/png.js';

const catalog = defaultCatalog();
const url = (i: number) => `https://cdn.example.com/ref/${i}.png`;

function fails(body: Record<string, unknown>): { code: string; param: string | undefined; status: number } {
  try {
    validateImageRequest(body, catalog);
  } catch (e) {
    if (e instanceof ApiError) return { code: e.code, param: e.param, status: e.status };
    throw e;
  }
  return { code: 'accepted', param: undefined, status: 0 };
}
const base = { model: 'image-1', prompt: 'a lighthouse at dusk' };

t.test('defaults and normalisation', async (t) => {
  const v = validateImageRequest({ ...base, metadata: { z: 1, a: 2 } }, catalog);
  t.same(v.request, { model: 'image-1', prompt: 'a lighthouse at dusk', size: '1K', aspect_ratio: '1:1', metadata: { z: 1, a: 2 } });
  t.same(v.urls, []);
  const full = validateImageRequest({ ...base, size: '4K', aspect_ratio: '21:9', seed: 7, reference_image_urls: [url(1), url(2)] }, catalog);
  t.same(full.request, { model: 'image-1', prompt: 'a lighthouse at dusk', size: '4K', aspect_ratio: '21:9', seed: 7, reference_image_urls: [url(1), url(2)] });
  t.same(
    full.urls.map((u) => u.param),
    ['reference_image_urls[0]', 'reference_image_urls[1]'],
  );
  t.equal(fails({ ...base, size: null, aspect_ratio: null, seed: null, reference_image_urls: null, metadata: null }).code, 'accepted', 'null = absent');
  t.notOk('reference_image_urls' in validateImageRequest({ ...base, reference_image_urls: [] }, catalog).request, 'an empty list is none');
  t.equal(fails({ ...base, reference_image_urls: Array.from({ length: 14 }, (_, i) => url(i)) }).code, 'accepted', '14 references are allowed');
  t.equal(fails({ ...base, prompt: 'é'.repeat(MAX_IMAGE_PROMPT_CHARS) }).code, 'accepted', 'the limit counts characters');
});

t.test('prices: 3 / 4 / 10 Ink per image', async (t) => {
  t.same(
    ['1K', '2K', '4K'].map((s) => imageInk(s as '1K')),
    [3, 4, 10],
  );
});

t.test('every bad input: code, param, 400', async (t) => {
  const cases: Array<[string, Record<string, unknown>, string, string]> = [
    ['no model', { prompt: 'x' }, 'unknown_model', 'model'],
    ['model not a string', { model: 5, prompt: 'x' }, 'unknown_model', 'model'],
    ['unknown model', { model: 'image-9', prompt: 'x' }, 'unknown_model', 'model'],
    ['a video model', { model: 'clip-2.5', prompt: 'x' }, 'unknown_model', 'model'],
    ['a text model', { model: 'text-6-astra', prompt: 'x' }, 'unknown_model', 'model'],
    ['unknown field', { ...base, style: 'vivid' }, 'unsupported_parameter', 'style'],
    ['n (one image per request)', { ...base, n: 2 }, 'unsupported_parameter', 'n'],
    ['video field', { ...base, duration: 5 }, 'unsupported_parameter', 'duration'],
    ['prompt not a string', { ...base, prompt: 42 }, 'invalid_type', 'prompt'],
    ['prompt too long', { ...base, prompt: 'a'.repeat(MAX_IMAGE_PROMPT_CHARS + 1) }, 'too_long', 'prompt'],
    ['size unknown', { ...base, size: '8K' }, 'invalid_enum', 'size'],
    ['size lower case', { ...base, size: '1k' }, 'invalid_enum', 'size'],
    ['size as pixels', { ...base, size: '1024x1024' }, 'invalid_enum', 'size'],
    ['size not a string', { ...base, size: 1 }, 'invalid_enum', 'size'],
    ['aspect unknown', { ...base, aspect_ratio: '7:3' }, 'invalid_enum', 'aspect_ratio'],
    ['aspect adaptive (video only)', { ...base, aspect_ratio: 'adaptive' }, 'invalid_enum', 'aspect_ratio'],
    ['seed fraction', { ...base, seed: 1.5 }, 'invalid_seed', 'seed'],
    ['seed too large', { ...base, seed: 2_147_483_648 }, 'invalid_seed', 'seed'],
    ['seed below -1', { ...base, seed: -2 }, 'invalid_seed', 'seed'],
    ['seed a string', { ...base, seed: '7' }, 'invalid_seed', 'seed'],
    ['references not an array', { ...base, reference_image_urls: url(1) }, 'invalid_type', 'reference_image_urls'],
    ['15 references', { ...base, reference_image_urls: Array.from({ length: 15 }, (_, i) => url(i)) }, 'too_many', 'reference_image_urls'],
    ['reference not a string', { ...base, reference_image_urls: [url(0), 7] }, 'invalid_type', 'reference_image_urls[1]'],
    ['reference too long', { ...base, reference_image_urls: ['https://cdn.example.com/' + 'a'.repeat(2100)] }, 'too_long', 'reference_image_urls[0]'],
    ['reference http', { ...base, reference_image_urls: ['http://cdn.example.com/a.png'] }, 'invalid_url', 'reference_image_urls[0]'],
    ['reference with credentials', { ...base, reference_image_urls: ['https://u:p@cdn.example.com/a.png'] }, 'invalid_url', 'reference_image_urls[0]'],
    ['reference private host', { ...base, reference_image_urls: ['https://10.0.0.1/a.png'] }, 'invalid_url', 'reference_image_urls[0]'],
    ['third reference private host', { ...base, reference_image_urls: [url(0), url(1), 'https://10.0.0.1/a.png'] }, 'invalid_url', 'reference_image_urls[2]'],
    ['reference loopback', { ...base, reference_image_urls: ['https://127.0.0.1/a.png'] }, 'invalid_url', 'reference_image_urls[0]'],
    ['reference not a URL', { ...base, reference_image_urls: ['not a url'] }, 'invalid_url', 'reference_image_urls[0]'],
    ['metadata an array', { ...base, metadata: [1] }, 'invalid_type', 'metadata'],
    ['metadata a string', { ...base, metadata: 'x' }, 'invalid_type', 'metadata'],
    ['metadata too big', { ...base, metadata: { a: 'x'.repeat(4100) } }, 'too_long', 'metadata'],
    ['no prompt', { model: 'image-1' }, 'missing_prompt', 'prompt'],
    ['blank prompt', { model: 'image-1', prompt: '  \n ' }, 'missing_prompt', 'prompt'],
    ['references but no prompt', { model: 'image-1', reference_image_urls: [url(1)] }, 'missing_prompt', 'prompt'],
  ];
  for (const [name, body, code, param] of cases) {
    const r = fails(body);
    t.same(r, { code, param, status: 400 }, name);
  }
});

t.test('order of checks: the first failure in the documented order answers', async (t) => {
  t.equal(fails({ model: 'nope', n: 2, prompt: 5 }).code, 'unknown_model');
  t.equal(fails({ ...base, n: 2, prompt: 5 }).code, 'unsupported_parameter');
  t.equal(fails({ ...base, prompt: 5, size: '9K' }).param, 'prompt');
  t.equal(fails({ ...base, size: '9K', aspect_ratio: 'x' }).param, 'size');
  t.equal(fails({ ...base, aspect_ratio: 'x', seed: 'x' }).param, 'aspect_ratio');
  t.equal(fails({ ...base, seed: 'x', reference_image_urls: 'x' }).param, 'seed');
  t.equal(fails({ ...base, reference_image_urls: 'x', metadata: 'x' }).param, 'reference_image_urls');
  t.equal(fails({ model: 'image-1', metadata: 'x' }).code, 'invalid_type', 'metadata before missing_prompt');
});

t.test('solidPng writes a valid PNG of the asked size', async (t) => {
  t.equal(crc32(Buffer.from('IEND')), 0xae426082, 'CRC-32 of IEND is the well-known constant');
  const png = solidPng(5, 3, [1, 2, 3]);
  t.same(imagePixelSize(png), { width: 5, height: 3, contentType: 'image/png' });
  // Walk the chunks: every CRC must match, IDAT must inflate to height rows of 1 + 3*width bytes.
  let off = 8;
  const types: string[] = [];
  let idat = Buffer.alloc(0);
  while (off < png.length) {
    const len = png.readUInt32BE(off);
    const type = png.toString('latin1', off + 4, off + 8);
    const data = png.subarray(off + 8, off + 8 + len);
    t.equal(png.readUInt32BE(off + 8 + len), crc32(png.subarray(off + 4, off + 8), data), `${type} CRC`);
    if (type === 'IDAT') idat = Buffer.concat([idat, data]);
    types.push(type);
    off += 12 + len;
  }
  t.same(types, ['IHDR', 'IDAT', 'IEND']);
  const raw = inflateSync(idat);
  t.equal(raw.length, 3 * (1 + 5 * 3));
  t.same([...raw.subarray(0, 4)], [0, 1, 2, 3], 'filter byte then the colour');
  const big = solidPng(4096, 4096);
  t.same(imagePixelSize(big), { width: 4096, height: 4096, contentType: 'image/png' });
  t.ok(big.length < 200_000, `a solid 4096x4096 PNG stays small (${big.length} bytes)`);
});

t.test('imagePixelSize reads JPEG and refuses junk', async (t) => {
  // SOI, APP0 (len 16), SOF0 (len 17): height 300, width 400
  const jpeg = Buffer.from([
    0xff,
    0xd8,
    0xff,
    0xe0,
    0x00,
    0x10,
    ...Buffer.alloc(14),
    0xff,
    0xc0,
    0x00,
    0x11,
    0x08,
    0x01,
    0x2c,
    0x01,
    0x90,
    0x03,
    ...Buffer.alloc(9),
  ]);
  t.same(imagePixelSize(jpeg), { width: 400, height: 300, contentType: 'image/jpeg' });
  t.equal(imagePixelSize(Buffer.from('not an image at all, really not')), undefined);
  t.equal(imagePixelSize(solidPng(2, 2).subarray(0, 20)), undefined, 'a cut header');
});

const vendorDir = new URL('../fixtures/gemini', import.meta.url).pathname;
t.test('the Gemini wire format', async (t) => {
  const sample = JSON.parse(readFileSync(`${vendorDir}/gemini_response.json`, 'utf8'));
  const ok = parseImageResponse(sample);
  t.equal(ok.kind, 'image');
  if (ok.kind === 'image') {
    t.equal(ok.mimeType, 'image/jpeg');
    t.equal(ok.responseId, 'KStzabiTDuClqtsP9KiFkQE');
    t.same(ok.usage, { promptTokens: 147, candidatesTokens: 1220, thoughtsTokens: 215, totalTokens: 1582 });
  }
  const safety = parseImageResponse(JSON.parse(readFileSync(`${vendorDir}/gemini_response_image_safety.json`, 'utf8')));
  t.equal(safety.kind, 'blocked');
  if (safety.kind === 'blocked') {
    t.equal(safety.reason, 'IMAGE_SAFETY');
    t.match(safety.message, /filtered out/);
    t.equal(safety.usage.thoughtsTokens, 291);
    t.equal(safety.usage.candidatesTokens, 0);
  }
  const blocked = parseImageResponse({ promptFeedback: { blockReason: 'PROHIBITED_CONTENT' }, usageMetadata: { promptTokenCount: 9 } });
  t.same(blocked.kind === 'blocked' && blocked.reason, 'PROHIBITED_CONTENT');
  const thoughtOnly = parseImageResponse({
    candidates: [{ content: { parts: [{ thought: true, inlineData: { mimeType: 'image/png', data: 'AAAA' } }] }, finishReason: 'STOP' }],
  });
  t.equal(thoughtOnly.kind, 'no_image', 'an interim thought image is not the result');
  // The same answers in proto field names (snake_case), as servers built from the proto or the
  // Python types write them: read the same.
  const snake = (v: unknown): unknown =>
    Array.isArray(v)
      ? v.map(snake)
      : v && typeof v === 'object'
        ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k.replace(/[A-Z]/g, (c) => '_' + c.toLowerCase()), snake(x)]))
        : v;
  t.same(parseImageResponse(snake(sample)), ok, 'snake_case answer: the same image, id and usage');
  const safetySnake = parseImageResponse(snake(JSON.parse(readFileSync(`${vendorDir}/gemini_response_image_safety.json`, 'utf8'))));
  t.same(safetySnake, safety, 'snake_case safety block: the same');
  t.same(parseImageResponse({ prompt_feedback: { block_reason: 'PROHIBITED_CONTENT' } }).kind, 'blocked');
  t.throws(() => parseImageResponse([]), { name: 'GeminiError' });
  t.throws(() => parseImageResponse({ candidates: [] }), { name: 'GeminiError' });

  const req = JSON.parse(readFileSync(`${vendorDir}/gemini_request.json`, 'utf8'));
  const ours = geminiRequestBody({
    vendorModel: 'gemini-3-pro-image-preview',
    prompt: 'p',
    imageSize: '4K',
    aspectRatio: '16:9',
    seed: -1,
    references: [
      { mimeType: 'image/png', data: Buffer.from('a') },
      { mimeType: 'image/jpeg', data: Buffer.from('b') },
    ],
  });
  t.same(Object.keys(ours), Object.keys(req), 'same top-level fields as the vendor example');
  t.same(ours.generationConfig, req.generationConfig, 'responseModalities and imageConfig as documented; seed -1 (random) is not sent');
  t.same(
    (ours.contents as any)[0].parts.map((p: any) => Object.keys(p)[0]),
    req.contents[0].parts.map((p: any) => Object.keys(p)[0]),
  );
  t.equal((geminiRequestBody({ vendorModel: 'm', prompt: 'p', imageSize: '1K', aspectRatio: '1:1', seed: 42 }).generationConfig as any).seed, 42);
});
