// The Ink ledger: reserve before a request runs, then settle, release or refund exactly once.
//
// Money rules (docs/api/billing.md, docs/ledger.md):
// - Amounts are whole Ink (BIGINT). The ledger never prices anything: callers pass whole-Ink holds
//   and charges (src/catalog/pricing.ts does the rounding).
// - Reserve takes from the period grant first, then pay-as-you-go; the hold records its split.
//   It checks the wallet and the key's lifetime cap together, under row locks, in one statement.
// - Settle charges min(charge, hold), grant first out of the hold, and returns the rest to the
//   pools it came from. Release (vendor refused) and refund (failed video/image) return it all.
// - Every hold resolves at most once; a second resolver gets { resolved: false }.
// - Unknown usage keeps the hold open (status usage_unknown, still in key.ink_reserved) until
//   reconcile() settles or releases it from vendor usage records. It is never charged blindly.
// - Every move writes its journal row in the same statement as the balances (migration 002).
//
// Throughput: concurrent reserves (and, separately, resolutions) are grouped into one statement
// and one commit (group-commit.ts). Each item still gets its whole hold or nothing.
import { assertLedger } from './hold.js';
import { stoppedAnswer } from './fail-stop.js';
import { inkToUsd, type TextUsage } from '../catalog/pricing.js';
import { ApiError } from '../errors.js';
import { isStoreUnavailable, storeError, withTx, type Pool, type Queryable } from '../store/pool.js';
import { GroupCommit } from '../store/group-commit.js';
import * as SQL from './statements.js';

export const PRODUCTS = ['messages', 'responses', 'video', 'images'] as const;
export type Product = (typeof PRODUCTS)[number];

export interface ReserveInput {
  requestId: string;
  accountId: string;
  keyId: string;
  product: Product;
  model: string;
  holdInk: number;
}

export interface Hold {
  requestId: string;
  holdInk: number;
  grantInk: number;
  paygInk: number;
}

/** Vendor-reported text usage; undefined = the vendor did not report that bucket (not zero). */
/** Usage as recorded with a settlement: a bucket the vendor did not report is absent, never zero. */
export type RecordedUsage = Partial<TextUsage>;

export type ResolveResult =
  | {
      resolved: true;
      chargedInk: number;
      /** Returned to the pools it came from. */
      releasedInk: number;
      /** Old-period grant that lapsed instead of returning (only after a roll-over); charged + released + expired = hold. */
      expiredInk: number;
    }
  | { resolved: false; reason: 'already_resolved' | 'unknown_request' | 'in_lease' };

export interface WalletView {
  account_id: string;
  grant_ink: number;
  payg_ink: number;
  held_grant_ink: number;
  held_payg_ink: number;
  charged_ink: number;
  expired_ink: number;
  credited_ink: number;
  topups_completed: number;
  grant_period: number;
  period_started_at: Date;
}

export type RequestStatus = 'running' | 'usage_unknown' | 'settled' | 'released' | 'refunded' | 'void';

/** One request record (one hold), as stored. */
export interface RequestRecord {
  id: string;
  account_id: string;
  key_id: string;
  product: Product;
  model: string;
  status: RequestStatus;
  hold_state: 'open' | 'settled' | 'released' | 'refunded' | 'void';
  hold_ink: number;
  hold_grant_ink: number;
  hold_payg_ink: number;
  charged_ink: number;
  charged_grant_ink: number;
  charged_payg_ink: number;
  expired_ink: number;
  /** Reported usage buckets; null = nothing reported; an absent bucket was not reported. */
  usage: Record<string, unknown> | null;
  vendor_request_id: string | null;
  reason: string | null;
  created_at: Date;
  resolved_at: Date | null;
}

/** One line of a vendor's usage report (invoice / usage export), keyed by the vendor's request id. */
export interface VendorUsageRecord {
  vendorRequestId: string;
  /** Token buckets as the vendor reported them (Messages-style disjoint buckets). */
  usage?: RecordedUsage;
  /** A charge already worked out (video seconds, images, or a vendor-side total), whole Ink. */
  chargeInk?: number;
}

export interface ReconcileOptions {
  /** Open holds older than this with no record are listed (never charged). */
  olderThanMs: number;
  /** The whole-Ink charge for a record; throw (e.g. RangeError) to skip the record. Capped at the hold. */
  chargeFor: (req: RequestRecord, record: VendorUsageRecord) => number;
  /** Most entries kept per list in the report (counts are always complete). Default 1,000. */
  listLimit?: number;
}

export interface ReportList<T> {
  count: number;
  items: T[];
}

export interface ReconciledHold {
  requestId: string;
  vendorRequestId: string;
  holdInk: number;
  chargedInk: number;
  releasedInk: number;
  expiredInk: number;
}

export interface ReconcileReport {
  recordsRead: number;
  settled: ReportList<ReconciledHold>;
  released: ReportList<ReconciledHold>;
  unmatched: ReportList<{ vendorRequestId: string; reason: 'no_request' | 'already_resolved' }>;
  skipped: ReportList<{ vendorRequestId: string; requestId?: string; reason: string }>;
  /** Open holds older than the cut-off that no record named: for an operator to look at. */
  stale: ReportList<RequestRecord> & { olderThan: string; truncated: boolean };
}

