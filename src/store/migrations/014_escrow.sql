-- Escrow leases and the write-behind journal: the text lanes' hot path without a database round trip.
--
-- A lease moves Ink out of an account's wallet (grant first, split kept) and the same amount of
-- headroom out of one key's lifetime cap into an escrow row owned by one running instance
-- (ledger_instances.id at an epoch). The instance takes holds from the lease and settles them in
-- memory, and writes what happened behind, in group commits (ledger_flush): one requests row per
-- request and one aggregate journal row per lease and flush. A lease ends by being returned (by
-- its instance: idle, recalled, shutdown) or recovered (by anyone, once it expired: its flushed
-- holds without an end become durable open holds, usage_unknown; the rest goes back).
--
-- Where Ink can be, per wallet, now:
--   grant + payg                 spendable, not leased
--   leased_grant + leased_payg   inside live leases (their holds in flight, unflushed charges, spare)
--   held_grant + held_payg       durable open holds (exact path, jobs, usage_unknown)
--   charged, expired
-- and they add up to every credit (wallet_balances). Per key, ink_leased is the headroom its live
-- leases took; charged + reserved + leased never passes the cap.
--
-- Lock order, for every function here: wallets, then api_keys, then leases (all sorted), then
-- requests. The older hold functions (002, 007) lock requests first. They are kept off requests
-- whose hold sits in a lease: the gateway answers a second end of such a hold from memory until its
-- record is written, reconciliation skips leased rows, and the request_leased CHECK refuses any
-- resolution that still reaches one (it fails instead of moving money).

ALTER TABLE wallets
  ADD COLUMN leased_grant_ink bigint NOT NULL DEFAULT 0 CHECK (leased_grant_ink >= 0),
  ADD COLUMN leased_payg_ink bigint NOT NULL DEFAULT 0 CHECK (leased_payg_ink >= 0);
ALTER TABLE wallets DROP CONSTRAINT wallet_balances;
ALTER TABLE wallets ADD CONSTRAINT wallet_balances CHECK (
  grant_ink + payg_ink + leased_grant_ink + leased_payg_ink + held_grant_ink + held_payg_ink + charged_ink + expired_ink = credited_ink);

ALTER TABLE api_keys ADD COLUMN ink_leased bigint NOT NULL DEFAULT 0 CHECK (ink_leased >= 0);

-- While a refusal at the edge waits for recalled leases to give their spare Ink back, no new lease
-- is taken on the account (or key) it recalled: otherwise another instance could lease that Ink
-- again and the refusal would wait for ever, or answer 402 while Ink sits in a lease.
ALTER TABLE wallets ADD COLUMN lease_pause_until timestamptz;
ALTER TABLE api_keys ADD COLUMN lease_pause_until timestamptz;

-- One row per running gateway process. `epoch` grows at every start under the same id: whatever
-- an older epoch still owns is recovered at once, and a late flush from it is told so.
CREATE TABLE ledger_instances (
  id text PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 200),
  epoch bigint NOT NULL CHECK (epoch >= 1),
  started_at timestamptz NOT NULL,
  heartbeat_at timestamptz NOT NULL
);

CREATE TABLE leases (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  account_id text NOT NULL,
  key_id text NOT NULL,
  instance_id text NOT NULL,
  epoch bigint NOT NULL,
  state text NOT NULL CHECK (state IN ('live', 'returned', 'recovered')),
  -- What the lease holds now, as of its last flush: spare Ink, holds in flight, charges not yet flushed.
  grant_ink bigint NOT NULL CHECK (grant_ink >= 0),
  payg_ink bigint NOT NULL CHECK (payg_ink >= 0),
  -- The wallet period its grant part came from: returned after a roll-over, that part lapses.
  grant_period integer NOT NULL,
  -- Set by whoever needs the Ink back exactly (the edge of the wallet or of a key cap, a revoke, a
  -- cap edit, a roll-over); the owner stops holding from it and returns its spare part (drained).
  recall_at timestamptz,
  drained_at timestamptz,
  expires_at timestamptz NOT NULL,
  created_at timestamptz NOT NULL,
  closed_at timestamptz,
  CONSTRAINT lease_key_of_account FOREIGN KEY (key_id, account_id) REFERENCES api_keys (id, account_id),
  CONSTRAINT lease_closed CHECK ((state = 'live') = (closed_at IS NULL)),
  CONSTRAINT lease_closed_empty CHECK (state = 'live' OR grant_ink + payg_ink = 0)
);
CREATE INDEX leases_live_account ON leases (account_id) WHERE state = 'live';
CREATE INDEX leases_live_key ON leases (key_id) WHERE state = 'live';
CREATE INDEX leases_live_instance ON leases (instance_id, epoch) WHERE state = 'live';
CREATE INDEX leases_live_expiry ON leases (expires_at) WHERE state = 'live';

