// The Ark client against a strict fake that answers with the recorded transcripts
// (test/fixtures/ark, the vendor's recorded examples): create, then a succeeded task whose
// recorded id is anonymised (cgt-2025******-****) and differs from the one created.
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { ArkClient } from '../../src/vendors/ark/client.js';

const fixtures = join(dirname(fileURLToPath(import.meta.url)), '..', 'fixtures', 'ark');
const created = readFileSync(join(fixtures, 'create_response.json'), 'utf8');
const succeeded = readFileSync(join(fixtures, 'get_response_succeeded.json'), 'utf8');
const API_KEY = 'ark-test-key';

t.test('recorded answers: create, then a succeeded task named with an anonymised id', async (t) => {
  const seen: Array<{ method: string; url: string; headers: IncomingMessage['headers']; body: string }> = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c));
    req.on('end', () => {
      seen.push({ method: req.method!, url: req.url!, headers: req.headers, body });
      if (req.headers.authorization !== `Bearer ${API_KEY}`) return void res.writeHead(401).end('{}');
      const json = (s: string) => res.writeHead(200, { 'content-type': 'application/json' }).end(s);
      if (req.method === 'POST' && req.url === '/api/v3/contents/generations/tasks') return json(created);
      if (req.method === 'GET' && req.url === '/api/v3/contents/generations/tasks/cgt-20250331175019-68d9t') return json(succeeded);
      if (req.method === 'GET' && req.url === '/api/v3/contents/generations/tasks/cgt-20250331175019-zzzzz')
        return json(succeeded.replace('cgt-2025******-****', 'cgt-20250331175019-68d9t'));
      res.writeHead(404).end('{}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => server.close());
  const ark = new ArkClient({ baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}/api/v3`, apiKey: API_KEY });

  const id = await ark.createTask({
    vendorModel: 'dreamina-seedance-2-0-260128',
    prompt: 'a cat',
    resolution: '720p',
    ratio: '16:9',
    durationS: 5,
    generateAudio: true,
  });
  t.equal(id, 'cgt-20250331175019-68d9t');
  const task = await ark.getTask(id);
  t.equal(task.id, id, 'the task the path named, whatever id the answer carries');
  t.equal(task.status, 'succeeded');
  t.equal(task.videoUrl, 'https://ark-content-generation-ap-southeast-1.tos-ap-southeast-1.volces.com/xxx');
  t.equal(task.durationS, 5);
  t.same(task.usage, { completionTokens: 108900, totalTokens: 108900 });
  for (const s of seen) t.equal(s.headers['accept-encoding'], 'identity', `${s.method}: no compressed answers asked for`);
  // An answer that names another (real) task is still refused: it must never be settled as ours.
  await t.rejects(ark.getTask('cgt-20250331175019-zzzzz'), /another task/);
  const body = JSON.parse(seen[0]!.body);
  t.equal(body.model, 'dreamina-seedance-2-0-260128');
  t.ok(Array.isArray(body.content) && body.content[0].type === 'text', 'content[] starts with the text item');
});
