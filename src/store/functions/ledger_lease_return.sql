-- Returns spare Ink of a live lease to the wallet (grant part lapses if the period rolled since the
-- lease took it). p_close: the lease ends and gives back all it holds (the owner closes only with
-- nothing in flight and everything flushed; a hold still in the lease makes it a mismatch). p_drain: the lease was recalled and
-- takes no more holds. Results: ok | lease_gone | mismatch.
CREATE OR REPLACE FUNCTION ledger_lease_return(p_lease bigint, p_instance text, p_epoch bigint, p_grant bigint, p_payg bigint, p_close boolean, p_drain boolean, p_now timestamp with time zone)
 RETURNS TABLE(result text, expired_ink bigint, left_grant_ink bigint, left_payg_ink bigint)
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
#variable_conflict use_column
DECLARE
  l record;
  w record;
  ex bigint := 0; back bigint;
BEGIN
  expired_ink := 0;
  SELECT account_id, key_id INTO l FROM leases WHERE id = p_lease;
  IF NOT FOUND THEN result := 'lease_gone'; RETURN NEXT; RETURN; END IF;
  SELECT grant_period INTO w FROM wallets WHERE account_id = l.account_id FOR UPDATE;
  PERFORM 1 FROM api_keys WHERE id = l.key_id FOR UPDATE;
  SELECT * INTO l FROM leases WHERE id = p_lease FOR UPDATE;
  left_grant_ink := l.grant_ink; left_payg_ink := l.payg_ink;
  IF l.state <> 'live' OR l.instance_id <> p_instance OR l.epoch <> p_epoch THEN
    result := 'lease_gone'; RETURN NEXT; RETURN;
  END IF;
  IF p_grant < 0 OR p_payg < 0 OR p_grant > l.grant_ink OR p_payg > l.payg_ink
     OR (p_close AND EXISTS (SELECT 1 FROM requests WHERE lease_id = p_lease AND leased)) THEN
    result := 'mismatch'; RETURN NEXT; RETURN;
  END IF;
  -- Closing returns everything the lease holds: with nothing in flight and every record written
  -- that is the owner's spare, plus what a refill whose answer was lost (a timeout) added.
  IF p_close THEN p_grant := l.grant_ink; p_payg := l.payg_ink; END IF;
  IF l.grant_period <> w.grant_period THEN ex := p_grant; END IF;
  back := p_grant - ex;
  UPDATE wallets SET grant_ink = grant_ink + back, payg_ink = payg_ink + p_payg, expired_ink = expired_ink + ex,
                     leased_grant_ink = leased_grant_ink - p_grant, leased_payg_ink = leased_payg_ink - p_payg
   WHERE account_id = l.account_id;
  UPDATE api_keys SET ink_leased = ink_leased - (p_grant + p_payg) WHERE id = l.key_id;
  UPDATE leases SET grant_ink = grant_ink - p_grant, payg_ink = payg_ink - p_payg,
                    state = CASE WHEN p_close THEN 'returned' ELSE state END,
                    closed_at = CASE WHEN p_close THEN p_now ELSE NULL END,
                    drained_at = CASE WHEN p_drain OR p_close THEN coalesce(drained_at, p_now) ELSE drained_at END
   WHERE id = p_lease;
  IF p_grant + p_payg > 0 THEN
    INSERT INTO ledger_journal (at, kind, account_id, key_id, lease_id, amount_ink, grant_ink, payg_ink, expired_ink,
                                leased_grant_ink, leased_payg_ink, note)
    VALUES (p_now, 'lease_return', l.account_id, l.key_id, p_lease, p_grant + p_payg, back, p_payg, ex, -p_grant, -p_payg,
            CASE WHEN p_close THEN 'lease closed' ELSE 'spare returned' END);
  END IF;
  result := 'ok'; expired_ink := ex; left_grant_ink := l.grant_ink - p_grant; left_payg_ink := l.payg_ink - p_payg;
  RETURN NEXT;
END
$function$;
