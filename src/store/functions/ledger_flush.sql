-- The write-behind journal's group commit: every record of a flush in one transaction.
-- A record is a request's start (end NULL: the hold is in flight, leased), its end
-- (settle | release | unknown) or both. Idempotent on request id: a start already written is not
-- written again, an end is applied only to a hold still in its lease, and the lease, wallet and key
-- move by exactly what the rows that changed say, so a flush retried after a lost answer moves
-- nothing twice. Records of leases that are no longer this instance's (recovered meanwhile) take
-- the late path one by one: a settle charges the durable hold recovery made, or, if the start was
-- never flushed, the wallet directly, never below zero and never past the key's limit (recovery gave
-- the lease's Ink back, and the key may have spent it since); a start alone waits for its end.
-- Per record: ok | late | deferred.
-- The batch comes as parallel arrays, one per column: one jsonb argument decoded into the same
-- arrays measured slower (docs/performance-history.md, the write-behind flush).
CREATE OR REPLACE FUNCTION ledger_flush(p_instance text, p_epoch bigint, p_now timestamp with time zone, p_ids text[], p_accounts text[], p_keys text[], p_products text[], p_models text[], p_leases bigint[], p_holds bigint[], p_hold_grants bigint[], p_periods integer[], p_created timestamp with time zone[], p_vendor_ids text[], p_ends text[], p_charges bigint[], p_usage jsonb[], p_reasons text[], p_resolved timestamp with time zone[])
 RETURNS TABLE(item integer, result text)
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
#variable_conflict use_column
DECLARE
  n integer := coalesce(cardinality(p_ids), 0);
  ours bigint[]; late boolean[]; r record; x record; i integer; c bigint; cg bigint; have bigint; g bigint; asked bigint;
  out_r text[];
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
  out_r := array_fill('ok'::text, ARRAY[n]);

  WITH rec AS (
    SELECT * FROM unnest(p_ids, p_accounts, p_keys, p_products, p_models, p_leases, p_holds, p_hold_grants, p_periods,
                         p_created, p_vendor_ids, p_ends, p_charges, p_usage, p_reasons, p_resolved)
             AS u(id, account_id, key_id, product, model, lease_id, hold, hold_g, period, created, vid, e, charge, usage, reason, resolved)
     WHERE u.lease_id = ANY(ours)
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

  -- The late path: records whose lease is not (or no longer) this instance's.
  FOR i IN 1..n LOOP
    CONTINUE WHEN p_leases[i] = ANY(ours);
    IF p_ends[i] IS NULL THEN
      UPDATE requests SET vendor_request_id = p_vendor_ids[i]
       WHERE id = p_ids[i] AND vendor_request_id IS NULL AND p_vendor_ids[i] IS NOT NULL;
      out_r[i] := 'deferred';
      CONTINUE;
    END IF;
    out_r[i] := 'late';
    SELECT hold_state, leased INTO r FROM requests WHERE id = p_ids[i] FOR UPDATE;
    IF FOUND THEN
      IF r.hold_state = 'open' AND NOT r.leased AND p_ends[i] IN ('settle', 'release') THEN
        SELECT * INTO x FROM ledger_resolve_one(p_ids[i], p_ends[i], coalesce(p_charges[i], 0), p_usage[i], p_vendor_ids[i],
                                                coalesce(p_reasons[i], 'flushed after its lease was recovered'), p_now);
      ELSE
        UPDATE requests SET vendor_request_id = coalesce(vendor_request_id, p_vendor_ids[i]) WHERE id = p_ids[i];
      END IF;
      CONTINUE;
    END IF;
    SELECT grant_ink, payg_ink INTO x FROM wallets WHERE account_id = p_accounts[i];
    have := x.grant_ink + x.payg_ink;
    -- The key's room too (its row is locked above): a capped key that spent the recovered Ink since
    -- must not end up past its limit. The shortfall is the operator's, as with the wallet's.
    SELECT least(have, coalesce(greatest(k.ink_limit - (k.ink_charged + k.ink_reserved + k.ink_leased), 0), have)) INTO have
      FROM api_keys k WHERE k.id = p_keys[i];
    IF p_ends[i] = 'settle' THEN
      -- Recovery never saw this request: the lease's Ink went back, so the charge comes from the wallet.
      asked := least(greatest(coalesce(p_charges[i], 0), 0), p_holds[i]);
      c := least(asked, have);
      cg := least(c, x.grant_ink);
      INSERT INTO requests (id, account_id, key_id, product, model, hold_state, status, hold_ink, hold_grant_ink, hold_payg_ink,
                            grant_period, charged_ink, charged_grant_ink, charged_payg_ink, usage, vendor_request_id, reason,
                            created_at, resolved_at, lease_id, leased)
      VALUES (p_ids[i], p_accounts[i], p_keys[i], p_products[i], p_models[i], 'settled', 'settled', p_holds[i], cg, p_holds[i] - cg,
              p_periods[i], c, cg, c - cg, p_usage[i], p_vendor_ids[i], 'charged after its lease was recovered',
              p_created[i], p_resolved[i], p_leases[i], false);
      UPDATE wallets SET grant_ink = grant_ink - cg, payg_ink = payg_ink - (c - cg), charged_ink = charged_ink + c
       WHERE account_id = p_accounts[i];
      UPDATE api_keys SET ink_charged = ink_charged + c WHERE id = p_keys[i];
      INSERT INTO ledger_journal (at, kind, account_id, key_id, request_id, lease_id, amount_ink, grant_ink, payg_ink, charged_ink, note)
      VALUES (p_now, 'late_charge', p_accounts[i], p_keys[i], p_ids[i], p_leases[i], c, -cg, -(c - cg), c,
              CASE WHEN c < asked THEN 'wallet or key limit short of the charge' END);
    ELSIF p_ends[i] = 'release' THEN
      INSERT INTO requests (id, account_id, key_id, product, model, hold_state, status, hold_ink, hold_grant_ink, hold_payg_ink,
                            grant_period, reason, created_at, resolved_at, lease_id, leased)
      VALUES (p_ids[i], p_accounts[i], p_keys[i], p_products[i], p_models[i], 'void', 'void', 0, 0, 0,
              p_periods[i], coalesce(p_reasons[i], 'released after its lease was recovered'), p_created[i], p_resolved[i], p_leases[i], false);
    ELSE
      -- Usage unknown: keep a durable hold, as much of it as the wallet and the key's limit still allow.
      c := least(p_holds[i], have);
      g := least(c, x.grant_ink);
      INSERT INTO requests (id, account_id, key_id, product, model, hold_state, status, hold_ink, hold_grant_ink, hold_payg_ink,
                            grant_period, vendor_request_id, reason, created_at, lease_id, leased)
      VALUES (p_ids[i], p_accounts[i], p_keys[i], p_products[i], p_models[i], 'open', 'usage_unknown', c, g, c - g,
              (SELECT grant_period FROM wallets WHERE account_id = p_accounts[i]), p_vendor_ids[i],
              coalesce(p_reasons[i], 'usage unknown after its lease was recovered'), p_created[i], p_leases[i], false);
      UPDATE wallets SET grant_ink = grant_ink - g, payg_ink = payg_ink - (c - g), held_grant_ink = held_grant_ink + g,
                         held_payg_ink = held_payg_ink + (c - g)
       WHERE account_id = p_accounts[i];
      UPDATE api_keys SET ink_reserved = ink_reserved + c WHERE id = p_keys[i];
      INSERT INTO ledger_journal (at, kind, account_id, key_id, request_id, amount_ink, grant_ink, payg_ink, held_grant_ink, held_payg_ink, note)
      VALUES (p_now, 'reserve', p_accounts[i], p_keys[i], p_ids[i], c, -g, -(c - g), g, c - g, 'usage unknown after its lease was recovered');
    END IF;
  END LOOP;

  RETURN QUERY SELECT o.ord::integer, o.r FROM unnest(out_r) WITH ORDINALITY AS o(r, ord);
END
$function$;
