-- Resolve a batch of holds: settle (charge min(charge, hold), grant first out of the hold, the rest
-- back to the pools it came from), release / refund (all back), reconcile (settle from a vendor
-- usage record; charge 0 releases). Each hold resolves at most once: the request rows are locked
-- first, only an open hold is resolved, and the UPDATE re-checks hold_state = 'open'. A second
-- resolver, in this batch or another transaction, gets 'already_resolved'.
-- If the hold's grant part came from an earlier period (a roll-over happened while it was open),
-- the unused grant part lapses into expired_ink instead of topping up the new period's grant.
-- result per item: ok | already_resolved | unknown_request
CREATE OR REPLACE FUNCTION ledger_resolve(p_ids text[], p_kinds text[], p_charges bigint[], p_usage jsonb[], p_vendor_ids text[], p_reasons text[], p_now timestamp with time zone, p_lock_timeout_ms integer)
 RETURNS TABLE(item integer, result text, charged_total_ink bigint, released_total_ink bigint, expired_total_ink bigint, held_total_ink bigint)
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
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
$function$;