-- A request's hold came from a lease (lease_id) and, while `leased`, still sits in it: then the
-- wallet's held pools do not count it and no resolution may touch it (it ends through the flush
-- or the lease's recovery).
ALTER TABLE requests ADD COLUMN lease_id bigint, ADD COLUMN leased boolean NOT NULL DEFAULT false;
ALTER TABLE requests ADD CONSTRAINT request_leased CHECK (
  NOT leased OR (lease_id IS NOT NULL AND hold_state = 'open' AND status = 'running'));
CREATE INDEX requests_leased ON requests (lease_id) WHERE leased;

-- The journal gains the leased pools and the lease a row belongs to, and the lease moves:
--   lease         wallet -> lease (a take or a refill)
--   lease_return  lease -> wallet (its grant part lapses when the period rolled meanwhile)
--   lease_flush   one flush's charges out of one lease (the requests rows carry the detail)
--   lease_hold    one hold moved out of its lease into a durable open hold (usage unknown, recovery)
--   late_charge   a charge flushed after its lease was recovered: straight from the wallet, never below zero
ALTER TABLE ledger_journal
  ADD COLUMN leased_grant_ink bigint NOT NULL DEFAULT 0,
  ADD COLUMN leased_payg_ink bigint NOT NULL DEFAULT 0,
  ADD COLUMN lease_id bigint;
ALTER TABLE ledger_journal DROP CONSTRAINT ledger_journal_kind_check;
ALTER TABLE ledger_journal ADD CONSTRAINT ledger_journal_kind_check CHECK (kind IN (
  'reserve', 'settle', 'release', 'refund', 'reconcile', 'topup', 'grant', 'expire',
  'lease', 'lease_return', 'lease_flush', 'lease_hold', 'late_charge'));
ALTER TABLE ledger_journal DROP CONSTRAINT journal_row_balances;
ALTER TABLE ledger_journal ADD CONSTRAINT journal_row_balances CHECK (
  grant_ink + payg_ink + leased_grant_ink + leased_payg_ink + held_grant_ink + held_payg_ink + charged_ink + expired_ink = credited_ink);
ALTER TABLE ledger_journal DROP CONSTRAINT journal_request_moves;
ALTER TABLE ledger_journal ADD CONSTRAINT journal_request_moves CHECK (CASE
  WHEN kind IN ('reserve', 'settle', 'release', 'refund', 'reconcile', 'late_charge') THEN request_id IS NOT NULL AND key_id IS NOT NULL
  WHEN kind = 'lease_hold' THEN request_id IS NOT NULL AND key_id IS NOT NULL AND lease_id IS NOT NULL
  WHEN kind IN ('lease', 'lease_return', 'lease_flush') THEN request_id IS NULL AND key_id IS NOT NULL AND lease_id IS NOT NULL
  ELSE request_id IS NULL AND key_id IS NULL END);
-- A hold opened from a lease counts as its one opening move, like a reserve.
DROP INDEX ledger_journal_one_reserve;
CREATE UNIQUE INDEX ledger_journal_one_reserve ON ledger_journal (request_id) WHERE kind IN ('reserve', 'lease_hold');
DROP INDEX ledger_journal_one_resolution;
CREATE UNIQUE INDEX ledger_journal_one_resolution ON ledger_journal (request_id)
  WHERE kind IN ('settle', 'release', 'refund', 'reconcile', 'late_charge');
CREATE INDEX ledger_journal_lease ON ledger_journal (lease_id) WHERE lease_id IS NOT NULL;

-- Registers a start under an instance id: the epoch grows, and every lease an older epoch of the
-- same id still owns is recovered now (that process is gone: this one took its name).
CREATE FUNCTION ledger_instance_start(p_instance text, p_now timestamptz, p_grace_ms integer)
RETURNS bigint LANGUAGE plpgsql AS $fn$
DECLARE
  e bigint;
BEGIN
  INSERT INTO ledger_instances AS i (id, epoch, started_at, heartbeat_at) VALUES (p_instance, 1, p_now, p_now)
  ON CONFLICT (id) DO UPDATE SET epoch = i.epoch + 1, started_at = p_now, heartbeat_at = p_now
  RETURNING epoch INTO e;
  RETURN e;
END
$fn$;

