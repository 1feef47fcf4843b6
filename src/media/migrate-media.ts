// Copies the live results (succeeded generations within their retention) from one media store to
// another: what `inkgate media migrate --to s3` runs before and after a deployment switches from
// files to a bucket. Idempotent: an object already at the destination with the same size is
// skipped, so a second run after the switch copies only what was stored in between. Nothing is
// deleted at the source. One object at a time (memory stays that of one upload), the rows read in
// pages so the list is never held whole.
import type { Queryable } from '../store/pool.js';
import type { MediaStore } from './media-store.js';

export interface MigrateReport {
  copied: number;
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
async function* liveKeys(db: Queryable): AsyncGenerator<string> {
  let after: { at: Date; id: string } | undefined;
  for (;;) {
    const rows = (
      await db.query<{ id: string; media_key: string; completed_at: Date }>(
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

/** Copies one key; what happened to it, and the bytes written. */
async function copyOne(from: MediaStore, to: MediaStore, key: string, dryRun: boolean): Promise<{ what: 'copied' | 'skipped' | 'missing'; bytes: number }> {
  const src = await from.open(key);
  if (src === undefined) return { what: 'missing', bytes: 0 };
  try {
    // One byte of the destination says whether it is there already, and its size.
    const there = await to.open(key, { start: 0, end: 0 });
    there?.stream.destroy();
    if (there !== undefined && there.sizeBytes === src.sizeBytes) return { what: 'skipped', bytes: 0 };
    if (dryRun) return { what: 'copied', bytes: 0 };
    return { what: 'copied', bytes: (await to.put(key, src.stream, src.contentType)).sizeBytes };
  } finally {
    src.stream.destroy();
  }
}

export async function migrateMedia(db: Queryable, from: MediaStore, to: MediaStore, opts: { dryRun?: boolean } = {}): Promise<MigrateReport> {
  const report: MigrateReport = { copied: 0, skipped: 0, missing: 0, failed: 0, copiedBytes: 0, failures: [] };
  for await (const key of liveKeys(db)) {
    try {
      const { what, bytes } = await copyOne(from, to, key, opts.dryRun === true);
      report[what]++;
      report.copiedBytes += bytes;
    } catch (e) {
      report.failed++;
      if (report.failures.length < MAX_FAILURES_LISTED) report.failures.push({ key, error: (e as Error).message.split('\n')[0] ?? '' });
    }
  }
  return report;
}
