// The write-behind journal: request records of leased holds, written to Postgres by the journal flush (every `flushMs`; "group commit" names only store/group-commit.ts).
//
// A record joins the queue when its request starts (the hold came out of a lease), again when it
// ends (settle, release, usage unknown) or learns its vendor id, unless it is already waiting.
// Every `flushMs` (or at once when `flushMaxRecords` are waiting) one ledger_flush statement
// writes a batch in one transaction: a request that started and ended inside the window costs one
// row. A start that joined during the window a flush closes waits for the next flush (unless the
// queue is at its bound, or the caller needs everything written): most requests end within one
// period, and then their start and end are one row insert instead of an insert and an update,
// which was most of what billing cost Postgres at the default period. So a start is in Postgres
// within two periods of its request starting, an end within one. ledger_flush is idempotent on
// request id, so a batch whose answer was lost (timeout, dropped connection) is simply sent again
// with whatever its records hold by then.
//
// Bounded: `journalMaxRecords` counts every record not yet fully written, waiting or in flight;
// once it is reached `full` is true and the escrow refuses new admissions (503) rather than let
// the heap grow while Postgres is away.
//
// A failed flush is an outage (connection refused, timeout, the server restarting) and is retried,
// except an integrity violation (SQLSTATE class 23: a CHECK, foreign key, unique or not-null rule of
// the schema refused the batch). That is a broken money rule, the same batch would be refused
// forever: it goes to the fail-stop as a LedgerAssertionError, and its records are never sent again.
import type { Pool } from '../store/pool.js';
import { isLedgerAssertion, type LedgerAssertionError, schemaViolation } from './assertion.js';
import { int4Array, int8Array, jsonbArray, textArray } from '../store/binary-array.js';
import { type EndKind, flushColumns, type JournalRecord } from './journal-record.js';
import type { EventLog } from '../util/log.js';

export interface WriteBehindOptions {
  readonly instanceId: string;
  readonly epoch: () => number;
  readonly flushMs: number;
  readonly flushMaxRecords: number;
  readonly journalMaxRecords: number;
  /** Batches without unknown usage commit without waiting for the WAL flush (write-behind mode). */
  readonly asyncCommit: boolean;
  readonly now: () => Date;
  readonly log: EventLog;
  /** Told when a record's end is written (the escrow closes drained leases then). */
  readonly onEndWritten: (record: JournalRecord) => void;
  /** A broken money rule met while taking in a committed batch: the fail-stop, never a retry. */
  readonly onViolation?: (error: LedgerAssertionError) => void;
}

// The column arrays go as binary parameters (store/binary-array.ts); the two of timestamps as
// text[], each element then read by timestamptz's own input, as a text array's would be.
const FLUSH_ARGS = `$1::text, $2::bigint, $3::timestamptz, $4::text[], $5::text[], $6::text[],
  $7::text[], $8::text[], $9::bigint[], $10::bigint[], $11::bigint[], $12::integer[], $13::text[]::timestamptz[], $14::text[], $15::text[],
  $16::bigint[], $17::jsonb[], $18::text[], $19::text[]::timestamptz[]`;
const FLUSH = `SELECT item, result FROM ledger_flush(${FLUSH_ARGS})`;
/**
 * The same without waiting for the WAL flush (write-behind mode, and no unknown usage in the batch).
 * Why it is safe: what a Postgres crash could lose is this batch, exactly what a kill of the gateway
 * loses in this mode (charges the operator does not get, never a charge the customer did not
 * incur), and WAL is one sequence, so the next synchronous commit (any lease take or return, or a
 * batch carrying unknown usage) makes it durable too. Measured on this 2-core machine, the WAL
 * flush was most of a small batch's cost.
 */
const FLUSH_ASYNC_COMMIT = `SELECT f.item, f.result FROM set_config('synchronous_commit', 'off', true) AS async_commit,
  LATERAL ledger_flush(${FLUSH_ARGS}) AS f`;

/**
 * The LedgerAssertionError for a flush the schema refused (SQLSTATE class 23, from pg's
 * DatabaseError), or undefined for any other failure (an outage: retried).
 */
export function flushViolation(error: unknown, batch: readonly JournalRecord[]): LedgerAssertionError | undefined {
  return schemaViolation(error, 'ledger_flush', {
    records: batch.length,
    first_request_id: batch[0]?.requestId ?? null,
    first_lease_id: batch[0]?.leaseId ?? null,
  });
}

/** Back-off between failed flushes: the store is away; try again soon, never in a tight loop. */
const RETRY_MS = [10, 25, 50, 100, 250, 500, 1000] as const;
/** Failures in a row after which a failing flush is logged as an error (the first is a warning). */
const FAILED_AFTER = 5;

type FlushResult = 'ok' | 'late' | 'deferred';

/**
 * ledger_flush's answer per record, matched by item number (1-based), not by row order (the order
 * of a set is no promise of SQL). An answer that does not cover every record fails the batch like
 * an error would: nothing says the missing ones were written, and the batch is idempotent to resend.
 */
