// Two gateways, each with its own data directory and its own S3 client, over one database and one
// bucket (an S3-protocol server): a video submitted and stored by one is downloaded through the
// other, with ranges; nothing is written to either data directory; the retention sweep run by the
// other deletes the objects in one batched call, and a second sweep finds nothing to do.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { request } from 'undici';
import { loadConfig } from '../../src/config/config.js';
import { createGateway } from '../../src/gateway.js';
import { resultKey } from '../../src/generations/video/run.js';
import { SAMPLE_MP4_PATH } from '../../simulators/ark/simulator.js';
import { silentLogger } from '../../src/util/log.js';
import { recordingProxy, startS3 } from '../helpers/s3-server.js';
import { runToEnd, startVideoHarness } from './video-harness.js';

const fixture = readFileSync(SAMPLE_MP4_PATH);

t.test('one bucket, two gateways: stored by one, served by the other, swept in batches', async (t) => {
  const s3 = await startS3(t);
  await s3.createBucket('shared-media');
  const viaA = await recordingProxy(t, s3.port);
  const viaB = await recordingProxy(t, s3.port);
  const h = await startVideoHarness(t, { media: s3.store('shared-media', { endpoint: viaA.endpoint }) });

  // Gateway B: the same database schema and bucket, another data directory and S3 client, no job timers.
  const dataDirB = mkdtempSync(join(tmpdir(), 'inkgate-b-'));
  t.teardown(() => rmSync(dataDirB, { recursive: true, force: true }));
  const cfgB = loadConfig(
    {},
    {
      server: { port: 0, host: '127.0.0.1' },
      db: { url: h.tg.db.url, schema: h.tg.db.schema },
      dataDir: dataDirB,
      vendors: { ark: { baseUrl: h.config.vendors.ark.baseUrl, apiKey: h.config.vendors.ark.apiKey } },
    },
  );
  const b = await createGateway(cfgB, {
    log: silentLogger,
    skipMigrate: true,
    jobs: { clock: h.sim.now, owner: 'test-instance-b', runner: { timers: false }, media: s3.store('shared-media', { endpoint: viaB.endpoint }) },
  });
  t.teardown(() => b.close());

  const { key } = await h.funded(5_000);
  const ids: string[] = [];
  for (let i = 0; i < 3; i++) {
    const r = await h.submit(key, { model: 'clip-2.0-fast', prompt: `clip ${i}` });
    t.equal(r.status, 202);
    t.equal((await runToEnd(h, key, r.json.id)).status, 'succeeded');
    ids.push(r.json.id);
  }
  t.ok(viaA.seen.filter((s) => s === 'PUT').length >= 3, 'A stored the results in the bucket');

  const polled = await request(`${b.url}/v1/video/generations/${ids[0]}`, { headers: { authorization: `Bearer ${key}` } });
  const g = (await polled.body.json()) as { video: { url: string } };
  t.ok(g.video.url.startsWith(b.url + '/media/'), 'B hands out its own link');
  const seenBefore = viaB.seen.length;
  const whole = await request(g.video.url);
  t.equal(whole.statusCode, 200);
  t.ok(Buffer.from(await whole.body.arrayBuffer()).equals(fixture), 'B serves the bytes A stored');
  const tail = await request(g.video.url, { headers: { range: 'bytes=-100' } });
  t.equal(tail.statusCode, 206);
  t.ok(Buffer.from(await tail.body.arrayBuffer()).equals(fixture.subarray(fixture.length - 100)));
  t.ok(viaB.seen.length > seenBefore, "through B's own S3 client");
  t.notOk(existsSync(join(dataDirB, 'media')), "nothing in B's data directory");
  t.notOk(existsSync(join(h.config.dataDir, 'media')), "nothing in A's data directory");

  // Past the retention, B's sweep deletes all three objects in one DeleteObjects call.
  h.advance(7 * 86_400_000 + 1);
  viaB.seen.length = 0;
  t.equal((await b.jobs.runner.sweep()).expired, 3);
  t.same(viaB.seen, ['POST delete'], 'one batched delete');
  for (const id of ids) t.equal(await h.deps.media.open(resultKey(id)), undefined, `${id}: gone from the bucket`);
  t.equal((await b.jobs.runner.sweep()).expired, 0, 'a second sweep has nothing to do');
  const after = await request(`${b.url}/v1/video/generations/${ids[0]}/content`, { headers: { authorization: `Bearer ${key}` } });
  t.equal(after.statusCode, 410);
  await after.body.dump();
});

t.test('deleteMany on S3 is idempotent: missing keys count as gone', async (t) => {
  const s3 = await startS3(t);
  await s3.createBucket('idem');
  const store = s3.store('idem');
  await store.put('a/1', Buffer.from('1'), 'text/plain');
  t.same([...(await store.deleteMany(['a/1', 'a/2', 'never/was']))].sort(), ['a/1', 'a/2', 'never/was']);
  t.same([...(await store.deleteMany(['a/1']))], ['a/1'], 'again');
  t.equal(await store.open('a/1'), undefined);
  await t.rejects(store.deleteMany(['../x']), { name: 'InvalidMediaKeyError' });
});
