-- Installed by migration 0019_drained_jobs_wait: the statements of scheduler/sql/functions/ that changed
-- since the migration before it (a delta, written by `python -m scheduler.sqlfiles delta`).
-- Never edit it: a later change ships in a new migration with a delta of its own.

-- Whether a worker other than p_uid is active: someone a drained worker's jobs could move to.
-- Without one, moving them would only throw their completed stages away (a move starts a new
-- execution from the dispatch) for nothing: the next worker to claim them is p_uid itself,
-- restarted, with the workspace its completed stages left. So they stay pinned to it until
-- another worker is active (the release pass moves them then) or it comes back and resumes them.
CREATE OR REPLACE FUNCTION other_worker_active_v2(p_uid text) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT EXISTS (SELECT 1 FROM queue_workers w WHERE w.uid <> p_uid AND w.lifecycle = 'active')
$$;

-- The recovery loop's release pass (every worker runs it each round, after recover_expired_v1):
-- pinned jobs with work waiting and nothing running, on a worker that is draining or left on
-- purpose (drained: it said offline itself, left_at; only once another worker is active) or lost. A worker is lost when it has sent no heartbeat for p_lost_seconds (the lease: by then every
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

-- The session itself says draining or offline (SIGTERM, the end of a drain). Fenced on the session:
-- NULL when it is not the current one. Leaving releases the worker's idle pinned jobs in the same
-- transaction (cause drained); stages still running when it began draining are handed back before
-- it says offline, so by then every pinned job is idle. Saying offline also records left_at, so a
-- job that could not move at that moment (busy finishing a webhook, a hand-back that failed) is
-- still treated as drained by the release pass, not as lost: a worker that left on purpose is not
-- coming back for its local work. With no other worker active nothing moves (other_worker_active_v2):
-- the jobs wait for this uid's return or for another worker. Returns how many jobs moved.
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
