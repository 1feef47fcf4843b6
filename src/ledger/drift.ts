// The drift gauge: a cheap subset of the ledger's rules (invariant.ts), run every minute by ONE
// instance of a deployment (whichever holds a Postgres advisory lock), exported on /metrics so an
// alert fires on money that drifted long before anyone runs `inkgate ledger check`:
//   - per wallet touched since the last run (a journal row newer than the last one seen; the first
//     run takes every wallet): conservation, and the leased and held pools equal to the live leases
//     and the durable open holds they stand for;
//   - holds open for more than a day (reconciliation is owed);
//   - live leases past their expiry by more than a minute (recovery is not running).
// Read-only. Each run is a handful of statements bounded by the pool's statement timeout.
import type { Pool, PoolClient } from '../store/pool.js';
import type { EventLog } from '../util/log.js';

/** What the last run found (zeros and no time on an instance that does not hold the lock). */
export interface DriftFigures {
  /** This instance holds the lock and runs the checks. */
  readonly leader: boolean;
  readonly driftAccounts: number;
  readonly staleHolds: number;
  readonly expiredLeases: number;
  /** Unix seconds of the last completed run; 0 before any. */
  readonly lastCheckS: number;
}

export interface DriftGaugeOptions {
  readonly pool: Pool;
  /** How often the leader runs (60 000 in a deployment). */
  readonly intervalMs: number;
  readonly log: EventLog;
  readonly now?: () => Date;
}

/** The lock's first half (the second is the schema's hash): one gauge per schema, not per database. */
const LOCK_CLASS = 0x696e6b67; // "inkg"
const STALE_HOLD_MS = 86_400_000;
/** A live lease this far past its expiry is one recovery missed (heartbeats recover after about a second). */
const EXPIRED_LEASE_MS = 60_000;
const SAMPLE_ACCOUNTS = 5;
/** At most this many drifted accounts are remembered to check again (the count itself is exact). */
const MAX_SUSPECTS = 1000;

const TRY_LOCK = `SELECT pg_try_advisory_lock(${LOCK_CLASS}, hashtext(current_schema())) AS locked`;
const UNLOCK = `SELECT pg_advisory_unlock(${LOCK_CLASS}, hashtext(current_schema()))`;
const WATERMARK = `SELECT coalesce(max(id), 0)::text AS id FROM ledger_journal`;
/** $1: the last journal id seen, or null for every wallet; $2: the accounts that drifted last run (checked again). */
const DRIFTED_ACCOUNTS = `
  WITH touched AS (
    SELECT account_id FROM wallets WHERE $1::bigint IS NULL
    UNION
    SELECT account_id FROM ledger_journal WHERE $1::bigint IS NOT NULL AND id > $1::bigint
    UNION
    SELECT unnest($2::text[]))
  SELECT w.account_id FROM wallets w JOIN touched t ON t.account_id = w.account_id
   CROSS JOIN LATERAL (SELECT coalesce(sum(l.grant_ink), 0) AS g, coalesce(sum(l.payg_ink), 0) AS p FROM leases l
                        WHERE l.state = 'live' AND l.account_id = w.account_id) lz
   CROSS JOIN LATERAL (SELECT coalesce(sum(r.hold_grant_ink), 0) AS g, coalesce(sum(r.hold_payg_ink), 0) AS p FROM requests r
                        WHERE r.hold_state = 'open' AND NOT r.leased AND r.account_id = w.account_id) hz
   WHERE w.grant_ink + w.payg_ink + w.leased_grant_ink + w.leased_payg_ink + w.held_grant_ink + w.held_payg_ink + w.charged_ink + w.expired_ink <> w.credited_ink
      OR least(w.grant_ink, w.payg_ink, w.leased_grant_ink, w.leased_payg_ink, w.held_grant_ink, w.held_payg_ink, w.charged_ink, w.expired_ink) < 0
      OR w.leased_grant_ink <> lz.g OR w.leased_payg_ink <> lz.p
      OR w.held_grant_ink <> hz.g OR w.held_payg_ink <> hz.p`;
