-- Generation ids and Idempotency-Keys checked without bounded repetitions: PostgreSQL's regex
-- engine expands `{1,64}` / `{1,128}` into large automata, evaluated on every INSERT and UPDATE
-- (a job's row is updated at every poll). Same accepted sets as 010 (see 005 for the measurement).
ALTER TABLE generations DROP CONSTRAINT generations_id_check;
ALTER TABLE generations ADD CONSTRAINT generations_id_check
  CHECK (length(id) BETWEEN 6 AND 69 AND id ~ '^(vgen|igen)_[A-Za-z0-9]+$');
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_idem_key_check;
ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_idem_key_check
  CHECK (length(idem_key) BETWEEN 1 AND 128 AND idem_key ~ '^[A-Za-z0-9._:-]+$');