/** The ledger's moves bound to one connection (inside the caller's transaction). */
export interface LedgerTx {
  reserve(input: ReserveInput): Promise<Hold>;
  settle(requestId: string, chargeInk: number, details?: { usage?: RecordedUsage | object; vendorRequestId?: string }): Promise<ResolveResult>;
  release(requestId: string, reason: string): Promise<ResolveResult>;
  refund(requestId: string, reason: string): Promise<ResolveResult>;
}

export interface LedgerOptions {
  now?: () => Date;
  /**
   * True once this instance stopped on a broken money rule (fail-stop.ts): every reserve, direct or
   * in a caller's transaction, then answers 503 before it touches the store.
   */
  stopped?: () => boolean;
  log?: (msg: string, fields?: object) => void;
  /** Group concurrent moves into one statement and one commit (default true). */
  batching?: boolean;
  /** Most moves per statement (default 128). */
  batchMaxItems?: number;
  /**
   * Statements in flight per kind of move (reserve, resolve); default 1. Why one: every batch of a
   * busy account queues for its wallet row anyway, so a second batch in flight mostly waits for
   * the first while splitting the backlog into smaller batches, and each batch has a fixed cost.
   * Measured with bench/text-breakdown.ts at 50 connections (four alternated runs each): Postgres
   * CPU per request 336-375 µs with one in flight, 384-513 µs with two; throughput unchanged.
   */
  batchMaxInFlight?: number;
  /** Most moves waiting per kind before new ones are refused with 503 (default 10,000). */
  batchMaxQueued?: number;
  /**
   * lock_timeout for a batch of more than one move and for its item-by-item retry (default 250 ms),
   * so a wedged row costs its neighbours at most about the session's lock_timeout in total.
   */
  batchLockTimeoutMs?: number;
  /**
   * Send a lone move through the batch functions too, instead of ledger_reserve_one /
   * ledger_resolve_one. For tests: both paths must agree on every rule.
   */
  functionForSingles?: boolean;
  /** Delays between attempts to clean up a reservation whose outcome is unknown (default 0.5 s, 2 s, 5 s, 15 s). */
  abandonRetryMs?: readonly number[];
}

/** Largest hold / charge / credit the ledger accepts in one move (a limit on everything). */
export const MAX_MOVE_INK = 1_000_000_000_000;
const MAX_USAGE_JSON_BYTES = 4096;
const MAX_REASON_CHARS = 500;
const MAX_RECONCILE_RECORDS = 1_000_000;
const RECONCILE_CHUNK = 500;
const STALE_SCAN_LIMIT = 10_000;
const REQUEST_ID = /^req_[A-Za-z0-9_-]{1,120}$/;
const RESOLVE_KINDS = ['settle', 'release', 'refund', 'reconcile'] as const;
type ResolveKind = (typeof RESOLVE_KINDS)[number];

interface ReserveRow {
  item: number;
  result: 'ok' | 'key_limit' | 'insufficient' | 'duplicate' | 'unknown_key' | 'key_not_live' | 'invalid';
  take_grant_ink: number;
  take_payg_ink: number;
  available_ink: number | null;
  key_room_ink: number | null;
}

interface ResolveItem {
  id: string;
  kind: ResolveKind;
  chargeInk: number;
  usage: string | null;
  vendorRequestId: string | null;
  reason: string | null;
}

interface ResolveRow {
  item: number;
  result: 'ok' | 'already_resolved' | 'unknown_request';
  charged_total_ink: number | null;
  released_total_ink: number | null;
  expired_total_ink: number | null;
  held_total_ink: number | null;
}

const USAGE_KEYS: Readonly<Record<string, string>> = {
  inputTokens: 'input_tokens',
  outputTokens: 'output_tokens',
  cacheReadTokens: 'cache_read_tokens',
  cacheWriteTokens: 'cache_write_tokens',
};

/** Usage as stored: reported buckets only (undefined dropped, zero kept), text buckets in snake_case. */
export function usageJson(usage: object | undefined): string | null {
  if (usage === undefined || usage === null) return null;
  if (typeof usage !== 'object' || Array.isArray(usage)) throw new TypeError('ledger: usage must be an object');
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(usage)) if (v !== undefined) out[USAGE_KEYS[k] ?? k] = v;
  const s = JSON.stringify(out);
  if (Buffer.byteLength(s) > MAX_USAGE_JSON_BYTES) throw new RangeError(`ledger: usage is larger than ${MAX_USAGE_JSON_BYTES} bytes`);
  return s;
}

export function wholeInk(name: string, v: number, min = 0): number {
  if (!Number.isSafeInteger(v) || v < min || v > MAX_MOVE_INK) {
    throw new RangeError(`ledger: ${name} must be a whole number of Ink from ${min} to ${MAX_MOVE_INK}, got ${v}`);
  }
  return v;
}

/** A vendor's request id as the request record stores it (1 to 256 characters), or a RangeError. */
export function checkVendorRequestId(v: string): string {
  return text('vendorRequestId', v, 256)!;
}

function checkRequestId(id: string): void {
  if (typeof id !== 'string' || !REQUEST_ID.test(id)) throw new RangeError(`ledger: bad request id ${JSON.stringify(id)}`);
}

function text(name: string, v: string | undefined, max: number): string | null {
  if (v === undefined) return null;
  if (typeof v !== 'string' || v.length === 0 || v.length > max) throw new RangeError(`ledger: ${name} must be 1 to ${max} characters`);
  return v;
}

