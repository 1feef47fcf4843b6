// INKGATE_PUBLIC_URL (server.publicUrl): checked at load, and the one rule console links take their
// address from (the CLI's `console link` and the demo's start-up link alike).
import t from 'tap';
import { loadConfig } from '../../src/config/config.js';
import { consoleLinkBase } from '../../src/config/public-url.js';

t.test('INKGATE_PUBLIC_URL is read, kept without its trailing slash, its path kept', async (t) => {
  t.equal(loadConfig({}).server.publicUrl, null, 'unset by default');
  t.equal(loadConfig({ INKGATE_PUBLIC_URL: 'https://api.example.com/' }).server.publicUrl, 'https://api.example.com');
  t.equal(loadConfig({ INKGATE_PUBLIC_URL: 'http://10.0.0.5:8080/inkgate/' }).server.publicUrl, 'http://10.0.0.5:8080/inkgate');
  t.equal(loadConfig({ INKGATE_PUBLIC_URL: '' }).server.publicUrl, null, 'empty counts as unset');
});

t.test('a public or console URL that is not a plain http(s) URL stops the load, naming the setting', async (t) => {
  for (const bad of [
    'api.example.com',
    'ftp://api.example.com',
    'https://user:pw@api.example.com',
    'https://api.example.com/?a=1',
    'https://api.example.com/#top',
  ]) {
    t.throws(() => loadConfig({ INKGATE_PUBLIC_URL: bad }), /server\.publicUrl \(INKGATE_PUBLIC_URL\)/, bad);
  }
  t.throws(() => loadConfig({ INKGATE_CONSOLE_URL: 'console.example.com' }), /console\.url \(INKGATE_CONSOLE_URL\) is not a URL/);
});

t.test('console links: INKGATE_CONSOLE_URL, else INKGATE_PUBLIC_URL, else the listener, else host:port', async (t) => {
  const both = loadConfig({ INKGATE_CONSOLE_URL: 'https://console.example.com/', INKGATE_PUBLIC_URL: 'https://api.example.com' });
  t.same(consoleLinkBase(both, 'http://127.0.0.1:5555'), { url: 'https://console.example.com', source: 'INKGATE_CONSOLE_URL' });
  const publicOnly = loadConfig({ INKGATE_PUBLIC_URL: 'https://api.example.com' });
  t.same(consoleLinkBase(publicOnly, 'http://127.0.0.1:5555'), { url: 'https://api.example.com', source: 'INKGATE_PUBLIC_URL' });
  const neither = loadConfig({ INKGATE_HOST: '::1', INKGATE_PORT: '9001' });
  t.same(consoleLinkBase(neither, 'http://127.0.0.1:5555/'), { url: 'http://127.0.0.1:5555', source: 'listener' }, 'the demo: where it really listens');
  t.same(consoleLinkBase(neither), { url: 'http://[::1]:9001', source: 'INKGATE_HOST/INKGATE_PORT' }, 'the CLI: a guess from the configuration');
});

t.test('a refused URL is never repeated with its credentials or query (the error reaches logs and stderr)', async (t) => {
  const cases: Array<[Record<string, string>, RegExp]> = [
    [{ INKGATE_PUBLIC_URL: 'https://user:s3cret@api.example.com/' }, /server\.publicUrl/],
    [{ INKGATE_CONSOLE_URL: 'https://console.example.com/?token=s3cret' }, /console\.url/],
    [{ INKGATE_OPENAI_BASE_URL: 'https://proxy.example.com/v1?key=s3cret', INKGATE_OPENAI_API_KEY: 'sk-x' }, /vendors\.openai\.baseUrl/],
    [{ INKGATE_ANTHROPIC_BASE_URL: 'https://u:s3cret@api.example.com', INKGATE_ANTHROPIC_API_KEY: 'sk-x' }, /vendors\.anthropic\.baseUrl/],
    [{ INKGATE_PUBLIC_URL: 'https://u:s3cret@[bad' }, /server\.publicUrl \(INKGATE_PUBLIC_URL\) is not a URL/],
  ];
  for (const [env, names] of cases) {
    let message = '';
    try {
      loadConfig(env);
    } catch (e) {
      message = (e as Error).message;
    }
    t.match(message, names, `refused: ${message}`);
    t.notMatch(message, /s3cret/, 'the secret is not in the message');
  }
  // What can be shown still is: the host and path the operator wrote.
  let shown = '';
  try {
    loadConfig({ INKGATE_PUBLIC_URL: 'https://user:s3cret@api.example.com/x?y=1' });
  } catch (e) {
    shown = (e as Error).message;
  }
  t.match(shown, /"https:\/\/api\.example\.com\/x"/);
});
