// What the console shows of an account, read straight from the ledger's rows. Every query is
// bounded by the account id it is given (the session's), so one account never reads another's.
import {
  ACCOUNT_INK_COLUMNS,
  ACCOUNT_INK_JOIN,
  ACCOUNT_RESERVED_COLUMN,
  inkFigures,
  KEY_SPEND_COLUMNS,
  KEY_SPEND_JOIN,
  keySpend,
  type InkFigures,
  type KeySpend,
} from '../accounts/ink-figures.js';
import type { UsageFrame } from '../accounts/usage-frame.js';
import type { Queryable } from '../store/pool.js';

export interface AccountView {
  name: string;
  planId: string;
  planLabel: string;
  paid: boolean;
  periodGrantInk: number;
  periodDays: number;
  periodStartedAt: Date;
  topupsCompleted: number;
  /** The `ink` figures of GET /v1/me, from the same computation (accounts/ink-figures.ts). */
  ink: InkFigures;
  /** Held by running requests on any key (durable holds and holds taken from leases). */
  reservedInk: number;
  chargedInk: number;
}

export async function readAccount(database: Queryable, accountId: string): Promise<AccountView | undefined> {
  const r = await database.query(
    `SELECT a.name, p.id AS plan_id, p.label, p.paid, p.period_grant_ink, p.period_days, w.period_started_at, w.topups_completed,
            ${ACCOUNT_INK_COLUMNS}, ${ACCOUNT_RESERVED_COLUMN}, w.charged_ink
       FROM accounts a JOIN plans p ON p.id = a.plan_id JOIN wallets w ON w.account_id = a.id
       ${ACCOUNT_INK_JOIN}
      WHERE a.id = $1`,
    [accountId],
  );
  const x = r.rows[0];
  if (!x) return undefined;
  return {
    name: x.name,
    planId: x.plan_id,
    planLabel: x.label,
    paid: x.paid,
    periodGrantInk: Number(x.period_grant_ink),
    periodDays: x.period_days,
    periodStartedAt: x.period_started_at,
    topupsCompleted: x.topups_completed,
    ink: inkFigures(x),
    reservedInk: Number(x.reserved_ink),
    chargedInk: Number(x.charged_ink),
  };
}

export interface KeyView {
  id: string;
  name: string;
  prefix: string;
  last4: string;
  /** The key's figures of GET /v1/me, from the same computation. */
  spend: KeySpend;
  expiresAt: Date | null;
  revokedAt: Date | null;
  createdAt: Date;
  playground: boolean;
  /** How the key's streams carry the usage frame. */
  usageFrame: UsageFrame;
}

/** The account's keys, newest first, each with its GET /v1/me spend. At most 500. */
export async function readKeys(database: Queryable, accountId: string): Promise<KeyView[]> {
  const r = await database.query(
    `SELECT k.id, k.name, k.prefix, k.last4, k.expires_at, k.revoked_at, k.created_at, k.usage_frame, ${KEY_SPEND_COLUMNS}, (pk.key_id IS NOT NULL) AS playground
       FROM api_keys k
       LEFT JOIN console_playground_keys pk ON pk.key_id = k.id
       ${KEY_SPEND_JOIN}
      WHERE k.account_id = $1 ORDER BY k.created_at DESC, k.id LIMIT 500`,
    [accountId],
  );
  return r.rows.map((row) => ({
    id: row.id,
    name: row.name,
    prefix: row.prefix,
    last4: row.last4,
    spend: keySpend(row),
    expiresAt: row.expires_at,
    revokedAt: row.revoked_at,
    createdAt: row.created_at,
    playground: row.playground,
    usageFrame: row.usage_frame,
  }));
}

export async function keyOfAccount(database: Queryable, accountId: string, keyId: string): Promise<boolean> {
  return ((await database.query('SELECT 1 FROM api_keys WHERE id = $1 AND account_id = $2', [keyId, accountId])).rowCount ?? 0) > 0;
}

export interface UsageFilter {
  keyId?: string;
  model?: string;
  /** YYYY-MM-DD, a UTC day. */
  day?: string;
}

export interface RequestView {
  id: string;
  keyId: string;
  product: string;
  model: string;
  status: string;
  holdInk: number;
  chargedInk: number;
  usage: Record<string, unknown> | null;
  createdAt: Date;
}

export const USAGE_PAGE_ROWS = 100;
export const CSV_MAX_ROWS = 10_000;