export function resultsByItem(rows: ReadonlyArray<{ item: number; result: FlushResult }>, itemCount: number): FlushResult[] {
  const out = new Array<FlushResult>(itemCount);
  let seen = 0;
  for (const row of rows) {
    if (!(row.item >= 1 && row.item <= itemCount) || out[row.item - 1] !== undefined) throw new Error(`ledger_flush answered item ${row.item} of ${itemCount}`);
    out[row.item - 1] = row.result;
    seen++;
  }
  if (seen !== itemCount) throw new Error(`ledger_flush answered ${seen} of ${itemCount} items`);
  return out;
}

export class WriteBehind {
  private queue: JournalRecord[] = [];
  private live = 0;
  private flushing: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private failures = 0;
  private closed = false;
  /** The window the next flush closes; a start joining now is written by the flush after it. */
  private window = 0;
  /** Records of a batch the schema refused: never sent again (left for lease recovery, as after a kill). */
  private readonly refused = new WeakSet<JournalRecord>();
  /** Flushes committed, and records they carried; failures retried; batches refused by the schema (for the bench and tests). */
  readonly stats = { flushes: 0, records: 0, failures: 0, late: 0, violations: 0 };
  /** Told each committed flush's duration (the metrics' flush histogram). */
  onFlushed: ((seconds: number, records: number) => void) | undefined;
  /** Told each flush as it starts (its trace span, tracing/); the function it returns is told how it ended. */
  onFlushStarted: ((batch: readonly JournalRecord[]) => ((error?: unknown) => void) | undefined) | undefined;

  constructor(
    private readonly pool: Pool,
    private readonly options: WriteBehindOptions,
  ) {}

  /** Records not fully written (waiting, in flight, or started and not yet ended). */
  get size(): number {
    return this.live;
  }

  get full(): boolean {
    return this.live >= this.options.journalMaxRecords;
  }

  get pending(): number {
    return this.queue.length;
  }

  /** A hold came out of a lease: its record starts. */
  start(record: JournalRecord): void {
    this.live++;
    record.startWindow = this.window;
    this.enqueue(record);
  }

  /** Its end (or vendor id) changed: written by the next batch. */
  touch(record: JournalRecord): void {
    this.enqueue(record);
  }

  /** Resolves once a batch carrying the record's current end has committed (or after `timeoutMs`: false). */
  whenWritten(record: JournalRecord, timeoutMs: number): Promise<boolean> {
    if (record.endWritten) return Promise.resolve(true);
    return new Promise((resolve) => {
      const t = setTimeout(() => resolve(false), timeoutMs);
      (record.waiters ??= []).push(() => {
        clearTimeout(t);
        resolve(true);
      });
      this.schedule(0);
    });
  }

  /**
   * Writes everything waiting now; resolves when the queue it saw is written (or `timeoutMs`
   * passed, or a batch was refused by the schema: false).
   */
  async flushAll(timeoutMs: number): Promise<boolean> {
    const until = performance.now() + timeoutMs;
    while (this.queue.length > 0 || this.flushing) {
      if (performance.now() > until) return false;
      if (this.flushing) await this.flushing;
      else await this.flushOnce(true);
      if (this.failures > 0 && this.queue.length > 0) {
        if (performance.now() + RETRY_MS[0] > until) return false;
        await new Promise((r) => setTimeout(r, RETRY_MS[Math.min(this.failures - 1, RETRY_MS.length - 1)]));
      }
    }
    return this.stats.violations === 0;
  }

  private enqueue(record: JournalRecord): void {
    if (this.refused.has(record)) return;
    if (!record.queued) {
      record.queued = true;
      this.queue.push(record);
    }
    if (this.queue.length >= this.options.flushMaxRecords) this.schedule(0);
    else this.schedule(this.options.flushMs);
  }

