// The ledger's SQL, one constant per statement. Wallets, holds and leases move only through the
// SQL functions in src/store/functions/ (one file each, applied by migrate when it changes): durable
// holds through ledger_reserve / ledger_resolve (batches) and ledger_reserve_one /
// ledger_resolve_one (a lone move); escrow leases through ledger_lease_take, ledger_lease_return,
// ledger_recall and ledger_lease_recover; leased requests' records through ledger_flush (the
// journal written behind, src/ledger/write-behind.ts; its steps ledger_flush_leased and ledger_flush_late); ledger_instance_start and ledger_heartbeat
// mark the instances that own leases. Credits move through the single
// statements and the short transaction below. Each writes its journal rows in the same
// transaction as the balances.
import { recallNotifySql } from './recalls.js';

/** Reserve a batch: one row per item, in order (the function's rules: src/store/functions/ledger_reserve.sql). */
export const RESERVE = `SELECT item, result, take_grant_ink, take_payg_ink, available_ink, key_room_ink
  FROM ledger_reserve($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::timestamptz, $8::integer)`;

/** Resolve a batch (settle / release / refund / reconcile): one row per item, in order. */
export const RESOLVE = `SELECT item, result, charged_total_ink, released_total_ink, expired_total_ink, held_total_ink
  FROM ledger_resolve($1::text[], $2::text[], $3::bigint[], $4::jsonb[], $5::text[], $6::text[], $7::timestamptz, $8::integer)`;

/**
 * The tombstone for a reservation whose outcome the caller could not learn (the statement timed
 * out or the connection dropped mid-flight): it claims the id so a reserve still running on the
 * server finds it taken and takes nothing. Not voided: the reserve got there first (then we release
 * it). Written only for a key of the account (`requests` has no foreign key to api_keys; a reserve
 * for any other pair could not have held anything): `key_known` false says so.
 */
export const VOID_REQUEST = `WITH k AS (SELECT 1 FROM api_keys WHERE id = $3::text AND account_id = $2::text),
  ins AS (
    INSERT INTO requests (id, account_id, key_id, product, model, hold_state, status,
                          hold_ink, hold_grant_ink, hold_payg_ink, grant_period, reason, created_at, resolved_at)
    SELECT $1::text, $2::text, $3::text, $4::text, $5::text, 'void', 'void', 0, 0, 0, 0, $6::text, $7::timestamptz, $7::timestamptz FROM k
    ON CONFLICT (id) DO NOTHING
    RETURNING 1)
  SELECT EXISTS (SELECT 1 FROM k) AS key_known, EXISTS (SELECT 1 FROM ins) AS voided`;

export const MARK_USAGE_UNKNOWN = `UPDATE requests
     SET status = 'usage_unknown', vendor_request_id = coalesce($2, vendor_request_id), reason = coalesce($3, reason)
   WHERE id = $1 AND hold_state = 'open' AND NOT leased`;

/**
 * The vendor's id of a running request, recorded as soon as the stream names it, so that a hold
 * left open by a crash mid-stream can still be matched by reconciliation. Bookkeeping only (no
 * money moves), so it does not wait for the WAL flush either.
 */
export const SET_VENDOR_REQUEST_ID = `UPDATE requests SET vendor_request_id = $2
    FROM set_config('synchronous_commit', 'off', true) AS async_commit
   WHERE id = $1 AND vendor_request_id IS DISTINCT FROM $2`;

/**
 * The same for a batch of running requests (group commit: one statement and one connection for
 * every stream that named its vendor id in the same turn). Pairs are (request id, vendor id).
 */
export const SET_VENDOR_REQUEST_IDS = `UPDATE requests r SET vendor_request_id = d.vid
    FROM set_config('synchronous_commit', 'off', true) AS async_commit,
         unnest($1::text[], $2::text[]) AS d(id, vid)
   WHERE r.id = d.id AND r.vendor_request_id IS DISTINCT FROM d.vid`;

/** Top-up: pay-as-you-go and the credit total grow together, with the journal row, in one statement. */
export const TOP_UP = `WITH w AS (
    UPDATE wallets SET payg_ink = payg_ink + $2, credited_ink = credited_ink + $2, topups_completed = topups_completed + 1
     WHERE account_id = $1 RETURNING account_id)
  INSERT INTO ledger_journal (at, kind, account_id, amount_ink, payg_ink, credited_ink, note)
  SELECT $3, 'topup', account_id, $2, $2, $2, $4 FROM w`;

