-- One reserve, the common case at low load: the same rules as ledger_reserve in two statements.
-- Statement 1 locks the wallet and the key together (wallet first: FOR UPDATE OF w, k locks in
-- that order) and returns their latest committed values. Statement 2 writes; it runs on a fresh
-- snapshot taken after the locks were granted, so it sees exactly what statement 1 saw and nobody
-- can change it in between. (A single statement that locked in one CTE and updated in another
-- was tried and lost updates under concurrency: the UPDATE worked from the statement's older
-- snapshot. Keep the lock and the write in separate statements.)
-- A key's cap is spent by its charges, its durable holds and its leases together
-- (ink_charged + ink_reserved + ink_leased).
CREATE OR REPLACE FUNCTION ledger_reserve_one(p_id text, p_account text, p_key text, p_product text, p_model text, p_hold bigint, p_now timestamp with time zone)
 RETURNS TABLE(item integer, result text, take_grant_ink bigint, take_payg_ink bigint, available_ink bigint, key_room_ink bigint)
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
#variable_conflict use_column
DECLARE
  v record;
  g bigint;
BEGIN
  item := 1; take_grant_ink := 0; take_payg_ink := 0; available_ink := NULL; key_room_ink := NULL;
  IF p_hold IS NULL OR p_hold < 0 THEN
    result := 'invalid'; RETURN NEXT; RETURN;
  END IF;
  SELECT w.grant_ink, w.payg_ink, w.grant_period, k.ink_limit, k.ink_charged + k.ink_reserved + k.ink_leased AS used,
         k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > p_now) AS live INTO v
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
  IF NOT v.live THEN
    result := 'key_not_live'; RETURN NEXT; RETURN;
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
$function$;
