// Copies the live results (succeeded generations within their retention) from one media store to
// another: what `inkgate media migrate --to s3` runs before and after a deployment switches from
// files to a bucket. Idempotent and resumable: an object already at the destination with the same
// size is skipped, so a run stopped half-way, or a second run after the switch, copies only what is
// missing. Every copy is verified: the SHA-256 of the bytes read from the source, computed as they
// stream, must equal that of the object read back from the destination, and so must the sizes; a
// copy that does not verify is deleted at the destination and counted as failed. The source is
// deleted only with `removeSource`, and only once its copy verified (an object skipped as already
// there is verified the same way first). One object at a time (memory stays that of one upload),
// the rows read in pages so the list is never held whole.
import { createHash } from 'node:crypto';
import { Transform, type Readable } from 'node:stream';
import type { Queryable } from '../store/pool.js';
import type { MediaStore } from './media-store.js';

export interface MigrateReport {
  copied: number;
  /** Sources deleted after their copy verified (removeSource). */
  removed: number;
  skipped: number;
  /** Live results whose source object is gone (a file deleted by hand): nothing to copy. */
  missing: number;
  failed: number;
  copiedBytes: number;
  /** The first failures, with why. */
  failures: Array<{ key: string; error: string }>;
}

const PAGE = 500;
const MAX_FAILURES_LISTED = 20;

/** The media keys of live results, oldest first, a page at a time (keyset on completed_at, id). */
async function* liveKeys(database: Queryable): AsyncGenerator<string> {
  let after: { at: Date; id: string } | undefined;
  for (;;) {
    const rows = (
      await database.query<{ id: string; media_key: string; completed_at: Date }>(
        `SELECT id, media_key, completed_at FROM generations
          WHERE state = 'succeeded' AND NOT result_expired AND media_key IS NOT NULL
            AND ($1::timestamptz IS NULL OR (completed_at, id) > ($1, $2))
          ORDER BY completed_at, id LIMIT $3`,
        [after?.at ?? null, after?.id ?? '', PAGE],
      )
    ).rows;
    for (const r of rows) yield r.media_key;
    if (rows.length < PAGE) return;
    const last = rows[rows.length - 1]!;
    after = { at: last.completed_at, id: last.id };
  }
}

/** SHA-256 and size of a stream, read to its end. */
async function digestOf(stream: Readable): Promise<{ sha256: string; sizeBytes: number }> {
  const h = createHash('sha256');
  let sizeBytes = 0;
  for await (const chunk of stream) {
    h.update(chunk as Buffer);
    sizeBytes += (chunk as Buffer).length;
  }
  return { sha256: h.digest('hex'), sizeBytes };
}

/** The destination's copy reads back as `want`, or it is deleted and this throws. */
async function verifyCopy(destination: MediaStore, key: string, want: { sha256: string; sizeBytes: number }): Promise<void> {
  const back = await destination.open(key);
  const got = back === undefined ? undefined : await digestOf(back.stream);
  if (got !== undefined && got.sha256 === want.sha256 && got.sizeBytes === want.sizeBytes) return;
  await destination.delete(key);
  throw new Error(
    `the copy of ${key} did not verify (${got === undefined ? 'not found' : `${got.sizeBytes} bytes, sha256 ${got.sha256.slice(0, 12)}`} against ${want.sizeBytes} bytes, sha256 ${want.sha256.slice(0, 12)}); removed at the destination`,
  );
}

type Outcome = 'copied' | 'skipped' | 'missing';

/** Copies one key (verified), or skips it when already there; what happened, and the bytes written. */
async function copyOne(
  from: MediaStore,
  destination: MediaStore,
  key: string,
  options: { dryRun: boolean; removeSource: boolean },
): Promise<{ what: Outcome; bytes: number; removed: boolean }> {
  const src = await from.open(key);
  if (src === undefined) return { what: 'missing', bytes: 0, removed: false };
  let what: Outcome = 'copied';
  let bytes = 0;
  try {
    // One byte of the destination says whether it is there already, and its size.
    const there = await destination.open(key, { start: 0, end: 0 });
    there?.stream.destroy();
    if (there !== undefined && there.sizeBytes === src.sizeBytes) {
      what = 'skipped';
      if (!options.removeSource || options.dryRun) return { what, bytes, removed: false };
      await verifyCopy(destination, key, await digestOf(src.stream)); // before the source may go
    } else {
      if (options.dryRun) return { what, bytes, removed: false };
      const h = createHash('sha256');
      let sizeBytes = 0;
      const hashing = new Transform({
        transform(chunk: Buffer, _enc, done) {
          h.update(chunk);
          sizeBytes += chunk.length;
          done(null, chunk);
        },
      });
      src.stream.once('error', (e) => hashing.destroy(e));
      bytes = (await destination.put(key, src.stream.pipe(hashing), src.contentType)).sizeBytes;
      await verifyCopy(destination, key, { sha256: h.digest('hex'), sizeBytes });
    }
  } finally {
    src.stream.destroy();
  }
  if (options.removeSource) await from.delete(key);
  return { what, bytes, removed: options.removeSource };
}

export async function migrateMedia(
  database: Queryable,
  from: MediaStore,
  destination: MediaStore,
  opts: { dryRun?: boolean; removeSource?: boolean } = {},
): Promise<MigrateReport> {
  const report: MigrateReport = { copied: 0, removed: 0, skipped: 0, missing: 0, failed: 0, copiedBytes: 0, failures: [] };
  const o = { dryRun: opts.dryRun === true, removeSource: opts.removeSource === true };
  for await (const key of liveKeys(database)) {
    try {
      const { what, bytes, removed } = await copyOne(from, destination, key, o);
      report[what]++;
      report.copiedBytes += bytes;
      if (removed) report.removed++;
    } catch (e) {
      report.failed++;
      if (report.failures.length < MAX_FAILURES_LISTED) report.failures.push({ key, error: (e as Error).message.split('\n')[0] ?? '' });
    }
  }
  return report;
}
