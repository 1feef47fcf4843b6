-- One resolution: the same rules as ledger_resolve, lock then write, as ledger_reserve_one.
-- The request, its wallet and its key are locked in the global order (request, wallet, key).
CREATE OR REPLACE FUNCTION ledger_resolve_one(p_id text, p_kind text, p_charge bigint, p_usage jsonb, p_vendor_id text, p_reason text, p_now timestamp with time zone)
 RETURNS TABLE(item integer, result text, charged_total_ink bigint, released_total_ink bigint, expired_total_ink bigint, held_total_ink bigint)
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
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
$function$;
