-- ledger_flush's second step: the records of this instance's live leases (`p_ours`, locked by
-- ledger_flush with the wallets and keys), written as one set. A start inserts its row (once: a
-- retried flush inserts nothing); an end updates a row still in its lease; each lease, wallet and
-- key then moves by exactly what the changed rows say: a settlement's charge leaves the lease, an
-- unknown-usage end's whole hold becomes a durable open hold. Called only by ledger_flush.
CREATE OR REPLACE FUNCTION ledger_flush_leased(p_now timestamp with time zone, p_ours bigint[], p_ids text[], p_accounts text[], p_keys text[], p_products text[], p_models text[], p_leases bigint[], p_holds bigint[], p_hold_grants bigint[], p_periods integer[], p_created timestamp with time zone[], p_vendor_ids text[], p_ends text[], p_charges bigint[], p_usage jsonb[], p_reasons text[], p_resolved timestamp with time zone[])
 RETURNS void
 LANGUAGE plpgsql
AS $function$
#variable_conflict use_column
BEGIN
  WITH rec AS (
    SELECT * FROM unnest(p_ids, p_accounts, p_keys, p_products, p_models, p_leases, p_holds, p_hold_grants, p_periods,
                         p_created, p_vendor_ids, p_ends, p_charges, p_usage, p_reasons, p_resolved)
             AS u(id, account_id, key_id, product, model, lease_id, hold, hold_g, period, created, vid, e, charge, usage, reason, resolved)
     WHERE u.lease_id = ANY(p_ours)
  ), amt AS (
    SELECT rec.*, least(greatest(coalesce(rec.charge, 0), 0), rec.hold) AS c FROM rec
  ), amt2 AS (
    SELECT amt.*, CASE WHEN amt.e = 'settle' THEN amt.c ELSE 0 END AS cc FROM amt
  ), amt3 AS (
    SELECT amt2.*, least(amt2.cc, amt2.hold_g) AS cg FROM amt2
  ), ins AS (
    INSERT INTO requests (id, account_id, key_id, product, model, hold_state, status, hold_ink, hold_grant_ink, hold_payg_ink,
                          grant_period, charged_ink, charged_grant_ink, charged_payg_ink, usage, vendor_request_id, reason,
                          created_at, resolved_at, lease_id, leased)
    SELECT a.id, a.account_id, a.key_id, a.product, a.model,
           CASE a.e WHEN 'settle' THEN 'settled' WHEN 'release' THEN 'released' ELSE 'open' END,
           CASE a.e WHEN 'settle' THEN 'settled' WHEN 'release' THEN 'released' WHEN 'unknown' THEN 'usage_unknown' ELSE 'running' END,
           a.hold, a.hold_g, a.hold - a.hold_g, a.period, a.cc, a.cg, a.cc - a.cg, a.usage, a.vid, a.reason,
           a.created, CASE WHEN a.e IN ('settle', 'release') THEN a.resolved END, a.lease_id, a.e IS NULL
      FROM amt3 a
    ON CONFLICT (id) DO NOTHING
    RETURNING id, account_id, key_id, lease_id, hold_state, status, hold_ink, hold_grant_ink, hold_payg_ink, charged_grant_ink, charged_payg_ink
  ), upd AS (
    UPDATE requests q
       SET hold_state = CASE a.e WHEN 'settle' THEN 'settled' WHEN 'release' THEN 'released' ELSE 'open' END,
           status = CASE a.e WHEN 'settle' THEN 'settled' WHEN 'release' THEN 'released' ELSE 'usage_unknown' END,
           charged_ink = a.cc, charged_grant_ink = a.cg, charged_payg_ink = a.cc - a.cg,
           usage = coalesce(a.usage, q.usage), vendor_request_id = coalesce(a.vid, q.vendor_request_id),
           reason = coalesce(a.reason, q.reason),
           resolved_at = CASE WHEN a.e IN ('settle', 'release') THEN a.resolved END, leased = false
      FROM amt3 a
     WHERE q.id = a.id AND q.leased AND q.lease_id = a.lease_id AND a.e IS NOT NULL
    RETURNING q.id, q.account_id, q.key_id, q.lease_id, q.hold_state, q.status, q.hold_ink, q.hold_grant_ink, q.hold_payg_ink,
              q.charged_grant_ink, q.charged_payg_ink
  ), vid AS (
    UPDATE requests q SET vendor_request_id = a.vid
      FROM amt3 a
     WHERE q.id = a.id AND q.leased AND a.e IS NULL AND a.vid IS NOT NULL AND q.vendor_request_id IS DISTINCT FROM a.vid
  ), ended AS (
    -- What each changed row moves out of its lease: its charge (settled), or its whole hold (now a durable open hold).
    SELECT m.*, (m.status = 'usage_unknown') AS kept FROM (
      SELECT * FROM ins WHERE hold_state <> 'open' OR status = 'usage_unknown'
      UNION ALL SELECT * FROM upd) m
  ), per_lease AS (
    SELECT lease_id, min(account_id) AS account_id, min(key_id) AS key_id,
           sum(charged_grant_ink) AS cg, sum(charged_payg_ink) AS cp,
           sum(CASE WHEN kept THEN hold_grant_ink ELSE 0 END) AS ug, sum(CASE WHEN kept THEN hold_payg_ink ELSE 0 END) AS up
      FROM ended GROUP BY lease_id
  ), ul AS (
    UPDATE leases l SET grant_ink = l.grant_ink - (d.cg + d.ug), payg_ink = l.payg_ink - (d.cp + d.up)
      FROM per_lease d WHERE l.id = d.lease_id
  ), uw AS (
    UPDATE wallets w
       SET leased_grant_ink = w.leased_grant_ink - d.g, leased_payg_ink = w.leased_payg_ink - d.p,
           held_grant_ink = w.held_grant_ink + d.ug, held_payg_ink = w.held_payg_ink + d.up, charged_ink = w.charged_ink + d.c
      FROM (SELECT account_id, sum(cg + ug) AS g, sum(cp + up) AS p, sum(ug) AS ug, sum(up) AS up, sum(cg + cp) AS c
              FROM per_lease GROUP BY account_id) d
     WHERE w.account_id = d.account_id
  ), uk AS (
    UPDATE api_keys k
       SET ink_leased = k.ink_leased - d.moved, ink_charged = k.ink_charged + d.c, ink_reserved = k.ink_reserved + d.kept
      FROM (SELECT key_id, sum(cg + cp + ug + up) AS moved, sum(cg + cp) AS c, sum(ug + up) AS kept FROM per_lease GROUP BY key_id) d
     WHERE k.id = d.key_id
  ), jl AS (
    INSERT INTO ledger_journal (at, kind, account_id, key_id, lease_id, amount_ink, leased_grant_ink, leased_payg_ink, charged_ink)
    SELECT p_now, 'lease_flush', d.account_id, d.key_id, d.lease_id, d.cg + d.cp, -d.cg, -d.cp, d.cg + d.cp
      FROM per_lease d WHERE d.cg + d.cp > 0
  )
  INSERT INTO ledger_journal (at, kind, account_id, key_id, request_id, lease_id, amount_ink,
                              leased_grant_ink, leased_payg_ink, held_grant_ink, held_payg_ink, note)
  SELECT p_now, 'lease_hold', e.account_id, e.key_id, e.id, e.lease_id, e.hold_ink,
         -e.hold_grant_ink, -e.hold_payg_ink, e.hold_grant_ink, e.hold_payg_ink, 'usage unknown'
    FROM ended e WHERE e.kept;
END
$function$;