const STALE_HOLDS = `SELECT count(*)::int AS n FROM requests WHERE hold_state = 'open' AND created_at < $1::timestamptz`;
const EXPIRED_LEASES = `SELECT count(*)::int AS n FROM leases WHERE state = 'live' AND expires_at < $1::timestamptz`;

const NOT_LEADER: DriftFigures = Object.freeze({ leader: false, driftAccounts: 0, staleHolds: 0, expiredLeases: 0, lastCheckS: 0 });

export class DriftGauge {
  private readonly now: () => Date;
  private lockHolder: PoolClient | undefined;
  /** The newest journal id the last run saw (null: none yet, the next run takes every wallet). */
  private watermark: string | null = null;
  /** Accounts that drifted: checked again every run until found clean. */
  private suspects: string[] = [];
  private last: DriftFigures = NOT_LEADER;
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<DriftFigures> | undefined;
  private stopped = false;

  constructor(private readonly options: DriftGaugeOptions) {
    this.now = options.now ?? (() => new Date());
  }

  get figures(): DriftFigures {
    return this.last;
  }

  start(): void {
    this.timer = setInterval(() => void this.checkNow().catch(() => undefined), this.options.intervalMs);
    this.timer.unref();
  }

  /** One run now (or the one running): the figures, or the not-leader zeros when another instance holds the lock. */
  checkNow(): Promise<DriftFigures> {
    this.running ??= this.run().finally(() => (this.running = undefined));
    return this.running;
  }

  private async run(): Promise<DriftFigures> {
    if (this.stopped) return this.last;
    try {
      const client = await this.lock();
      if (client === undefined) return (this.last = NOT_LEADER);
      const mark = (await client.query<{ id: string }>(WATERMARK)).rows[0]!.id;
      const drifted = await client.query<{ account_id: string }>(DRIFTED_ACCOUNTS, [this.watermark, this.suspects]);
      const nowMs = this.now().getTime();
      const stale = await client.query<{ n: number }>(STALE_HOLDS, [new Date(nowMs - STALE_HOLD_MS)]);
      const expired = await client.query<{ n: number }>(EXPIRED_LEASES, [new Date(nowMs - EXPIRED_LEASE_MS)]);
      // A drifted account stays counted until it is found clean: it is checked again next run too.
      this.watermark = mark;
      this.suspects = drifted.rows.slice(0, MAX_SUSPECTS).map((r) => r.account_id);
      this.last = {
        leader: true,
        driftAccounts: drifted.rows.length,
        staleHolds: stale.rows[0]!.n,
        expiredLeases: expired.rows[0]!.n,
        lastCheckS: Math.floor(nowMs / 1000),
      };
      if (drifted.rows.length > 0) {
        this.options.log(
          {
            accounts: drifted.rows.length,
            sample: drifted.rows.slice(0, SAMPLE_ACCOUNTS).map((r) => r.account_id),
            note: 'run `inkgate ledger check`',
          },
          'ledger.drift',
        );
      }
      return this.last;
    } catch (e) {
      this.options.log({ err: (e as Error).message }, 'ledger.drift_check_failed');
      this.dropLock(e as Error);
      return this.last;
    }
  }

  /** The client holding the lock: kept between runs; taken when free. */
  private async lock(): Promise<PoolClient | undefined> {
    if (this.lockHolder !== undefined) return this.lockHolder;
    const client = await this.options.pool.connect();
    try {
      const r = await client.query<{ locked: boolean }>(TRY_LOCK);
      if (!r.rows[0]!.locked) {
        client.release();
        return undefined;
      }
    } catch (e) {
      client.release(e as Error);
      throw e;
    }
    client.on('error', (e) => this.dropLock(e));
    this.lockHolder = client;
    return client;
  }

  /** The lock's connection failed: drop it (the lock went with the session); the next run tries again. */
  private dropLock(err: Error): void {
    const c = this.lockHolder;
    this.lockHolder = undefined;
    this.watermark = null;
    c?.release(err);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    await this.running?.catch(() => undefined);
    const c = this.lockHolder;
    this.lockHolder = undefined;
    if (c === undefined) return;
    try {
      await c.query(UNLOCK);
      c.release();
    } catch (e) {
      c.release(e as Error);
    }
  }
}
