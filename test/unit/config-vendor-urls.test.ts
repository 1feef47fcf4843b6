// Vendor base URLs as operators write them: with or without the API path, with a trailing slash,
// behind a proxy prefix. Each becomes the form our clients join their paths to.
import t from 'tap';
import { loadConfig, vendorBaseUrl } from '../../src/config/config.js';

t.test('each vendor: a bare host gets the API path its SDKs use; a written path is kept', async (t) => {
  const cases: Array<[Parameters<typeof vendorBaseUrl>[0], string, string]> = [
    ['anthropic', 'https://api.anthropic.com', 'https://api.anthropic.com'],
    ['anthropic', 'https://api.anthropic.com/', 'https://api.anthropic.com'],
    ['anthropic', 'https://api.anthropic.com/v1', 'https://api.anthropic.com'],
    ['anthropic', 'https://api.anthropic.com/v1/', 'https://api.anthropic.com'],
    ['anthropic', 'http://127.0.0.1:9000/proxy/anthropic', 'http://127.0.0.1:9000/proxy/anthropic'],
    ['anthropic', 'http://127.0.0.1:9000/proxy/v1', 'http://127.0.0.1:9000/proxy'],
    ['openai', 'https://api.openai.com', 'https://api.openai.com/v1'],
    ['openai', 'https://api.openai.com/v1', 'https://api.openai.com/v1'],
    ['openai', 'https://api.openai.com/v1/', 'https://api.openai.com/v1'],
    ['openai', 'http://127.0.0.1:9000/openai/v1', 'http://127.0.0.1:9000/openai/v1'],
    ['gemini', 'https://generativelanguage.googleapis.com', 'https://generativelanguage.googleapis.com/v1beta'],
    ['gemini', 'https://generativelanguage.googleapis.com/v1beta/', 'https://generativelanguage.googleapis.com/v1beta'],
    ['ark', 'https://ark.cn-beijing.volces.com', 'https://ark.cn-beijing.volces.com/api/v3'],
    ['ark', 'https://ark.cn-beijing.volces.com/api/v3', 'https://ark.cn-beijing.volces.com/api/v3'],
  ];
  for (const [vendor, raw, want] of cases) t.equal(vendorBaseUrl(vendor, raw), want, `${vendor} ${raw}`);
});

t.test('malformed base URLs are configuration errors, not requests gone astray', async (t) => {
  t.throws(() => vendorBaseUrl('openai', 'api.openai.com'), /not a URL/);
  t.throws(() => vendorBaseUrl('openai', 'ftp://api.openai.com'), /http\(s\)/);
  t.throws(() => vendorBaseUrl('openai', 'https://api.openai.com/v1?x=1'), /no query/);
  t.throws(() => vendorBaseUrl('openai', 'https://user:pw@api.openai.com/v1'), /no credentials/);
});

t.test('the environment names of DESIGN.md go through the same rule', async (t) => {
  const cfg = loadConfig({
    INKGATE_ANTHROPIC_BASE_URL: 'http://127.0.0.1:1/v1/',
    INKGATE_ANTHROPIC_API_KEY: 'k',
    INKGATE_OPENAI_BASE_URL: 'http://127.0.0.1:2',
    INKGATE_OPENAI_API_KEY: 'k',
  });
  t.equal(cfg.vendors.anthropic.baseUrl, 'http://127.0.0.1:1');
  t.equal(cfg.vendors.openai.baseUrl, 'http://127.0.0.1:2/v1');
  t.equal(cfg.vendors.ark.baseUrl, null, 'unset stays unset');
});

