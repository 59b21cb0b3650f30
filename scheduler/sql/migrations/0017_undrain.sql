-- Installed by migration 0017_undrain: undrain_worker_v1 (issue 37), copied from
-- scheduler/sql/functions/40_recovery_and_failover.sql. A delta: only what this migration adds.

-- Undrain: an operator returns a drained (or evacuated) worker to service: it claims again. Jobs that
-- moved away stay where they went. Idempotent for an active worker; JE404 for an unknown worker,
-- JE409 for an offline one (a worker comes back by starting again, which registers it active).
CREATE OR REPLACE FUNCTION undrain_worker_v1(p_uid text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  current text;
BEGIN
  SELECT lifecycle INTO current FROM queue_workers WHERE uid = p_uid FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'JE404', MESSAGE = 'worker not found';
  END IF;
  IF current = 'offline' THEN
    RAISE EXCEPTION USING ERRCODE = 'JE409', MESSAGE = 'worker ' || p_uid || ' is offline: it returns to service when it starts again';
  END IF;
  UPDATE queue_workers SET lifecycle = 'active' WHERE uid = p_uid AND lifecycle = 'draining';
  RETURN 'active';
END
$$;
