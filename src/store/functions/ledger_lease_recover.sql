-- Recovers one live lease that its owner can no longer use (expired, or its instance id restarted):
-- every flushed hold still in it becomes a durable open hold (usage_unknown: the vendor's record
-- reconciles it), the rest goes back to the wallet, and the lease ends as 'recovered'.
-- Returns the number of holds kept, or NULL when the lease was not live any more.
CREATE OR REPLACE FUNCTION ledger_lease_recover(p_lease bigint, p_now timestamp with time zone, p_reason text)
 RETURNS integer
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
AS $function$
DECLARE
  l record;
  w record;
  hg bigint; hp bigint; n integer; ex bigint := 0; bg bigint;
BEGIN
  SELECT account_id, key_id INTO l FROM leases WHERE id = p_lease;
  IF NOT FOUND THEN RETURN NULL; END IF;
  SELECT grant_period INTO w FROM wallets WHERE account_id = l.account_id FOR UPDATE;
  PERFORM 1 FROM api_keys WHERE id = l.key_id FOR UPDATE;
  SELECT * INTO l FROM leases WHERE id = p_lease FOR UPDATE;
  IF l.state <> 'live' THEN RETURN NULL; END IF;
  WITH moved AS (
    UPDATE requests SET leased = false, status = 'usage_unknown', reason = coalesce(reason, p_reason)
     WHERE lease_id = p_lease AND leased
    RETURNING id, hold_ink, hold_grant_ink, hold_payg_ink
  ), j AS (
    INSERT INTO ledger_journal (at, kind, account_id, key_id, request_id, lease_id, amount_ink,
                                leased_grant_ink, leased_payg_ink, held_grant_ink, held_payg_ink, note)
    SELECT p_now, 'lease_hold', l.account_id, l.key_id, m.id, p_lease, m.hold_ink,
           -m.hold_grant_ink, -m.hold_payg_ink, m.hold_grant_ink, m.hold_payg_ink, p_reason
      FROM moved m
  )
  SELECT coalesce(sum(hold_grant_ink), 0), coalesce(sum(hold_payg_ink), 0), count(*) INTO hg, hp, n FROM moved;
  IF hg > l.grant_ink OR hp > l.payg_ink THEN
    RAISE EXCEPTION 'ledger_lease_recover: lease % holds % + % but its open holds need % + %', p_lease, l.grant_ink, l.payg_ink, hg, hp;
  END IF;
  bg := l.grant_ink - hg;
  IF l.grant_period <> w.grant_period THEN ex := bg; bg := 0; END IF;
  UPDATE wallets SET grant_ink = grant_ink + bg, payg_ink = payg_ink + (l.payg_ink - hp), expired_ink = expired_ink + ex,
                     held_grant_ink = held_grant_ink + hg, held_payg_ink = held_payg_ink + hp,
                     leased_grant_ink = leased_grant_ink - l.grant_ink, leased_payg_ink = leased_payg_ink - l.payg_ink
   WHERE account_id = l.account_id;
  UPDATE api_keys SET ink_leased = ink_leased - (l.grant_ink + l.payg_ink), ink_reserved = ink_reserved + hg + hp
   WHERE id = l.key_id;
  UPDATE leases SET grant_ink = 0, payg_ink = 0, state = 'recovered', closed_at = p_now, drained_at = coalesce(drained_at, p_now)
   WHERE id = p_lease;
  IF l.grant_ink + l.payg_ink - hg - hp > 0 THEN
    INSERT INTO ledger_journal (at, kind, account_id, key_id, lease_id, amount_ink, grant_ink, payg_ink, expired_ink,
                                leased_grant_ink, leased_payg_ink, note)
    VALUES (p_now, 'lease_return', l.account_id, l.key_id, p_lease, l.grant_ink + l.payg_ink - hg - hp, bg, l.payg_ink - hp, ex,
            -(l.grant_ink - hg), -(l.payg_ink - hp), 'lease recovered');
  END IF;
  RETURN n;
END
$function$;
