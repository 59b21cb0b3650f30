-- Installed by migration 0010_worker_left_at: the statements of scheduler/sql/functions/ that changed
-- since the migration before it (a delta, written by `python -m scheduler.sqlfiles delta`).
-- Never edit it: a later change ships in a new migration with a delta of its own.

-- Register a process start. The new session fences the previous one of the same uid at once: its
-- running tasks' leases are expired so the recovery loop can hand them on without waiting. The
-- worker row ends active with this session's capacity (and no left_at: a new process has not left).
-- Returns the session it replaced, if any.
CREATE OR REPLACE FUNCTION register_worker_v1(
  p_uid text, p_session uuid, p_hostname text, p_pid int, p_version text, p_concurrency int,
  p_background_slots int, p_limits jsonb, p_vram int, p_capabilities jsonb, p_workspace text
) RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
  previous uuid;
BEGIN
  SELECT current_session_id INTO previous FROM queue_workers WHERE uid = p_uid FOR UPDATE;
  INSERT INTO queue_workers (uid, current_session_id, hostname, pid, version, concurrency, background_slots,
                             category_limits, vram_total_mb, lifecycle, registered_at, last_heartbeat_at,
                             system_sample, capabilities, workspace)
  VALUES (p_uid, p_session, p_hostname, p_pid, p_version, p_concurrency, p_background_slots, p_limits, p_vram,
          'active', now(), now(), '{}', p_capabilities, p_workspace)
  ON CONFLICT (uid) DO UPDATE SET
    current_session_id = EXCLUDED.current_session_id, hostname = EXCLUDED.hostname, pid = EXCLUDED.pid,
    version = EXCLUDED.version, concurrency = EXCLUDED.concurrency,
    background_slots = EXCLUDED.background_slots, category_limits = EXCLUDED.category_limits,
    vram_total_mb = EXCLUDED.vram_total_mb, lifecycle = 'active', registered_at = now(),
    last_heartbeat_at = now(), capabilities = EXCLUDED.capabilities, workspace = EXCLUDED.workspace,
    left_at = NULL;
  IF previous IS NOT NULL AND previous <> p_session THEN
    UPDATE queue_tasks SET lease_expires_at = now() - interval '1 millisecond'
    WHERE state = 'running' AND claimed_worker_session_id = previous;
  END IF;
  RETURN previous;
END
$$;

-- The recovery loop's release pass (every worker runs it each round, after recover_expired_v1):
-- pinned jobs with work waiting and nothing running, on a worker that is draining or left on
-- purpose (drained: it said offline itself, left_at) or lost. A worker is lost when it has sent no heartbeat for p_lost_seconds (the lease: by then every
-- lease it held has run out): lost_in_dispatch without local work, lost_after_delay with local
-- work once the silence exceeds p_reassign_after. Cheap when nothing is wrong: the candidates are
-- found from the (few) draining or silent worker rows.
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
                 THEN 'drained'
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

-- The session itself says draining or offline (SIGTERM, the end of a drain). Fenced on the session:
-- NULL when it is not the current one. Leaving releases the worker's idle pinned jobs in the same
-- transaction (cause drained); stages still running when it began draining are handed back before
-- it says offline, so by then every pinned job is idle. Saying offline also records left_at, so a
-- job that could not move at that moment (busy finishing a webhook, a hand-back that failed) is
-- still treated as drained by the release pass, not as lost: a worker that left on purpose is not
-- coming back for its local work. Returns how many jobs moved.
CREATE OR REPLACE FUNCTION set_session_lifecycle_v2(p_uid text, p_session uuid, p_lifecycle text) RETURNS int
LANGUAGE plpgsql AS $$
BEGIN
  UPDATE queue_workers SET lifecycle = p_lifecycle, last_heartbeat_at = now(),
                           left_at = CASE WHEN p_lifecycle = 'offline' THEN now() ELSE left_at END
   WHERE uid = p_uid AND current_session_id = p_session;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  IF p_lifecycle = 'active' THEN
    RETURN 0;
  END IF;
  RETURN release_worker_jobs_v2(p_uid, 'drained', false);
END
$$;
