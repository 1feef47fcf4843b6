-- The Ink ledger: request records (each carries one hold), an append-only journal of every move,
-- and the functions that move held Ink: ledger_reserve / ledger_resolve (a batch, group commit)
-- and ledger_reserve_one / ledger_resolve_one (a lone move, fewer statements). Balances live in
-- wallets / api_keys (001) and change only in the same statement that writes the journal rows
-- that explain them.
--
-- Lock order, everywhere a move takes row locks: requests (by id), then wallets (by account_id),
-- then api_keys (by id). Every function below takes its locks in that order, sorted, before it
-- writes, so concurrent batches cannot deadlock each other.

-- Which period a wallet's grant belongs to. A hold remembers the period its grant part came from;
-- when it resolves after a roll-over, the unused old-period grant lapses (expired) instead of
-- returning to the new period's grant.
ALTER TABLE wallets ADD COLUMN grant_period integer NOT NULL DEFAULT 0 CHECK (grant_period >= 0);

-- A request's key must be a key of the request's account: one composite foreign key says both
-- (and, unlike a key to accounts, does not lock the account row on every reserve).
ALTER TABLE api_keys ADD CONSTRAINT api_keys_id_account UNIQUE (id, account_id);

CREATE TABLE requests (
  id text PRIMARY KEY CHECK (id ~ '^req_[A-Za-z0-9_-]{1,120}$'),
  account_id text NOT NULL,
  key_id text NOT NULL,
  product text NOT NULL CHECK (product IN ('messages', 'responses', 'video', 'images')),
  model text NOT NULL CHECK (length(model) BETWEEN 1 AND 200),
  -- open -> settled | released | refunded, exactly once. 'void' marks an id whose reservation was
  -- abandoned (outcome unknown to the caller); it holds nothing and blocks a late reserve.
  hold_state text NOT NULL CHECK (hold_state IN ('open', 'settled', 'released', 'refunded', 'void')),
  -- What the request is doing: while the hold is open, running or usage_unknown (the vendor never
  -- reported usage; the hold waits for reconciliation); afterwards the same word as hold_state.
  status text NOT NULL CHECK (status IN ('running', 'usage_unknown', 'settled', 'released', 'refunded', 'void')),
  hold_ink bigint NOT NULL CHECK (hold_ink >= 0),
  hold_grant_ink bigint NOT NULL CHECK (hold_grant_ink >= 0),
  hold_payg_ink bigint NOT NULL CHECK (hold_payg_ink >= 0),
  grant_period integer NOT NULL,
  charged_ink bigint NOT NULL DEFAULT 0,
  charged_grant_ink bigint NOT NULL DEFAULT 0 CHECK (charged_grant_ink >= 0),
  charged_payg_ink bigint NOT NULL DEFAULT 0 CHECK (charged_payg_ink >= 0),
  expired_ink bigint NOT NULL DEFAULT 0 CHECK (expired_ink >= 0),
  -- Vendor-reported usage buckets. NULL: nothing reported. A bucket the vendor did not send is
  -- absent from the object, never 0: "not reported" is kept apart from zero.
  usage jsonb CHECK (usage IS NULL OR jsonb_typeof(usage) = 'object'),
  vendor_request_id text CHECK (length(vendor_request_id) BETWEEN 1 AND 256),
  reason text CHECK (length(reason) <= 500),
  created_at timestamptz NOT NULL,
  resolved_at timestamptz,
  CONSTRAINT request_key_of_account FOREIGN KEY (key_id, account_id) REFERENCES api_keys (id, account_id),
  CONSTRAINT request_hold_split CHECK (hold_grant_ink + hold_payg_ink = hold_ink),
  CONSTRAINT request_charge_split CHECK (
    charged_grant_ink + charged_payg_ink = charged_ink
    AND charged_grant_ink <= hold_grant_ink AND charged_payg_ink <= hold_payg_ink),
  CONSTRAINT request_expired CHECK (expired_ink <= hold_grant_ink - charged_grant_ink),
  CONSTRAINT request_state CHECK (CASE
    WHEN hold_state = 'open' THEN status IN ('running', 'usage_unknown') AND resolved_at IS NULL AND charged_ink = 0 AND expired_ink = 0
    ELSE status = hold_state AND resolved_at IS NOT NULL END),
  CONSTRAINT request_uncharged CHECK (hold_state IN ('open', 'settled') OR charged_ink = 0),
  CONSTRAINT request_void CHECK (hold_state <> 'void' OR hold_ink = 0)
);
CREATE INDEX requests_account_created ON requests (account_id, created_at DESC, id DESC);
CREATE INDEX requests_vendor_request ON requests (vendor_request_id) WHERE vendor_request_id IS NOT NULL;
CREATE INDEX requests_open_created ON requests (created_at) WHERE hold_state = 'open';

