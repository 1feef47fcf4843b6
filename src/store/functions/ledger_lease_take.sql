-- Takes a new lease (p_lease NULL) or refills one (p_lease). Size: p_want, but at most
-- p_wallet_permille of the unleased wallet and p_key_permille of the key's headroom, and the
-- unleased wallet keeps at least p_floor; below p_min (the hold waiting for it) the answer is
-- 'edge': the caller uses the exact path. Results: ok | edge | key_not_live | unknown_key |
-- lease_gone (refill of a lease that is no longer this instance's, or from an older period) |
-- stale_instance (this epoch was superseded).
CREATE OR REPLACE FUNCTION ledger_lease_take(p_lease bigint, p_account text, p_key text, p_instance text, p_epoch bigint, p_min bigint, p_want bigint, p_floor bigint, p_wallet_permille integer, p_key_permille integer, p_ttl_ms integer, p_now timestamp with time zone)
 RETURNS TABLE(result text, lease_id bigint, take_grant_ink bigint, take_payg_ink bigint, grant_period integer, available_ink bigint, key_room_ink bigint)
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
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
$function$;
