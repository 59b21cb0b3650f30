-- Installed by migration 0017_drained_jobs_wait (a delta: only the functions it changes, copied
-- verbatim from scheduler/sql/functions/40_recovery_and_failover.sql). A drained worker's jobs move
-- only when another worker is active: other_worker_active_v2 is new, release_jobs_v2 and
-- set_session_lifecycle_v2 ask it (signatures unchanged).

CREATE OR REPLACE FUNCTION other_worker_active_v2(p_uid text) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT EXISTS (SELECT 1 FROM queue_workers w WHERE w.uid <> p_uid AND w.lifecycle = 'active')
$$;

CREATE OR REPLACE FUNCTION release_jobs_v2(p_lost_seconds float, p_reassign_after float, p_batch int)
RETURNS TABLE (job_id uuid, execution_id int, cause text, worker_uid text)
LANGUAGE plpgsql AS $$
DECLARE
  c record;
BEGIN
  FOR c IN
    SELECT * FROM (
      SELECT s.job_id AS job, w.uid, CASE
               WHEN w.lifecycle = 'draining' OR (w.lifecycle = 'offline' AND w.left_at IS NOT NULL)
                 THEN CASE WHEN other_worker_active_v2(w.uid) THEN 'drained' END
               WHEN w.last_heartbeat_at >= now() - make_interval(secs => p_lost_seconds) THEN NULL
               WHEN NOT has_local_work_v2(s.job_id, s.execution_id) THEN 'lost_in_dispatch'
               WHEN w.last_heartbeat_at < now() - make_interval(secs => p_reassign_after) THEN 'lost_after_delay'
             END AS why
        FROM queue_workers w
        JOIN job_schedule s ON s.group_key = w.uid AND s.assigned_worker_uid = w.uid
        JOIN jobs j ON j.id = s.job_id
       WHERE (w.lifecycle = 'draining' OR (w.lifecycle = 'offline' AND w.left_at IS NOT NULL)
              OR w.last_heartbeat_at < now() - make_interval(secs => p_lost_seconds))
         AND j.status IN ('pending', 'retry_wait', 'paused')
         AND s.cancel_requested_at IS NULL AND s.required_worker_uid IS NULL
    ) candidates
     WHERE why IS NOT NULL
     LIMIT p_batch
  LOOP
    BEGIN
      execution_id := release_job_v2(c.job, c.uid, c.why, false,
                                     CASE c.why WHEN 'lost_in_dispatch' THEN p_lost_seconds
                                                WHEN 'lost_after_delay' THEN p_reassign_after ELSE 0 END);
    EXCEPTION WHEN SQLSTATE 'JE409' OR SQLSTATE 'JE404' THEN
      CONTINUE;
    END;
    CONTINUE WHEN execution_id IS NULL;
    job_id := c.job; cause := c.why; worker_uid := c.uid;
    RETURN NEXT;
  END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION set_session_lifecycle_v2(p_uid text, p_session uuid, p_lifecycle text) RETURNS int
LANGUAGE plpgsql AS $$
BEGIN
  UPDATE queue_workers SET lifecycle = p_lifecycle, last_heartbeat_at = now(),
                           left_at = CASE WHEN p_lifecycle = 'offline' THEN now() ELSE left_at END
   WHERE uid = p_uid AND current_session_id = p_session;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  IF p_lifecycle = 'active' OR NOT other_worker_active_v2(p_uid) THEN
    RETURN 0;
  END IF;
  RETURN release_worker_jobs_v2(p_uid, 'drained', false);
END
$$;
