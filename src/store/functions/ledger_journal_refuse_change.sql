-- The trigger function that keeps ledger_journal append-only: an UPDATE, DELETE or TRUNCATE of a
-- journal row raises restrict_violation (triggers ledger_journal_append_only and _no_truncate).
CREATE OR REPLACE FUNCTION ledger_journal_refuse_change()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
  RAISE EXCEPTION 'ledger_journal is append-only: % refused', TG_OP USING ERRCODE = 'restrict_violation';
END $function$;
