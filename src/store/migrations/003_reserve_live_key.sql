-- Reserve refuses a key that is no longer live (revoked, or past its expiry at the move's time).
--
-- Why here: the text lanes keep a short in-process cache of authenticated keys (src/auth), so the
-- hot path does not pay a key lookup per request. Revocation must still refuse the very next
-- request (spec: "refuses new calls at once"): the reserve, which every billed request makes
-- before anything reaches a vendor, re-checks the key in the same round trip and answers
-- 'key_not_live', which the gateway turns into 401 invalid_api_key with no hold taken.
--
-- The 002 functions keep their bodies under a new name and are wrapped, so the money rules
-- live in one place.

ALTER FUNCTION ledger_reserve_one(text, text, text, text, text, bigint, timestamptz) RENAME TO ledger_reserve_one_any_key;
ALTER FUNCTION ledger_reserve(text[], text[], text[], text[], text[], bigint[], timestamptz, integer) RENAME TO ledger_reserve_any_key;

CREATE FUNCTION ledger_key_live(p_key text, p_now timestamptz) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT EXISTS (SELECT 1 FROM api_keys WHERE id = p_key AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > p_now))
$$;

CREATE FUNCTION ledger_reserve_one(
  p_id text, p_account text, p_key text, p_product text, p_model text, p_hold bigint, p_now timestamptz)
RETURNS TABLE (item integer, result text, take_grant_ink bigint, take_payg_ink bigint, available_ink bigint, key_room_ink bigint)
LANGUAGE plpgsql AS $fn$
BEGIN
  IF NOT ledger_key_live(p_key, p_now) THEN
    -- A key that does not exist at all keeps its old answer (unknown_key: a caller's bug, not a revocation).
    IF EXISTS (SELECT 1 FROM api_keys WHERE id = p_key) THEN
      RETURN QUERY SELECT 1, 'key_not_live'::text, 0::bigint, 0::bigint, NULL::bigint, NULL::bigint;
      RETURN;
    END IF;
  END IF;
  RETURN QUERY SELECT * FROM ledger_reserve_one_any_key(p_id, p_account, p_key, p_product, p_model, p_hold, p_now);
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
