// Retention: a succeeded result's file (or object: batched on S3) is deleted `retentionDays` after the result was stored
// (completed_at); the record stays and gains result_expired (GET shows `result_expired: true`,
// `/content` answers 410). Also drops Idempotency-Key claims older than their 24-hour window.
import type { Services } from '../services.js';
import type { Logger } from '../util/log.js';
import { withTx } from '../store/pool.js';
import type { GenerationRow } from './store.js';
import type { GenerationDeps } from './deps.js';
import type { MediaStore } from '../media/media-store.js';
import { IDEMPOTENCY_WINDOW_MS } from './idempotency.js';

const BATCH = 100;
const MAX_BATCHES = 50;

export interface SweepReport {
  expired: number;
  idempotencyKeysDropped: number;
}

/** The instant before which a result's retention has run out: results completed at or before it are gone. */
export function retentionCutoffMs(nowMs: number, retentionDays: number): number {
  return nowMs - retentionDays * 86_400_000;
}

/** The row as clients see it: a succeeded result past its retention is expired, swept or not. */
export function withRetention(row: GenerationRow, nowMs: number, retentionDays: number): GenerationRow {
  const past =
    row.state === 'succeeded' && !row.result_expired && row.completed_at !== null && row.completed_at.getTime() <= retentionCutoffMs(nowMs, retentionDays);
  return past ? { ...row, result_expired: true } : row;
}

/** Deletes the rows' results (in batches where the store has them); returns the ids whose result is gone. */
async function deleteResults(log: Logger, media: MediaStore, rows: ReadonlyArray<{ id: string; media_key: string }>): Promise<string[]> {
  if (media.deleteMany !== undefined && rows.length > 0) {
    try {
      const gone = await media.deleteMany(rows.map((r) => r.media_key));
      for (const r of rows) if (!gone.has(r.media_key)) log.warn({ generation: r.id, err: 'the store did not delete it' }, 'media.retention_delete_failed');
      return rows.filter((r) => gone.has(r.media_key)).map((r) => r.id);
    } catch (e) {
      log.warn({ generations: rows.length, err: (e as Error).message }, 'media.retention_delete_failed');
      return [];
    }
  }
  const gone: string[] = [];
  for (const r of rows) {
    try {
      await media.delete(r.media_key);
      gone.push(r.id);
    } catch (e) {
      log.warn({ generation: r.id, err: (e as Error).message }, 'media.retention_delete_failed');
    }
  }
  return gone;
}

export async function sweepRetention(services: Services, deps: Pick<GenerationDeps, 'clock' | 'media'>): Promise<SweepReport> {
  const now = deps.clock();
  const log = services.log.child({ component: 'sweep' });
  const cutoff = new Date(retentionCutoffMs(now, services.config.media.retentionDays));
  let expired = 0;
  for (let i = 0; i < MAX_BATCHES; i++) {
    const n = await withTx(services.pool, async (client) => {
      const rows = (
        await client.query<{ id: string; media_key: string }>(
          `SELECT id, media_key FROM generations
            WHERE state = 'succeeded' AND NOT result_expired AND completed_at <= $1
            ORDER BY completed_at LIMIT $2 FOR UPDATE SKIP LOCKED`,
          [cutoff, BATCH],
        )
      ).rows;
      // The files first: a record says expired only once its file is gone.
      const gone = await deleteResults(log, deps.media, rows);
      if (gone.length > 0) await client.query('UPDATE generations SET result_expired = true, updated_at = $2 WHERE id = ANY($1)', [gone, new Date(now)]);
      return { seen: rows.length, expired: gone.length };
    });
    expired += n.expired;
    if (n.seen < BATCH) break;
  }
  const dropped = await services.pool.query('DELETE FROM idempotency_keys WHERE created_at <= $1', [new Date(now - IDEMPOTENCY_WINDOW_MS)]);
  const store = deps.media as { sweepTemp?: (nowMs: number, maxAgeMs: number) => Promise<number> };
  if (typeof store.sweepTemp === 'function') await store.sweepTemp(Date.now(), 86_400_000).catch(() => 0);
  return { expired, idempotencyKeysDropped: dropped.rowCount ?? 0 };
}