-- Every move is one row; the amount columns are signed deltas of the wallet columns of the same
-- name, so SUM(journal.x) per account = wallets.x, and each row balances on its own.
-- No foreign keys here, on purpose: rows are written only by the functions below (and the
-- top-up / grant / roll-over statements), in the same statement as the request and wallet rows
-- they point to, and a foreign-key check per journal row cost a large share of a batch. The
-- test invariant (test/helpers/ledger-invariant.ts) checks that every row points to its wallet
-- and request.
CREATE TABLE ledger_journal (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  at timestamptz NOT NULL,
  kind text NOT NULL CHECK (kind IN ('reserve', 'settle', 'release', 'refund', 'reconcile', 'topup', 'grant', 'expire')),
  account_id text NOT NULL,
  key_id text,
  request_id text,
  -- The move's headline: the hold for reserve, the charge for a resolution, the credit for top-up/grant.
  amount_ink bigint NOT NULL CHECK (amount_ink >= 0),
  grant_ink bigint NOT NULL DEFAULT 0,
  payg_ink bigint NOT NULL DEFAULT 0,
  held_grant_ink bigint NOT NULL DEFAULT 0,
  held_payg_ink bigint NOT NULL DEFAULT 0,
  charged_ink bigint NOT NULL DEFAULT 0,
  expired_ink bigint NOT NULL DEFAULT 0,
  credited_ink bigint NOT NULL DEFAULT 0,
  note text CHECK (length(note) <= 500),
  CONSTRAINT journal_row_balances CHECK (
    grant_ink + payg_ink + held_grant_ink + held_payg_ink + charged_ink + expired_ink = credited_ink),
  CONSTRAINT journal_request_moves CHECK (
    (kind IN ('reserve', 'settle', 'release', 'refund', 'reconcile')) = (request_id IS NOT NULL AND key_id IS NOT NULL))
);
-- At most one reserve and at most one resolution per hold, enforced by the database itself.
CREATE UNIQUE INDEX ledger_journal_one_reserve ON ledger_journal (request_id) WHERE kind = 'reserve';
CREATE UNIQUE INDEX ledger_journal_one_resolution ON ledger_journal (request_id)
  WHERE kind IN ('settle', 'release', 'refund', 'reconcile');
CREATE INDEX ledger_journal_account ON ledger_journal (account_id, id);

CREATE FUNCTION ledger_journal_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'ledger_journal is append-only: % refused', TG_OP USING ERRCODE = 'restrict_violation';
END $$;
CREATE TRIGGER ledger_journal_append_only BEFORE UPDATE OR DELETE ON ledger_journal
  FOR EACH ROW EXECUTE FUNCTION ledger_journal_refuse_change();
CREATE TRIGGER ledger_journal_no_truncate BEFORE TRUNCATE ON ledger_journal
  FOR EACH STATEMENT EXECUTE FUNCTION ledger_journal_refuse_change();