/** Grant extension: the current period's grant grows; it lapses at the next roll-over like the rest. */
export const GRANT = `WITH w AS (
    UPDATE wallets SET grant_ink = grant_ink + $2, credited_ink = credited_ink + $2
     WHERE account_id = $1 RETURNING account_id)
  INSERT INTO ledger_journal (at, kind, account_id, amount_ink, grant_ink, credited_ink, note)
  SELECT $3, 'grant', account_id, $2, $2, $2, $4 FROM w`;

/** Roll-over, step 1 (in a transaction): lock the wallet and read what lapses and what the plan grants. */
export const ROLL_LOCK = `SELECT w.grant_ink, p.period_grant_ink
    FROM wallets w JOIN accounts a ON a.id = w.account_id JOIN plans p ON p.id = a.plan_id
   WHERE w.account_id = $1
     FOR UPDATE OF w`;

/** Roll-over, step 2: the old grant lapses, the new one is credited, the period advances. */
export const ROLL_APPLY = `UPDATE wallets
     SET expired_ink = expired_ink + grant_ink, grant_ink = $2, credited_ink = credited_ink + $2,
         grant_period = grant_period + 1, period_started_at = $3
   WHERE account_id = $1`;

export const JOURNAL_EXPIRE = `INSERT INTO ledger_journal (at, kind, account_id, amount_ink, grant_ink, expired_ink, note)
  VALUES ($3, 'expire', $1, $2, -$2::bigint, $2, 'period roll-over')`;

export const JOURNAL_PERIOD_GRANT = `INSERT INTO ledger_journal (at, kind, account_id, amount_ink, grant_ink, credited_ink, note)
  VALUES ($3, 'grant', $1, $2, $2, $2, 'period grant')`;

export const WALLET_VIEW = `SELECT account_id, grant_ink, payg_ink, held_grant_ink, held_payg_ink, charged_ink, expired_ink,
         credited_ink, topups_completed, grant_period, period_started_at
    FROM wallets WHERE account_id = $1`;

const REQUEST_COLUMNS = `id, account_id, key_id, product, model, status, hold_state, hold_ink, hold_grant_ink, hold_payg_ink,
  charged_ink, charged_grant_ink, charged_payg_ink, expired_ink, usage, vendor_request_id, reason, created_at, resolved_at`;

export const LIST_REQUESTS = `SELECT ${REQUEST_COLUMNS} FROM requests
   WHERE account_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2`;

export const GET_REQUEST = `SELECT ${REQUEST_COLUMNS} FROM requests WHERE id = $1`;

/** Holds still inside a lease are not reconcilable yet (they end through their lease): left out. */
export const REQUESTS_BY_VENDOR_ID = `SELECT ${REQUEST_COLUMNS} FROM requests WHERE vendor_request_id = ANY($1::text[]) AND NOT leased`;

export const STALE_OPEN_HOLDS = `SELECT ${REQUEST_COLUMNS} FROM requests
   WHERE hold_state = 'open' AND NOT leased AND created_at < $1 ORDER BY created_at, id LIMIT $2`;

/** Reserve one hold (the common case at low load): ledger_reserve_one, one round trip. */
export const RESERVE_ONE = `SELECT item, result, take_grant_ink, take_payg_ink, available_ink, key_room_ink
  FROM ledger_reserve_one($1::text, $2::text, $3::text, $4::text, $5::text, $6::bigint, $7::timestamptz)`;

/** Resolve one hold: ledger_resolve_one, one round trip. */
export const RESOLVE_ONE = `SELECT item, result, charged_total_ink, released_total_ink, expired_total_ink, held_total_ink
  FROM ledger_resolve_one($1::text, $2::text, $3::bigint, $4::jsonb, $5::text, $6::text, $7::timestamptz)`;

