-- The heartbeat: renews the live leases this instance knows (p_known) and says which of them the
-- owner must give up (recalled, key revoked or expired, period rolled). A live lease of this
-- instance and epoch that it does not know and that is older than p_orphan_ms is an orphan: a take
-- whose answer the instance never got (it timed out while Postgres was slow, then committed). It
-- is listed as 'orphan' and not renewed, so the instance recovers it (it never held anything from
-- it). No rows but one `stale`: the epoch was superseded (another start took the id) and every
-- lease of it is someone else's to recover.
CREATE OR REPLACE FUNCTION ledger_heartbeat(p_instance text, p_epoch bigint, p_ttl_ms integer, p_now timestamp with time zone, p_known bigint[], p_orphan_ms integer)
 RETURNS TABLE(lease_id bigint, give_up text)
 LANGUAGE plpgsql
AS $function$
BEGIN
  UPDATE ledger_instances SET heartbeat_at = p_now WHERE id = p_instance AND epoch = p_epoch;
  IF NOT FOUND THEN
    RETURN QUERY SELECT NULL::bigint, 'stale'::text;
    RETURN;
  END IF;
  RETURN QUERY
  WITH renewed AS (
    UPDATE leases l SET expires_at = p_now + make_interval(secs => p_ttl_ms / 1000.0)
     WHERE l.id = ANY(p_known) AND l.instance_id = p_instance AND l.epoch = p_epoch AND l.state = 'live'
    RETURNING l.id, l.key_id, l.account_id, l.recall_at, l.drained_at, l.grant_period
  )
  SELECT r.id, CASE
           WHEN NOT (k.revoked_at IS NULL AND (k.expires_at IS NULL OR k.expires_at > p_now)) THEN 'key_not_live'
           WHEN r.recall_at IS NOT NULL AND r.drained_at IS NULL THEN 'recalled'
           WHEN w.grant_period <> r.grant_period THEN 'period'
         END
    FROM renewed r JOIN api_keys k ON k.id = r.key_id JOIN wallets w ON w.account_id = r.account_id
  UNION ALL
  SELECT l.id, 'orphan'::text FROM leases l
   WHERE l.instance_id = p_instance AND l.epoch = p_epoch AND l.state = 'live' AND NOT (l.id = ANY(p_known))
     AND l.created_at < p_now - make_interval(secs => p_orphan_ms / 1000.0);
END
$function$;
