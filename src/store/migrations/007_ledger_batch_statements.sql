-- The batch moves with fewer statements: the fixed cost of a batch is what a busy account pays.
--
-- Why: bench/pg-steps.ts puts a reserve batch at about 1.2 ms of Postgres work plus about 60 µs per
-- item, a resolve batch at about 1.0 ms plus 60 µs per item (2-core VM), and under the saturation
-- bench batches carry about 7 items, so the fixed part is most of the cost. Every statement a
-- PL/pgSQL function runs pays executor start-up and shut-down (and, for a write, reading the
-- table's CHECK expressions back from text), so:
-- - ledger_reserve no longer wraps ledger_reserve_any_key (migration 003): the key's liveness is
--   read in the statement that already locks the keys, as ledger_reserve_one does; an item whose
--   key is revoked or expired answers 'key_not_live' as before. One function call and one
--   statement fewer.
-- - The four writes of each batch function (wallets, keys, requests, journal) are one statement
--   with data-modifying CTEs, as the lone functions already do. The rows were locked by the
--   earlier statements of the same function, and this statement's snapshot is taken after the
--   locks were granted, so it writes exactly what was checked. Three statements fewer per batch.
-- The rules, results and lock order are those of 002 and 003, unchanged. The planner settings of
-- 004 and 006 are part of the definitions now.
-- Measured (bench/pg-steps.ts, five alternated runs each, medians of Postgres CPU per item): reserve
-- batches of 10 157 vs 163 µs, of 30 87 vs 94 µs; settle batches 160 vs 163 and 100 vs 101 µs. A
-- few per cent, inside this VM's run-to-run noise: most of a batch's fixed cost is elsewhere (the
-- commit, the socket, the function call), not in statement start-up as expected. Kept because
-- it is no slower and one function is simpler to follow than a wrapper around another.

DROP FUNCTION ledger_reserve(text[], text[], text[], text[], text[], bigint[], timestamptz, integer);
DROP FUNCTION ledger_reserve_any_key(text[], text[], text[], text[], text[], bigint[], timestamptz, integer);

CREATE FUNCTION ledger_reserve(
  p_ids text[], p_accounts text[], p_keys text[], p_products text[], p_models text[], p_holds bigint[], p_now timestamptz,
  p_lock_timeout_ms integer)
RETURNS TABLE (item integer, result text, take_grant_ink bigint, take_payg_ink bigint, available_ink bigint, key_room_ink bigint)
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
  n integer := coalesce(cardinality(p_ids), 0);
  w_ids text[]; w_grant bigint[]; w_payg bigint[]; w_period integer[]; w_tg bigint[]; w_tp bigint[];
  k_ids text[]; k_acc text[]; k_limit bigint[]; k_used bigint[]; k_take bigint[]; k_live boolean[];
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
  SELECT array_agg(x.id), array_agg(x.account_id), array_agg(x.ink_limit), array_agg(x.ink_charged + x.ink_reserved),
         array_agg(x.revoked_at IS NULL AND (x.expires_at IS NULL OR x.expires_at > p_now))
    INTO k_ids, k_acc, k_limit, k_used, k_live
    FROM (SELECT id, account_id, ink_limit, ink_charged, ink_reserved, revoked_at, expires_at FROM api_keys
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
    ELSIF NOT k_live[kj] THEN
      o_result := o_result || 'key_not_live'::text; o_avail := o_avail || NULL::bigint; o_room := o_room || NULL::bigint;
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
    -- One statement for the four writes (the rows are locked above, and this statement's snapshot
    -- is taken after those locks were granted, so it sees exactly what was checked).
    WITH uw AS (
      UPDATE wallets w
         SET grant_ink = w.grant_ink - d.g, payg_ink = w.payg_ink - d.p,
             held_grant_ink = w.held_grant_ink + d.g, held_payg_ink = w.held_payg_ink + d.p
        FROM unnest(w_ids, w_tg, w_tp) AS d(account_id, g, p)
       WHERE w.account_id = d.account_id AND d.g + d.p > 0
    ), uk AS (
      UPDATE api_keys k SET ink_reserved = k.ink_reserved + d.t
        FROM unnest(k_ids, k_take) AS d(id, t)
       WHERE k.id = d.id AND d.t > 0
    ), ir AS (
      INSERT INTO requests (id, account_id, key_id, product, model, hold_state, status,
                            hold_ink, hold_grant_ink, hold_payg_ink, grant_period, created_at)
      SELECT p_ids[s.i], p_accounts[s.i], p_keys[s.i], p_products[s.i], p_models[s.i], 'open', 'running',
             p_holds[s.i], s.g, s.p, s.period, p_now
        FROM unnest(s_i, s_g, s_p, s_period) AS s(i, g, p, period)
    )
    INSERT INTO ledger_journal (at, kind, account_id, key_id, request_id, amount_ink,
                                grant_ink, payg_ink, held_grant_ink, held_payg_ink)
    SELECT p_now, 'reserve', p_accounts[s.i], p_keys[s.i], p_ids[s.i], p_holds[s.i], -s.g, -s.p, s.g, s.p
      FROM unnest(s_i, s_g, s_p) AS s(i, g, p);
  END IF;

  RETURN QUERY SELECT o.ord::integer, o.r, o.g, o.p, o.a, o.k
    FROM unnest(o_result, o_g, o_p, o_avail, o_room) WITH ORDINALITY AS o(r, g, p, a, k, ord);
END
$fn$;

CREATE OR REPLACE FUNCTION ledger_resolve(
  p_ids text[], p_kinds text[], p_charges bigint[], p_usage jsonb[], p_vendor_ids text[], p_reasons text[], p_now timestamptz,
  p_lock_timeout_ms integer)
RETURNS TABLE (item integer, result text, charged_total_ink bigint, released_total_ink bigint, expired_total_ink bigint, held_total_ink bigint)
LANGUAGE plpgsql
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $fn$
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
    -- One statement for the four writes (every row was locked above); the count checks that each
    -- hold found open when it was locked was the one resolved.
    WITH uq AS (
      UPDATE requests r
         SET hold_state = s.st, status = s.st, charged_ink = s.c, charged_grant_ink = s.cg, charged_payg_ink = s.cp,
             expired_ink = s.ex, resolved_at = p_now,
             usage = coalesce(p_usage[s.i], r.usage),
             vendor_request_id = coalesce(p_vendor_ids[s.i], r.vendor_request_id),
             reason = coalesce(p_reasons[s.i], r.reason)
        FROM unnest(s_i, s_state, s_c, s_cg, s_cp, s_ex) AS s(i, st, c, cg, cp, ex)
       WHERE r.id = p_ids[s.i] AND r.hold_state = 'open'
      RETURNING 1
    ), uw AS (
      UPDATE wallets w
         SET grant_ink = w.grant_ink + d.bg, payg_ink = w.payg_ink + d.bp,
             held_grant_ink = w.held_grant_ink - d.hg, held_payg_ink = w.held_payg_ink - d.hp,
             charged_ink = w.charged_ink + d.c, expired_ink = w.expired_ink + d.ex
        FROM (SELECT q_acc[s.j] AS account_id, sum(s.bg) AS bg, sum(s.bp) AS bp, sum(q_hg[s.j]) AS hg, sum(q_hp[s.j]) AS hp,
                     sum(s.c) AS c, sum(s.ex) AS ex
                FROM unnest(s_j, s_c, s_bg, s_bp, s_ex) AS s(j, c, bg, bp, ex) GROUP BY 1) d
       WHERE w.account_id = d.account_id
    ), uk AS (
      UPDATE api_keys k SET ink_reserved = k.ink_reserved - d.h, ink_charged = k.ink_charged + d.c
        FROM (SELECT q_key[s.j] AS id, sum(q_hold[s.j]) AS h, sum(s.c) AS c
                FROM unnest(s_j, s_c) AS s(j, c) GROUP BY 1) d
       WHERE k.id = d.id
    ), ij AS (
      INSERT INTO ledger_journal (at, kind, account_id, key_id, request_id, amount_ink, grant_ink, payg_ink,
                                  held_grant_ink, held_payg_ink, charged_ink, expired_ink, note)
      SELECT p_now, p_kinds[s.i], q_acc[s.j], q_key[s.j], p_ids[s.i], s.c, s.bg, s.bp, -q_hg[s.j], -q_hp[s.j], s.c, s.ex,
             p_reasons[s.i]
        FROM unnest(s_i, s_j, s_c, s_bg, s_bp, s_ex) AS s(i, j, c, bg, bp, ex)
    )
    SELECT count(*) INTO cnt FROM uq;
    IF cnt <> cardinality(s_i) THEN
      RAISE EXCEPTION 'ledger_resolve: % holds to resolve, % were open', cardinality(s_i), cnt;
    END IF;
  END IF;

  RETURN QUERY SELECT o.ord::integer, o.r, o.c, o.rel, o.ex, o.h
    FROM unnest(o_result, o_c, o_rel, o_ex, o_hold) WITH ORDINALITY AS o(r, c, rel, ex, h, ord);
END
$fn$;