t.test('a comma-separated base URL is a pool of deployments, one key for all or one each', async (t) => {
  const one = loadConfig({ INKGATE_ANTHROPIC_BASE_URL: 'http://127.0.0.1:1/v1', INKGATE_ANTHROPIC_API_KEY: 'k' });
  t.same(one.vendors.anthropic.deployments, [{ name: '127.0.0.1:1', baseUrl: 'http://127.0.0.1:1', apiKey: 'k', weight: 1, maxConcurrent: null }]);
  t.equal(one.vendors.anthropic.baseUrl, 'http://127.0.0.1:1', 'a single URL reads as before');

  const shared = loadConfig({ INKGATE_OPENAI_BASE_URL: 'http://127.0.0.1:2, http://127.0.0.1:3/v1,http://127.0.0.1:2/other', INKGATE_OPENAI_API_KEY: 'k' });
  t.same(
    shared.vendors.openai.deployments.map((d) => [d.name, d.baseUrl, d.apiKey]),
    [
      ['127.0.0.1:2', 'http://127.0.0.1:2/v1', 'k'],
      ['127.0.0.1:3', 'http://127.0.0.1:3/v1', 'k'],
      ['127.0.0.1:2-2', 'http://127.0.0.1:2/other', 'k'],
    ],
    'each URL normalised, named after its host, the one key shared',
  );
  const each = loadConfig({ INKGATE_ARK_BASE_URL: 'http://127.0.0.1:4,http://127.0.0.1:5', INKGATE_ARK_API_KEY: 'a,b' });
  t.same(
    each.vendors.ark.deployments.map((d) => d.apiKey),
    ['a', 'b'],
  );
  t.throws(
    () => loadConfig({ INKGATE_ARK_BASE_URL: 'http://127.0.0.1:4,http://127.0.0.1:5,http://127.0.0.1:6', INKGATE_ARK_API_KEY: 'a,b' }),
    /INKGATE_ARK_API_KEY .*3 keys.*it has 2/,
    'a key list of another length is a start-up error naming the variable',
  );
  t.throws(
    () => loadConfig({ INKGATE_ARK_BASE_URL: 'http://127.0.0.1:4,not a url', INKGATE_ARK_API_KEY: 'a' }),
    /vendors\.ark\.baseUrl is not a URL: "not a url"/,
  );
  const noKey = loadConfig({ INKGATE_GEMINI_BASE_URL: 'http://127.0.0.1:7,http://127.0.0.1:8' });
  t.same(noKey.vendors.gemini.deployments, [], 'URLs without a key leave the vendor unconfigured, as before');
});

t.test('the file form: named deployments with weights; both forms at once is refused; a resolved config reloads', async (t) => {
  const deployments = [
    { name: 'us', baseUrl: 'http://127.0.0.1:1', apiKey: 'ka', weight: 3 },
    { name: 'eu', baseUrl: 'http://127.0.0.1:2/v1', apiKey: 'kb', maxConcurrent: 50 },
  ];
  const cfg = loadConfig({}, { vendors: { anthropic: { deployments } } });
  t.same(cfg.vendors.anthropic.deployments, [
    { name: 'us', baseUrl: 'http://127.0.0.1:1', apiKey: 'ka', weight: 3, maxConcurrent: null },
    { name: 'eu', baseUrl: 'http://127.0.0.1:2', apiKey: 'kb', weight: 1, maxConcurrent: 50 },
  ]);
  t.equal(cfg.vendors.anthropic.apiKey, 'ka', "baseUrl and apiKey read as the first deployment's");
  t.throws(() => loadConfig({}, { vendors: { anthropic: { deployments, baseUrl: 'http://127.0.0.1:9' } } }), /both deployments and baseUrl/);
  t.throws(() => loadConfig({}, { vendors: { anthropic: { deployments: [deployments[0]!, { ...deployments[1]!, name: 'us' }] } } }), /names "us" twice/);
  t.same(loadConfig({}, { vendors: cfg.vendors }).vendors.anthropic.deployments, cfg.vendors.anthropic.deployments);
  const envWins = loadConfig({ INKGATE_ANTHROPIC_BASE_URL: 'http://127.0.0.1:5', INKGATE_ANTHROPIC_API_KEY: 'k' }, {});
  t.equal(envWins.vendors.anthropic.deployments.length, 1);
});