-- Reserve a batch of holds in one statement and one commit (group commit).
-- Items are taken in array order; each gets its whole hold or nothing, never part. The wallet and
-- key rows are locked (FOR UPDATE, sorted) before they are read, so the checks below see the
-- latest committed balances and nothing can change them until this transaction commits: the
-- check and the write are one critical section, not a racy read-then-write. The table CHECKs
-- (no pool below zero, wallet_balances) are the backstop.
-- p_lock_timeout_ms: NULL keeps the session's lock_timeout.
-- result per item: ok | key_limit | insufficient | duplicate | unknown_key | invalid
CREATE FUNCTION ledger_reserve(
  p_ids text[], p_accounts text[], p_keys text[], p_products text[], p_models text[], p_holds bigint[], p_now timestamptz,
  p_lock_timeout_ms integer)
RETURNS TABLE (item integer, result text, take_grant_ink bigint, take_payg_ink bigint, available_ink bigint, key_room_ink bigint)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  n integer := coalesce(cardinality(p_ids), 0);
  w_ids text[]; w_grant bigint[]; w_payg bigint[]; w_period integer[]; w_tg bigint[]; w_tp bigint[];
  k_ids text[]; k_acc text[]; k_limit bigint[]; k_used bigint[]; k_take bigint[];
  taken text[];
  o_result text[] := '{}'; o_g bigint[] := '{}'; o_p bigint[] := '{}'; o_avail bigint[] := '{}'; o_room bigint[] := '{}';
  s_i integer[] := '{}'; s_g bigint[] := '{}'; s_p bigint[] := '{}'; s_period integer[] := '{}';
  i integer; wj integer; kj integer; h bigint; g bigint; p bigint; lim bigint;