-- Takes a new lease (p_lease NULL) or refills one (p_lease). Size: p_want, but at most
-- p_wallet_permille of the unleased wallet and p_key_permille of the key's headroom, and the
-- unleased wallet keeps at least p_floor; below p_min (the hold waiting for it) the answer is
-- 'edge': the caller uses the exact path. Results: ok | edge | key_not_live | unknown_key |
-- lease_gone (refill of a lease that is no longer this instance's, or from an older period) |
-- stale_instance (this epoch was superseded).
CREATE FUNCTION ledger_lease_take(
  p_lease bigint, p_account text, p_key text, p_instance text, p_epoch bigint,
  p_min bigint, p_want bigint, p_floor bigint, p_wallet_permille integer, p_key_permille integer,
  p_ttl_ms integer, p_now timestamptz)
RETURNS TABLE (result text, lease_id bigint, take_grant_ink bigint, take_payg_ink bigint, grant_period integer,
               available_ink bigint, key_room_ink bigint)
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
  v record;
  l record;
  unleased bigint; room bigint; size bigint; g bigint; p bigint; lid bigint;
BEGIN
  take_grant_ink := 0; take_payg_ink := 0; lease_id := p_lease; grant_period := NULL; available_ink := NULL; key_room_ink := NULL;
  SELECT w.grant_ink, w.payg_ink, w.grant_period, k.ink_limit, k.ink_charged + k.ink_reserved + k.ink_leased AS used,
         k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > p_now) AS live,
         coalesce(w.lease_pause_until > p_now, false) OR coalesce(k.lease_pause_until > p_now, false) AS paused INTO v
    FROM wallets w JOIN api_keys k ON k.account_id = w.account_id
   WHERE w.account_id = p_account AND k.id = p_key
     FOR UPDATE OF w, k;
  IF NOT FOUND THEN result := 'unknown_key'; RETURN NEXT; RETURN; END IF;
  IF NOT v.live THEN result := 'key_not_live'; RETURN NEXT; RETURN; END IF;
  IF NOT EXISTS (SELECT 1 FROM ledger_instances WHERE id = p_instance AND epoch = p_epoch) THEN
    result := 'stale_instance'; RETURN NEXT; RETURN;
  END IF;
  IF p_lease IS NOT NULL THEN
    SELECT * INTO l FROM leases WHERE id = p_lease FOR UPDATE;
    IF NOT FOUND OR l.state <> 'live' OR l.instance_id <> p_instance OR l.epoch <> p_epoch OR l.recall_at IS NOT NULL
       OR l.grant_period <> v.grant_period OR l.key_id <> p_key THEN
      result := 'lease_gone'; RETURN NEXT; RETURN;
    END IF;
  END IF;
  unleased := v.grant_ink + v.payg_ink;
  IF v.paused THEN result := 'edge'; available_ink := unleased; RETURN NEXT; RETURN; END IF;
  room := CASE WHEN v.ink_limit IS NULL THEN NULL ELSE greatest(v.ink_limit - v.used, 0) END;
  available_ink := unleased; key_room_ink := room;
  size := least(p_want, (unleased * p_wallet_permille) / 1000, unleased - p_floor);
  IF room IS NOT NULL THEN size := least(size, (room * p_key_permille) / 1000); END IF;
  IF size < greatest(p_min, 1) THEN result := 'edge'; RETURN NEXT; RETURN; END IF;
  g := least(v.grant_ink, size);
  p := size - g;
  IF p_lease IS NULL THEN
    INSERT INTO leases (account_id, key_id, instance_id, epoch, state, grant_ink, payg_ink, grant_period, expires_at, created_at)
    VALUES (p_account, p_key, p_instance, p_epoch, 'live', g, p, v.grant_period, p_now + make_interval(secs => p_ttl_ms / 1000.0), p_now)
    RETURNING id INTO lid;
  ELSE
    lid := p_lease;
    UPDATE leases SET grant_ink = grant_ink + g, payg_ink = payg_ink + p,
                      expires_at = p_now + make_interval(secs => p_ttl_ms / 1000.0)
     WHERE id = lid;
  END IF;
  UPDATE wallets SET grant_ink = grant_ink - g, payg_ink = payg_ink - p,
                     leased_grant_ink = leased_grant_ink + g, leased_payg_ink = leased_payg_ink + p
   WHERE account_id = p_account;
  UPDATE api_keys SET ink_leased = ink_leased + size WHERE id = p_key;
  INSERT INTO ledger_journal (at, kind, account_id, key_id, lease_id, amount_ink, grant_ink, payg_ink, leased_grant_ink, leased_payg_ink)
  VALUES (p_now, 'lease', p_account, p_key, lid, size, -g, -p, g, p);
  result := 'ok'; lease_id := lid; take_grant_ink := g; take_payg_ink := p; grant_period := v.grant_period;
  RETURN NEXT;
END
$fn$;

-- Returns spare Ink of a live lease to the wallet (grant part lapses if the period rolled since the
-- lease took it). p_close: the lease ends and gives back all it holds (the owner closes only with
-- nothing in flight and everything flushed; a hold still in the lease makes it a mismatch). p_drain: the lease was recalled and
-- takes no more holds. Results: ok | lease_gone | mismatch.
CREATE FUNCTION ledger_lease_return(
  p_lease bigint, p_instance text, p_epoch bigint, p_grant bigint, p_payg bigint, p_close boolean, p_drain boolean,
  p_now timestamptz)
RETURNS TABLE (result text, expired_ink bigint, left_grant_ink bigint, left_payg_ink bigint)
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
  l record;
  w record;
  ex bigint := 0; back bigint;
