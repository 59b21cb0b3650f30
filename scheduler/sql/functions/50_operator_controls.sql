-- JetEncode scheduler, part 50: what operators do to jobs (API, dashboard, admin actions).
--
-- Each control locks the scheduler row, then the job's schedule row (lock_schedule_for_control_v1),
-- so it never interleaves with a claim's selection; applies to unfinished jobs only and affects only
-- their unclaimed tasks; and refuses what does not apply with JE409 (HTTP 409) and the reason.
-- Moving jobs off a worker (drain, evacuate, redispatch) is failover: 40_recovery_and_failover.sql.

-- Lock a job for an operator's p_action: the scheduler row, then its schedule row, returned locked.
-- JE404 for an unknown job; JE409 when it has finished or is being cancelled, unless
-- p_allow_terminal (retry decides for itself).
CREATE OR REPLACE FUNCTION lock_job_for_control_v1(p_job uuid, p_action text, p_allow_terminal boolean DEFAULT false)
RETURNS job_schedule
LANGUAGE plpgsql AS $$
DECLARE
  s job_schedule%ROWTYPE;
  st text;
BEGIN
  s := lock_schedule_for_control_v1(p_job);
  SELECT status INTO st FROM jobs WHERE id = p_job;
  IF NOT p_allow_terminal AND (st IN ('completed', 'failed', 'cancelled') OR s.cancel_requested_at IS NOT NULL) THEN
    RAISE EXCEPTION USING ERRCODE = 'JE409',
      MESSAGE = 'cannot ' || p_action || ': the job is ' || CASE WHEN s.cancel_requested_at IS NOT NULL AND st NOT IN ('completed','failed','cancelled') THEN 'being cancelled' ELSE st END;
  END IF;
  RETURN s;
END
$$;

-- Cancel: waiting tasks of the current execution are cancelled at once; running ones see the
-- request through their heartbeat and end cancelled when they next write. Returns the job's status
-- (cancelled, or running until its last stage stops).
CREATE OR REPLACE FUNCTION cancel_job_v1(p_job uuid) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  s job_schedule%ROWTYPE := lock_job_for_control_v1(p_job, 'cancel');
BEGIN
  UPDATE job_schedule SET cancel_requested_at = now() WHERE job_id = p_job;
  UPDATE queue_tasks SET state = 'cancelled', finished_at = now(), last_failure = 'cancelled by an operator'
   WHERE job_id = p_job AND execution_id = s.execution_id AND task_type <> 'webhook'
     AND state IN ('blocked', 'pending', 'retry_wait');
  RETURN refresh_job_v1(p_job, 'cancel requested by an operator');
END
$$;

-- Pause or resume the job's unclaimed tasks (running stages carry on). JE409 when it already is.
-- Resuming notifies the media workers. Returns the job's status.
CREATE OR REPLACE FUNCTION set_paused_v1(p_job uuid, p_paused boolean) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  s job_schedule%ROWTYPE := lock_job_for_control_v1(p_job, CASE WHEN p_paused THEN 'pause' ELSE 'resume' END);
BEGIN
  IF s.paused = p_paused THEN
    RAISE EXCEPTION USING ERRCODE = 'JE409', MESSAGE = 'the job is already ' || CASE WHEN p_paused THEN 'paused' ELSE 'running unpaused' END;
  END IF;
  UPDATE job_schedule SET paused = p_paused WHERE job_id = p_job;
  IF NOT p_paused THEN
    PERFORM pg_notify('jetencode_queue_tasks', 'media');
  END IF;
  RETURN refresh_job_v1(p_job, CASE WHEN p_paused THEN 'paused by an operator' ELSE 'resumed by an operator' END);
END
$$;

