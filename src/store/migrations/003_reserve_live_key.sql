-- Reserve refuses a key that is no longer live (revoked, or past its expiry at the move's time).
--
-- Why here: the text lanes keep a short in-process cache of authenticated keys (src/auth), so the
-- hot path does not pay a key lookup per request. Revocation must still refuse the very next
-- request (spec: "refuses new calls at once"): the reserve, which every billed request makes
-- before anything reaches a vendor, re-checks the key in the same round trip and answers
-- 'key_not_live', which the gateway turns into 401 invalid_api_key with no hold taken.
--
-- The batch function keeps 002's body under a new name and is wrapped (the check is one statement
-- per batch); the lone reserve, where a second statement would be felt, is rewritten with the
-- check folded into its locking read.

ALTER FUNCTION ledger_reserve(text[], text[], text[], text[], text[], bigint[], timestamptz, integer) RENAME TO ledger_reserve_any_key;

-- The lone reserve (the common case at low load) checks liveness in the statement that already
-- locks the key: no extra statement on the hot path. Otherwise 002's body, unchanged.
CREATE OR REPLACE FUNCTION ledger_reserve_one(
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
  SELECT w.grant_ink, w.payg_ink, w.grant_period, k.ink_limit, k.ink_charged + k.ink_reserved AS used,
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
$fn$;

-- The batch: items whose key is not live answer 'key_not_live'; the others go to the 002 batch
-- function together, and its rows are put back at their original positions.
CREATE FUNCTION ledger_reserve(
  p_ids text[], p_accounts text[], p_keys text[], p_products text[], p_models text[], p_holds bigint[], p_now timestamptz,
  p_lock_timeout_ms integer)
RETURNS TABLE (item integer, result text, take_grant_ink bigint, take_payg_ink bigint, available_ink bigint, key_room_ink bigint)
LANGUAGE plpgsql AS $fn$
DECLARE
  dead text[];
  keep integer[];
BEGIN
  SELECT coalesce(array_agg(k.id), '{}') INTO dead
    FROM api_keys k
   WHERE k.id = ANY(p_keys) AND NOT (k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > p_now));
  IF cardinality(dead) = 0 THEN
    RETURN QUERY SELECT * FROM ledger_reserve_any_key(p_ids, p_accounts, p_keys, p_products, p_models, p_holds, p_now, p_lock_timeout_ms);
    RETURN;
  END IF;
  SELECT coalesce(array_agg(i ORDER BY i), '{}') INTO keep
    FROM generate_subscripts(p_keys, 1) AS i WHERE NOT (p_keys[i] = ANY(dead));
  RETURN QUERY
    SELECT i::integer, 'key_not_live'::text, 0::bigint, 0::bigint, NULL::bigint, NULL::bigint
      FROM generate_subscripts(p_keys, 1) AS i WHERE p_keys[i] = ANY(dead)
    UNION ALL
    SELECT keep[r.item], r.result, r.take_grant_ink, r.take_payg_ink, r.available_ink, r.key_room_ink
      FROM ledger_reserve_any_key(
             ARRAY(SELECT p_ids[j] FROM unnest(keep) WITH ORDINALITY AS u(j, o) ORDER BY o), ARRAY(SELECT p_accounts[j] FROM unnest(keep) WITH ORDINALITY AS u(j, o) ORDER BY o),
             ARRAY(SELECT p_keys[j] FROM unnest(keep) WITH ORDINALITY AS u(j, o) ORDER BY o), ARRAY(SELECT p_products[j] FROM unnest(keep) WITH ORDINALITY AS u(j, o) ORDER BY o),
             ARRAY(SELECT p_models[j] FROM unnest(keep) WITH ORDINALITY AS u(j, o) ORDER BY o), ARRAY(SELECT p_holds[j] FROM unnest(keep) WITH ORDINALITY AS u(j, o) ORDER BY o),
             p_now, p_lock_timeout_ms) AS r
     ORDER BY 1;
END
$fn$;
