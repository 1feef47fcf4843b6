// The favicon: every console page links it, and GET /favicon.ico (what a browser asks for on
// every page) answers the image with a long cache instead of a 404, on each HTTP engine.
import { readFileSync } from 'node:fs';
import { request } from 'undici';
import { eachEngine } from '../helpers/engines.js';
import { getPage, startConsoleStack } from '../helpers/console-stack.js';

const svg = readFileSync(new URL('../../src/console/assets/favicon.svg', import.meta.url));

eachEngine('GET /favicon.ico is the image, cached; console pages link it', async (t, engine) => {
  const s = await startConsoleStack(t, { engine });
  const icon = await request(`${s.g.url}/favicon.ico`);
  const body = Buffer.from(await icon.body.arrayBuffer());
  t.equal(icon.statusCode, 200);
  t.equal(icon.headers['content-type'], 'image/svg+xml', 'an image type');
  t.ok(body.equals(svg), 'the bytes of src/console/assets/favicon.svg');
  const maxAge = Number(/max-age=(\d+)/.exec(String(icon.headers['cache-control']))?.[1]);
  t.ok(maxAge >= 86_400, `cached for at least a day (Cache-Control: ${icon.headers['cache-control']})`);
  const etag = String(icon.headers.etag);
  const again = await request(`${s.g.url}/favicon.ico`, { headers: { 'if-none-match': etag } });
  await again.body.dump();
  t.equal(again.statusCode, 304, 'a revalidation with its ETag is a 304');
  const head = await request(`${s.g.url}/favicon.ico`, { method: 'HEAD' });
  await head.body.dump();
  t.equal(head.statusCode, 200, 'HEAD answers too');

  for (const path of ['/console/signin', '/console/reference']) {
    const page = await getPage(s.g.url, path);
    t.equal(page.status, 200, path);
    t.match(page.text, /<link rel="icon" href="\/favicon\.ico" type="image\/svg\+xml">/, `${path} links the favicon`);
  }
});
