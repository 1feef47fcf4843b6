// Video submit validation against docs/api/video.md's request table and submit codes: every code
// with its `param`, the defaults, the normalised request, and the documented order of checks.
import t from 'tap';
import { defaultCatalog } from '../../src/catalog/models.js';
import { ApiError } from '../../src/errors.js';
import { validateVideoRequest } from '../../src/generations/video/validate.js';

const catalog = defaultCatalog();
const img = (i: number) => `https://cdn.example.com/img/${i}.png`;
const vid = (i: number) => `https://cdn.example.com/vid/${i}.mp4`;
const aud = (i: number) => `https://cdn.example.com/aud/${i}.mp3`;
const list = (n: number, f: (i: number) => string) => Array.from({ length: n }, (_, i) => f(i));

function fails(body: Record<string, unknown>, allowList?: ReadonlySet<string>): { code: string; param: string | undefined; status: number } {
  try {
    validateVideoRequest(body, catalog, { allowList });
  } catch (e) {
    if (e instanceof ApiError) return { code: e.code, param: e.param, status: e.status };
    throw e;
  }
  return { code: 'accepted', param: undefined, status: 0 };
}

const base = { model: 'clip-2.5', prompt: 'a cat' };

t.test('defaults are filled and the request is normalised', async (t) => {
  const v = validateVideoRequest({ model: 'clip-2.0', prompt: 'a cat', metadata: { b: 1, a: [1, 2] } }, catalog);
  t.same(v.request, {
    model: 'clip-2.0',
    prompt: 'a cat',
    aspect_ratio: '16:9',
    resolution: '720p',
    duration: 5,
    generate_audio: true,
    metadata: { b: 1, a: [1, 2] },
  });
  t.same(Object.keys(v.request.metadata!), ['b', 'a'], 'metadata echoed with its keys in the order given');
  t.equal(v.urls.length, 0);
  const n = validateVideoRequest({ ...base, seed: null, duration: null, reference_image_urls: [] }, catalog);
  t.equal(n.request.duration, 5, 'null is the same as absent');
  t.notOk('seed' in n.request);
  t.notOk('reference_image_urls' in n.request, 'an empty list is the same as none');
});

t.test('reference lists keep their order; every URL is listed for the fetch check', async (t) => {
  const v = validateVideoRequest(
    { model: 'clip-2.0', prompt: 'p', reference_image_urls: [img(3), img(1), img(2)], reference_video_urls: [vid(0)], reference_audio_urls: [aud(0)] },
    catalog,
  );
  t.same(v.request.reference_image_urls, [img(3), img(1), img(2)]);
  t.same(
    v.urls.map((u) => u.param),
    ['reference_image_urls[0]', 'reference_image_urls[1]', 'reference_image_urls[2]', 'reference_video_urls[0]', 'reference_audio_urls[0]'],
  );
});

