// `inkgate media migrate --to s3`: the live results of a files deployment copied into a bucket (an
// S3-protocol server), by the operator CLI in-process against the test schema. Expired results and
// files gone by hand are not copied; a second run skips what is there; --dry-run writes nothing.
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { runCli } from '../../src/admin/cli.js';
import { loadConfig, type Config } from '../../src/config/config.js';
import { resultKey } from '../../src/generations/video/run.js';
import { SAMPLE_MP4_PATH } from '../../simulators/ark/simulator.js';
import { readAll } from '../helpers/media-store-contract.js';
import { startS3, useS3CredentialsInEnv } from '../helpers/s3-server.js';
import { runToEnd, startVideoHarness } from './video-harness.js';

const fixture = readFileSync(SAMPLE_MP4_PATH);

async function cli(cfg: Config, ...argv: string[]): Promise<{ code: number; out: any; err: string }> {
  let out = '';
  let err = '';
  const code = await runCli(
    [...argv, '--json'],
    (s) => void (out += s),
    (s) => void (err += s),
    cfg,
  );
  // With --json a failure is one JSON document on stdout ({"error":{...}}): `err` is then its message.
  const doc = out === '' ? undefined : JSON.parse(out);
  return { code, out: doc, err: doc?.error?.message ?? err };
}

t.test('media migrate --to s3 copies live results, skips them the second time, and --dry-run writes nothing', async (t) => {
  // The CLI takes its S3 credentials from the AWS SDK's chain, as in production: here, the variables.
  useS3CredentialsInEnv(t);
  const s3 = await startS3(t);
  await s3.createBucket('migrated');
  const h = await startVideoHarness(t);
  const { key } = await h.funded(5_000);
  const ids: string[] = [];
  for (let i = 0; i < 4; i++) {
    const r = await h.submit(key, { model: 'clip-2.0-fast', prompt: `clip ${i}` });
    t.equal((await runToEnd(h, key, r.json.id)).status, 'succeeded');
    ids.push(r.json.id);
  }
  const [kept1, kept2, removedByHand, expired] = ids as [string, string, string, string];
  rmSync(join(h.config.dataDir, 'media', resultKey(removedByHand)));
  await h.services.pool.query('UPDATE generations SET result_expired = true WHERE id = $1', [expired]);

  const cfgFor = (bucket: string, prefix = 'media/'): Config =>
    loadConfig(
      {},
      {
        db: { url: h.tg.db.url, schema: h.tg.db.schema },
        dataDir: h.config.dataDir,
        media: { s3: { bucket, endpoint: s3.endpoint, forcePathStyle: true, prefix } },
      },
    );

  const dry = await cli(cfgFor('migrated', 'dry/'), 'media', 'migrate', '--to', 's3', '--dry-run');
  t.equal(dry.code, 0, dry.err);
  t.match(dry.out, { copied: 2, skipped: 0, missing: 1, failed: 0, copiedBytes: 0, dry_run: true });
  t.equal(await s3.store('migrated', { prefix: 'dry/' }).open(resultKey(kept1)), undefined, 'a dry run writes nothing');

  const first = await cli(cfgFor('migrated'), 'media', 'migrate', '--to', 's3');
  t.equal(first.code, 0, first.err);
  t.match(first.out, { copied: 2, skipped: 0, missing: 1, failed: 0, copiedBytes: 2 * fixture.length });
  const bucket = s3.store('migrated');
  for (const id of [kept1, kept2]) {
    const o = (await bucket.open(resultKey(id)))!;
    t.equal(o.contentType, 'video/mp4', `${id}: the content type travels`);
    t.ok((await readAll(o.stream)).equals(fixture), `${id}: the bytes`);
  }
  t.equal(await bucket.open(resultKey(expired)), undefined, 'an expired result is not copied');

  const again = await cli(cfgFor('migrated'), 'media', 'migrate', '--to', 's3');
  t.match(again.out, { copied: 0, skipped: 2, missing: 1, failed: 0, removed: 0 }, 'a second run copies nothing');

  // A copy damaged in the bucket (same size, other bytes): --remove-local verifies before deleting,
  // finds it, deletes the bad copy and keeps the local file; the next run copies it again.
  const damaged = Buffer.from(fixture);
  damaged[damaged.length >> 1] ^= 0xff;
  await bucket.put(resultKey(kept2), damaged, 'video/mp4');
  const local = async (id: string) => {
    const o = await h.deps.media.open(resultKey(id));
    return o === undefined ? undefined : readAll(o.stream);
  };
  const verify = await cli(cfgFor('migrated'), 'media', 'migrate', '--to', 's3', '--remove-local');
  t.equal(verify.code, 1, 'a copy that does not verify fails the run');
  t.match(verify.out, { skipped: 1, failed: 1, removed: 1 });
  t.match(verify.out.failures, [{ key: resultKey(kept2), error: /did not verify/ }]);
  t.equal(await bucket.open(resultKey(kept2)), undefined, 'the bad copy is removed at the destination');
  t.ok((await local(kept2))?.equals(fixture), 'its local file is kept');
  t.equal(await local(kept1), undefined, "a verified copy's local file is removed");
  const healed = await cli(cfgFor('migrated'), 'media', 'migrate', '--to', 's3', '--remove-local');
  t.equal(healed.code, 0, healed.err);
  t.match(healed.out, { copied: 1, failed: 0, removed: 1, missing: 2 });
  t.ok((await readAll((await bucket.open(resultKey(kept2)))!.stream)).equals(fixture), 'copied again, whole');
  t.equal(await local(kept2), undefined);

  const wrongTarget = await cli(cfgFor('migrated'), 'media', 'migrate', '--to', 'gcs');
  t.equal(wrongTarget.code, 2, 'a usage error');
  t.match(wrongTarget.err, /--to must be s3/);
  const noBucket = await cli(loadConfig({}, { db: { url: h.tg.db.url, schema: h.tg.db.schema }, dataDir: h.config.dataDir }), 'media', 'migrate', '--to', 's3');
  t.equal(noBucket.code, 1);
  t.match(noBucket.err, /INKGATE_S3_BUCKET/);
  const missingBucket = await cli(cfgFor('not-there'), 'media', 'migrate', '--to', 's3');
  t.equal(missingBucket.code, 1);
  t.match(missingBucket.err, /"not-there" .* does not exist/, 'checked before any copy');
});