  private schedule(delayMs: number): void {
    if (this.closed && delayMs > 0) delayMs = 0;
    if (this.flushing) return; // the running flush reschedules itself when it ends
    if (this.timer) {
      if (delayMs > 0) return;
      clearTimeout(this.timer);
    }
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.flushOnce();
    }, delayMs);
  }

  /** One flush; `everything`: young starts too (flushAll: a shutdown, a lease's return, a view). */
  private flushOnce(everything = false): Promise<void> {
    if (this.flushing) return this.flushing;
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    if (this.queue.length === 0) return Promise.resolve();
    const batch = this.takeBatch(everything);
    if (batch.length === 0) {
      // Only young starts wait: the next window's flush writes them.
      this.schedule(this.options.flushMs);
      return Promise.resolve();
    }
    this.flushing = this.write(batch).finally(() => {
      this.flushing = undefined;
      if (this.queue.length > 0) this.schedule(this.failures > 0 ? RETRY_MS[Math.min(this.failures - 1, RETRY_MS.length - 1)] : this.options.flushMs);
    });
    return this.flushing;
  }

  /**
   * The records the flush closing this window writes: all of them when asked or when the queue is
   * at its bound, else all but the starts (no end yet) that joined during this window.
   */
  private takeBatch(everything: boolean): JournalRecord[] {
    const closing = this.window++;
    const max = this.options.flushMaxRecords;
    if (everything || this.queue.length >= max) {
      const batch = this.queue.length <= max ? this.queue : this.queue.slice(0, max);
      this.queue = batch === this.queue ? [] : this.queue.slice(batch.length);
      return batch;
    }
    const batch: JournalRecord[] = [];
    const young: JournalRecord[] = [];
    for (const record of this.queue) {
      if (record.end === null && record.startWindow === closing) young.push(record);
      else batch.push(record);
    }
    this.queue = young;
    return batch;
  }

  private async write(batch: JournalRecord[]): Promise<void> {
    const n = batch.length;
    const { cols, ends, anyUnknown } = flushColumns(batch);
    const durable = anyUnknown || !this.options.asyncCommit;
    let results: Array<'ok' | 'late' | 'deferred'>;
    const startedMs = performance.now();
    const traced = this.onFlushStarted?.(batch);
    try {
      const res = await this.pool.query<{ item: number; result: FlushResult }>({
        name: durable ? 'ledger_flush' : 'ledger_flush_async_commit',
        text: durable ? FLUSH : FLUSH_ASYNC_COMMIT,
        values: [
          this.options.instanceId,
          this.options.epoch(),
          this.options.now().toISOString(),
          textArray(cols.ids),
          textArray(cols.accounts),
          textArray(cols.keys),
          textArray(cols.products),
          textArray(cols.models),
          int8Array(cols.leases),
          int8Array(cols.holds),
          int8Array(cols.holdGrants),
          int4Array(cols.periods),
          textArray(cols.created),
          textArray(cols.vids),
          textArray(ends),
          int8Array(cols.charges),
          jsonbArray(cols.usage),
          textArray(cols.reasons),
          textArray(cols.resolved),
        ],
      });
      results = resultsByItem(res.rows, n);
    } catch (e) {
      traced?.(e);
      const violation = flushViolation(e, batch);
      if (violation) return this.refuse(batch, violation);
      this.failures++;
      this.stats.failures++;
      // One failure under load (a lock wait past lock_timeout) is retried and passes: a warning. A
      // run of them is the store in trouble: an error, repeated now and then while it lasts.
      const fields = { records: n, failures: this.failures, err: e as Error };
      if (this.failures === 1) this.options.log(fields, 'ledger.flush_retried');
      else if (this.failures === FAILED_AFTER || this.failures % 100 === 0) this.options.log(fields, 'ledger.flush_failed');
      // Back to the front, in order; a record touched meanwhile is already queued again.
      const again = batch.filter((r) => !r.queued);
      for (const r of again) r.queued = true;
      this.queue = again.concat(this.queue);
      return;
    }
    traced?.();
    this.failures = 0;
    this.stats.flushes++;
    this.stats.records += n;
    this.onFlushed?.((performance.now() - startedMs) / 1000, n);
    this.afterFlush(batch, results, ends);
  }

  /** Counts each written record and, on its first written end, wakes its waiters and hands it to the lease. */
  private afterFlush(batch: JournalRecord[], results: FlushResult[], ends: Array<EndKind | null>): void {
    for (let i = 0; i < batch.length; i++) {
      const r = batch[i]!;
      const result = results[i]!;
      if (result === 'deferred') continue; // its lease was recovered: the start waits for its end (late path)
      if (result === 'late') {
        this.stats.late++;
        this.options.log({ request_id: r.requestId, lease_id: r.leaseId, end: ends[i], charge_ink: r.chargeInk }, 'ledger.late_flush');
      }
      // Once per record, even if it was queued again after its end (a late vendor id): the counters
      // and the lease's bookkeeping must not see the same end twice.
      if (ends[i] !== null && !r.endWritten) {
        r.endWritten = true;
        this.live--;
        const w = r.waiters;
        r.waiters = undefined;
        if (w) for (const f of w) f();
        this.ended(r);
      }
    }
  }

  /** A batch the schema refused: its records leave the queue for good, and the violation goes to the fail-stop. */
  private refuse(batch: readonly JournalRecord[], violation: LedgerAssertionError): void {
    for (const r of batch) this.refused.add(r);
    this.queue = this.queue.filter((r) => !this.refused.has(r));
    this.stats.violations++;
    if (this.options.onViolation) this.options.onViolation(violation);
    else
      this.options.log(
        { err: violation.message, figures: violation.figures, note: 'no fail-stop handler: the batch is not retried' },
        'ledger.assertion_failed',
      );
  }

  /** Tells the escrow an end is written; a broken rule there goes to the fail-stop, the batch's other records still count. */
  private ended(record: JournalRecord): void {
    try {
      this.options.onEndWritten(record);
    } catch (e) {
      if (!isLedgerAssertion(e) || this.options.onViolation === undefined) throw e;
      this.options.onViolation(e);
    }
  }

  /** Stops the timer; what is still queued is flushed by the caller (flushAll) first. */
  close(): void {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }
}