/**
 * True when a statement may have committed although we got no answer (read timeout, connection
 * dropped after sending). A server-side error (a SQLSTATE) means it rolled back; a failure to
 * connect means it was never sent.
 */
export function outcomeUnknown(err: unknown): boolean {
  if (!isStoreUnavailable(err)) return false;
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) return false;
  if (code === 'ECONNREFUSED' || code === 'ENOTFOUND' || code === 'EHOSTUNREACH') return false;
  const m = (err as Error).message;
  if (m.includes('trying to connect') || m.includes('connection timeout')) return false;
  return true;
}

/**
 * The request id was taken by a concurrent insert after the function's own check (the request
 * row or its reserve journal row, whichever the statement happened to write first).
 */
const idTaken = (e: unknown): boolean => {
  const c = (e as { constraint?: unknown }).constraint;
  return (e as { code?: unknown }).code === '23505' && (c === 'requests_pkey' || c === 'ledger_journal_one_reserve');
};
const DUPLICATE: ReserveRow = Object.freeze({ item: 1, result: 'duplicate', take_grant_ink: 0, take_payg_ink: 0, available_ink: null, key_room_ink: null });

/**
 * How long a move's statement waits for a locked row: 'first' (a batch waits `batchLockTimeoutMs`,
 * a lone move the session's lock_timeout), 'patient' (the session's lock_timeout), or a number of
 * ms (the single moves a batch was split into).
 *
 * A batch that timed out waiting for a row lock is retried once whole, waiting the session's
 * longer lock_timeout, before it is split into single moves. Why: under a burst on one busy
 * account the batches queue for the same wallet row, and splitting a batch there turns one
 * statement into a hundred that queue for the same row and the same connections (measured: 1,000
 * streams opened at once on one key got 503s). Splitting stays for what it is for: one wedged row
 * (held by a long transaction elsewhere) that would otherwise fail its neighbours.
 */
type LockWait = 'first' | 'patient' | number;

function lockTimedOut(err: unknown): boolean {
  return (err as { code?: unknown }).code === '55P03';
}

/** Errors after which a batch is re-run item by item: not an outage, or one wedged row's lock. */
function retryAlone(err: unknown): boolean {
  return !isStoreUnavailable(err) || lockTimedOut(err);
}

export function checkReserveInput(input: ReserveInput): void {
  checkRequestId(input.requestId);
  if (!(PRODUCTS as readonly string[]).includes(input.product)) throw new RangeError(`ledger: unknown product ${JSON.stringify(input.product)}`);
  text('model', input.model, 200);
  text('accountId', input.accountId, 200);
  text('keyId', input.keyId, 200);
  wholeInk('holdInk', input.holdInk);
}

function settleItem(requestId: string, chargeInk: number, details: { usage?: RecordedUsage | object; vendorRequestId?: string }): ResolveItem {
  checkRequestId(requestId);
  wholeInk('chargeInk', chargeInk);
  return {
    id: requestId,
    kind: 'settle',
    chargeInk,
    usage: usageJson(details.usage),
    vendorRequestId: text('vendorRequestId', details.vendorRequestId, 256),
    reason: null,
  };
}

function returnItem(kind: 'release' | 'refund', requestId: string, reason: string): ResolveItem {
  checkRequestId(requestId);
  return { id: requestId, kind, chargeInk: 0, usage: null, vendorRequestId: null, reason: text('reason', reason, MAX_REASON_CHARS) };
}

const overloaded = (cause: Error) =>
  new ApiError('provider_unavailable', { message: 'The ledger is overloaded; retry after Retry-After.', retryAfterS: 1, cause });

/** The caller's answer for one reserve row: the hold, or the error docs/api/errors.md names. */
function reserveOutcome(input: ReserveInput, row: ReserveRow | Error): Hold {
  if (row instanceof Error) {
    if (row.name === 'QueueFullError') throw overloaded(row);
    storeError(row);
  }
  switch (row.result) {
    case 'ok':
      // Postcondition: the hold was taken whole from its two sources.
      assertLedger(row.take_grant_ink + row.take_payg_ink === input.holdInk, `reserve ${input.requestId}: grant ${row.take_grant_ink} + payg ${row.take_payg_ink} != hold ${input.holdInk}`);
      return { requestId: input.requestId, holdInk: input.holdInk, grantInk: row.take_grant_ink, paygInk: row.take_payg_ink };
    case 'insufficient':
      throw new ApiError('insufficient_ink', {
        message: `Insufficient Ink: this request needs ${input.holdInk} Ink and the wallet has ${row.available_ink ?? 0} Ink available.`,
      });
    case 'key_limit':
      throw new ApiError('key_ink_limit_reached', {
        message: `This key's Ink cap would be crossed: this request needs ${input.holdInk} Ink and the key has ${row.key_room_ink ?? 0} Ink left under its cap.`,
      });
    case 'duplicate':
      throw new Error(`ledger: request id ${input.requestId} already exists`);
    case 'key_not_live':
      // Revoked or expired since the caller authenticated it (the text lanes' key cache): refused
      // like any dead key, and nothing was held.
      throw new ApiError('invalid_api_key', { message: 'The API key has been revoked or has expired.' });
    case 'unknown_key':
      throw new Error(`ledger: ${input.keyId} is not a key of account ${input.accountId}`);
    default:
      throw new RangeError(`ledger: reserve refused ${input.requestId}: ${row.result}`);
  }
}

