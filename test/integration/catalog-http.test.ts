// GET /v1/models and /v1/models/{id} over HTTP: public, cards per docs/api/models.md's tables, availability
// following lane, vendor configuration and pauses, both published video price sets.
import t from 'tap';
import { pauseModel, resumeModel, setLane } from '../../src/deployment/state.js';
import { startTestGateway } from '../helpers/gateway.js';

const vendors = {
  anthropic: { baseUrl: 'http://127.0.0.1:9', apiKey: 'k' },
  openai: { baseUrl: 'http://127.0.0.1:9', apiKey: 'k' },
  ark: { baseUrl: 'http://127.0.0.1:9', apiKey: 'k' },
  gemini: { baseUrl: 'http://127.0.0.1:9', apiKey: 'k' },
};

t.test('catalogue', async (t) => {
  const g = await startTestGateway(t, { vendors });
  const list = await g.call('GET', '/v1/models');
  t.equal(list.status, 200);
  t.equal(list.json.object, 'list');
  const ids = list.json.data.map((c: any) => c.id);
  for (const id of ['clip-2.5', 'clip-2.0', 'clip-2.0-fast', 'text-6-astra', 'assistant-fable-5-1', 'assistant-opus-5', 'assistant-sonnet-5']) {
    t.ok(ids.includes(id), `${id} listed`);
  }
  t.equal(new Set(ids).size, ids.length, 'one card per model');

  const clip = (await g.call('GET', '/v1/models/clip-2.5')).json;
  t.match(clip, { id: 'clip-2.5', object: 'model', type: 'video', label: 'Clip 2.5', endpoint: '/v1/video/generations', available: true });
  t.equal(clip.pricing.unit, 'second');
  t.same(clip.pricing.ink_per_5_second_clip, { '480p': 52, '720p': 115, '1080p': 284 }, 'billing table by default');
  t.same(clip.constraints.resolution_ceiling_by_aspect, { '9:16': '720p', adaptive: '720p' });
  t.same(clip.constraints.duration_seconds, { min: 4, max: 30 });
  t.same(clip.constraints.references, { total: 50, images: 30, videos: 10, audio: 10 });
  const fast = (await g.call('GET', '/v1/models/clip-2.0-fast')).json;
  t.notOk('resolution_ceiling_by_aspect' in fast.constraints, 'absent when there is none');
  t.same(fast.constraints.resolutions, ['480p', '720p']);

  const astra = await g.call('GET', '/v1/models/astra');
  t.equal(astra.status, 200, 'aliases resolve');
  t.equal(astra.json.id, 'text-6-astra');
  t.match(astra.json, { type: 'text', protocol: 'openai-responses', endpoint: '/v1/responses' });
  t.same(astra.json.pricing.input, { ink: 375, usd_payg: 3.75 });
  t.equal(astra.json.pricing.long_context.above_input_tokens, 272000);
  t.match(astra.json.constraints, { max_input_tokens: 922000, default_max_output_tokens: 32768, max_output_tokens: 128000, images: false, streaming: true });
  t.equal(astra.json.available, false, 'text lanes stay closed until certified');

  const missing = await g.call('GET', '/v1/models/gpt-4');
  t.equal(missing.status, 404);
  t.equal(missing.json.error.code, 'model_not_found');

  // Lane switch and pause flip `available`.
  await setLane(g.db.pool, 'responses', true);
  await pauseModel(g.db.pool, 'clip-2.5', 120);
  await g.gw.services.state.refresh();
  t.equal((await g.call('GET', '/v1/models/astra')).json.available, true);
  t.equal((await g.call('GET', '/v1/models/clip-2.5')).json.available, false, 'paused model');
  await resumeModel(g.db.pool, 'clip-2.5');
  await g.gw.services.state.refresh();
  t.equal((await g.call('GET', '/v1/models/clip-2.5')).json.available, true);
});

t.test('a lane without a configured vendor is not available', async (t) => {
  const g = await startTestGateway(t);
  t.equal((await g.call('GET', '/v1/models/clip-2.0')).json.available, false);
});

t.test('the second published price set is selectable by config alone', async (t) => {
  const g = await startTestGateway(t, { pricing: { videoPriceSet: 'catalogue' } });
  const clips = Object.fromEntries(
    (await g.call('GET', '/v1/models')).json.data.filter((c: any) => c.type === 'video').map((c: any) => [c.id, c.pricing.ink_per_5_second_clip]),
  );
  t.same(clips, {
    'clip-2.5': { '480p': 58, '720p': 130, '1080p': 320 },
    'clip-2.0': { '480p': 40, '720p': 86, '1080p': 211 },
    'clip-2.0-fast': { '480p': 32, '720p': 69 },
  });
});