BEGIN
  expired_ink := 0;
  SELECT account_id, key_id INTO l FROM leases WHERE id = p_lease;
  IF NOT FOUND THEN result := 'lease_gone'; RETURN NEXT; RETURN; END IF;
  SELECT grant_period INTO w FROM wallets WHERE account_id = l.account_id FOR UPDATE;
  PERFORM 1 FROM api_keys WHERE id = l.key_id FOR UPDATE;
  SELECT * INTO l FROM leases WHERE id = p_lease FOR UPDATE;
  left_grant_ink := l.grant_ink; left_payg_ink := l.payg_ink;
  IF l.state <> 'live' OR l.instance_id <> p_instance OR l.epoch <> p_epoch THEN
    result := 'lease_gone'; RETURN NEXT; RETURN;
  END IF;
  IF p_grant < 0 OR p_payg < 0 OR p_grant > l.grant_ink OR p_payg > l.payg_ink
     OR (p_close AND EXISTS (SELECT 1 FROM requests WHERE lease_id = p_lease AND leased)) THEN
    result := 'mismatch'; RETURN NEXT; RETURN;
  END IF;
  -- Closing returns everything the lease holds: with nothing in flight and every record written
  -- that is the owner's spare, plus what a refill whose answer was lost (a timeout) added.
  IF p_close THEN p_grant := l.grant_ink; p_payg := l.payg_ink; END IF;
  IF l.grant_period <> w.grant_period THEN ex := p_grant; END IF;
  back := p_grant - ex;
  UPDATE wallets SET grant_ink = grant_ink + back, payg_ink = payg_ink + p_payg, expired_ink = expired_ink + ex,
                     leased_grant_ink = leased_grant_ink - p_grant, leased_payg_ink = leased_payg_ink - p_payg
   WHERE account_id = l.account_id;
  UPDATE api_keys SET ink_leased = ink_leased - (p_grant + p_payg) WHERE id = l.key_id;
  UPDATE leases SET grant_ink = grant_ink - p_grant, payg_ink = payg_ink - p_payg,
                    state = CASE WHEN p_close THEN 'returned' ELSE state END,
                    closed_at = CASE WHEN p_close THEN p_now ELSE NULL END,
                    drained_at = CASE WHEN p_drain OR p_close THEN coalesce(drained_at, p_now) ELSE drained_at END
   WHERE id = p_lease;
  IF p_grant + p_payg > 0 THEN
    INSERT INTO ledger_journal (at, kind, account_id, key_id, lease_id, amount_ink, grant_ink, payg_ink, expired_ink,
                                leased_grant_ink, leased_payg_ink, note)
    VALUES (p_now, 'lease_return', l.account_id, l.key_id, p_lease, p_grant + p_payg, back, p_payg, ex, -p_grant, -p_payg,
            CASE WHEN p_close THEN 'lease closed' ELSE 'spare returned' END);
  END IF;
  result := 'ok'; expired_ink := ex; left_grant_ink := l.grant_ink - p_grant; left_payg_ink := l.payg_ink - p_payg;
  RETURN NEXT;
END
$fn$;

-- Recalls the undrained live leases of an account (p_account) or of a key (p_key): marks them
-- (recall_at) and pauses new leases there until p_until. Returns how many were not marked yet.
-- Statements in the house lock order (wallets, keys, leases), so it never deadlocks with a take,
-- a return or a flush.
CREATE FUNCTION ledger_recall(p_account text, p_key text, p_now timestamptz, p_until timestamptz)
RETURNS integer LANGUAGE plpgsql AS $fn$
DECLARE
  n integer;
BEGIN
  UPDATE wallets SET lease_pause_until = greatest(lease_pause_until, p_until) WHERE account_id = p_account;
  UPDATE api_keys SET lease_pause_until = greatest(lease_pause_until, p_until) WHERE id = p_key;
  UPDATE leases SET recall_at = p_now
   WHERE state = 'live' AND drained_at IS NULL AND recall_at IS NULL AND (account_id = p_account OR key_id = p_key);
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END
$fn$;

-- Recovers one live lease that its owner can no longer use (expired, or its instance id restarted):
-- every flushed hold still in it becomes a durable open hold (usage_unknown: the vendor's record
-- reconciles it), the rest goes back to the wallet, and the lease ends as 'recovered'.
-- Returns the number of holds kept, or NULL when the lease was not live any more.
CREATE FUNCTION ledger_lease_recover(p_lease bigint, p_now timestamptz, p_reason text)
RETURNS integer
LANGUAGE plpgsql
SET enable_seqscan = off
AS $fn$
DECLARE
  l record;
  w record;
  hg bigint; hp bigint; n integer; ex bigint := 0; bg bigint;