/** Request records, newest first, filtered; `limit` rows at most. */
export async function readRequests(database: Queryable, accountId: string, filter: UsageFilter, limit: number): Promise<RequestView[]> {
  const r = await database.query(
    `SELECT id, key_id, product, model, status, hold_ink, charged_ink, usage, created_at FROM requests
      WHERE account_id = $1 AND ($2::text IS NULL OR key_id = $2) AND ($3::text IS NULL OR model = $3)
        AND ($4::date IS NULL OR (created_at >= $4::date::timestamp AT TIME ZONE 'UTC' AND created_at < ($4::date + 1)::timestamp AT TIME ZONE 'UTC'))
      ORDER BY created_at DESC, id DESC LIMIT $5`,
    [accountId, filter.keyId ?? null, filter.model ?? null, filter.day ?? null, limit],
  );
  return r.rows.map((row) => ({
    id: row.id,
    keyId: row.key_id,
    product: row.product,
    model: row.model,
    status: row.status,
    holdInk: Number(row.hold_ink),
    chargedInk: Number(row.charged_ink),
    usage: row.usage,
    createdAt: row.created_at,
  }));
}

/** Ink charged per UTC day and model over the last `days` days. */
export async function readDailyInk(database: Queryable, accountId: string, days: number): Promise<Array<{ day: string; model: string; ink: number }>> {
  const r = await database.query(
    `SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, model, sum(charged_ink)::bigint AS ink FROM requests
      WHERE account_id = $1 AND created_at >= (now() AT TIME ZONE 'UTC')::date - ($2::int - 1)
      GROUP BY 1, 2 ORDER BY 1, 2`,
    [accountId, days],
  );
  return r.rows.map((x) => ({ day: x.day, model: x.model, ink: Number(x.ink) }));
}

export interface GenerationView {
  id: string;
  kind: string;
  model: string;
  state: string;
  chargedInk: number | null;
  hasMedia: boolean;
  expired: boolean;
  createdAt: Date;
}

export async function readGenerations(database: Queryable, accountId: string, limit: number): Promise<GenerationView[]> {
  const r = await database.query(
    `SELECT id, kind, model, state, charged_ink, media_key, result_expired, created_at FROM generations
      WHERE account_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2`,
    [accountId, limit],
  );
  return r.rows.map((row) => ({
    id: row.id,
    kind: row.kind,
    model: row.model,
    state: row.state,
    chargedInk: row.charged_ink === null ? null : Number(row.charged_ink),
    hasMedia: row.media_key !== null,
    expired: row.result_expired,
    createdAt: row.created_at,
  }));
}

export interface JournalView {
  id: number;
  at: Date;
  kind: string;
  requestId: string | null;
  note: string | null;
  /** Ink added to the wallet by this entry (top-ups, grants). */
  creditedInk: number;
  chargedInk: number;
  expiredInk: number;
  /** The account's unspent Ink (available + reserved) just after this entry. */
  balanceAfterInk: number;
}

/**
 * The newest journal entries (older than `beforeId` when given), each with the balance after it,
 * counted back from the wallet in the same statement (one snapshot: the figures agree with the
 * ledger even while requests settle). `balanceInk` is the wallet's unspent Ink in that snapshot.
 */
export async function readJournal(
  database: Queryable,
  accountId: string,
  beforeId: number | undefined,
  limit: number,
): Promise<{ rows: JournalView[]; balanceInk: number }> {
  const r = await database.query(
    `WITH w AS (SELECT credited_ink - charged_ink - expired_ink AS total FROM wallets WHERE account_id = $1),
          newer AS (SELECT coalesce(sum(credited_ink - charged_ink - expired_ink), 0)::bigint AS d FROM ledger_journal
                     WHERE account_id = $1 AND $2::bigint IS NOT NULL AND id >= $2),
          page AS (SELECT id, at, kind, request_id, note, credited_ink, charged_ink, expired_ink FROM ledger_journal
                    WHERE account_id = $1 AND ($2::bigint IS NULL OR id < $2) ORDER BY id DESC LIMIT $3)
     SELECT page.*, w.total, newer.d FROM w CROSS JOIN newer LEFT JOIN page ON true ORDER BY page.id DESC`,
    [accountId, beforeId ?? null, limit],
  );
  // A page without entries (an empty account, or a page past the oldest entry) is one row of the
  // wallet alone, its entry columns null; no wallet, no row.
  const total = Number(r.rows[0]?.total ?? 0);
  const entries = r.rows.filter((x) => x.id !== null);
  let balance = entries.length > 0 ? total - Number(entries[0].d) : total;
  const rows: JournalView[] = [];
  for (const x of entries) {
    const v: JournalView = {
      id: Number(x.id),
      at: x.at,
      kind: x.kind,
      requestId: x.request_id,
      note: x.note,
      creditedInk: Number(x.credited_ink),
      chargedInk: Number(x.charged_ink),
      expiredInk: Number(x.expired_ink),
      balanceAfterInk: balance,
    };
    rows.push(v);
    balance -= v.creditedInk - v.chargedInk - v.expiredInk;
  }
  return { rows, balanceInk: total };
}