export class Ledger {
  private readonly now: () => Date;
  private readonly stopped: () => boolean;
  private readonly log: (msg: string, fields?: object) => void;
  private readonly reserveBatch: GroupCommit<ReserveInput, ReserveRow | Error> | undefined;
  private readonly resolveBatch: GroupCommit<ResolveItem, ResolveRow | Error> | undefined;
  /** Vendor ids named mid-stream: bookkeeping, one batch at a time so it never crowds out the moves. */
  private readonly vendorIdBatch: GroupCommit<readonly [string, string], void> | undefined;
  private readonly abandonRetryMs: readonly number[];
  private readonly batchLockTimeoutMs: number;
  private readonly functionForSingles: boolean;
  private readonly cleanups = new Set<Promise<void>>();
  private readonly cleanupTimers = new Set<NodeJS.Timeout>();
  private closed = false;

  constructor(
    private readonly pool: Pool,
    opts: LedgerOptions = {},
  ) {
    this.now = opts.now ?? (() => new Date());
    this.stopped = opts.stopped ?? (() => false);
    this.log = opts.log ?? (() => undefined);
    this.abandonRetryMs = opts.abandonRetryMs ?? [500, 2000, 5000, 15000];
    this.batchLockTimeoutMs = opts.batchLockTimeoutMs ?? 250;
    this.functionForSingles = opts.functionForSingles ?? false;
    if (!Number.isSafeInteger(this.batchLockTimeoutMs) || this.batchLockTimeoutMs < 1) throw new RangeError('ledger: batchLockTimeoutMs must be >= 1');
    if (opts.batching ?? true) {
      const gc = {
        maxItems: opts.batchMaxItems ?? 128,
        maxInFlight: opts.batchMaxInFlight ?? 1,
        maxQueued: opts.batchMaxQueued ?? 10_000,
      };
      this.reserveBatch = new GroupCommit('ledger reserve', (items) => this.runReserve(items), gc);
      this.resolveBatch = new GroupCommit('ledger resolve', (items) => this.runResolve(items), gc);
      this.vendorIdBatch = new GroupCommit('ledger vendor ids', (items) => this.runSetVendorIds(items), {
        maxItems: gc.maxItems,
        maxInFlight: 1,
        maxQueued: gc.maxQueued,
      });
    }
  }

  /**
   * The clock as ISO-8601 text for the hot statements: Postgres reads it as the same instant, and
   * pg's own Date formatting (local time, by hand) showed up in the gateway's CPU profile.
   */
  private nowText(): string {
    return this.now().toISOString();
  }

  /** The batch functions' lock-timeout argument for `wait` (null: the session's lock_timeout). */
  private lockParam(n: number, wait: LockWait): number | null {
    if (wait === 'patient') return null;
    if (wait === 'first') return n > 1 ? this.batchLockTimeoutMs : null;
    return wait;
  }

  /** Group-commit counters: statements sent and moves they carried, per kind (undefined when batching is off). */
  batchStats(): { reserve: { batches: number; items: number }; resolve: { batches: number; items: number } } | undefined {
    if (!this.reserveBatch || !this.resolveBatch) return undefined;
    const r = this.reserveBatch.stats, s = this.resolveBatch.stats;
    return { reserve: { batches: r.batches, items: r.items }, resolve: { batches: s.batches, items: s.items } };
  }

  // ---------------------------------------------------------------------------------------------
  // Reserve

  /**
   * Takes the hold, grant first. Throws ApiError insufficient_ink / key_ink_limit_reached (402) or
   * provider_unavailable (503, store outage); on any throw no hold exists.
   */
  async reserve(input: ReserveInput): Promise<Hold> {
    checkReserveInput(input);
    if (this.closed) throw new Error('ledger: closed');
    if (this.stopped()) throw stoppedAnswer();
    let row: ReserveRow | Error;
    try {
      row = this.reserveBatch ? await this.reserveBatch.submit(input) : (await this.runReserve([input]))[0]!;
    } catch (e) {
      row = e as Error;
    }
    // A statement that may still commit on the server would leave a hold nobody knows about:
    // claim the id (or release the hold) in the background, then answer 503 now.
    if (row instanceof Error && outcomeUnknown(row)) this.abandon(input);
    return reserveOutcome(input, row);
  }

  private async runReserve(items: ReserveInput[], wait: LockWait = 'first', q: Queryable = this.pool): Promise<Array<ReserveRow | Error>> {
    const n = items.length;
    if (n === 1 && wait === 'first' && !this.functionForSingles) return [await this.reserveOne(items[0]!, q).catch((e: Error) => e)];
    const ids = new Array<string>(n), accounts = new Array<string>(n), keys = new Array<string>(n);
    const products = new Array<string>(n), models = new Array<string>(n), holds = new Array<number>(n);
    for (let i = 0; i < n; i++) {
      const it = items[i]!;
      ids[i] = it.requestId;
      accounts[i] = it.accountId;
      keys[i] = it.keyId;
      products[i] = it.product;
      models[i] = it.model;
      holds[i] = it.holdInk;
    }
    try {
      const r = await q.query<ReserveRow>({
        name: 'ledger_reserve',
        text: SQL.RESERVE,
        values: [ids, accounts, keys, products, models, holds, this.nowText(), this.lockParam(n, wait)],
      });
      return byItem(r.rows, n);
    } catch (e) {
      // One bad item (an id that raced in elsewhere, a wedged wallet) must not fail its neighbours.
      if (n > 1 && wait === 'first' && q === this.pool && lockTimedOut(e)) return this.runReserve(items, 'patient', q);
      if (n > 1 && retryAlone(e)) return Promise.all(items.map((it) => this.runReserve([it], this.batchLockTimeoutMs).then((o) => o[0]!)));
      if (n === 1) return [idTaken(e) ? DUPLICATE : (e as Error)];
      throw e;
    }
  }