BEGIN
  SELECT account_id, key_id INTO l FROM leases WHERE id = p_lease;
  IF NOT FOUND THEN RETURN NULL; END IF;
  SELECT grant_period INTO w FROM wallets WHERE account_id = l.account_id FOR UPDATE;
  PERFORM 1 FROM api_keys WHERE id = l.key_id FOR UPDATE;
  SELECT * INTO l FROM leases WHERE id = p_lease FOR UPDATE;
  IF l.state <> 'live' THEN RETURN NULL; END IF;
  WITH moved AS (
    UPDATE requests SET leased = false, status = 'usage_unknown', reason = coalesce(reason, p_reason)
     WHERE lease_id = p_lease AND leased
    RETURNING id, hold_ink, hold_grant_ink, hold_payg_ink
  ), j AS (
    INSERT INTO ledger_journal (at, kind, account_id, key_id, request_id, lease_id, amount_ink,
                                leased_grant_ink, leased_payg_ink, held_grant_ink, held_payg_ink, note)
    SELECT p_now, 'lease_hold', l.account_id, l.key_id, m.id, p_lease, m.hold_ink,
           -m.hold_grant_ink, -m.hold_payg_ink, m.hold_grant_ink, m.hold_payg_ink, p_reason
      FROM moved m
  )
  SELECT coalesce(sum(hold_grant_ink), 0), coalesce(sum(hold_payg_ink), 0), count(*) INTO hg, hp, n FROM moved;
  IF hg > l.grant_ink OR hp > l.payg_ink THEN
    RAISE EXCEPTION 'ledger_lease_recover: lease % holds % + % but its open holds need % + %', p_lease, l.grant_ink, l.payg_ink, hg, hp;
  END IF;
  bg := l.grant_ink - hg;
  IF l.grant_period <> w.grant_period THEN ex := bg; bg := 0; END IF;
  UPDATE wallets SET grant_ink = grant_ink + bg, payg_ink = payg_ink + (l.payg_ink - hp), expired_ink = expired_ink + ex,
                     held_grant_ink = held_grant_ink + hg, held_payg_ink = held_payg_ink + hp,
                     leased_grant_ink = leased_grant_ink - l.grant_ink, leased_payg_ink = leased_payg_ink - l.payg_ink
   WHERE account_id = l.account_id;
  UPDATE api_keys SET ink_leased = ink_leased - (l.grant_ink + l.payg_ink), ink_reserved = ink_reserved + hg + hp
   WHERE id = l.key_id;
  UPDATE leases SET grant_ink = 0, payg_ink = 0, state = 'recovered', closed_at = p_now, drained_at = coalesce(drained_at, p_now)
   WHERE id = p_lease;
  IF l.grant_ink + l.payg_ink - hg - hp > 0 THEN
    INSERT INTO ledger_journal (at, kind, account_id, key_id, lease_id, amount_ink, grant_ink, payg_ink, expired_ink,
                                leased_grant_ink, leased_payg_ink, note)
    VALUES (p_now, 'lease_return', l.account_id, l.key_id, p_lease, l.grant_ink + l.payg_ink - hg - hp, bg, l.payg_ink - hp, ex,
            -(l.grant_ink - hg), -(l.payg_ink - hp), 'lease recovered');
  END IF;
  RETURN n;
END
$fn$;

-- The write-behind journal's group commit: every record of a flush in one transaction.
-- A record is a request's start (end NULL: the hold is in flight, leased), its end
-- (settle | release | unknown) or both. Idempotent on request id: a start already written is not
-- written again, an end is applied only to a hold still in its lease, and the lease, wallet and key
-- move by exactly what the rows that changed say, so a flush retried after a lost answer moves
-- nothing twice. Records of leases that are no longer this instance's (recovered meanwhile) take
-- the late path one by one: a settle charges the durable hold recovery made, or, if the start was
-- never flushed, the wallet directly (never below zero); a start alone waits for its end.
-- Per record: ok | late | deferred.
CREATE FUNCTION ledger_flush(
  p_instance text, p_epoch bigint, p_now timestamptz,
  p_ids text[], p_accounts text[], p_keys text[], p_products text[], p_models text[], p_leases bigint[],
  p_holds bigint[], p_hold_grants bigint[], p_periods integer[], p_created timestamptz[], p_vendor_ids text[],
  p_ends text[], p_charges bigint[], p_usage jsonb[], p_reasons text[], p_resolved timestamptz[])
RETURNS TABLE (item integer, result text)
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
  n integer := coalesce(cardinality(p_ids), 0);
  ours bigint[]; late boolean[]; r record; x record; i integer; c bigint; cg bigint; have bigint; g bigint;
  out_r text[];
