-- JetEncode scheduler, part 40: recovery and failover (docs/scheduler.md, "Failure, retry and
-- recovery" and "Failover"). Every worker's recovery loop runs these, so each must be safe to run
-- at once from many sessions: candidates are locked with SKIP LOCKED or re-checked under the job's
-- lock, and a task or job is moved by exactly one of them.
--
-- Recovery is by liveness, never by runtime: a running task whose lease stopped being renewed (or
-- whose deadline passed) is retried, failed or cancelled.
--
-- Failover refines DECISIONS 5. A job's job-placement stages stay with its assigned worker only
-- while that is worth something:
--   drained           the worker is draining or said offline on purpose: its idle pinned jobs move at once
--                     when another worker is active (else they wait for it or for this uid's return)
--   evacuated         an operator evacuated the worker: every pinned job moves, running stages included
--   lost_in_dispatch  the worker is lost (no heartbeat for a lease) and the job has no local work
--   lost_after_delay  the worker is lost longer than JETENCODE_REASSIGN_AFTER_SECONDS and the job has
--                     local work
--   manual            an operator's redispatch
--   lost_reserved     a dedicated worker lost its reservation (55_reservations.sql): its job
--                     moves at once, running stages included, to the reservation's next worker
-- "Moving" a job whose dispatch has not completed (and nothing of it runs) clears the assignment:
-- the dispatch is retried by any worker, same execution, attempts kept. Any other move starts a new
-- execution (redispatch_job_v2). Targeted jobs (required_worker_uid) never move: they wait for their
-- worker (DECISIONS 13).

-- ---- Expired leases and stale workers --------------------------------------------------------

-- Recovery by liveness: leases that stopped being renewed (or deadlines passed), oldest first, at
-- most p_batch per call. SKIP LOCKED keeps every worker's recovery loop safe to run at once; a task
-- is handled by exactly one of them. Each goes to cancelled (job cancelling, or an old execution),
-- retry_wait or failed (retry_or_fail_v1), audited as a recovery. Returns (task, new state) pairs.
CREATE OR REPLACE FUNCTION recover_expired_v1(p_batch int)
RETURNS TABLE (task_id bigint, outcome text)
LANGUAGE plpgsql AS $$
DECLARE
  c record;
  s job_schedule%ROWTYPE;
  t queue_tasks%ROWTYPE;
  why text;
BEGIN
  FOR c IN
    SELECT q.id, q.job_id FROM queue_tasks q
     WHERE q.state = 'running' AND (q.lease_expires_at < now() OR q.deadline_at < now())
     ORDER BY q.lease_expires_at LIMIT p_batch
  LOOP
    SELECT * INTO s FROM job_schedule js WHERE js.job_id = c.job_id FOR NO KEY UPDATE SKIP LOCKED;
    CONTINUE WHEN NOT FOUND;
    SELECT * INTO t FROM queue_tasks q
     WHERE q.id = c.id AND q.state = 'running' AND (q.lease_expires_at < now() OR q.deadline_at < now())
     FOR UPDATE SKIP LOCKED;
    CONTINUE WHEN NOT FOUND;
    why := CASE WHEN t.deadline_at < now() THEN 'execution deadline passed' ELSE 'lease expired' END
           || ' on ' || coalesce(t.claimed_by, '?') || ' (attempt ' || t.attempt || '/' || t.max_attempts || ')';
    t := retry_or_fail_v1(t, s.cancel_requested_at IS NOT NULL OR t.execution_id <> s.execution_id, true, why);
    PERFORM audit_v1(t, 'recover', true, t.state || ': ' || why, t.lease_token, t.claimed_by,
                     t.claimed_worker_session_id);
    PERFORM refresh_job_v1(t.job_id, CASE WHEN t.task_type = 'webhook' THEN NULL
                                          ELSE t.task_type || ' ' || why || ' -> ' || t.state END);
    task_id := t.id; outcome := t.state;
    RETURN NEXT;
  END LOOP;
END
$$;

-- Report workers whose heartbeat is older than the stale threshold as offline (they are refused
-- for targeted dispatch). Returns their uids; a worker already offline is not reported again.
CREATE OR REPLACE FUNCTION mark_stale_workers_v1(p_stale_seconds float) RETURNS SETOF text
LANGUAGE sql AS $$
  UPDATE queue_workers SET lifecycle = 'offline'
  WHERE lifecycle <> 'offline' AND last_heartbeat_at < now() - make_interval(secs => p_stale_seconds)
  RETURNING uid
$$;

-- ---- Failover --------------------------------------------------------------------------------

-- Local work: a completed job-placement stage of the execution. Such a stage ran in the assigned
-- worker's workspace after the dispatch, and later stages read what it left there (renditions for
-- the HLS packaging, a detected scene list for the cuts). The dispatch itself only stages the input
-- and plans the children, which another worker redoes in seconds, so it does not count.
CREATE OR REPLACE FUNCTION has_local_work_v2(p_job uuid, p_execution int) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT EXISTS (SELECT 1 FROM queue_tasks q
                  WHERE q.job_id = p_job AND q.execution_id = p_execution
                    AND q.state = 'completed' AND q.placement = 'job')
$$;

-- Whether a worker other than p_uid is active: someone a drained worker's jobs could move to.
-- Without one, moving them would only throw their completed stages away (a move starts a new
-- execution from the dispatch) for nothing: the next worker to claim them is p_uid itself,
-- restarted, with the workspace its completed stages left. So they stay pinned to it until
-- another worker is active (the release pass moves them then) or it comes back and resumes them.
CREATE OR REPLACE FUNCTION other_worker_active_v2(p_uid text) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT EXISTS (SELECT 1 FROM queue_workers w WHERE w.uid <> p_uid AND w.lifecycle = 'active')
$$;

-- A duration for people: '37s', '4m12s', '1h05m' (rounded up to the second, never negative).
CREATE OR REPLACE FUNCTION format_seconds_v2(p_seconds float) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE WHEN s >= 3600 THEN (s / 3600) || 'h' || lpad(((s % 3600) / 60)::text, 2, '0') || 'm'
              WHEN s >= 60 THEN (s / 60) || 'm' || lpad((s % 60)::text, 2, '0') || 's'
              ELSE s || 's' END
    FROM (SELECT greatest(0, ceil(coalesce(p_seconds, 0)))::int AS s) x
$$;

-- Count one reassignment by cause (/metrics: jetencode_reassignments_total). The caller holds the
-- scheduler row's lock already (every move of a job takes it), so this adds no contention.
CREATE OR REPLACE FUNCTION count_reassignment_v2(p_cause text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  UPDATE queue_scheduler_state
     SET reassignments = jsonb_set(reassignments, ARRAY[p_cause],
                                   to_jsonb(coalesce((reassignments ->> p_cause)::bigint, 0) + 1))
   WHERE id = 1;
END
$$;

-- Start a new execution of a job: the old execution's unfinished tasks are cancelled (a running one
-- is fenced out: its next write meets "execution generation changed"), the assignment is cleared
-- and a fresh dispatch is queued with the job's own dispatch timeout. Outputs of the old execution
-- are never reused. The job log says "<why>: new execution N". Returns N. JE409 for a finished or
-- cancelling job; counted as a reassignment by p_cause.
CREATE OR REPLACE FUNCTION redispatch_job_v2(p_job uuid, p_cause text, p_why text, p_patience_ms int DEFAULT 2000)
RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
  s job_schedule%ROWTYPE := lock_schedule_for_control_v1(p_job, p_patience_ms);
  j record;
  next_execution int := s.execution_id + 1;
  dispatch_timeout float;
BEGIN
  SELECT type, status, max_attempts INTO j FROM jobs WHERE id = p_job;
  IF j.status IN ('completed', 'cancelled') OR s.cancel_requested_at IS NOT NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'JE409', MESSAGE = 'job is ' || j.status || ': only unfinished jobs can be redispatched';
  END IF;
  SELECT q.timeout_seconds INTO dispatch_timeout FROM queue_tasks q
   WHERE q.job_id = p_job AND q.execution_id = s.execution_id AND q.placement = 'dispatch'
   ORDER BY q.id LIMIT 1;
  UPDATE queue_tasks SET state = 'cancelled', finished_at = now(),
                         last_failure = coalesce(last_failure || E'\n', '') || 'superseded by execution ' || next_execution
   WHERE job_id = p_job AND execution_id = s.execution_id AND task_type <> 'webhook'
     AND state IN ('blocked', 'pending', 'retry_wait', 'running', 'failed');
  UPDATE job_schedule SET execution_id = next_execution, assigned_worker_uid = NULL,
                          lost_workers = lost_workers + CASE WHEN p_cause LIKE 'lost\_%' THEN 1 ELSE 0 END
   WHERE job_id = p_job;
  PERFORM insert_dispatch_v1(p_job, next_execution, j.type, j.max_attempts, coalesce(dispatch_timeout, 600));
  UPDATE jobs SET status = 'pending', progress = 0, finished_at = NULL WHERE id = p_job;
  PERFORM refresh_job_v1(p_job, p_why || ': new execution ' || next_execution);
  PERFORM count_reassignment_v2(p_cause);
  PERFORM pg_notify('jetencode_queue_tasks', 'media');
  RETURN next_execution;
END
$$;

-- Move one job off p_worker for p_cause, if that still applies once the job is locked (another
-- worker's pass may have moved it, or the worker come back, since the caller looked):
--   - not pinned to p_worker any more, targeted, cancelling, failed (an operator's retry comes
--     first) or finished: nothing to do, NULL;
--   - a stage runs and p_include_running is false: nothing to do yet, NULL;
--   - a lost cause whose worker has sent a heartbeat within p_silent_seconds, or lost_in_dispatch
--     for a job that has local work: NULL;
--   - the job has lost its worker max_attempts times already: it fails ("lost its worker N
--     times"), so a stage that kills every worker it runs on cannot loop through the farm; NULL;
--   - its dispatch has not completed and nothing runs: the assignment is cleared and the dispatch
--     retried by any worker (same execution, attempts kept);
--   - else a new execution.
-- Returns the execution that now carries the job. No patience: callers may hold the scheduler
-- lock for a batch, so a job busy finishing raises JE409 and is tried again next round.
CREATE OR REPLACE FUNCTION release_job_v2(p_job uuid, p_worker text, p_cause text, p_include_running boolean,
                                          p_silent_seconds float DEFAULT 0)
RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
  s job_schedule%ROWTYPE := lock_schedule_for_control_v1(p_job, 0);
  j record;
  w queue_workers%ROWTYPE;
  running int;
  dispatched boolean;
  silence float;
  why text;
BEGIN
  SELECT status, max_attempts INTO j FROM jobs WHERE id = p_job;
  IF s.assigned_worker_uid IS DISTINCT FROM p_worker OR s.required_worker_uid IS NOT NULL
     OR s.cancel_requested_at IS NOT NULL
     OR j.status NOT IN ('pending', 'retry_wait', 'paused', 'running') THEN
    RETURN NULL;
  END IF;
  SELECT count(*) FILTER (WHERE q.state = 'running'),
         coalesce(bool_or(q.placement = 'dispatch' AND q.state = 'completed'), false)
    INTO running, dispatched
    FROM queue_tasks q
   WHERE q.job_id = p_job AND q.execution_id = s.execution_id AND q.task_type <> 'webhook';
  IF running > 0 AND NOT p_include_running THEN
    RETURN NULL;
  END IF;
  SELECT * INTO w FROM queue_workers WHERE uid = p_worker;
  silence := extract(epoch FROM now() - w.last_heartbeat_at);
  IF p_cause = 'drained' AND w.lifecycle = 'active' THEN
    RETURN NULL;  -- it came back (a new session) since the caller looked
  END IF;
  IF p_cause LIKE 'lost\_%' THEN
    IF silence IS NULL OR silence <= p_silent_seconds
       OR (p_cause = 'lost_in_dispatch' AND has_local_work_v2(p_job, s.execution_id)) THEN
      RETURN NULL;
    END IF;
  END IF;

  why := 'worker ' || p_worker || ' ' || CASE p_cause
    WHEN 'lost_in_dispatch' THEN 'lost (no heartbeat for ' || format_seconds_v2(silence) || ', no local work)'
    WHEN 'lost_after_delay' THEN 'lost (no heartbeat for ' || format_seconds_v2(silence)
                                 || ', longer than the reassignment delay of ' || format_seconds_v2(p_silent_seconds) || ')'
    WHEN 'lost_reserved' THEN 'lost its reservation (last heartbeat ' || format_seconds_v2(silence) || ' ago)'
    ELSE p_cause END;

  IF p_cause LIKE 'lost\_%' AND s.lost_workers >= j.max_attempts THEN
    UPDATE queue_tasks SET state = 'failed', finished_at = now(),
                           last_failure = why || ': the job has lost its worker ' || s.lost_workers || ' times'
     WHERE job_id = p_job AND execution_id = s.execution_id AND task_type <> 'webhook'
       AND state IN ('blocked', 'pending', 'retry_wait');
    UPDATE jobs SET last_error = 'lost its worker ' || (s.lost_workers + 1) || ' times (max_attempts '
                                 || j.max_attempts || '); last: ' || why
     WHERE id = p_job;
    PERFORM refresh_job_v1(p_job, why || ': the job has lost its worker ' || (s.lost_workers + 1)
                                  || ' times, no more attempts');
    RETURN NULL;
  END IF;

  IF running = 0 AND NOT dispatched THEN
    UPDATE job_schedule SET assigned_worker_uid = NULL WHERE job_id = p_job;
    PERFORM refresh_job_v1(p_job, why || ': its dispatch is retried by any worker');
    PERFORM count_reassignment_v2(p_cause);
    PERFORM pg_notify('jetencode_queue_tasks', 'media');
    RETURN s.execution_id;
  END IF;
  RETURN redispatch_job_v2(p_job, p_cause, why, 0);
END
$$;

-- Move every job pinned to p_worker that release_job_v2 says may move; busy ones are left to the
-- recovery loop's next pass. Returns how many moved.
CREATE OR REPLACE FUNCTION release_worker_jobs_v2(p_worker text, p_cause text, p_include_running boolean)
RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
  c record;
  moved int := 0;
BEGIN
  FOR c IN
    SELECT s.job_id FROM job_schedule s JOIN jobs j ON j.id = s.job_id
     WHERE s.group_key = p_worker AND s.assigned_worker_uid = p_worker AND s.required_worker_uid IS NULL
       AND j.status IN ('pending', 'retry_wait', 'paused', 'running')
     ORDER BY s.priority DESC, s.position
  LOOP
    BEGIN
      IF release_job_v2(c.job_id, p_worker, p_cause, p_include_running) IS NOT NULL THEN
        moved := moved + 1;
      END IF;
    EXCEPTION WHEN SQLSTATE 'JE409' OR SQLSTATE 'JE404' THEN
      CONTINUE;
    END;
  END LOOP;
  RETURN moved;
END
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

-- ---- Leaving workers -------------------------------------------------------------------------

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
                           left_at = CASE WHEN p_lifecycle = 'offline' THEN now() ELSE left_at END,
                           drained_at = CASE WHEN p_lifecycle = 'draining' THEN coalesce(drained_at, now())
                                             WHEN p_lifecycle = 'active' THEN NULL ELSE drained_at END
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

-- An operator drains a worker (API, dashboard, admin): it finishes what it runs and claims nothing
-- new; its idle pinned jobs move at once, the others as soon as their running stage ends (the
-- recovery loop's release pass).
CREATE OR REPLACE FUNCTION drain_worker_v2(p_uid text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  result text;
BEGIN
  UPDATE queue_workers SET lifecycle = 'draining', drained_at = coalesce(drained_at, now())
   WHERE uid = p_uid AND lifecycle <> 'offline'
  RETURNING lifecycle INTO result;
  IF NOT FOUND THEN
    IF EXISTS (SELECT 1 FROM queue_workers WHERE uid = p_uid) THEN
      RAISE EXCEPTION USING ERRCODE = 'JE409', MESSAGE = 'worker ' || p_uid || ' is offline';
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'JE404', MESSAGE = 'worker not found';
  END IF;
  PERFORM release_worker_jobs_v2(p_uid, 'drained', false);
  RETURN result;
END
$$;

-- The running stages of split jobs (placement cluster, not webhooks) on worker p_uid go back to
-- pending at once, without using up an attempt (as a release on SIGTERM): their leases are cleared,
-- so the worker's next heartbeat or progress write is refused and it kills their FFmpeg, and any
-- other worker claims them. A row busy right now is skipped (SKIP LOCKED): waiting could deadlock
-- with the worker's own heartbeat, which renews these tasks' leases and then updates the worker row
-- an evacuation holds; the caller hands back the skipped ones in a later transaction
-- (cluster_tasks_running_v1). Returns how many.
CREATE OR REPLACE FUNCTION hand_back_cluster_tasks_v1(p_uid text) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
  c record;
  s job_schedule%ROWTYPE;
  t queue_tasks%ROWTYPE;
  token uuid;
  moved int := 0;
BEGIN
  FOR c IN
    SELECT q.id, q.job_id FROM queue_tasks q
     WHERE q.claimed_worker_session_id = (SELECT w.current_session_id FROM queue_workers w WHERE w.uid = p_uid)
       AND q.state = 'running' AND q.placement = 'cluster' AND q.task_type <> 'webhook'
  LOOP
    SELECT * INTO s FROM job_schedule js WHERE js.job_id = c.job_id FOR NO KEY UPDATE SKIP LOCKED;
    CONTINUE WHEN NOT FOUND;
    SELECT * INTO t FROM queue_tasks q WHERE q.id = c.id AND q.state = 'running' FOR UPDATE SKIP LOCKED;
    CONTINUE WHEN NOT FOUND;
    token := t.lease_token;
    UPDATE queue_tasks q SET state = 'pending', attempt = greatest(q.attempt - 1, 0), available_at = now(),
                             lease_token = NULL, lease_expires_at = NULL, deadline_at = NULL, progress = 0
     WHERE q.id = t.id RETURNING q.* INTO t;
    PERFORM audit_v1(t, 'release', true, 'worker ' || p_uid || ' evacuated', token, p_uid, t.claimed_worker_session_id);
    PERFORM refresh_job_v1(t.job_id, t.task_type || ' moved off ' || p_uid || ': the worker is being evacuated');
    moved := moved + 1;
  END LOOP;
  IF moved > 0 THEN
    PERFORM pg_notify('jetencode_queue_tasks', 'media');
    PERFORM pg_notify('jetencode_queue_tasks', 'background');
  END IF;
  RETURN moved;
END
$$;

-- How many split-job stages (placement cluster, not webhooks) the worker's current session still
-- runs: what an evacuation's hand-back skipped because their rows were locked at that instant
-- (scheduler.repository.evacuate_worker tries again, each time in a transaction of its own).
CREATE OR REPLACE FUNCTION cluster_tasks_running_v1(p_uid text) RETURNS int
LANGUAGE sql STABLE AS $$
  SELECT count(*)::int FROM queue_tasks q
   WHERE q.claimed_worker_session_id = (SELECT w.current_session_id FROM queue_workers w WHERE w.uid = p_uid)
     AND q.state = 'running' AND q.placement = 'cluster' AND q.task_type <> 'webhook'
$$;

-- Evacuate: drain the worker (unless it is offline already) and move every job pinned to it now,
-- running stages included (they are fenced out and redone in the new execution). JE404 for an
-- unknown worker, JE409 for an offline one with nothing to move. Returns how many jobs moved, plus the split-job stages it
-- handed back (hand_back_cluster_tasks_v1).
CREATE OR REPLACE FUNCTION evacuate_worker_v2(p_uid text) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
  current text;
  moved int;
BEGIN
  SELECT lifecycle INTO current FROM queue_workers WHERE uid = p_uid FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'JE404', MESSAGE = 'worker not found';
  END IF;
  -- An offline worker stays offline, but if its session comes back it comes back draining.
  UPDATE queue_workers SET lifecycle = CASE WHEN current = 'offline' THEN 'offline' ELSE 'draining' END,
                           drained_at = coalesce(drained_at, now())
   WHERE uid = p_uid;
  moved := release_worker_jobs_v2(p_uid, 'evacuated', true);
  -- A split job is pinned to no worker: its stages running here are handed back one by one.
  moved := moved + hand_back_cluster_tasks_v1(p_uid);
  IF current = 'offline' AND moved = 0 THEN
    RAISE EXCEPTION USING ERRCODE = 'JE409', MESSAGE = 'worker ' || p_uid || ' is offline and holds no jobs to move';
  END IF;
  RETURN moved;
END
$$;

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
  UPDATE queue_workers SET lifecycle = 'active', drained_at = NULL WHERE uid = p_uid AND lifecycle = 'draining';
  RETURN 'active';
END
$$;