  /** One reserve, one round trip (ledger_reserve_one); same outcomes as the batch function. */
  private async reserveOne(it: ReserveInput, q: Queryable): Promise<ReserveRow> {
    try {
      const r = await q.query<ReserveRow>({
        name: 'ledger_reserve_one',
        text: SQL.RESERVE_ONE,
        values: [it.requestId, it.accountId, it.keyId, it.product, it.model, it.holdInk, this.nowText()],
      });
      return r.rows[0]!;
    } catch (e) {
      if (idTaken(e)) return DUPLICATE;
      throw e;
    }
  }

  /** One resolution, one round trip (ledger_resolve_one); same outcomes as the batch function. */
  private async resolveOne(it: ResolveItem, q: Queryable): Promise<ResolveRow> {
    const alone = q === this.pool;
    const r = await q.query<ResolveRow>({
      name: alone ? 'ledger_resolve_one_async_commit' : 'ledger_resolve_one',
      text: alone ? SQL.RESOLVE_ONE_ASYNC_COMMIT : SQL.RESOLVE_ONE,
      values: [it.id, it.kind, it.chargeInk, it.usage, it.vendorRequestId, it.reason, this.nowText()],
    });
    return r.rows[0]!;
  }

  /** Claims the id of a reservation whose outcome is unknown, or releases the hold if it was taken. */
  private abandon(input: ReserveInput): void {
    const requestId = input.requestId;
    const tryVoid = () => this.voidReservation(input).then((outcome) => this.log('ledger.reserve_abandoned', { requestId, outcome }));
    this.track(tryVoid().catch(() => this.retryLater('ledger.reserve_abandon_failed', requestId, tryVoid)));
  }

  /**
   * Runs `attempt` again `abandonRetryMs[n]` from now and, while it fails, after each following
   * delay; when the delays run out (or the ledger closes) it logs `gaveUp`. For bookkeeping that
   * must land once the store is back: an abandoned reserve's clean-up, a usage_unknown mark.
   */
  private retryLater(gaveUp: string, requestId: string, attempt: () => Promise<unknown>, n = 0): void {
    const delay = this.abandonRetryMs[n];
    if (delay === undefined || this.closed) {
      this.log(gaveUp, { requestId });
      return;
    }
    const t = setTimeout(() => {
      this.cleanupTimers.delete(t);
      this.track(attempt().then(() => undefined, () => this.retryLater(gaveUp, requestId, attempt, n + 1)));
    }, delay);
    t.unref();
    this.cleanupTimers.add(t);
  }

  /** Background work close() waits for. */
  private track(p: Promise<unknown>): void {
    const done = p.then(() => undefined);
    this.cleanups.add(done);
    void done.finally(() => this.cleanups.delete(done));
  }

  private async voidReservation(input: ReserveInput): Promise<'voided' | 'released' | 'already_resolved' | 'no_account'> {
    const now = this.now();
    try {
      const r = await this.pool.query(SQL.VOID_REQUEST, [
        input.requestId, input.accountId, input.keyId, input.product, input.model, 'reserve_abandoned', now,
      ]);
      if (r.rowCount === 1) return 'voided';
    } catch (e) {
      if ((e as { code?: unknown }).code === '23503') return 'no_account'; // unknown account/key: nothing could be held
      throw e;
    }
    const [row] = await this.runResolve([
      { id: input.requestId, kind: 'release', chargeInk: 0, usage: null, vendorRequestId: null, reason: 'reserve_abandoned' },
    ]);
    if (row instanceof Error) throw row;
    return row!.result === 'ok' ? 'released' : 'already_resolved';
  }

  // ---------------------------------------------------------------------------------------------
  // Resolve

  /** Charges min(chargeInk, hold) grant-first out of the hold and returns the rest; logs a charge above the hold. */
  async settle(requestId: string, chargeInk: number, details: { usage?: RecordedUsage | object; vendorRequestId?: string } = {}): Promise<ResolveResult> {
    return this.resolve(settleItem(requestId, chargeInk, details));
  }

  /** The vendor refused before running: the whole hold goes back. */
  async release(requestId: string, reason: string): Promise<ResolveResult> {
    return this.resolve(returnItem('release', requestId, reason));
  }

  /** A failed video/image generation: the whole hold goes back, nothing is charged. */
  async refund(requestId: string, reason: string): Promise<ResolveResult> {
    return this.resolve(returnItem('refund', requestId, reason));
  }

  /**
   * The same moves inside the caller's transaction (e.g. a job submit that claims idempotency,
   * reserves and writes its row in one commit). No batching; the caller commits or rolls back.
   */
  using(q: Queryable): LedgerTx {
    const resolveOn = async (item: ResolveItem): Promise<ResolveResult> => this.resolveOutcome(item, (await this.runResolve([item], 'first', q))[0]!);
    return {
      reserve: async (input) => {
        checkReserveInput(input);
        if (this.stopped()) throw stoppedAnswer();
        return reserveOutcome(input, (await this.runReserve([input], 'first', q))[0]!);
      },
      settle: async (requestId, chargeInk, details = {}) => resolveOn(settleItem(requestId, chargeInk, details)),
      release: async (requestId, reason) => resolveOn(returnItem('release', requestId, reason)),
      refund: async (requestId, reason) => resolveOn(returnItem('refund', requestId, reason)),
    };
  }

