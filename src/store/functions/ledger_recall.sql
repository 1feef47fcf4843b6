-- Recalls the undrained live leases of an account (p_account) or of a key (p_key): marks them
-- (recall_at) and pauses new leases there until p_until. Returns how many were not marked yet.
-- Statements in the house lock order (wallets, keys, leases), so it never deadlocks with a take,
-- a return or a flush.
CREATE OR REPLACE FUNCTION ledger_recall(p_account text, p_key text, p_now timestamp with time zone, p_until timestamp with time zone)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
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
$function$;
