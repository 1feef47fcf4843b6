// Operator switches kept in Postgres (api open/closed, lanes certified, models paused).
// Each instance re-reads them every refreshMs, so a switch flipped by the CLI reaches every
// instance within that interval; nothing here is state another instance needs from us.
import type { Queryable } from '../store/pool.js';

export type Lane = 'messages' | 'responses' | 'video' | 'images';
export const LANES: readonly Lane[] = ['messages', 'responses', 'video', 'images'];

export interface Snapshot {
  readonly apiOpen: boolean;
  readonly lanes: Readonly<Record<Lane, boolean>>;
  /** model id -> Retry-After seconds while paused */
  readonly paused: ReadonlyMap<string, number>;
}

export const CLOSED: Snapshot = Object.freeze({
  apiOpen: false,
  lanes: Object.freeze({ messages: false, responses: false, video: false, images: false }),
  paused: new Map(),
});

export async function readSnapshot(db: Queryable): Promise<Snapshot> {
  const r = await db.query<{ api_open: boolean; lanes: Record<string, boolean> | null; paused: Record<string, number> | null }>(
    `SELECT d.api_open,
            (SELECT jsonb_object_agg(lane, enabled) FROM lanes) AS lanes,
            (SELECT jsonb_object_agg(model_id, retry_after_s) FROM model_pauses) AS paused
       FROM deployment d`,
  );
  const row = r.rows[0];
  const lanes = { messages: false, responses: false, video: false, images: false };
  for (const l of LANES) lanes[l] = row?.lanes?.[l] === true;
  return Object.freeze({
    apiOpen: row?.api_open === true,
    lanes: Object.freeze(lanes),
    paused: new Map(Object.entries(row?.paused ?? {})),
  });
}

export class DeploymentState {
  private snap: Snapshot = CLOSED;
  private timer: NodeJS.Timeout | undefined;
  private loaded = false;

  constructor(private readonly db: Queryable, private readonly refreshMs = 1000) {}

  get current(): Snapshot {
    return this.snap;
  }

  /** Re-reads the switches now. On a store outage the last snapshot stays (fail static, not open). */
  async refresh(): Promise<Snapshot> {
    try {
      this.snap = await readSnapshot(this.db);
      this.loaded = true;
    } catch (e) {
      if (!this.loaded) throw e;
    }
    return this.snap;
  }

  async start(): Promise<void> {
    await this.refresh();
    this.timer = setInterval(() => void this.refresh(), this.refreshMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }
}

// ---- writers used by the admin CLI ----

export async function setApiOpen(db: Queryable, open: boolean): Promise<void> {
  await db.query('UPDATE deployment SET api_open = $1, updated_at = now()', [open]);
}

export async function setLane(db: Queryable, lane: Lane, enabled: boolean): Promise<void> {
  await db.query('UPDATE lanes SET enabled = $2, updated_at = now() WHERE lane = $1', [lane, enabled]);
}

export async function pauseModel(db: Queryable, modelId: string, retryAfterS: number): Promise<void> {
  await db.query(
    `INSERT INTO model_pauses (model_id, retry_after_s) VALUES ($1, $2)
     ON CONFLICT (model_id) DO UPDATE SET retry_after_s = excluded.retry_after_s, paused_at = now()`,
    [modelId, retryAfterS],
  );
}

export async function resumeModel(db: Queryable, modelId: string): Promise<void> {
  await db.query('DELETE FROM model_pauses WHERE model_id = $1', [modelId]);
}