BEGIN
  IF n = 0 THEN RETURN; END IF;
  PERFORM 1 FROM (SELECT account_id FROM wallets WHERE account_id = ANY(p_accounts) ORDER BY account_id FOR UPDATE) x;
  PERFORM 1 FROM (SELECT id FROM api_keys WHERE id = ANY(p_keys) ORDER BY id FOR UPDATE) x;
  SELECT coalesce(array_agg(x.id), '{}') INTO ours
    FROM (SELECT id FROM leases WHERE id = ANY(p_leases) AND state = 'live' AND instance_id = p_instance AND epoch = p_epoch
           ORDER BY id FOR UPDATE) x;
  out_r := array_fill('ok'::text, ARRAY[n]);

  WITH rec AS (
    SELECT * FROM unnest(p_ids, p_accounts, p_keys, p_products, p_models, p_leases, p_holds, p_hold_grants, p_periods,
                         p_created, p_vendor_ids, p_ends, p_charges, p_usage, p_reasons, p_resolved)
             AS u(id, account_id, key_id, product, model, lease_id, hold, hold_g, period, created, vid, e, charge, usage, reason, resolved)
     WHERE u.lease_id = ANY(ours)
  ), amt AS (
    SELECT rec.*, least(greatest(coalesce(rec.charge, 0), 0), rec.hold) AS c FROM rec
  ), amt2 AS (
    SELECT amt.*, CASE WHEN amt.e = 'settle' THEN amt.c ELSE 0 END AS cc FROM amt
  ), amt3 AS (
    SELECT amt2.*, least(amt2.cc, amt2.hold_g) AS cg FROM amt2
  ), ins AS (
    INSERT INTO requests (id, account_id, key_id, product, model, hold_state, status, hold_ink, hold_grant_ink, hold_payg_ink,
                          grant_period, charged_ink, charged_grant_ink, charged_payg_ink, usage, vendor_request_id, reason,
                          created_at, resolved_at, lease_id, leased)
    SELECT a.id, a.account_id, a.key_id, a.product, a.model,
           CASE a.e WHEN 'settle' THEN 'settled' WHEN 'release' THEN 'released' ELSE 'open' END,
           CASE a.e WHEN 'settle' THEN 'settled' WHEN 'release' THEN 'released' WHEN 'unknown' THEN 'usage_unknown' ELSE 'running' END,
           a.hold, a.hold_g, a.hold - a.hold_g, a.period, a.cc, a.cg, a.cc - a.cg, a.usage, a.vid, a.reason,
           a.created, CASE WHEN a.e IN ('settle', 'release') THEN a.resolved END, a.lease_id, a.e IS NULL
      FROM amt3 a
    ON CONFLICT (id) DO NOTHING
    RETURNING id, account_id, key_id, lease_id, hold_state, status, hold_ink, hold_grant_ink, hold_payg_ink, charged_grant_ink, charged_payg_ink
  ), upd AS (
    UPDATE requests q
       SET hold_state = CASE a.e WHEN 'settle' THEN 'settled' WHEN 'release' THEN 'released' ELSE 'open' END,
           status = CASE a.e WHEN 'settle' THEN 'settled' WHEN 'release' THEN 'released' ELSE 'usage_unknown' END,
           charged_ink = a.cc, charged_grant_ink = a.cg, charged_payg_ink = a.cc - a.cg,
           usage = coalesce(a.usage, q.usage), vendor_request_id = coalesce(a.vid, q.vendor_request_id),
           reason = coalesce(a.reason, q.reason),
           resolved_at = CASE WHEN a.e IN ('settle', 'release') THEN a.resolved END, leased = false
      FROM amt3 a
     WHERE q.id = a.id AND q.leased AND q.lease_id = a.lease_id AND a.e IS NOT NULL
    RETURNING q.id, q.account_id, q.key_id, q.lease_id, q.hold_state, q.status, q.hold_ink, q.hold_grant_ink, q.hold_payg_ink,
              q.charged_grant_ink, q.charged_payg_ink
  ), vid AS (
    UPDATE requests q SET vendor_request_id = a.vid
      FROM amt3 a
     WHERE q.id = a.id AND q.leased AND a.e IS NULL AND a.vid IS NOT NULL AND q.vendor_request_id IS DISTINCT FROM a.vid
  ), ended AS (
    -- What each changed row moves out of its lease: its charge (settled), or its whole hold (now a durable open hold).
    SELECT m.*, (m.status = 'usage_unknown') AS kept FROM (
      SELECT * FROM ins WHERE hold_state <> 'open' OR status = 'usage_unknown'
      UNION ALL SELECT * FROM upd) m
  ), per_lease AS (
    SELECT lease_id, min(account_id) AS account_id, min(key_id) AS key_id,
           sum(charged_grant_ink) AS cg, sum(charged_payg_ink) AS cp,
           sum(CASE WHEN kept THEN hold_grant_ink ELSE 0 END) AS ug, sum(CASE WHEN kept THEN hold_payg_ink ELSE 0 END) AS up
      FROM ended GROUP BY lease_id
  ), ul AS (
    UPDATE leases l SET grant_ink = l.grant_ink - (d.cg + d.ug), payg_ink = l.payg_ink - (d.cp + d.up)
      FROM per_lease d WHERE l.id = d.lease_id
  ), uw AS (
    UPDATE wallets w
       SET leased_grant_ink = w.leased_grant_ink - d.g, leased_payg_ink = w.leased_payg_ink - d.p,
           held_grant_ink = w.held_grant_ink + d.ug, held_payg_ink = w.held_payg_ink + d.up, charged_ink = w.charged_ink + d.c
      FROM (SELECT account_id, sum(cg + ug) AS g, sum(cp + up) AS p, sum(ug) AS ug, sum(up) AS up, sum(cg + cp) AS c
              FROM per_lease GROUP BY account_id) d
     WHERE w.account_id = d.account_id
  ), uk AS (
    UPDATE api_keys k
       SET ink_leased = k.ink_leased - d.moved, ink_charged = k.ink_charged + d.c, ink_reserved = k.ink_reserved + d.kept
      FROM (SELECT key_id, sum(cg + cp + ug + up) AS moved, sum(cg + cp) AS c, sum(ug + up) AS kept FROM per_lease GROUP BY key_id) d
     WHERE k.id = d.key_id
  ), jl AS (
    INSERT INTO ledger_journal (at, kind, account_id, key_id, lease_id, amount_ink, leased_grant_ink, leased_payg_ink, charged_ink)
    SELECT p_now, 'lease_flush', d.account_id, d.key_id, d.lease_id, d.cg + d.cp, -d.cg, -d.cp, d.cg + d.cp
      FROM per_lease d WHERE d.cg + d.cp > 0
  )
  INSERT INTO ledger_journal (at, kind, account_id, key_id, request_id, lease_id, amount_ink,
                              leased_grant_ink, leased_payg_ink, held_grant_ink, held_payg_ink, note)
  SELECT p_now, 'lease_hold', e.account_id, e.key_id, e.id, e.lease_id, e.hold_ink,
         -e.hold_grant_ink, -e.hold_payg_ink, e.hold_grant_ink, e.hold_payg_ink, 'usage unknown'
    FROM ended e WHERE e.kept;

  -- The late path: records whose lease is not (or no longer) this instance's.
  FOR i IN 1..n LOOP
    CONTINUE WHEN p_leases[i] = ANY(ours);
    IF p_ends[i] IS NULL THEN
      UPDATE requests SET vendor_request_id = p_vendor_ids[i]
       WHERE id = p_ids[i] AND vendor_request_id IS NULL AND p_vendor_ids[i] IS NOT NULL;
      out_r[i] := 'deferred';
      CONTINUE;
    END IF;
    out_r[i] := 'late';
    SELECT hold_state, leased INTO r FROM requests WHERE id = p_ids[i] FOR UPDATE;
    IF FOUND THEN
      IF r.hold_state = 'open' AND NOT r.leased AND p_ends[i] IN ('settle', 'release') THEN
        SELECT * INTO x FROM ledger_resolve_one(p_ids[i], p_ends[i], coalesce(p_charges[i], 0), p_usage[i], p_vendor_ids[i],
                                                coalesce(p_reasons[i], 'flushed after its lease was recovered'), p_now);
      ELSE
        UPDATE requests SET vendor_request_id = coalesce(vendor_request_id, p_vendor_ids[i]) WHERE id = p_ids[i];
      END IF;
      CONTINUE;
    END IF;
    SELECT grant_ink, payg_ink INTO x FROM wallets WHERE account_id = p_accounts[i];
    have := x.grant_ink + x.payg_ink;
    IF p_ends[i] = 'settle' THEN
      -- Recovery never saw this request: the lease's Ink went back, so the charge comes from the wallet.
      c := least(greatest(coalesce(p_charges[i], 0), 0), p_holds[i], have);
      cg := least(c, x.grant_ink);
      INSERT INTO requests (id, account_id, key_id, product, model, hold_state, status, hold_ink, hold_grant_ink, hold_payg_ink,
                            grant_period, charged_ink, charged_grant_ink, charged_payg_ink, usage, vendor_request_id, reason,
                            created_at, resolved_at, lease_id, leased)
      VALUES (p_ids[i], p_accounts[i], p_keys[i], p_products[i], p_models[i], 'settled', 'settled', p_holds[i], cg, p_holds[i] - cg,
              p_periods[i], c, cg, c - cg, p_usage[i], p_vendor_ids[i], 'charged after its lease was recovered',
              p_created[i], p_resolved[i], p_leases[i], false);
      UPDATE wallets SET grant_ink = grant_ink - cg, payg_ink = payg_ink - (c - cg), charged_ink = charged_ink + c
       WHERE account_id = p_accounts[i];
      UPDATE api_keys SET ink_charged = ink_charged + c WHERE id = p_keys[i];
      INSERT INTO ledger_journal (at, kind, account_id, key_id, request_id, lease_id, amount_ink, grant_ink, payg_ink, charged_ink, note)
      VALUES (p_now, 'late_charge', p_accounts[i], p_keys[i], p_ids[i], p_leases[i], c, -cg, -(c - cg), c,
              CASE WHEN c < least(greatest(coalesce(p_charges[i], 0), 0), p_holds[i]) THEN 'wallet short of the charge' END);
    ELSIF p_ends[i] = 'release' THEN
      INSERT INTO requests (id, account_id, key_id, product, model, hold_state, status, hold_ink, hold_grant_ink, hold_payg_ink,
                            grant_period, reason, created_at, resolved_at, lease_id, leased)
      VALUES (p_ids[i], p_accounts[i], p_keys[i], p_products[i], p_models[i], 'void', 'void', 0, 0, 0,
              p_periods[i], coalesce(p_reasons[i], 'released after its lease was recovered'), p_created[i], p_resolved[i], p_leases[i], false);
    ELSE
      -- Usage unknown: keep a durable hold, as much of it as the wallet still has.
      c := least(p_holds[i], have);
      g := least(c, x.grant_ink);
      INSERT INTO requests (id, account_id, key_id, product, model, hold_state, status, hold_ink, hold_grant_ink, hold_payg_ink,
                            grant_period, vendor_request_id, reason, created_at, lease_id, leased)
      VALUES (p_ids[i], p_accounts[i], p_keys[i], p_products[i], p_models[i], 'open', 'usage_unknown', c, g, c - g,
              (SELECT grant_period FROM wallets WHERE account_id = p_accounts[i]), p_vendor_ids[i],
              coalesce(p_reasons[i], 'usage unknown after its lease was recovered'), p_created[i], p_leases[i], false);
      UPDATE wallets SET grant_ink = grant_ink - g, payg_ink = payg_ink - (c - g), held_grant_ink = held_grant_ink + g,
                         held_payg_ink = held_payg_ink + (c - g)
       WHERE account_id = p_accounts[i];
      UPDATE api_keys SET ink_reserved = ink_reserved + c WHERE id = p_keys[i];
      INSERT INTO ledger_journal (at, kind, account_id, key_id, request_id, amount_ink, grant_ink, payg_ink, held_grant_ink, held_payg_ink, note)
      VALUES (p_now, 'reserve', p_accounts[i], p_keys[i], p_ids[i], c, -g, -(c - g), g, c - g, 'usage unknown after its lease was recovered');
    END IF;
  END LOOP;

  RETURN QUERY SELECT o.ord::integer, o.r FROM unnest(out_r) WITH ORDINALITY AS o(r, ord);