/**
 * Resolutions made on their own (not inside a caller's transaction: the text lanes' settle and
 * release, the CLI's release) commit without waiting for the WAL flush. Why this is safe for
 * money: a resolution lost in a database crash leaves its hold open, which is exactly the state
 * reconciliation exists for (the hold still covers the charge; nothing is charged twice or lost),
 * and WAL is one sequence, so the next synchronous commit (any reserve) makes it durable anyway.
 * Visibility is not affected: other sessions see the resolution as soon as it commits. Reserves
 * always wait for the flush: a reserve lost after its request reached the vendor would be a
 * vendor call without a hold.
 */
const ASYNC_COMMIT = `set_config('synchronous_commit', 'off', true) AS async_commit, LATERAL`;

export const RESOLVE_ASYNC_COMMIT = `SELECT r.item, r.result, r.charged_total_ink, r.released_total_ink, r.expired_total_ink, r.held_total_ink
  FROM ${ASYNC_COMMIT} ledger_resolve($1::text[], $2::text[], $3::bigint[], $4::jsonb[], $5::text[], $6::text[], $7::timestamptz, $8::integer) AS r`;

export const RESOLVE_ONE_ASYNC_COMMIT = `SELECT r.item, r.result, r.charged_total_ink, r.released_total_ink, r.expired_total_ink, r.held_total_ink
  FROM ${ASYNC_COMMIT} ledger_resolve_one($1::text, $2::text, $3::bigint, $4::jsonb, $5::text, $6::text, $7::timestamptz) AS r`;

// ---------------------------------------------------------------------------------------------
// Escrow leases (014_escrow.sql)

export const INSTANCE_START = `SELECT ledger_instance_start($1::text, $2::timestamptz, 0) AS epoch`;

export const LEASE_TAKE = `SELECT result, lease_id, take_grant_ink, take_payg_ink, grant_period, available_ink, key_room_ink
  FROM ledger_lease_take($1::bigint, $2::text, $3::text, $4::text, $5::bigint, $6::bigint, $7::bigint, $8::bigint, $9::integer,
                         $10::integer, $11::integer, $12::timestamptz)`;

export const LEASE_RETURN = `SELECT result, expired_ink, left_grant_ink, left_payg_ink
  FROM ledger_lease_return($1::bigint, $2::text, $3::bigint, $4::bigint, $5::bigint, $6::boolean, $7::boolean, $8::timestamptz)`;

export const LEASE_RECOVER = `SELECT ledger_lease_recover($1::bigint, $2::timestamptz, $3::text) AS kept`;

export const HEARTBEAT = `SELECT lease_id, give_up FROM ledger_heartbeat($1::text, $2::bigint, $3::integer, $4::timestamptz, $5::bigint[], $6::integer)`;

/** Live leases past their expiry (and the grace): anyone's to recover. */
export const EXPIRED_LEASES = `SELECT id FROM leases WHERE state = 'live' AND expires_at < $1::timestamptz ORDER BY expires_at LIMIT $2`;

/** This epoch's live leases (at shutdown, after every return). */
export const OWN_LIVE_LEASES = `SELECT id FROM leases WHERE state = 'live' AND instance_id = $1 AND epoch = $2 ORDER BY id`;

/** Leases an older start under this instance id left behind. */
export const OWN_OLD_LEASES = `SELECT id FROM leases WHERE state = 'live' AND instance_id = $1 AND epoch < $2 ORDER BY id`;

/**
 * Marks the live, undrained leases of an account ($1) or of a key ($2) as recalled (`marked`: how
 * many were not marked yet), and pauses new leases there until $4, so the Ink they give back is
 * not leased again while the refusal that recalled them waits for it.
 */
export const RECALL_LEASES = `SELECT ledger_recall($1::text, $2::text, $3::timestamptz, $4::timestamptz) AS marked`;

/** How many leases of an account ($1) or key ($2) still hold spare Ink they have not given back. */
export const UNDRAINED_LEASES = `SELECT count(*)::int AS n FROM leases
   WHERE state = 'live' AND drained_at IS NULL AND (account_id = $1 OR key_id = $2)`;

/** Roll-over: the account's leases are recalled in the same transaction, and told so when it commits. */
export const RECALL_FOR_PERIOD = `WITH l AS (UPDATE leases SET recall_at = coalesce(recall_at, $2::timestamptz) WHERE account_id = $1 AND state = 'live')
  SELECT ${recallNotifySql('$1::text', null, 'period')}`;
