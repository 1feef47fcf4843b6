-- ledger_flush's third step, the late path: records whose lease is not (or no longer) this
-- instance's (`p_ours` are its live leases), taken one by one. A start alone waits for its end
-- (deferred; its vendor id is kept). An end of a hold recovery kept open resolves that hold. An
-- end recovery never saw (its start was never flushed) comes from the wallet directly: a
-- settlement charges, an unknown-usage end keeps, at most what the wallet still has and the key's
-- limit still allows (recovery gave the lease's Ink back, and the key may have spent it since);
-- the shortfall is the operator's and is noted on the journal row. Returns each record's result
-- (ok for the records of `p_ours`). Called by ledger_flush, after it took the locks in their order.
CREATE OR REPLACE FUNCTION ledger_flush_late(p_now timestamp with time zone, p_ours bigint[], p_ids text[], p_accounts text[], p_keys text[], p_products text[], p_models text[], p_leases bigint[], p_holds bigint[], p_hold_grants bigint[], p_periods integer[], p_created timestamp with time zone[], p_vendor_ids text[], p_ends text[], p_charges bigint[], p_usage jsonb[], p_reasons text[], p_resolved timestamp with time zone[])
 RETURNS text[]
 LANGUAGE plpgsql
AS $function$
#variable_conflict use_column
DECLARE
  n integer := coalesce(cardinality(p_ids), 0);
  out_r text[] := array_fill('ok'::text, ARRAY[n]);
  r record; x record; i integer; c bigint; cg bigint; room bigint; g bigint; asked bigint;
BEGIN
  IF n = 0 THEN RETURN out_r; END IF;
  -- The late path: records whose lease is not (or no longer) this instance's.
  FOR i IN 1..n LOOP
    CONTINUE WHEN p_leases[i] = ANY(p_ours);
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
    -- What the wallet still has and the key's limit still allows (a capped key may have spent the
    -- recovered Ink since; the shortfall is the operator's). Read under the rows' own locks, so this
    -- step is safe alone too (in ledger_flush they are held already). A missing row would read as
    -- no bound at all: refused as the integrity violation it is.
    SELECT w.grant_ink, w.grant_ink + w.payg_ink AS balance, k.ink_limit - (k.ink_charged + k.ink_reserved + k.ink_leased) AS key_room
      INTO x FROM wallets w, api_keys k WHERE w.account_id = p_accounts[i] AND k.id = p_keys[i]
       FOR UPDATE OF w, k;
    IF NOT FOUND THEN
      RAISE EXCEPTION 'late journal record % names account % and key %, which do not both exist', p_ids[i], p_accounts[i], p_keys[i]
        USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'request_key_of_lease', TABLE = 'requests';
    END IF;
    room := least(x.balance, greatest(coalesce(x.key_room, x.balance), 0));
    IF p_ends[i] = 'settle' THEN
      -- Recovery never saw this request: the lease's Ink went back, so the charge comes from the wallet.
      asked := least(greatest(coalesce(p_charges[i], 0), 0), p_holds[i]);
      c := least(asked, room);
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
      c := least(p_holds[i], room);
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
  RETURN out_r;
END
$function$;