-- Change the job's priority (-1000..1000, JE422 otherwise) for its unclaimed tasks; its position is
-- kept. Returns the job's status.
CREATE OR REPLACE FUNCTION set_priority_v1(p_job uuid, p_priority int) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  s job_schedule%ROWTYPE;
BEGIN
  IF p_priority IS NULL OR p_priority < -1000 OR p_priority > 1000 THEN
    RAISE EXCEPTION USING ERRCODE = 'JE422', MESSAGE = 'priority', DETAIL = 'must be an integer from -1000 to 1000';
  END IF;
  s := lock_job_for_control_v1(p_job, 'change priority');
  UPDATE job_schedule SET priority = p_priority WHERE job_id = p_job;
  RETURN refresh_job_v1(p_job, 'priority ' || s.priority || ' -> ' || p_priority);
END
$$;

-- Renumber one comparable group (same group key, same priority, unfinished jobs) 1024 apart,
-- keeping its order and its first position. Counted in queue_scheduler_state.rebalances.
CREATE OR REPLACE FUNCTION rebalance_group_v1(p_group text, p_priority int) RETURNS void
LANGUAGE sql AS $$
  WITH ordered AS (
    SELECT s.job_id, row_number() OVER (ORDER BY s.position, s.job_id) - 1 AS rn,
           min(s.position) OVER () AS base
      FROM job_schedule s JOIN jobs j ON j.id = s.job_id
     WHERE s.group_key = p_group AND s.priority = p_priority
       AND j.status IN ('pending', 'running', 'retry_wait', 'paused'))
  UPDATE job_schedule s SET position = ordered.base + ordered.rn * 1024
    FROM ordered WHERE s.job_id = ordered.job_id;
  UPDATE queue_scheduler_state SET rebalances = rebalances + 1 WHERE id = 1;
$$;

