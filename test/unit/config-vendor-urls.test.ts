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