t.test('every submit code with its param', async (t) => {
  const cases: Array<[string, Record<string, unknown>, string, string]> = [
    ['no model', { prompt: 'x' }, 'unknown_model', 'model'],
    ['unknown model', { model: 'clip-9', prompt: 'x' }, 'unknown_model', 'model'],
    ['text model id', { model: 'assistant-opus-5', prompt: 'x' }, 'unknown_model', 'model'],
    ['model not a string', { model: 5, prompt: 'x' }, 'unknown_model', 'model'],
    ['unknown field', { ...base, camera_fixed: true }, 'unsupported_parameter', 'camera_fixed'],
    ['prompt not a string', { model: 'clip-2.5', prompt: 5 }, 'invalid_type', 'prompt'],
    ['prompt 4,001 characters', { model: 'clip-2.5', prompt: 'x'.repeat(4001) }, 'too_long', 'prompt'],
    ['aspect ratio unknown', { ...base, aspect_ratio: '2:1' }, 'invalid_enum', 'aspect_ratio'],
    ['aspect ratio not a string', { ...base, aspect_ratio: 16 }, 'invalid_enum', 'aspect_ratio'],
    ['resolution unknown', { ...base, resolution: '4k' }, 'invalid_enum', 'resolution'],
    ['clip-2.0-fast has no 1080p', { model: 'clip-2.0-fast', prompt: 'x', resolution: '1080p' }, 'unsupported_resolution', 'resolution'],
    ['clip-2.5 refuses 1080p with 9:16', { ...base, resolution: '1080p', aspect_ratio: '9:16' }, 'unsupported_resolution', 'resolution'],
    ['clip-2.5 refuses 1080p with adaptive', { ...base, resolution: '1080p', aspect_ratio: 'adaptive' }, 'unsupported_resolution', 'resolution'],
    ['duration auto', { ...base, duration: 'auto' }, 'unsupported_parameter', 'duration'],
    ['duration -1', { ...base, duration: -1 }, 'unsupported_parameter', 'duration'],
    ['duration 3', { ...base, duration: 3 }, 'invalid_duration', 'duration'],
    ['duration 31 on clip-2.5', { ...base, duration: 31 }, 'invalid_duration', 'duration'],
    ['duration 16 on clip-2.0', { model: 'clip-2.0', prompt: 'x', duration: 16 }, 'invalid_duration', 'duration'],
    ['duration 16 on clip-2.0-fast', { model: 'clip-2.0-fast', prompt: 'x', duration: 16 }, 'invalid_duration', 'duration'],
    ['duration 5.5', { ...base, duration: 5.5 }, 'invalid_duration', 'duration'],
    ['duration "5"', { ...base, duration: '5' }, 'invalid_duration', 'duration'],
    ['generate_audio not a boolean', { ...base, generate_audio: 'yes' }, 'invalid_type', 'generate_audio'],
    ['seed -2', { ...base, seed: -2 }, 'invalid_seed', 'seed'],
    ['seed 2147483648', { ...base, seed: 2147483648 }, 'invalid_seed', 'seed'],
    ['seed 1.5', { ...base, seed: 1.5 }, 'invalid_seed', 'seed'],
    ['first frame not a string', { ...base, first_frame_url: 7 }, 'invalid_type', 'first_frame_url'],
    ['first frame http', { ...base, first_frame_url: 'http://cdn.example.com/a.png' }, 'invalid_url', 'first_frame_url'],
    ['first frame with credentials', { ...base, first_frame_url: 'https://u:p@cdn.example.com/a.png' }, 'invalid_url', 'first_frame_url'],
    ['first frame not a URL', { ...base, first_frame_url: 'not a url' }, 'invalid_url', 'first_frame_url'],
    ['first frame 2,049 characters', { ...base, first_frame_url: 'https://cdn.example.com/' + 'a'.repeat(2025) }, 'too_long', 'first_frame_url'],
    ['first frame loopback', { ...base, first_frame_url: 'https://127.0.0.1/a.png' }, 'invalid_url', 'first_frame_url'],
    ['last frame http', { ...base, first_frame_url: img(0), last_frame_url: 'http://cdn.example.com/b.png' }, 'invalid_url', 'last_frame_url'],
    ['reference list not an array', { ...base, reference_image_urls: img(0) }, 'invalid_type', 'reference_image_urls'],
    ['reference element not a string', { ...base, reference_image_urls: [img(0), 5] }, 'invalid_type', 'reference_image_urls[1]'],
    ['reference element private address', { ...base, reference_video_urls: ['https://10.0.0.1/v.mp4'] }, 'invalid_url', 'reference_video_urls[0]'],
    [
      'third reference element private address',
      { ...base, reference_image_urls: [img(0), img(1), 'https://10.0.0.1/i.png'] },
      'invalid_url',
      'reference_image_urls[2]',
    ],
    ['31 images on clip-2.5', { ...base, reference_image_urls: list(31, img) }, 'too_many', 'reference_image_urls'],
    ['11 videos on clip-2.5', { ...base, reference_video_urls: list(11, vid) }, 'too_many', 'reference_video_urls'],
    ['11 audio on clip-2.5', { ...base, reference_audio_urls: list(11, aud) }, 'too_many', 'reference_audio_urls'],
    ['10 images on clip-2.0', { model: 'clip-2.0', prompt: 'x', reference_image_urls: list(10, img) }, 'too_many', 'reference_image_urls'],
    ['4 videos on clip-2.0-fast', { model: 'clip-2.0-fast', prompt: 'x', reference_video_urls: list(4, vid) }, 'too_many', 'reference_video_urls'],
    [
      '4 audio on clip-2.0',
      { model: 'clip-2.0', prompt: 'x', reference_image_urls: [img(0)], reference_audio_urls: list(4, aud) },
      'too_many',
      'reference_audio_urls',
    ],
    ['metadata an array', { ...base, metadata: [1] }, 'invalid_type', 'metadata'],
    ['metadata a string', { ...base, metadata: 'x' }, 'invalid_type', 'metadata'],
    ['metadata above 4 KiB', { ...base, metadata: { k: 'x'.repeat(4096) } }, 'too_long', 'metadata'],
    ['last frame without first', { ...base, last_frame_url: img(1) }, 'missing_first_frame', 'last_frame_url'],
    ['frames and references', { ...base, first_frame_url: img(0), reference_video_urls: [vid(0)] }, 'conflicting_references', 'reference_video_urls'],
    [
      '13 references on clip-2.0',
      { model: 'clip-2.0', prompt: 'x', reference_image_urls: list(9, img), reference_video_urls: list(3, vid), reference_audio_urls: [aud(0)] },
      'reference_limit',
      'reference_audio_urls',
    ],
    ['audio alone on clip-2.0', { model: 'clip-2.0', prompt: 'x', reference_audio_urls: [aud(0)] }, 'reference_limit', 'reference_audio_urls'],
    ['audio alone on clip-2.0-fast', { model: 'clip-2.0-fast', prompt: 'x', reference_audio_urls: [aud(0)] }, 'reference_limit', 'reference_audio_urls'],
    ['no prompt, nothing else', { model: 'clip-2.5' }, 'missing_prompt', 'prompt'],
    ['blank prompt', { model: 'clip-2.5', prompt: '   ' }, 'missing_prompt', 'prompt'],
    ['no prompt, audio only on clip-2.5', { model: 'clip-2.5', reference_audio_urls: [aud(0)] }, 'missing_prompt', 'prompt'],
  ];
  for (const [name, body, code, param] of cases) {
    const got = fails(body);
    t.same(got, { code, param, status: 400 }, name);
  }
});

