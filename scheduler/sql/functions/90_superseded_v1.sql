-- JetEncode scheduler, part 90: v1 functions that newer ones superseded. Nothing in this release
-- calls them. The public ones stay for workers and web processes of the previous release, which
-- still call them during a rolling deploy (docs/operations.md, "Upgrades and rolling deploys"), and
-- are dropped one release later with a migration of their own:
--
--   set_session_lifecycle_v1  -> set_session_lifecycle_v2 (leaving also releases idle pinned jobs)
--   drain_worker_v1           -> drain_worker_v2 (idle pinned jobs move at once)
--   redispatch_job_v1         -> redispatch_job_v2 (counted by cause; the job's own dispatch timeout)
--   reassign_lost_jobs_v1     -> release_jobs_v2 (the failover rules of 40_recovery_and_failover)
--   lock_for_fenced_write_v1  -> begin_fenced_write_v1 (the same locks, and the fence, in one call);
--                                tests/scheduler/test_write_path.py still lists it among the hot
--                                functions (enable_seqscan off), so it goes when that list does

-- The session itself says draining/offline (shutdown). Fenced on the session: true when it is the
-- current one, NULL otherwise.
CREATE OR REPLACE FUNCTION set_session_lifecycle_v1(p_uid text, p_session uuid, p_lifecycle text) RETURNS boolean
LANGUAGE sql AS $$
  UPDATE queue_workers SET lifecycle = p_lifecycle, last_heartbeat_at = now()
  WHERE uid = p_uid AND current_session_id = p_session
  RETURNING true
$$;

-- An operator drains a worker: it finishes what it runs and claims nothing new. JE409 for an
-- offline worker, JE404 for an unknown one. Returns its lifecycle (draining).
CREATE OR REPLACE FUNCTION drain_worker_v1(p_uid text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  result text;
BEGIN
  UPDATE queue_workers SET lifecycle = 'draining' WHERE uid = p_uid AND lifecycle <> 'offline'
  RETURNING lifecycle INTO result;
  IF NOT FOUND THEN
    IF EXISTS (SELECT 1 FROM queue_workers WHERE uid = p_uid) THEN
      RAISE EXCEPTION USING ERRCODE = 'JE409', MESSAGE = 'worker ' || p_uid || ' is offline';
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'JE404', MESSAGE = 'worker not found';
  END IF;
  RETURN result;
END
$$;

-- Start a new execution of a job: the old execution's unfinished tasks are cancelled, the
-- assignment is cleared and a fresh dispatch queued. Outputs of the old execution are never reused.
-- JE409 for a finished or cancelling job. Returns the new execution.
CREATE OR REPLACE FUNCTION redispatch_job_v1(p_job uuid, p_why text, p_patience_ms int DEFAULT 2000) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
  s job_schedule%ROWTYPE := lock_schedule_for_control_v1(p_job, p_patience_ms);
  j record;
BEGIN
  SELECT type, status, max_attempts INTO j FROM jobs WHERE id = p_job;
  IF j.status IN ('completed', 'cancelled') OR s.cancel_requested_at IS NOT NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'JE409', MESSAGE = 'job is ' || j.status || ': only unfinished jobs can be redispatched';
  END IF;
  UPDATE queue_tasks SET state = 'cancelled', finished_at = now(),
                         last_failure = coalesce(last_failure || E'\n', '') || 'superseded by execution ' || (s.execution_id + 1)
   WHERE job_id = p_job AND execution_id = s.execution_id AND placement <> 'cluster'
     AND state IN ('blocked', 'pending', 'retry_wait', 'running', 'failed');
  UPDATE job_schedule SET execution_id = s.execution_id + 1, assigned_worker_uid = NULL WHERE job_id = p_job;
  PERFORM insert_dispatch_v1(p_job, s.execution_id + 1, j.type, j.max_attempts, 600);
  UPDATE jobs SET status = 'pending', progress = 0, finished_at = NULL WHERE id = p_job;
  PERFORM refresh_job_v1(p_job, 'execution ' || (s.execution_id + 1) || ' started: ' || p_why);
  PERFORM pg_notify('jetencode_queue_tasks', 'media');
  RETURN s.execution_id + 1;
END
$$;

-- Affinity when a worker is lost: jobs whose assigned worker has been silent longer than the
-- reassignment threshold, with unfinished work and nothing running, start a new execution.
CREATE OR REPLACE FUNCTION reassign_lost_jobs_v1(p_after_seconds float, p_batch int)
RETURNS TABLE (job_id uuid, execution_id int)
LANGUAGE plpgsql AS $$
DECLARE
  c record;
BEGIN
  FOR c IN
    SELECT s.job_id, s.assigned_worker_uid FROM job_schedule s
      JOIN jobs j ON j.id = s.job_id
      JOIN queue_workers w ON w.uid = s.assigned_worker_uid
     WHERE j.status IN ('pending', 'retry_wait')
       AND s.cancel_requested_at IS NULL
       AND w.last_heartbeat_at < now() - make_interval(secs => p_after_seconds)
     LIMIT p_batch
  LOOP
    -- Every worker runs this loop: another one may have reassigned the job since the list above
    -- was read. Take the scheduler lock first (canonical order, as redispatch does), then re-check
    -- on rows committed since (each statement sees a fresh snapshot), so a job is reassigned once.
    PERFORM 1 FROM queue_scheduler_state st WHERE st.id = 1 FOR UPDATE;
    PERFORM 1 FROM job_schedule s
      JOIN jobs j ON j.id = s.job_id
      JOIN queue_workers w ON w.uid = s.assigned_worker_uid
     WHERE s.job_id = c.job_id AND s.assigned_worker_uid = c.assigned_worker_uid
       AND j.status IN ('pending', 'retry_wait')
       AND s.cancel_requested_at IS NULL
       AND w.last_heartbeat_at < now() - make_interval(secs => p_after_seconds);
    CONTINUE WHEN NOT FOUND;
    job_id := c.job_id;
    BEGIN
      -- No patience here: this loop holds the scheduler lock; a job busy finishing is retried next round.
      execution_id := redispatch_job_v1(c.job_id, 'worker ' || c.assigned_worker_uid || ' lost', 0);
    EXCEPTION WHEN SQLSTATE 'JE409' THEN
      CONTINUE;
    END;
    RETURN NEXT;
  END LOOP;
END
$$;

-- The locks of a fenced write of a stage's outcome, in the canonical order: the task's worker (KEY
-- SHARE), the job's schedule row, the task. Rows that do not exist come back NULL.
CREATE OR REPLACE FUNCTION lock_for_fenced_write_v1(p_task bigint, OUT w queue_workers, OUT s job_schedule,
                                                    OUT t queue_tasks)
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
DECLARE
  job uuid;
  worker text;
BEGIN
  SELECT q.job_id, q.claimed_by INTO job, worker FROM queue_tasks q WHERE q.id = p_task;
  SELECT * INTO w FROM queue_workers q WHERE q.uid = worker FOR KEY SHARE;
  SELECT * INTO s FROM job_schedule js WHERE js.job_id = job FOR NO KEY UPDATE;
  SELECT * INTO t FROM queue_tasks q WHERE q.id = p_task FOR UPDATE;
END
$$;
