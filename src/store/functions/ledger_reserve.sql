-- Reserve a batch of holds in one statement and one commit (group commit).
-- Items are taken in array order; each gets its whole hold or nothing, never part. The wallet and
-- key rows are locked (FOR UPDATE, sorted) before they are read, so the checks below see the
-- latest committed balances and nothing can change them until this transaction commits: the
-- check and the write are one critical section, not a racy read-then-write. The table CHECKs
-- (no pool below zero, wallet_balances) are the backstop.
-- p_lock_timeout_ms: NULL keeps the session's lock_timeout.
-- result per item: ok | key_limit | insufficient | duplicate | unknown_key | key_not_live | invalid
-- key_not_live: the key is revoked or expired. A key's cap is spent by its charges, its
-- durable holds and its leases together (ink_charged + ink_reserved + ink_leased).
CREATE OR REPLACE FUNCTION ledger_reserve(p_ids text[], p_accounts text[], p_keys text[], p_products text[], p_models text[], p_holds bigint[], p_now timestamp with time zone, p_lock_timeout_ms integer)
 RETURNS TABLE(item integer, result text, take_grant_ink bigint, take_payg_ink bigint, available_ink bigint, key_room_ink bigint)
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
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
  SELECT array_agg(x.id), array_agg(x.account_id), array_agg(x.ink_limit), array_agg(x.ink_charged + x.ink_reserved + x.ink_leased),
         array_agg(x.revoked_at IS NULL AND (x.expires_at IS NULL OR x.expires_at > p_now))
    INTO k_ids, k_acc, k_limit, k_used, k_live
    FROM (SELECT id, account_id, ink_limit, ink_charged, ink_reserved, ink_leased, revoked_at, expires_at FROM api_keys
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
$function$;