END
$fn$;

-- The heartbeat: renews the live leases this instance knows (p_known) and says which of them the
-- owner must give up (recalled, key revoked or expired, period rolled). A live lease of this
-- instance and epoch that it does not know and that is older than p_orphan_ms is an orphan: a take
-- whose answer the instance never got (it timed out while Postgres was slow, then committed). It
-- is listed as 'orphan' and not renewed, so the instance recovers it (it never held anything from
-- it). No rows but one `stale`: the epoch was superseded (another start took the id) and every
-- lease of it is someone else's to recover.
CREATE FUNCTION ledger_heartbeat(p_instance text, p_epoch bigint, p_ttl_ms integer, p_now timestamptz, p_known bigint[],
                                 p_orphan_ms integer)
RETURNS TABLE (lease_id bigint, give_up text)
LANGUAGE plpgsql AS $fn$
BEGIN
  UPDATE ledger_instances SET heartbeat_at = p_now WHERE id = p_instance AND epoch = p_epoch;
  IF NOT FOUND THEN
    RETURN QUERY SELECT NULL::bigint, 'stale'::text;
    RETURN;
  END IF;
  RETURN QUERY
  WITH renewed AS (
    UPDATE leases l SET expires_at = p_now + make_interval(secs => p_ttl_ms / 1000.0)
     WHERE l.id = ANY(p_known) AND l.instance_id = p_instance AND l.epoch = p_epoch AND l.state = 'live'
    RETURNING l.id, l.key_id, l.account_id, l.recall_at, l.drained_at, l.grant_period
  )
  SELECT r.id, CASE
           WHEN NOT (k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > p_now)) THEN 'key_not_live'
           WHEN r.recall_at IS NOT NULL AND r.drained_at IS NULL THEN 'recalled'
           WHEN w.grant_period <> r.grant_period THEN 'period'
         END
    FROM renewed r JOIN api_keys k ON k.id = r.key_id JOIN wallets w ON w.account_id = r.account_id
  UNION ALL
  SELECT l.id, 'orphan'::text FROM leases l
   WHERE l.instance_id = p_instance AND l.epoch = p_epoch AND l.state = 'live' AND NOT (l.id = ANY(p_known))
     AND l.created_at < p_now - make_interval(secs => p_orphan_ms / 1000.0);
END
$fn$;