BEGIN
  IF n = 0 THEN RETURN; END IF;
  -- A batch waits less for a wedged row than the session default, so that after it fails the
  -- items can be retried one by one and the healthy ones still answer within the usual budget.
  IF p_lock_timeout_ms IS NOT NULL THEN PERFORM set_config('lock_timeout', p_lock_timeout_ms::text, true); END IF;
  SELECT array_agg(x.account_id), array_agg(x.grant_ink), array_agg(x.payg_ink), array_agg(x.grant_period)
    INTO w_ids, w_grant, w_payg, w_period
    FROM (SELECT account_id, grant_ink, payg_ink, grant_period FROM wallets
           WHERE account_id = ANY(p_accounts) ORDER BY account_id FOR UPDATE) x;
  SELECT array_agg(x.id), array_agg(x.account_id), array_agg(x.ink_limit), array_agg(x.ink_charged + x.ink_reserved)
    INTO k_ids, k_acc, k_limit, k_used
    FROM (SELECT id, account_id, ink_limit, ink_charged, ink_reserved FROM api_keys
           WHERE id = ANY(p_keys) ORDER BY id FOR UPDATE) x;
  SELECT coalesce(array_agg(id), '{}') INTO taken FROM requests WHERE id = ANY(p_ids);
  w_ids := coalesce(w_ids, '{}'); k_ids := coalesce(k_ids, '{}');
  w_tg := array_fill(0::bigint, ARRAY[greatest(cardinality(w_ids), 1)]);
  w_tp := w_tg;
  k_take := array_fill(0::bigint, ARRAY[greatest(cardinality(k_ids), 1)]);

  FOR i IN 1..n LOOP
    h := p_holds[i];
    kj := array_position(k_ids, p_keys[i]);
    wj := array_position(w_ids, p_accounts[i]);
    g := 0; p := 0;
    IF h IS NULL OR h < 0 THEN
      o_result := o_result || 'invalid'::text; o_avail := o_avail || NULL::bigint; o_room := o_room || NULL::bigint;
    ELSIF p_ids[i] = ANY(taken) THEN
      o_result := o_result || 'duplicate'::text; o_avail := o_avail || NULL::bigint; o_room := o_room || NULL::bigint;
    ELSIF kj IS NULL OR k_acc[kj] <> p_accounts[i] THEN
      o_result := o_result || 'unknown_key'::text; o_avail := o_avail || NULL::bigint; o_room := o_room || NULL::bigint;
    ELSIF k_limit[kj] IS NOT NULL AND k_used[kj] + h > k_limit[kj] THEN
      lim := k_limit[kj];
      o_result := o_result || 'key_limit'::text;
      o_avail := o_avail || NULL::bigint;
      o_room := o_room || greatest(lim - k_used[kj], 0);
    ELSIF wj IS NULL OR w_grant[wj] + w_payg[wj] < h THEN
      o_result := o_result || 'insufficient'::text;
      o_avail := o_avail || (CASE WHEN wj IS NULL THEN 0 ELSE w_grant[wj] + w_payg[wj] END);
      o_room := o_room || NULL::bigint;
    ELSE
      -- Grant first, then pay-as-you-go; the hold remembers the split.
      g := least(w_grant[wj], h);
      p := h - g;
      w_grant[wj] := w_grant[wj] - g;
      w_payg[wj] := w_payg[wj] - p;
      w_tg[wj] := w_tg[wj] + g;
      w_tp[wj] := w_tp[wj] + p;
      k_used[kj] := k_used[kj] + h;
      k_take[kj] := k_take[kj] + h;
      taken := taken || p_ids[i];
      s_i := s_i || i; s_g := s_g || g; s_p := s_p || p; s_period := s_period || w_period[wj];
      o_result := o_result || 'ok'::text; o_avail := o_avail || NULL::bigint; o_room := o_room || NULL::bigint;
    END IF;
    o_g := o_g || g; o_p := o_p || p;
  END LOOP;

  IF cardinality(s_i) > 0 THEN
    UPDATE wallets w
       SET grant_ink = w.grant_ink - d.g, payg_ink = w.payg_ink - d.p,
           held_grant_ink = w.held_grant_ink + d.g, held_payg_ink = w.held_payg_ink + d.p
      FROM unnest(w_ids, w_tg, w_tp) AS d(account_id, g, p)
     WHERE w.account_id = d.account_id AND d.g + d.p > 0;
    UPDATE api_keys k SET ink_reserved = k.ink_reserved + d.t
      FROM unnest(k_ids, k_take) AS d(id, t)
     WHERE k.id = d.id AND d.t > 0;
    INSERT INTO requests (id, account_id, key_id, product, model, hold_state, status,
                          hold_ink, hold_grant_ink, hold_payg_ink, grant_period, created_at)
    SELECT p_ids[s.i], p_accounts[s.i], p_keys[s.i], p_products[s.i], p_models[s.i], 'open', 'running',
           p_holds[s.i], s.g, s.p, s.period, p_now
      FROM unnest(s_i, s_g, s_p, s_period) AS s(i, g, p, period);
    INSERT INTO ledger_journal (at, kind, account_id, key_id, request_id, amount_ink,
                                grant_ink, payg_ink, held_grant_ink, held_payg_ink)
    SELECT p_now, 'reserve', p_accounts[s.i], p_keys[s.i], p_ids[s.i], p_holds[s.i], -s.g, -s.p, s.g, s.p
      FROM unnest(s_i, s_g, s_p) AS s(i, g, p);
  END IF;

  RETURN QUERY SELECT o.ord::integer, o.r, o.g, o.p, o.a, o.k
    FROM unnest(o_result, o_g, o_p, o_avail, o_room) WITH ORDINALITY AS o(r, g, p, a, k, ord);
END
$fn$;

-- Resolve a batch of holds: settle (charge min(charge, hold), grant first out of the hold, the rest
-- back to the pools it came from), release / refund (all back), reconcile (settle from a vendor
-- usage record; charge 0 releases). Each hold resolves at most once: the request rows are locked
-- first, only an open hold is resolved, and the UPDATE re-checks hold_state = 'open'. A second
-- resolver, in this batch or another transaction, gets 'already_resolved'.
-- If the hold's grant part came from an earlier period (a roll-over happened while it was open),
-- the unused grant part lapses into expired_ink instead of topping up the new period's grant.
-- result per item: ok | already_resolved | unknown_request
CREATE FUNCTION ledger_resolve(
  p_ids text[], p_kinds text[], p_charges bigint[], p_usage jsonb[], p_vendor_ids text[], p_reasons text[], p_now timestamptz,
  p_lock_timeout_ms integer)