  private async resolve(item: ResolveItem): Promise<ResolveResult> {
    if (this.closed) throw new Error('ledger: closed');
    let row: ResolveRow | Error;
    try {
      row = this.resolveBatch ? await this.resolveBatch.submit(item) : (await this.runResolve([item]))[0]!;
    } catch (e) {
      row = e as Error;
    }
    return this.resolveOutcome(item, row);
  }

  private resolveOutcome(item: ResolveItem, row: ResolveRow | Error): ResolveResult {
    // The hold still sits in an instance's Ink lease (its request is running there): it ends through
    // that instance's journal, or through the lease's recovery, never by a resolution from outside.
    if (row instanceof Error && (row as { constraint?: unknown }).constraint === 'request_leased') return { resolved: false, reason: 'in_lease' };
    if (row instanceof Error) {
      if (row.name === 'QueueFullError') throw overloaded(row);
      // The hold stays open (or was resolved by a commit we did not see): a retry is safe either way.
      storeError(row);
    }
    return this.resolveResult(item, row);
  }

  private resolveResult(item: ResolveItem, row: ResolveRow): ResolveResult {
    if (row.result !== 'ok') return { resolved: false, reason: row.result };
    const held = row.held_total_ink ?? 0;
    if (item.kind !== 'release' && item.kind !== 'refund' && item.chargeInk > held) {
      this.log('ledger.charge_above_hold', { requestId: item.id, chargeInk: item.chargeInk, holdInk: held, kind: item.kind });
    }
    const r = { resolved: true as const, chargedInk: row.charged_total_ink ?? 0, releasedInk: row.released_total_ink ?? 0, expiredInk: row.expired_total_ink ?? 0 };
    // Postcondition: every Ink of the hold went somewhere (charged, back to the wallet, or expired with its grant).
    assertLedger(r.chargedInk + r.releasedInk + r.expiredInk === held, `resolve ${item.id}: charged ${r.chargedInk} + released ${r.releasedInk} + expired ${r.expiredInk} != hold ${held}`);
    return r;
  }

