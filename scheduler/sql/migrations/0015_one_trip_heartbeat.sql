-- Installed by migration 0015_one_trip_heartbeat: the statements of scheduler/sql/functions/ that changed
-- since the migration before it (a delta, written by `python -m scheduler.sqlfiles delta`).
-- Never edit it: a later change ships in a new migration with a delta of its own.

-- A worker session's whole heartbeat in one statement, so an idle worker's beat is one round trip:
-- the leases of its running tasks first (heartbeat_tasks_v1: they are what a slow beat would cost),
-- then its own row and system sample (worker_heartbeat_v1). Returns the worker's lifecycle and one
-- answer per task asked about ({task_id, accepted, cancel_requested, reason}); JE410 when the
-- session is not the worker's current one.
CREATE OR REPLACE FUNCTION worker_beat_v1(p_worker text, p_session uuid, p_tasks jsonb, p_lease_seconds float,
                                          p_sample jsonb)
RETURNS TABLE (lifecycle text, answers jsonb)
LANGUAGE plpgsql AS $$
BEGIN
  answers := '[]';
  IF jsonb_array_length(p_tasks) > 0 THEN
    SELECT coalesce(jsonb_agg(to_jsonb(h)), '[]') INTO answers
      FROM heartbeat_tasks_v1(p_worker, p_session, p_tasks, p_lease_seconds) h;
  END IF;
  lifecycle := worker_heartbeat_v1(p_worker, p_session, p_sample);
  RETURN NEXT;
END
$$;