RETURNS TABLE (item integer, result text, charged_total_ink bigint, released_total_ink bigint, expired_total_ink bigint, held_total_ink bigint)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  n integer := coalesce(cardinality(p_ids), 0);
  q_ids text[]; q_acc text[]; q_key text[]; q_hold bigint[]; q_hg bigint[]; q_hp bigint[]; q_period integer[]; q_open boolean[];
  open_acc text[]; open_key text[];
  w_ids text[]; w_period integer[];
  s_i integer[] := '{}'; s_j integer[] := '{}'; s_state text[] := '{}';
  s_c bigint[] := '{}'; s_cg bigint[] := '{}'; s_cp bigint[] := '{}'; s_bg bigint[] := '{}'; s_bp bigint[] := '{}'; s_ex bigint[] := '{}';
  o_result text[] := '{}'; o_c bigint[] := '{}'; o_rel bigint[] := '{}'; o_ex bigint[] := '{}'; o_hold bigint[] := '{}';
  i integer; j integer; wj integer; c bigint; cg bigint; cp bigint; bg bigint; bp bigint; ex bigint; st text; cnt integer;
BEGIN
  IF n = 0 THEN RETURN; END IF;
  -- A batch waits less for a wedged row than the session default, so that after it fails the
  -- items can be retried one by one and the healthy ones still answer within the usual budget.
  IF p_lock_timeout_ms IS NOT NULL THEN PERFORM set_config('lock_timeout', p_lock_timeout_ms::text, true); END IF;
  SELECT array_agg(x.id), array_agg(x.account_id), array_agg(x.key_id), array_agg(x.hold_ink),
         array_agg(x.hold_grant_ink), array_agg(x.hold_payg_ink), array_agg(x.grant_period), array_agg(x.hold_state = 'open'),
         array_agg(x.account_id) FILTER (WHERE x.hold_state = 'open'), array_agg(x.key_id) FILTER (WHERE x.hold_state = 'open')
    INTO q_ids, q_acc, q_key, q_hold, q_hg, q_hp, q_period, q_open, open_acc, open_key
    FROM (SELECT id, account_id, key_id, hold_ink, hold_grant_ink, hold_payg_ink, grant_period, hold_state
            FROM requests WHERE id = ANY(p_ids) ORDER BY id FOR UPDATE) x;
  q_ids := coalesce(q_ids, '{}');
  SELECT array_agg(x.account_id), array_agg(x.grant_period) INTO w_ids, w_period
    FROM (SELECT account_id, grant_period FROM wallets WHERE account_id = ANY(open_acc) ORDER BY account_id FOR UPDATE) x;
  w_ids := coalesce(w_ids, '{}');
  SELECT count(*) INTO cnt FROM (SELECT id FROM api_keys WHERE id = ANY(open_key) ORDER BY id FOR UPDATE) x;

  FOR i IN 1..n LOOP
    j := array_position(q_ids, p_ids[i]);
    IF j IS NULL THEN
      o_result := o_result || 'unknown_request'::text;
      o_c := o_c || NULL::bigint; o_rel := o_rel || NULL::bigint; o_ex := o_ex || NULL::bigint; o_hold := o_hold || NULL::bigint;
    ELSIF NOT q_open[j] THEN
      o_result := o_result || 'already_resolved'::text;
      o_c := o_c || NULL::bigint; o_rel := o_rel || NULL::bigint; o_ex := o_ex || NULL::bigint; o_hold := o_hold || q_hold[j];
    ELSE
      q_open[j] := false; -- a second resolver of the same hold in this batch loses
      IF p_kinds[i] IN ('settle', 'reconcile') THEN
        c := least(greatest(coalesce(p_charges[i], 0), 0), q_hold[j]);
      ELSE
        c := 0;
      END IF;
      cg := least(c, q_hg[j]);
      cp := c - cg;
      bg := q_hg[j] - cg;
      bp := q_hp[j] - cp;
      wj := array_position(w_ids, q_acc[j]);
      IF wj IS NOT NULL AND w_period[wj] <> q_period[j] THEN
        ex := bg; bg := 0;
      ELSE
        ex := 0;
      END IF;
      st := CASE p_kinds[i]
              WHEN 'settle' THEN 'settled' WHEN 'release' THEN 'released' WHEN 'refund' THEN 'refunded'
              ELSE CASE WHEN c > 0 THEN 'settled' ELSE 'released' END END;
      s_i := s_i || i; s_j := s_j || j; s_state := s_state || st;
      s_c := s_c || c; s_cg := s_cg || cg; s_cp := s_cp || cp; s_bg := s_bg || bg; s_bp := s_bp || bp; s_ex := s_ex || ex;
      o_result := o_result || 'ok'::text;
      o_c := o_c || c; o_rel := o_rel || (bg + bp); o_ex := o_ex || ex; o_hold := o_hold || q_hold[j];
    END IF;
  END LOOP;

  IF cardinality(s_i) > 0 THEN
    UPDATE requests r
       SET hold_state = s.st, status = s.st, charged_ink = s.c, charged_grant_ink = s.cg, charged_payg_ink = s.cp,
           expired_ink = s.ex, resolved_at = p_now,
           usage = coalesce(p_usage[s.i], r.usage),
           vendor_request_id = coalesce(p_vendor_ids[s.i], r.vendor_request_id),
           reason = coalesce(p_reasons[s.i], r.reason)
      FROM unnest(s_i, s_state, s_c, s_cg, s_cp, s_ex) AS s(i, st, c, cg, cp, ex)
     WHERE r.id = p_ids[s.i] AND r.hold_state = 'open';
    GET DIAGNOSTICS cnt = ROW_COUNT;
    IF cnt <> cardinality(s_i) THEN
      RAISE EXCEPTION 'ledger_resolve: % holds to resolve, % were open', cardinality(s_i), cnt;
    END IF;
    UPDATE wallets w
       SET grant_ink = w.grant_ink + d.bg, payg_ink = w.payg_ink + d.bp,
           held_grant_ink = w.held_grant_ink - d.hg, held_payg_ink = w.held_payg_ink - d.hp,
           charged_ink = w.charged_ink + d.c, expired_ink = w.expired_ink + d.ex
      FROM (SELECT q_acc[s.j] AS account_id, sum(s.bg) AS bg, sum(s.bp) AS bp, sum(q_hg[s.j]) AS hg, sum(q_hp[s.j]) AS hp,
                   sum(s.c) AS c, sum(s.ex) AS ex
              FROM unnest(s_j, s_c, s_bg, s_bp, s_ex) AS s(j, c, bg, bp, ex) GROUP BY 1) d
     WHERE w.account_id = d.account_id;
    UPDATE api_keys k SET ink_reserved = k.ink_reserved - d.h, ink_charged = k.ink_charged + d.c
      FROM (SELECT q_key[s.j] AS id, sum(q_hold[s.j]) AS h, sum(s.c) AS c
              FROM unnest(s_j, s_c) AS s(j, c) GROUP BY 1) d
     WHERE k.id = d.id;
    INSERT INTO ledger_journal (at, kind, account_id, key_id, request_id, amount_ink, grant_ink, payg_ink,
                                held_grant_ink, held_payg_ink, charged_ink, expired_ink, note)
    SELECT p_now, p_kinds[s.i], q_acc[s.j], q_key[s.j], p_ids[s.i], s.c, s.bg, s.bp, -q_hg[s.j], -q_hp[s.j], s.c, s.ex,
           p_reasons[s.i]
      FROM unnest(s_i, s_j, s_c, s_bg, s_bp, s_ex) AS s(i, j, c, bg, bp, ex);
  END IF;

  RETURN QUERY SELECT o.ord::integer, o.r, o.c, o.rel, o.ex, o.h
    FROM unnest(o_result, o_c, o_rel, o_ex, o_hold) WITH ORDINALITY AS o(r, c, rel, ex, h, ord);
