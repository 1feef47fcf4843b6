// Operator switches kept in Postgres (api open/closed, lanes certified, models paused).
// A writer below sends a NOTIFY in the statement that flips the switch (delivered if it commits):
// every instance hears it on the ledger's Postgres bus and re-reads at once (milliseconds). Each
// instance also re-reads every refreshMs, so a lost message costs at most that long.
import { SWITCH_NOTIFY_SQL } from '../store/notify.js';
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

export async function readSnapshot(database: Queryable): Promise<Snapshot> {
  const r = await database.query<{ api_open: boolean; lanes: Record<string, boolean> | null; paused: Record<string, number> | null }>(
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

  constructor(
    private readonly database: Queryable,
    private readonly refreshMs = 1000,
  ) {}

  get current(): Snapshot {
    return this.snap;
  }

  /** Re-reads the switches now. On a store outage the last snapshot stays (fail static, not open). */
  async refresh(): Promise<Snapshot> {
    try {
      this.snap = await readSnapshot(this.database);
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

/** Tells every instance to re-read the switches (ledger/recalls.ts: the bus every instance listens on). */
const SWITCH_NOTIFY = SWITCH_NOTIFY_SQL;

export async function setApiOpen(database: Queryable, open: boolean): Promise<void> {
  await database.query(
    `WITH changed AS (UPDATE deployment SET api_open = $1, updated_at = now() RETURNING 1) SELECT ${SWITCH_NOTIFY} FROM (SELECT count(*) FROM changed) c`,
    [open],
  );
}

export async function setLane(database: Queryable, lane: Lane, enabled: boolean): Promise<void> {
  await database.query(
    `WITH changed AS (UPDATE lanes SET enabled = $2, updated_at = now() WHERE lane = $1 RETURNING 1) SELECT ${SWITCH_NOTIFY} FROM (SELECT count(*) FROM changed) c`,
    [lane, enabled],
  );
}

export async function pauseModel(database: Queryable, modelId: string, retryAfterS: number): Promise<void> {
  await database.query(
    `WITH changed AS (
       INSERT INTO model_pauses (model_id, retry_after_s) VALUES ($1, $2)
       ON CONFLICT (model_id) DO UPDATE SET retry_after_s = excluded.retry_after_s, paused_at = now() RETURNING 1)
     SELECT ${SWITCH_NOTIFY} FROM (SELECT count(*) FROM changed) c`,
    [modelId, retryAfterS],
  );
}

export async function resumeModel(database: Queryable, modelId: string): Promise<void> {
  await database.query(
    `WITH changed AS (DELETE FROM model_pauses WHERE model_id = $1 RETURNING 1) SELECT ${SWITCH_NOTIFY} FROM (SELECT count(*) FROM changed) c`,
    [modelId],
  );
}
