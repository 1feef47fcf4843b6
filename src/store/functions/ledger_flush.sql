-- The write-behind journal's group commit: every record of a flush in one transaction, in three
-- steps: this dispatcher checks each record against its lease and takes the locks (wallets, keys,
-- then this instance's live leases, in that order, as every writer does); ledger_flush_leased
-- writes the records of those leases as one set; ledger_flush_late takes the others one by one.
-- A record is a request's start (end NULL: the hold is in flight, leased), its end
-- (settle | release | unknown) or both. Idempotent on request id: a start already written is not
-- written again, an end is applied only to a hold still in its lease, and the lease, wallet and key
-- move by exactly what the rows that changed say, so a flush retried after a lost answer moves
-- nothing twice. Per record: ok | late | deferred.
-- The batch comes as parallel arrays, one per column: one jsonb argument decoded into the same
-- arrays measured slower (docs/performance-history.md, the write-behind flush). The steps run
-- under this function's settings (no seqscan, generic plans): a called function keeps them.
CREATE OR REPLACE FUNCTION ledger_flush(p_instance text, p_epoch bigint, p_now timestamp with time zone, p_ids text[], p_accounts text[], p_keys text[], p_products text[], p_models text[], p_leases bigint[], p_holds bigint[], p_hold_grants bigint[], p_periods integer[], p_created timestamp with time zone[], p_vendor_ids text[], p_ends text[], p_charges bigint[], p_usage jsonb[], p_reasons text[], p_resolved timestamp with time zone[])
 RETURNS TABLE(item integer, result text)
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
#variable_conflict use_column
DECLARE
  n integer := coalesce(cardinality(p_ids), 0);
  ours bigint[]; r record;
BEGIN
  IF n = 0 THEN RETURN; END IF;
  -- Every record's account and key are those of the lease it names (a lease's key is of its account
  -- by lease_key_of_account): the one check of a flushed request's key, as `requests` has no
  -- foreign key to api_keys. One probe of `leases` per distinct (lease, account, key) of the batch,
  -- not per record. A record that names another key or account, or no lease at all, was forged or
  -- corrupted: the whole batch is refused as an integrity violation, which stops the instance
  -- (docs/ledger.md, Fail-stop).
  SELECT d.id, d.lease_id, d.account_id, d.key_id, l.account_id AS lease_account, l.key_id AS lease_key INTO r
    FROM (SELECT min(u.id) AS id, u.lease_id, u.account_id, u.key_id
            FROM unnest(p_ids, p_leases, p_accounts, p_keys) AS u(id, lease_id, account_id, key_id)
           GROUP BY u.lease_id, u.account_id, u.key_id) d
    LEFT JOIN leases l ON l.id = d.lease_id
   WHERE l.id IS NULL OR l.account_id IS DISTINCT FROM d.account_id OR l.key_id IS DISTINCT FROM d.key_id
   LIMIT 1;
  IF FOUND THEN
    RAISE EXCEPTION 'journal record % names account % and key %, its lease % is of account % and key %',
                    r.id, r.account_id, r.key_id, r.lease_id, r.lease_account, r.lease_key
      USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'request_key_of_lease', TABLE = 'requests';
  END IF;
  PERFORM 1 FROM (SELECT account_id FROM wallets WHERE account_id = ANY(p_accounts) ORDER BY account_id FOR UPDATE) x;
  PERFORM 1 FROM (SELECT id FROM api_keys WHERE id = ANY(p_keys) ORDER BY id FOR UPDATE) x;
  SELECT coalesce(array_agg(x.id), '{}') INTO ours
    FROM (SELECT id FROM leases WHERE id = ANY(p_leases) AND state = 'live' AND instance_id = p_instance AND epoch = p_epoch
           ORDER BY id FOR UPDATE) x;
  PERFORM ledger_flush_leased(p_now, ours, p_ids, p_accounts, p_keys, p_products, p_models, p_leases, p_holds, p_hold_grants, p_periods, p_created, p_vendor_ids, p_ends, p_charges, p_usage, p_reasons, p_resolved);
  RETURN QUERY SELECT o.ord::integer, o.r
    FROM unnest(ledger_flush_late(p_now, ours, p_ids, p_accounts, p_keys, p_products, p_models, p_leases, p_holds, p_hold_grants, p_periods, p_created, p_vendor_ids, p_ends, p_charges, p_usage, p_reasons, p_resolved)) WITH ORDINALITY AS o(r, ord);
END
$function$;