END
$fn$;

-- One reserve, the common case at low load: the same rules as ledger_reserve in two statements.
-- Statement 1 locks the wallet and the key together (wallet first: FOR UPDATE OF w, k locks in
-- that order) and returns their latest committed values. Statement 2 writes; it runs on a fresh
-- snapshot taken after the locks were granted, so it sees exactly what statement 1 saw and nobody
-- can change it in between. (A single statement that locked in one CTE and updated in another
-- was tried and lost updates under concurrency: the UPDATE worked from the statement's older
-- snapshot. Keep the lock and the write in separate statements.)
CREATE FUNCTION ledger_reserve_one(
  p_id text, p_account text, p_key text, p_product text, p_model text, p_hold bigint, p_now timestamptz)
RETURNS TABLE (item integer, result text, take_grant_ink bigint, take_payg_ink bigint, available_ink bigint, key_room_ink bigint)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  v record;
  g bigint;
BEGIN
  item := 1; take_grant_ink := 0; take_payg_ink := 0; available_ink := NULL; key_room_ink := NULL;
  IF p_hold IS NULL OR p_hold < 0 THEN
    result := 'invalid'; RETURN NEXT; RETURN;
  END IF;
  SELECT w.grant_ink, w.payg_ink, w.grant_period, k.ink_limit, k.ink_charged + k.ink_reserved AS used INTO v
    FROM wallets w JOIN api_keys k ON k.account_id = w.account_id
   WHERE w.account_id = p_account AND k.id = p_key
     FOR UPDATE OF w, k;
  IF NOT FOUND THEN
    IF EXISTS (SELECT 1 FROM api_keys WHERE id = p_key AND account_id = p_account) THEN
      result := 'insufficient'; available_ink := 0; -- no wallet
    ELSE
      result := 'unknown_key';
    END IF;
    RETURN NEXT; RETURN;
  END IF;
  IF v.ink_limit IS NOT NULL AND v.used + p_hold > v.ink_limit THEN
    result := 'key_limit'; key_room_ink := greatest(v.ink_limit - v.used, 0); RETURN NEXT; RETURN;
  END IF;
  IF v.grant_ink + v.payg_ink < p_hold THEN
    result := 'insufficient'; available_ink := v.grant_ink + v.payg_ink; RETURN NEXT; RETURN;
  END IF;
  IF EXISTS (SELECT 1 FROM requests WHERE id = p_id) THEN
    result := 'duplicate'; RETURN NEXT; RETURN;
  END IF;
  g := least(v.grant_ink, p_hold);
  WITH uw AS (
    UPDATE wallets SET grant_ink = grant_ink - g, payg_ink = payg_ink - (p_hold - g),
                       held_grant_ink = held_grant_ink + g, held_payg_ink = held_payg_ink + (p_hold - g)
     WHERE account_id = p_account
  ), uk AS (
    UPDATE api_keys SET ink_reserved = ink_reserved + p_hold WHERE id = p_key
  ), ir AS (
    INSERT INTO requests (id, account_id, key_id, product, model, hold_state, status,
                          hold_ink, hold_grant_ink, hold_payg_ink, grant_period, created_at)
    VALUES (p_id, p_account, p_key, p_product, p_model, 'open', 'running', p_hold, g, p_hold - g, v.grant_period, p_now)
  )
  INSERT INTO ledger_journal (at, kind, account_id, key_id, request_id, amount_ink, grant_ink, payg_ink, held_grant_ink, held_payg_ink)
  VALUES (p_now, 'reserve', p_account, p_key, p_id, p_hold, -g, -(p_hold - g), g, p_hold - g);
  result := 'ok'; take_grant_ink := g; take_payg_ink := p_hold - g;
  RETURN NEXT;