  private async runResolve(items: ResolveItem[], wait: LockWait = 'first', q: Queryable = this.pool): Promise<Array<ResolveRow | Error>> {
    const n = items.length;
    if (n === 1 && wait === 'first' && !this.functionForSingles) return [await this.resolveOne(items[0]!, q).catch((e: Error) => e)];
    const ids = new Array<string>(n), kinds = new Array<string>(n), charges = new Array<number>(n);
    const usage = new Array<string | null>(n), vendorIds = new Array<string | null>(n), reasons = new Array<string | null>(n);
    for (let i = 0; i < n; i++) {
      const it = items[i]!;
      ids[i] = it.id;
      kinds[i] = it.kind;
      charges[i] = it.chargeInk;
      usage[i] = it.usage;
      vendorIds[i] = it.vendorRequestId;
      reasons[i] = it.reason;
    }
    try {
      const alone = q === this.pool;
      const r = await q.query<ResolveRow>({
        name: alone ? 'ledger_resolve_async_commit' : 'ledger_resolve',
        text: alone ? SQL.RESOLVE_ASYNC_COMMIT : SQL.RESOLVE,
        values: [ids, kinds, charges, usage, vendorIds, reasons, this.nowText(), this.lockParam(n, wait)],
      });
      return byItem(r.rows, n);
    } catch (e) {
      if (n > 1 && wait === 'first' && q === this.pool && lockTimedOut(e)) return this.runResolve(items, 'patient', q);
      if (n > 1 && retryAlone(e)) return Promise.all(items.map((it) => this.runResolve([it], this.batchLockTimeoutMs).then((o) => o[0]!)));
      if (n === 1) return [e as Error];
      throw e;
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Request bookkeeping (no money moves)

  /** The vendor never reported usage: the hold stays open (and in key.ink_reserved) until reconciled. */
  async markUsageUnknown(requestId: string, details: { vendorRequestId?: string; reason?: string } = {}): Promise<void> {
    checkRequestId(requestId);
    const vid = text('vendorRequestId', details.vendorRequestId, 256);
    const reason = text('reason', details.reason, MAX_REASON_CHARS);
    let n: number | null;
    try {
      n = (await this.pool.query(SQL.MARK_USAGE_UNKNOWN, [requestId, vid, reason])).rowCount;
    } catch (e) {
      storeError(e);
    }
    if (n !== 1) this.log('ledger.usage_unknown_not_open', { requestId });
  }

  /**
   * markUsageUnknown that does not give up when the store is briefly away: the first try is
   * awaited; if it fails, it is retried in the background (abandonRetryMs apart) until it lands
   * or the ledger closes. The text lanes mark every hold they leave open this way (no receipt,
   * vendor 5xx, a settle that could not be written): the hold stays open either way, and this is
   * what puts the vendor's id on it, without which reconciliation could never match the vendor's
   * record.
   */
  async markUsageUnknownEventually(requestId: string, details: { vendorRequestId?: string; reason?: string } = {}): Promise<void> {
    try {
      await this.markUsageUnknown(requestId, details);
    } catch (e) {
      this.retryLater('ledger.usage_unknown_gave_up', requestId, () => this.markUsageUnknown(requestId, details));
      throw e;
    }
  }

  async setVendorRequestId(requestId: string, vendorRequestId: string): Promise<void> {
    checkRequestId(requestId);
    const vid = text('vendorRequestId', vendorRequestId, 256)!;
    try {
      if (this.vendorIdBatch) await this.vendorIdBatch.submit([requestId, vid]);
      else await this.pool.query({ name: 'ledger_set_vendor_request_id', text: SQL.SET_VENDOR_REQUEST_ID, values: [requestId, vid] });
    } catch (e) {
      storeError(e);
    }
  }

  private async runSetVendorIds(items: Array<readonly [string, string]>): Promise<void[]> {
    const ids = new Array<string>(items.length), vids = new Array<string>(items.length);
    for (let i = 0; i < items.length; i++) [ids[i], vids[i]] = items[i]!;
    await this.pool.query({ name: 'ledger_set_vendor_request_ids', text: SQL.SET_VENDOR_REQUEST_IDS, values: [ids, vids] });
    return new Array<void>(items.length);
  }

  // ---------------------------------------------------------------------------------------------
  // Credits

  /** Credits pay-as-you-go; counts one completed top-up. */
  async topUp(accountId: string, ink: number, note?: string): Promise<void> {
    wholeInk('ink', ink, 1);
    const r = await this.pool.query(SQL.TOP_UP, [accountId, ink, this.now(), text('note', note, MAX_REASON_CHARS)]);
    if (r.rowCount !== 1) throw new Error(`unknown account ${accountId} (no wallet)`);
  }

  /**
   * Admin: extends the current period's grant by `ink` (adds; never lowers it). Like the plan's
   * grant it is spent first and lapses at the next roll-over.
   */
  async grant(accountId: string, ink: number, note?: string): Promise<void> {
    wholeInk('ink', ink, 1);
    const r = await this.pool.query(SQL.GRANT, [accountId, ink, this.now(), text('note', note, MAX_REASON_CHARS) ?? 'admin grant']);
    if (r.rowCount !== 1) throw new Error(`unknown account ${accountId} (no wallet)`);
  }

  /**
   * Period roll-over: the unspent grant lapses (expired) and the grant is reset to the plan's
   * period_grant_ink. Holds open across the roll keep their Ink (the request in flight is still
   * paid for); when they resolve, whatever of their old-period grant part is not charged lapses
   * too instead of returning to the new grant. Pay-as-you-go never lapses.
   */
  async rollPeriod(accountId: string): Promise<{ expiredInk: number; grantInk: number }> {
    const now = this.now();
    return withTx(this.pool, async (c) => {
      const r = await c.query<{ grant_ink: number; period_grant_ink: number }>(SQL.ROLL_LOCK, [accountId]);
      const row = r.rows[0];
      if (!row) throw new Error(`unknown account ${accountId} (no wallet)`);
      await c.query(SQL.ROLL_APPLY, [accountId, row.period_grant_ink, now]);
      // Leases keep old-period grant: recalled now, their grant part lapses when it comes back.
      await c.query(SQL.RECALL_FOR_PERIOD, [accountId, now]);
      if (row.grant_ink > 0) await c.query(SQL.JOURNAL_EXPIRE, [accountId, row.grant_ink, now]);
      if (row.period_grant_ink > 0) await c.query(SQL.JOURNAL_PERIOD_GRANT, [accountId, row.period_grant_ink, now]);
      return { expiredInk: row.grant_ink, grantInk: row.period_grant_ink };
    });
  }

  // ---------------------------------------------------------------------------------------------
  // Views

  async walletView(accountId: string): Promise<WalletView | undefined> {
    return (await this.pool.query<WalletView>(SQL.WALLET_VIEW, [accountId])).rows[0];
  }

  /** Newest first; limit 1 to 1,000 (default 50). */
  async listRequests(accountId: string, opts: { limit?: number } = {}): Promise<RequestRecord[]> {
    const limit = opts.limit ?? 50;
    if (!Number.isSafeInteger(limit) || limit < 1 || limit > 1000) throw new RangeError('ledger: limit must be 1 to 1000');
    return (await this.pool.query<RequestRecord>(SQL.LIST_REQUESTS, [accountId, limit])).rows;
  }

  async getRequest(requestId: string): Promise<RequestRecord | undefined> {
    return (await this.pool.query<RequestRecord>(SQL.GET_REQUEST, [requestId])).rows[0];
  }

  // ---------------------------------------------------------------------------------------------
  // Reconciliation

  /**
   * Settles or releases each open hold a record names (by vendor request id): charge =
   * min(chargeFor(req, record), hold); 0 releases. Lists open holds older than `olderThanMs` that
   * no record named; those are never charged.
   */
  async reconcile(records: Iterable<VendorUsageRecord> | AsyncIterable<VendorUsageRecord>, opts: ReconcileOptions): Promise<ReconcileReport> {
    if (!Number.isSafeInteger(opts.olderThanMs) || opts.olderThanMs < 0) throw new RangeError('ledger: olderThanMs must be a whole number >= 0');
    const listLimit = opts.listLimit ?? 1000;
    const cutoff = new Date(this.now().getTime() - opts.olderThanMs);
    const push = <T>(l: ReportList<T>, v: T) => {
      l.count++;
      if (l.items.length < listLimit) l.items.push(v);
    };
    const report: ReconcileReport = {
      recordsRead: 0,
      settled: { count: 0, items: [] },
      released: { count: 0, items: [] },
      unmatched: { count: 0, items: [] },
      skipped: { count: 0, items: [] },
      stale: { count: 0, items: [], olderThan: cutoff.toISOString(), truncated: false },
    };
    const named = new Set<string>();
    let chunk: VendorUsageRecord[] = [];
    for await (const rec of records as AsyncIterable<VendorUsageRecord>) {
      if (++report.recordsRead > MAX_RECONCILE_RECORDS) throw new RangeError(`ledger: more than ${MAX_RECONCILE_RECORDS} records in one reconcile run`);
      if (typeof rec?.vendorRequestId !== 'string' || rec.vendorRequestId.length === 0 || rec.vendorRequestId.length > 256) {
        push(report.skipped, { vendorRequestId: String(rec?.vendorRequestId), reason: 'vendor request id must be 1 to 256 characters' });
        continue;
      }
      named.add(rec.vendorRequestId);
      chunk.push(rec);
      if (chunk.length >= RECONCILE_CHUNK) {
        await this.reconcileChunk(chunk, opts, report, push);
        chunk = [];
      }
    }
    if (chunk.length > 0) await this.reconcileChunk(chunk, opts, report, push);

    const stale = (await this.pool.query<RequestRecord>(SQL.STALE_OPEN_HOLDS, [cutoff, STALE_SCAN_LIMIT])).rows;
    report.stale.truncated = stale.length === STALE_SCAN_LIMIT;
    for (const r of stale) if (r.vendor_request_id === null || !named.has(r.vendor_request_id)) push(report.stale, r);
    return report;
  }

  private async reconcileChunk(
    chunk: VendorUsageRecord[],
    opts: ReconcileOptions,
    report: ReconcileReport,
    push: <T>(l: ReportList<T>, v: T) => void,
  ): Promise<void> {
    const vids = [...new Set(chunk.map((r) => r.vendorRequestId))];
    const rows = (await this.pool.query<RequestRecord>(SQL.REQUESTS_BY_VENDOR_ID, [vids])).rows;
    const byVid = new Map<string, RequestRecord[]>();
    for (const r of rows) {
      const l = byVid.get(r.vendor_request_id!);
      if (l) l.push(r);
      else byVid.set(r.vendor_request_id!, [r]);
    }
    const items: ResolveItem[] = [];
    const meta: Array<{ vid: string; req: RequestRecord }> = [];
    const inChunk = new Set<string>();
    for (const rec of chunk) {
      const vid = rec.vendorRequestId;
      const all = byVid.get(vid);
      if (!all) {
        push(report.unmatched, { vendorRequestId: vid, reason: 'no_request' });
        continue;
      }
      const open = all.filter((r) => r.hold_state === 'open');
      if (open.length === 0 || (open.length === 1 && inChunk.has(open[0]!.id))) {
        push(report.unmatched, { vendorRequestId: vid, reason: 'already_resolved' });
        continue;
      }
      if (open.length > 1) {
        push(report.skipped, { vendorRequestId: vid, reason: `${open.length} open requests carry this vendor request id` });
        continue;
      }
      const req = open[0]!;
      let charge: number;
      let usage: string | null;
      try {
        charge = wholeInk('charge', opts.chargeFor(req, rec));
        usage = usageJson(rec.usage);
      } catch (e) {
        push(report.skipped, { vendorRequestId: vid, requestId: req.id, reason: (e as Error).message });
        continue;
      }
      inChunk.add(req.id);
      items.push({ id: req.id, kind: 'reconcile', chargeInk: charge, usage, vendorRequestId: null, reason: 'reconcile' });
      meta.push({ vid, req });
    }
    if (items.length === 0) return;
    let out: Array<ResolveRow | Error>;
    try {
      out = await this.runResolve(items);
    } catch (e) {
      storeError(e);
    }
    for (let i = 0; i < items.length; i++) {
      const row = out[i]!;
      const { vid, req } = meta[i]!;
      if (row instanceof Error) {
        push(report.skipped, { vendorRequestId: vid, requestId: req.id, reason: row.message.split('\n')[0]! });
        continue;
      }
      const res = this.resolveResult(items[i]!, row);
      if (!res.resolved) {
        push(report.unmatched, { vendorRequestId: vid, reason: 'already_resolved' });
        continue;
      }
      const entry: ReconciledHold = {
        requestId: req.id, vendorRequestId: vid, holdInk: req.hold_ink,
        chargedInk: res.chargedInk, releasedInk: res.releasedInk, expiredInk: res.expiredInk,
      };
      push(res.chargedInk > 0 ? report.settled : report.released, entry);
    }
  }

  /** Finishes every move already submitted; the pool is the caller's to end. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([this.reserveBatch?.close(), this.resolveBatch?.close(), this.vendorIdBatch?.close()]);
    for (const t of this.cleanupTimers) clearTimeout(t);
    this.cleanupTimers.clear();
    await Promise.allSettled([...this.cleanups]);
  }
}

/** Rows of a batch function, indexed by their 1-based item number. */
function byItem<R extends { item: number }>(rows: R[], n: number): R[] {
  if (rows.length !== n) throw new Error(`ledger: ${rows.length} results for ${n} items`);
  const out = new Array<R>(n);
  for (const r of rows) out[r.item - 1] = r;
  return out;
}