t.test('accepted edges', async (t) => {
  const ok: Array<[string, Record<string, unknown>]> = [
    ['prompt exactly 4,000 characters', { model: 'clip-2.5', prompt: 'x'.repeat(4000) }],
    ['prompt of 4,000 astral characters', { model: 'clip-2.5', prompt: '😀'.repeat(4000) }],
    ['duration 4 and 30 on clip-2.5', { ...base, duration: 30 }],
    ['duration 15 on clip-2.0', { model: 'clip-2.0', prompt: 'x', duration: 15 }],
    ['seed -1 and max', { ...base, seed: 2147483647 }],
    ['seed -1', { ...base, seed: -1 }],
    ['720p with 9:16 on clip-2.5', { ...base, resolution: '720p', aspect_ratio: '9:16' }],
    ['1080p with 21:9 on clip-2.5', { ...base, resolution: '1080p', aspect_ratio: '21:9' }],
    ['1080p with adaptive on clip-2.0', { model: 'clip-2.0', prompt: 'x', resolution: '1080p', aspect_ratio: 'adaptive' }],
    ['first frame carries the intent', { model: 'clip-2.5', first_frame_url: img(0), last_frame_url: img(1) }],
    ['image reference carries the intent', { model: 'clip-2.0', reference_image_urls: [img(0)] }],
    ['video reference carries the intent', { model: 'clip-2.0', reference_video_urls: [vid(0)], reference_audio_urls: [aud(0)] }],
    ['audio alone with a prompt on clip-2.5', { model: 'clip-2.5', prompt: 'x', reference_audio_urls: [aud(0)] }],
    ['12 references on clip-2.0', { model: 'clip-2.0', prompt: 'x', reference_image_urls: list(9, img), reference_video_urls: list(3, vid) }],
    ['50 references on clip-2.5', { ...base, reference_image_urls: list(30, img), reference_video_urls: list(10, vid), reference_audio_urls: list(10, aud) }],
    ['metadata at 4 KiB', { ...base, metadata: { k: 'x'.repeat(4096 - 8) } }],
    ['URL of 2,048 characters', { ...base, first_frame_url: 'https://cdn.example.com/' + 'a'.repeat(2024) }],
  ];
  for (const [name, body] of ok) t.equal(fails(body).code, 'accepted', name);
});