-- Move a job within the jobs its claimers compare it with, at its priority: top and bottom go 1024
-- beyond the first or last of them (never past a higher priority), up and down take the midpoint
-- with the neighbour beyond the next job of its own group, rebalancing that group once when no
-- integer gap is left. JE422 for another direction. Returns the job's new position.
CREATE OR REPLACE FUNCTION move_job_v1(p_job uuid, p_direction text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  s job_schedule%ROWTYPE;
  current_position bigint;
  near_position bigint;
  near_job uuid;
  far_position bigint;
  far_job uuid;
  bound bigint;
  new_position bigint;
  tries int := 0;
  step int := CASE WHEN p_direction IN ('up', 'top') THEN -1 ELSE 1 END;
BEGIN
  IF p_direction IS NULL OR p_direction NOT IN ('up', 'down', 'top', 'bottom') THEN
    RAISE EXCEPTION USING ERRCODE = 'JE422', MESSAGE = 'direction', DETAIL = 'must be one of up, down, top, bottom';
  END IF;
  s := lock_job_for_control_v1(p_job, 'move');
  current_position := s.position;

  IF p_direction IN ('top', 'bottom') THEN
    -- Beyond every job its claimers compare it with: its worker's group plus the pending group, or
    -- every group for a pending job; same priority, unfinished.
    SELECT CASE WHEN step < 0 THEN min(o.position) ELSE max(o.position) END INTO bound
      FROM job_schedule o JOIN jobs j ON j.id = o.job_id
     WHERE o.priority = s.priority AND o.job_id <> p_job
       AND j.status IN ('pending', 'running', 'retry_wait', 'paused')
       AND (s.group_key = '' OR o.group_key IN (s.group_key, ''));
    IF bound IS NULL OR (step < 0 AND current_position < bound) OR (step > 0 AND current_position > bound) THEN
      new_position := current_position;
    ELSE
      new_position := bound + step * 1024;
    END IF;
  ELSE
    -- Up/down: the midpoint between the neighbour in its own group and the one beyond it; when no
    -- integer gap remains, rebalance that group once and look again.
    LOOP
      tries := tries + 1;
      near_job := NULL; far_job := NULL;
      SELECT o.position, o.job_id INTO near_position, near_job
        FROM job_schedule o JOIN jobs j ON j.id = o.job_id
       WHERE o.group_key = s.group_key AND o.priority = s.priority
         AND j.status IN ('pending', 'running', 'retry_wait', 'paused')
         AND CASE WHEN step < 0 THEN (o.position, o.job_id) < (current_position, p_job)
                  ELSE (o.position, o.job_id) > (current_position, p_job) END
       ORDER BY o.position * step, CASE WHEN step < 0 THEN NULL ELSE o.job_id END, o.job_id DESC
       LIMIT 1;
      IF near_job IS NULL THEN
        new_position := current_position;  -- already first (last) of its group
        EXIT;
      END IF;
      SELECT o.position, o.job_id INTO far_position, far_job
        FROM job_schedule o JOIN jobs j ON j.id = o.job_id
       WHERE o.group_key = s.group_key AND o.priority = s.priority AND o.job_id <> p_job
         AND j.status IN ('pending', 'running', 'retry_wait', 'paused')
         AND CASE WHEN step < 0 THEN (o.position, o.job_id) < (near_position, near_job)
                  ELSE (o.position, o.job_id) > (near_position, near_job) END
       ORDER BY o.position * step, CASE WHEN step < 0 THEN NULL ELSE o.job_id END, o.job_id DESC
       LIMIT 1;
      IF far_job IS NULL THEN
        new_position := near_position + step * 1024;
        EXIT;
      END IF;
      IF abs(far_position - near_position) >= 2 THEN
        new_position := least(far_position, near_position) + abs(far_position - near_position) / 2;
        EXIT;
      END IF;
      IF tries > 1 THEN
        RAISE EXCEPTION 'rebalance left no gap in group % (a bug)', s.group_key;
      END IF;
      PERFORM rebalance_group_v1(s.group_key, s.priority);
      SELECT position INTO current_position FROM job_schedule WHERE job_id = p_job;
    END LOOP;
  END IF;

  IF new_position IS DISTINCT FROM current_position OR tries > 1 THEN
    UPDATE job_schedule SET position = new_position WHERE job_id = p_job;
    PERFORM refresh_job_v1(p_job, 'moved ' || p_direction || ' by an operator');
  END IF;
  RETURN new_position;
END
$$;

-- Manual retry of a failed (not cancelled) job: its failed stage deliveries start again at attempt
-- zero under the same execution, assignment, priority and position. Completed stages are kept, and
-- the terminal webhook may fire again (the retry count is part of its key). JE409 for any other job.
-- The body of retry_job_v2, which the repository calls.
CREATE OR REPLACE FUNCTION retry_job_v1(p_job uuid) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  s job_schedule%ROWTYPE;
  st text;
  n int;
BEGIN
  s := lock_job_for_control_v1(p_job, 'retry', true);
  SELECT status INTO st FROM jobs WHERE id = p_job;
  IF st <> 'failed' OR s.cancel_requested_at IS NOT NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'JE409', MESSAGE = 'cannot retry: the job is ' || st || ' (only failed jobs can be retried)';
  END IF;
  UPDATE queue_tasks SET state = 'pending', attempt = 0, available_at = now(), finished_at = NULL,
                         lease_token = NULL, lease_expires_at = NULL, deadline_at = NULL, progress = 0
   WHERE job_id = p_job AND execution_id = s.execution_id AND state = 'failed' AND task_type <> 'webhook';
  GET DIAGNOSTICS n = ROW_COUNT;
  UPDATE jobs SET manual_retry_count = manual_retry_count + 1, status = 'pending', finished_at = NULL,
                  last_error = NULL
   WHERE id = p_job;
  PERFORM pg_notify('jetencode_queue_tasks', 'media');
  PERFORM pg_notify('jetencode_queue_tasks', 'background');
  RETURN refresh_job_v1(p_job, 'retried by an operator (' || n || ' failed stage(s) reset)');
END
$$;

-- A manual retry (retry_job_v1) that also starts the lost-worker count again: the operator has
-- looked at the job, so it may move off lost workers max_attempts more times.
CREATE OR REPLACE FUNCTION retry_job_v2(p_job uuid) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  result text := retry_job_v1(p_job);
BEGIN
  UPDATE job_schedule SET lost_workers = 0 WHERE job_id = p_job AND lost_workers <> 0;
  RETURN result;
END
$$;