END
$fn$;

-- One resolution: the same rules as ledger_resolve, lock then write, as ledger_reserve_one.
-- The request, its wallet and its key are locked in the global order (request, wallet, key).
CREATE FUNCTION ledger_resolve_one(
  p_id text, p_kind text, p_charge bigint, p_usage jsonb, p_vendor_id text, p_reason text, p_now timestamptz)
RETURNS TABLE (item integer, result text, charged_total_ink bigint, released_total_ink bigint, expired_total_ink bigint, held_total_ink bigint)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  v record;
  c bigint; cg bigint; cp bigint; bg bigint; bp bigint; ex bigint; st text; cnt integer;
BEGIN
  item := 1;
  SELECT q.account_id, q.key_id, q.hold_ink, q.hold_grant_ink AS hg, q.hold_payg_ink AS hp, q.hold_state,
         q.grant_period <> w.grant_period AS lapsed INTO v
    FROM requests q JOIN wallets w ON w.account_id = q.account_id JOIN api_keys k ON k.id = q.key_id
   WHERE q.id = p_id
     FOR UPDATE OF q, w, k;
  IF NOT FOUND THEN
    result := 'unknown_request'; RETURN NEXT; RETURN;
  END IF;
  held_total_ink := v.hold_ink;
  IF v.hold_state <> 'open' THEN
    result := 'already_resolved'; RETURN NEXT; RETURN;
  END IF;
  IF p_kind IN ('settle', 'reconcile') THEN c := least(greatest(coalesce(p_charge, 0), 0), v.hold_ink); ELSE c := 0; END IF;
  cg := least(c, v.hg);
  cp := c - cg;
  bg := v.hg - cg;
  bp := v.hp - cp;
  IF v.lapsed THEN ex := bg; bg := 0; ELSE ex := 0; END IF;
  st := CASE p_kind WHEN 'settle' THEN 'settled' WHEN 'release' THEN 'released' WHEN 'refund' THEN 'refunded'
                    ELSE CASE WHEN c > 0 THEN 'settled' ELSE 'released' END END;
  WITH uq AS (
    UPDATE requests
       SET hold_state = st, status = st, charged_ink = c, charged_grant_ink = cg, charged_payg_ink = cp,
           expired_ink = ex, resolved_at = p_now,
           usage = coalesce(p_usage, usage),
           vendor_request_id = coalesce(p_vendor_id, vendor_request_id),
           reason = coalesce(p_reason, reason)
     WHERE id = p_id AND hold_state = 'open'
    RETURNING id
  ), uw AS (
    UPDATE wallets
       SET grant_ink = grant_ink + bg, payg_ink = payg_ink + bp,
           held_grant_ink = held_grant_ink - v.hg, held_payg_ink = held_payg_ink - v.hp,
           charged_ink = charged_ink + c, expired_ink = expired_ink + ex
     WHERE account_id = v.account_id AND EXISTS (SELECT 1 FROM uq)
  ), uk AS (
    UPDATE api_keys SET ink_reserved = ink_reserved - v.hold_ink, ink_charged = ink_charged + c
     WHERE id = v.key_id AND EXISTS (SELECT 1 FROM uq)
  ), ij AS (
    INSERT INTO ledger_journal (at, kind, account_id, key_id, request_id, amount_ink, grant_ink, payg_ink,
                                held_grant_ink, held_payg_ink, charged_ink, expired_ink, note)
    SELECT p_now, p_kind, v.account_id, v.key_id, uq.id, c, bg, bp, -v.hg, -v.hp, c, ex, p_reason FROM uq
  )
  SELECT count(*) INTO cnt FROM uq;
  IF cnt <> 1 THEN
    RAISE EXCEPTION 'ledger_resolve_one: % was locked open but not resolved', p_id;
  END IF;
  result := 'ok'; charged_total_ink := c; released_total_ink := bg + bp; expired_total_ink := ex;
  RETURN NEXT;
END
$fn$;