t.test('order of checks: the first failure in the documented order answers', async (t) => {
  t.equal(fails({ model: 'nope', prompt: 5, duration: 'auto' }).code, 'unknown_model', 'model before everything');
  t.equal(fails({ model: 'clip-2.5', foo: 1, prompt: 5 }).code, 'unsupported_parameter', 'unknown fields before field checks');
  t.equal(fails({ model: 'clip-2.5', prompt: 5, aspect_ratio: 'x' }).param, 'prompt', 'prompt before aspect ratio');
  t.equal(
    fails({ model: 'clip-2.5', prompt: 'p', resolution: '1080p', aspect_ratio: '9:16', duration: 99 }).code,
    'unsupported_resolution',
    'resolution before duration',
  );
  t.equal(fails({ model: 'clip-2.5', prompt: 'p', duration: 99, seed: -5 }).code, 'invalid_duration', 'duration before seed');
  t.equal(fails({ model: 'clip-2.5', prompt: 'p', seed: -5, first_frame_url: 'http://x.example.com' }).code, 'invalid_seed', 'seed before URLs');
  t.equal(
    fails({ model: 'clip-2.0', prompt: 'p', reference_image_urls: ['http://a.example.com', ...list(9, img)] }).code,
    'too_many',
    'the per-kind cap before each element',
  );
  t.equal(
    fails({ model: 'clip-2.5', last_frame_url: img(1), reference_image_urls: [img(0)] }).code,
    'missing_first_frame',
    'missing first frame before conflicting references',
  );
  t.equal(
    fails({ model: 'clip-2.0', first_frame_url: img(0), reference_audio_urls: [aud(0)] }).code,
    'conflicting_references',
    'conflict before the audio anchor',
  );
  t.equal(fails({ model: 'clip-2.0', reference_audio_urls: [aud(0)] }).code, 'reference_limit', 'reference limit before missing prompt');
});

t.test('an allow-listed test host is exempt from the host rule only', async (t) => {
  const allow = new Set(['127.0.0.1:8443']);
  t.equal(fails({ ...base, first_frame_url: 'https://127.0.0.1:8443/a.png' }, allow).code, 'accepted');
  t.equal(fails({ ...base, first_frame_url: 'https://127.0.0.1:8444/a.png' }, allow).code, 'invalid_url', 'another port is not exempt');
  t.equal(fails({ ...base, first_frame_url: 'http://127.0.0.1:8443/a.png' }, allow).code, 'invalid_url', 'https still required');
  t.equal(fails({ ...base, first_frame_url: 'https://u:p@127.0.0.1:8443/a.png' }, allow).code, 'invalid_url', 'credentials still refused');
});
