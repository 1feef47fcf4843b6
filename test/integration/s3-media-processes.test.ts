// Two gateway processes configured for the S3 media store the way an operator does it (media.store
// `s3`, the bucket's settings, credentials from the AWS variables only), each with its own data
// directory, over one database and one bucket (an S3-protocol server): an object in the bucket is
// served by both, with ranges, on the shared signed links; /readyz reports the store, and turns
// 503 while the store does not answer. And an image submitted on one process is polled and
// downloaded, whole and by range, through the other, with nothing written to either data dir.
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { request } from 'undici';
import { createAccount, createKey } from '../../src/accounts/accounts.js';
import { setLane } from '../../src/deployment/state.js';
import { loadMediaSecret } from '../../src/generations/deps.js';
import { Ledger } from '../../src/ledger/ledger.js';
import { startGeminiSimulator } from '../../simulators/gemini/simulator.js';
import { signedMediaLink } from '../../src/media/signed-link.js';
import { testDb } from '../helpers/db.js';
import { startGatewayProcess } from '../helpers/gateway-process.js';
import { startS3, useS3CredentialsInEnv } from '../helpers/s3-server.js';
import { startTcpProxy } from '../helpers/tcp-proxy.js';

t.test('two processes, one bucket: both serve what is in it; readiness follows the store', async (t) => {
  // The children inherit the environment: their S3 client finds these in the SDK's chain.
  useS3CredentialsInEnv(t);
  const s3 = await startS3(t);
  await s3.createBucket('procs');
  const proxy = await startTcpProxy('127.0.0.1', s3.port);
  t.teardown(() => proxy.close());
  const db = await testDb(t);
  const dirs = [mkdtempSync(join(tmpdir(), 'inkgate-p1-')), mkdtempSync(join(tmpdir(), 'inkgate-p2-'))];
  t.teardown(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });
  const config = (dataDir: string, instanceId: string) => ({
    dataDir,
    server: { host: '127.0.0.1', port: 0 },
    db: { url: db.url, schema: db.schema },
    admin: { readyTimeoutMs: 500 },
    ledger: { instanceId },
    media: { store: 's3' as const, s3: { bucket: 'procs', endpoint: proxy.url('http'), forcePathStyle: true, prefix: 'shared/', timeoutMs: 5_000 } },
  });
  const [one, two] = await Promise.all([startGatewayProcess(t, config(dirs[0]!, 'p-one')), startGatewayProcess(t, config(dirs[1]!, 'p-two'))]);

  const data = Buffer.from('a result every instance must serve, from one bucket');
  await s3.store('procs', { prefix: 'shared/' }).put('video/vgen_shared-0123456789ab.mp4', data, 'video/mp4');
  const secret = await loadMediaSecret(db.pool);
  for (const g of [one, two]) {
    const link = signedMediaLink(secret, g.url, 'video/vgen_shared-0123456789ab.mp4', Date.now(), 900).url;
    const whole = await request(link);
    t.equal(whole.statusCode, 200);
    t.ok(Buffer.from(await whole.body.arrayBuffer()).equals(data), `${g.url}: the bytes`);
    const part = await request(link, { headers: { range: 'bytes=2-7' } });
    t.equal(part.statusCode, 206);
    t.equal(await part.body.text(), data.subarray(2, 8).toString());
    const ready = await request(g.adminUrl + '/readyz');
    t.equal(ready.statusCode, 200);
    t.match(await ready.body.json(), { ready: true, mediaStore: 'ok' });
  }

  proxy.freeze();
  const frozen = await request(one.adminUrl + '/readyz');
  t.equal(frozen.statusCode, 503, 'not ready while the store does not answer');
  t.match(await frozen.body.json(), { ready: false, mediaStore: 'timeout', postgres: 'ok' });
  proxy.thaw();
});

t.test('two processes, one bucket: an image submitted on one is polled and downloaded, whole and by range, through the other', async (t) => {
  useS3CredentialsInEnv(t);
  const s3 = await startS3(t);
  await s3.createBucket('images');
  const gemini = await startGeminiSimulator();
  t.teardown(() => gemini.close());
  const db = await testDb(t);
  await setLane(db.pool, 'images', true);
  const dirs = [mkdtempSync(join(tmpdir(), 'inkgate-i1-')), mkdtempSync(join(tmpdir(), 'inkgate-i2-'))];
  t.teardown(() => {
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  });
  const config = (dataDir: string, instanceId: string) => ({
    dataDir,
    server: { host: '127.0.0.1', port: 0 },
    db: { url: db.url, schema: db.schema },
    ledger: { instanceId },
    vendors: { gemini: { baseUrl: gemini.url, apiKey: gemini.apiKey } },
    jobs: { tickMs: 100 },
    media: { store: 's3' as const, s3: { bucket: 'images', endpoint: s3.endpoint, forcePathStyle: true, prefix: '', timeoutMs: 5_000 } },
  });
  const [one, two] = await Promise.all([startGatewayProcess(t, config(dirs[0]!, 'i-one')), startGatewayProcess(t, config(dirs[1]!, 'i-two'))]);
  const acc = await createAccount(db.pool, { name: 'images across', planId: 'pro' });
  const k = await createKey(db.pool, { accountId: acc.id, name: 'k' });
  await new Ledger(db.pool).topUp(acc.id, 1_000, 'test');
  const auth = { authorization: `Bearer ${k.key}`, 'content-type': 'application/json' };

  const sub = await request(`${one.url}/v1/images/generations`, {
    method: 'POST',
    headers: auth,
    body: JSON.stringify({ model: 'image-1', prompt: 'a lighthouse at dusk' }),
  });
  t.equal(sub.statusCode, 202);
  const id = ((await sub.body.json()) as { id: string }).id;
  // A client polls (that is the protocol); bounded, and the state read from the other process.
  let g: { status: string; image?: { url: string } } = { status: 'queued' };
  for (let i = 0; i < 300 && g.status !== 'succeeded' && g.status !== 'failed'; i++) {
    await new Promise((r) => setTimeout(r, 100));
    g = (await (await request(`${two.url}/v1/images/generations/${id}`, { headers: auth })).body.json()) as typeof g;
  }
  t.equal(g.status, 'succeeded');
  t.ok(g.image!.url.startsWith(two.url + '/media/'), 'the second process hands out its own link');
  const whole = await request(g.image!.url);
  const png = Buffer.from(await whole.body.arrayBuffer());
  t.equal(whole.statusCode, 200);
  t.equal(whole.headers['content-type'], 'image/png');
  t.ok(png.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])), 'a PNG, read from the bucket');
  const part = await request(g.image!.url, { headers: { range: 'bytes=1-3' } });
  t.equal(part.statusCode, 206);
  t.equal(part.headers['content-range'], `bytes 1-3/${png.length}`);
  t.equal(await part.body.text(), 'PNG');
  t.same(
    readdirSync(dirs[0]!).filter((f) => f === 'media'),
    [],
    "nothing under either data directory's media",
  );
  t.same(
    readdirSync(dirs[1]!).filter((f) => f === 'media'),
    [],
  );
});
