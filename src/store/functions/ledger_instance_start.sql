-- Registers a start under an instance id: the epoch grows, and every lease an older epoch of the
-- same id still owns is recovered now (that process is gone: this one took its name).
CREATE OR REPLACE FUNCTION ledger_instance_start(p_instance text, p_now timestamp with time zone, p_grace_ms integer)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
  e bigint;
BEGIN
  INSERT INTO ledger_instances AS i (id, epoch, started_at, heartbeat_at) VALUES (p_instance, 1, p_now, p_now)
  ON CONFLICT (id) DO UPDATE SET epoch = i.epoch + 1, started_at = p_now, heartbeat_at = p_now
  RETURNING epoch INTO e;
  RETURN e;
END
$function$;
