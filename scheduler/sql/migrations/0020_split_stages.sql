-- Installed by migration 0020_split_stages: the statements of scheduler/sql/functions/ that changed
-- since the migration before it (a delta, written by `python -m scheduler.sqlfiles delta`).
-- Never edit it: a later change ships in a new migration with a delta of its own.

-- The end of a failed attempt (a stage's error, an expired lease), written on the locked task in
-- the transaction that records the failure: cancelled when p_cancelled; retry_wait, available after
-- retry_delay_v1, while p_retryable and attempts remain; else failed for good, and the job's
-- last_error says why (a webhook never speaks for its job). Returns the task as written.
CREATE OR REPLACE FUNCTION retry_or_fail_v1(t queue_tasks, p_cancelled boolean, p_retryable boolean,
                                            p_failure text) RETURNS queue_tasks
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
DECLARE
  next_state text := CASE WHEN p_cancelled THEN 'cancelled'
                          WHEN p_retryable AND t.attempt < t.max_attempts THEN 'retry_wait'
                          ELSE 'failed' END;
BEGIN
  UPDATE queue_tasks q SET
    state = next_state,
    available_at = CASE WHEN next_state = 'retry_wait' THEN now() + retry_delay_v1(q.attempt) ELSE q.available_at END,
    finished_at = CASE WHEN next_state = 'retry_wait' THEN NULL ELSE now() END,
    last_failure = p_failure
  WHERE q.id = t.id RETURNING q.* INTO t;
  IF next_state = 'failed' AND t.task_type <> 'webhook' THEN
    UPDATE jobs SET last_error = p_failure WHERE id = t.job_id;
  END IF;
  RETURN t;
END
$$;

-- Recompute what the claim index and the job row derive from the job's tasks: runnable columns,
-- status, progress, timestamps; append p_log to the job log; insert the terminal webhook when the job
-- enters a terminal status. Called by every transition, after it has locked the job_schedule row
-- (the enqueue and the claim write the same result directly; tests/scheduler/test_write_path.py
-- checks that a full refresh afterwards changes nothing). Webhook deliveries never influence the
-- job's status; every other task does, whatever its placement (a split transcode's chunks are
-- `cluster`). completed and cancelled are final; failed is left only by a retry. A split job's
-- progress may go down (a restarted chunk gives its frames back); any other job's never does.
-- Returns the job's status.
CREATE OR REPLACE FUNCTION refresh_job_v1(p_job uuid, p_log text DEFAULT NULL) RETURNS text
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
DECLARE
  s job_schedule%ROWTYPE;
  j record;
  a record;
  new_status text;
  runnable boolean;
BEGIN
  SELECT * INTO s FROM job_schedule WHERE job_id = p_job;
  SELECT status, webhook_url, manual_retry_count, progress INTO j FROM jobs WHERE id = p_job;
  SELECT
    count(*) FILTER (WHERE state = 'running') AS running,
    count(*) FILTER (WHERE state = 'failed') AS failed,
    count(*) FILTER (WHERE state = 'pending') AS ready,
    count(*) FILTER (WHERE state = 'retry_wait') AS retrying,
    count(*) FILTER (WHERE state IN ('pending', 'retry_wait', 'blocked')) AS waiting,
    count(*) AS total,
    min(available_at) FILTER (WHERE state IN ('pending', 'retry_wait') AND pool = 'media') AS media_at,
    jsonb_agg(DISTINCT resource_category) FILTER (WHERE state IN ('pending', 'retry_wait') AND pool = 'media') AS cats,
    min(vram_mb) FILTER (WHERE state IN ('pending', 'retry_wait') AND pool = 'media') AS min_vram,
    min(available_at) FILTER (WHERE state IN ('pending', 'retry_wait') AND pool = 'background') AS bg_at
  INTO a
  FROM queue_tasks
  WHERE job_id = p_job AND execution_id = s.execution_id AND task_type <> 'webhook';

  new_status := CASE
    WHEN s.cancel_requested_at IS NOT NULL THEN CASE WHEN a.running > 0 THEN 'running' ELSE 'cancelled' END
    WHEN a.running > 0 THEN 'running'
    WHEN a.failed > 0 THEN 'failed'
    WHEN a.waiting > 0 AND s.paused THEN 'paused'
    WHEN a.ready > 0 THEN 'pending'
    WHEN a.retrying > 0 THEN 'retry_wait'
    WHEN a.waiting > 0 THEN 'pending'
    WHEN a.total > 0 THEN 'completed'
    ELSE j.status
  END;
  -- completed and cancelled are final; only a manual retry (which resets tasks first) leaves failed.
  IF j.status IN ('completed', 'cancelled') THEN
    new_status := j.status;
  END IF;

  -- A failed stage holds the rest of its execution until an operator retries it.
  runnable := a.failed = 0 AND NOT s.paused AND s.cancel_requested_at IS NULL
              AND new_status NOT IN ('completed', 'cancelled', 'failed');
  UPDATE job_schedule SET
    media_runnable_at = CASE WHEN runnable THEN a.media_at END,
    media_categories = CASE WHEN runnable AND a.media_at IS NOT NULL THEN a.cats END,
    media_min_vram = CASE WHEN runnable AND a.media_at IS NOT NULL THEN a.min_vram END,
    background_runnable_at = CASE WHEN runnable THEN a.bg_at END
  WHERE job_id = p_job
    AND (media_runnable_at, media_categories, media_min_vram, background_runnable_at) IS DISTINCT FROM
        (CASE WHEN runnable THEN a.media_at END,
         CASE WHEN runnable AND a.media_at IS NOT NULL THEN a.cats END,
         CASE WHEN runnable AND a.media_at IS NOT NULL THEN a.min_vram END,
         CASE WHEN runnable THEN a.bg_at END);

  UPDATE jobs SET
    status = new_status,
    -- Weighted by the work of each stage (15_progress); 100 only once completed, never lower.
    progress = CASE WHEN new_status = 'completed' THEN 100
                    WHEN new_status IN ('failed', 'cancelled') THEN progress
                    WHEN EXISTS (SELECT 1 FROM queue_tasks q WHERE q.job_id = p_job AND q.execution_id = s.execution_id
                                    AND q.task_type = 'transcode.chunk')
                      THEN least(99, floor(coalesce(job_progress_v1(p_job, s.execution_id), 0)))::smallint
                    ELSE greatest(progress, least(99, floor(coalesce(job_progress_v1(p_job, s.execution_id), 0)))::smallint) END,
    started_at = coalesce(started_at, CASE WHEN new_status = 'running' THEN now() END),
    finished_at = CASE WHEN new_status IN ('completed', 'failed', 'cancelled') THEN coalesce(finished_at, now()) END,
    log = CASE WHEN p_log IS NULL THEN log ELSE right(log || log_line_v1(p_log), 65536) END,
    updated_at = now()
  WHERE id = p_job;

  IF new_status IN ('completed', 'failed', 'cancelled') AND new_status IS DISTINCT FROM j.status
     AND j.webhook_url IS NOT NULL THEN
    PERFORM enqueue_webhook_v1(p_job, s.execution_id, new_status, j.webhook_url, j.manual_retry_count);
  END IF;
  RETURN new_status;
END
$$;

-- The weighted progress (0..100, unrounded) of execution p_execution of job p_job, from its plan;
-- NULL when the execution has no counted task. Reads only; the callers store it. PL/pgSQL, so the
-- plan is kept per session (every progress report runs it).
CREATE OR REPLACE FUNCTION job_progress_v1(p_job uuid, p_execution int) RETURNS float
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
AS $$
BEGIN
  RETURN (WITH tasks AS (
    -- A split job's stages count in the groups of the unsplit stages they stand for: the group their
    -- payload names, else a split transcode's.
    SELECT CASE WHEN q.placement = 'dispatch' THEN 'dispatch'
                WHEN q.payload ? 'progress_group' THEN q.payload ->> 'progress_group'
                WHEN q.task_type = 'transcode.chunk' THEN 'transcode.rendition'
                WHEN q.task_type = 'transcode.audio' THEN 'transcode.thumbnail'
                WHEN q.task_type IN ('transcode.chunk_quality', 'transcode.split_quality') THEN 'transcode.quality'
                ELSE q.task_type END AS grp,
           task_weight_v1(q.payload) AS w,
           CASE WHEN q.state = 'completed' THEN 100 ELSE q.progress END AS p
      FROM queue_tasks q
     WHERE q.job_id = p_job AND q.execution_id = p_execution AND q.task_type <> 'webhook'
       AND q.state <> 'cancelled'
  ), groups AS (
    SELECT grp, sum(w * p) / sum(w) AS p FROM tasks GROUP BY grp
  ), plan AS (
    SELECT e.key AS grp, e.value::float AS share
      FROM jobs j, jsonb_each_text(progress_plan_v1(j.type, j.params)) e
     WHERE j.id = p_job AND e.value::float > 0
  )
  SELECT CASE
    WHEN NOT EXISTS (SELECT 1 FROM tasks) THEN NULL
    WHEN NOT EXISTS (SELECT 1 FROM plan) THEN (SELECT avg(p) FROM tasks)
    ELSE (SELECT sum(plan.share * coalesce(g.p, 0)) / sum(plan.share) FROM plan LEFT JOIN groups g USING (grp))
  END);
END
$$;

-- Whether job p_job has, besides task p_task, a stage of the pool pinned to its worker (placement
-- 'job') or open to any worker (a split job's `cluster` stages) that can run now, in the job's
-- current execution. False when p_job is NULL.
CREATE OR REPLACE FUNCTION pinned_siblings_runnable_v1(p_job uuid, p_task bigint, p_pool text) RETURNS boolean
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
SET jit = off
AS $$
BEGIN
  IF p_job IS NULL THEN
    RETURN false;
  END IF;
  RETURN EXISTS (
    SELECT 1 FROM job_schedule js JOIN queue_tasks q ON q.job_id = js.job_id AND q.execution_id = js.execution_id
     WHERE js.job_id = p_job AND q.id IS DISTINCT FROM p_task AND q.pool = p_pool AND q.placement IN ('job', 'cluster')
       AND q.task_type <> 'webhook'
       AND q.state IN ('pending', 'retry_wait') AND q.available_at <= now());
END
$$;

-- The claim: one round trip, the design's steps. At most one task per call, only for the worker's
-- current session (JE410 otherwise) while it is active, within its free capacity (pool slots,
-- per-category limits, VRAM), in claim order (priority, position, availability, creation, id),
-- honouring placement (a job's stages stay on its assigned worker), targets and reservations.
-- The task comes back running under a fresh lease; no row or empty: nothing to claim.
CREATE OR REPLACE FUNCTION claim_task_v1(p_worker text, p_session uuid, p_pool text, p_lease_seconds float)
RETURNS TABLE (
  id bigint, job_id uuid, execution_id int, task_type text, payload jsonb, attempt int, max_attempts int,
  lease_token uuid, lease_expires_at timestamptz, deadline_at timestamptz, pool text, placement text,
  resource_category text, vram_mb int, timeout_seconds float, job_type text, job_params jsonb,
  job_hardware text
)
LANGUAGE plpgsql
-- The walk must follow the claim index in order and stop at the first eligible job. Statistics on a
-- queue table are always stale (rows change state every few milliseconds), and a bitmap scan plus a
-- sort of every runnable job would make each claim cost O(queue length) inside the serialized
-- section; these settings keep the planner on ordered index scans whatever the statistics say.
SET enable_sort = off
SET enable_bitmapscan = off
-- A plan that still needs a sort (the background walk orders across two tables) is costed at the
-- "disabled" penalty (1e10), far above jit_above_cost: without this, every such claim spent ~1 s
-- JIT-compiling inside the serialized section.
SET jit = off
SET enable_seqscan = off
AS $$
DECLARE
  w queue_workers%ROWTYPE;
  used record;
  allowed text[];
  vram_free int;
  cand record;
  s job_schedule%ROWTYPE;
  t queue_tasks%ROWTYPE;
  left_to_run record;
  job record;
BEGIN
  -- 1. The worker row, and the session must be the current one.
  SELECT * INTO w FROM queue_workers q WHERE q.uid = p_worker FOR NO KEY UPDATE;
  IF NOT FOUND OR w.current_session_id IS DISTINCT FROM p_session THEN
    RAISE EXCEPTION USING ERRCODE = 'JE410', MESSAGE = 'uid taken over by a newer session: ' || p_worker;
  END IF;
  IF w.lifecycle <> 'active' THEN
    RETURN;
  END IF;

  -- The claim's commit does not wait for its WAL flush, so the scheduler lock is held for the
  -- selection only, not for an fdatasync (nor does an empty claim wait for one for its row lock).
  -- Safe: the worker's next synchronous write (progress, heartbeat, finish) flushes the WAL up to
  -- and including this claim first, and a claim lost in a database crash leaves the task pending;
  -- the worker's later writes are then fenced out.
  PERFORM set_config('synchronous_commit', 'off', true);

  -- 2. The capacity guard counts this session's running tasks. Before the scheduler lock: the worker
  -- row lock above already serializes this session's claims (the count cannot grow under us, and
  -- finishes only lower it), and a full worker returns without queueing on the lock.
  SELECT count(*) FILTER (WHERE q.pool = 'media') AS media,
         count(*) FILTER (WHERE q.pool = 'background') AS background,
         count(*) FILTER (WHERE q.pool = 'media' AND q.resource_category = 'cpu') AS cpu,
         count(*) FILTER (WHERE q.pool = 'media' AND q.resource_category = 'gpu_encode') AS gpu_encode,
         count(*) FILTER (WHERE q.pool = 'media' AND q.resource_category = 'gpu_ai') AS gpu_ai,
         coalesce(sum(q.vram_mb) FILTER (WHERE q.pool = 'media'), 0) AS vram
  INTO used
  FROM queue_tasks q
  WHERE q.claimed_worker_session_id = p_session AND q.state = 'running';

  IF p_pool = 'media' THEN
    IF used.media >= w.concurrency THEN
      RETURN;
    END IF;
    allowed := array_remove(ARRAY[
      CASE WHEN coalesce((w.category_limits ->> 'cpu')::int, 0) > used.cpu THEN 'cpu' END,
      CASE WHEN coalesce((w.category_limits ->> 'gpu_encode')::int, 0) > used.gpu_encode THEN 'gpu_encode' END,
      CASE WHEN coalesce((w.category_limits ->> 'gpu_ai')::int, 0) > used.gpu_ai THEN 'gpu_ai' END], NULL);
    IF cardinality(allowed) = 0 THEN
      RETURN;
    END IF;
    vram_free := w.vram_total_mb - used.vram;
  ELSIF used.background >= w.background_slots THEN
    RETURN;
  END IF;

  -- 3. Serialize selection with operator controls.
  PERFORM 1 FROM queue_scheduler_state st WHERE st.id = 1 FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'queue_scheduler_state singleton row is missing: run migrations or re-seed it';
  END IF;

  IF p_pool = 'media' THEN
    -- 4. Walk the claim index of the worker's group and the pending group, merged in claim order.
    FOR cand IN
      SELECT c.job_id FROM (
        (SELECT js.job_id, js.priority, js.position, js.media_runnable_at
           FROM job_schedule js
          WHERE js.group_key = p_worker AND js.media_runnable_at IS NOT NULL
          ORDER BY js.priority DESC, js.position, js.media_runnable_at, js.job_id)
        UNION ALL
        (SELECT js.job_id, js.priority, js.position, js.media_runnable_at
           FROM job_schedule js
          WHERE js.group_key = '' AND js.media_runnable_at IS NOT NULL
          ORDER BY js.priority DESC, js.position, js.media_runnable_at, js.job_id)
      ) c
      ORDER BY c.priority DESC, c.position, c.media_runnable_at, c.job_id
    LOOP
      -- 5. Lock the job's schedule row; re-check every eligibility predicate on the locked row.
      SELECT * INTO s FROM job_schedule js
      WHERE js.job_id = cand.job_id
        AND js.media_runnable_at <= now()
        AND js.group_key IN (p_worker, '')
        AND NOT js.paused AND js.cancel_requested_at IS NULL
        AND js.media_categories ?| allowed
        AND js.media_min_vram <= vram_free
        AND ((js.execution_mode = 'shared' AND w.reservation_id IS NULL)
             OR (js.execution_mode = 'dedicated' AND js.reservation_id = w.reservation_id))
        AND (js.required_category IS NULL
             OR (coalesce((w.category_limits ->> js.required_category)::int, 0) > 0
                 AND w.vram_total_mb >= js.required_vram_mb))
      FOR UPDATE SKIP LOCKED;
      CONTINUE WHEN NOT FOUND;

      -- 6. The job's first runnable task that fits, in claim order.
      SELECT * INTO t FROM queue_tasks q
      WHERE q.job_id = s.job_id AND q.execution_id = s.execution_id
        AND q.state IN ('pending', 'retry_wait') AND q.available_at <= now()
        AND q.pool = 'media'
        AND q.resource_category = ANY (allowed) AND q.vram_mb <= vram_free
        AND (q.target_worker_uid IS NULL OR q.target_worker_uid = p_worker)
        AND CASE q.placement
              WHEN 'dispatch' THEN coalesce(s.assigned_worker_uid, s.required_worker_uid, p_worker) = p_worker
              WHEN 'job' THEN s.assigned_worker_uid = p_worker
              ELSE true END
      ORDER BY q.available_at, q.created_at, q.id
      LIMIT 1
      FOR UPDATE SKIP LOCKED;
      CONTINUE WHEN NOT FOUND;
      EXIT;
    END LOOP;
  ELSE
    FOR cand IN
      SELECT q.id AS task_id, q.job_id
        FROM queue_tasks q JOIN job_schedule js ON js.job_id = q.job_id
       WHERE q.pool = 'background' AND q.state IN ('pending', 'retry_wait') AND q.available_at <= now()
         AND ((js.execution_mode = 'shared' AND w.reservation_id IS NULL)
              OR (js.execution_mode = 'dedicated' AND js.reservation_id = w.reservation_id))
         AND CASE WHEN q.task_type = 'webhook' THEN true
                  WHEN q.placement = 'cluster' THEN js.background_runnable_at IS NOT NULL
                  ELSE js.assigned_worker_uid = p_worker AND js.background_runnable_at IS NOT NULL END
       ORDER BY js.priority DESC, js.position, q.available_at, q.created_at, q.id
    LOOP
      SELECT * INTO s FROM job_schedule js WHERE js.job_id = cand.job_id FOR UPDATE SKIP LOCKED;
      CONTINUE WHEN NOT FOUND;
      SELECT * INTO t FROM queue_tasks q
      WHERE q.id = cand.task_id AND q.state IN ('pending', 'retry_wait') AND q.available_at <= now()
        AND q.execution_id = s.execution_id
        AND (q.task_type = 'webhook'
             OR ((q.placement = 'cluster' OR s.assigned_worker_uid = p_worker)
                 AND NOT s.paused AND s.cancel_requested_at IS NULL AND s.background_runnable_at IS NOT NULL))
      FOR UPDATE SKIP LOCKED;
      CONTINUE WHEN NOT FOUND;
      EXIT;
    END LOOP;
  END IF;

  IF t.id IS NULL THEN
    RETURN;
  END IF;

  -- 7. The task gets a fresh lease. Commit returns it.
  UPDATE queue_tasks q SET
    state = 'running', attempt = q.attempt + 1, lease_token = gen_random_uuid(),
    claimed_by = p_worker, claimed_worker_session_id = p_session, claimed_reservation_id = w.reservation_id,
    lease_expires_at = now() + make_interval(secs => p_lease_seconds),
    deadline_at = now() + make_interval(secs => q.timeout_seconds),
    heartbeat_at = now(), started_at = now(), finished_at = NULL, progress = 0
  WHERE q.id = t.id
  RETURNING q.* INTO t;

  IF t.task_type = 'webhook' THEN
    -- Webhook deliveries never influence the job's derived columns.
    SELECT j.type, j.params, j.hardware INTO job FROM jobs j WHERE j.id = t.job_id;
  ELSE
    -- 8. refresh_job_v1, specialised to what a claim changes (tests/scheduler/test_write_path.py
    -- checks that a full refresh afterwards changes nothing). The job was runnable (the walk and
    -- the locked re-check above saw to that: no failed stage, not paused, not cancelling), so it is
    -- now running; its progress cannot rise (the claimed task restarts at 0); what is left to run
    -- is its other pending tasks. Dispatch establishes the worker assignment in the same update.
    SELECT min(q.available_at) FILTER (WHERE q.pool = 'media') AS media_at,
           jsonb_agg(DISTINCT q.resource_category) FILTER (WHERE q.pool = 'media') AS cats,
           min(q.vram_mb) FILTER (WHERE q.pool = 'media') AS min_vram,
           min(q.available_at) FILTER (WHERE q.pool = 'background') AS bg_at
      INTO left_to_run
      FROM queue_tasks q
     WHERE q.job_id = t.job_id AND q.execution_id = t.execution_id AND q.state IN ('pending', 'retry_wait')
       AND q.task_type <> 'webhook';
    UPDATE job_schedule js SET
      assigned_worker_uid = CASE WHEN t.placement = 'dispatch' THEN coalesce(js.assigned_worker_uid, p_worker)
                                 ELSE js.assigned_worker_uid END,
      media_runnable_at = left_to_run.media_at,
      media_categories = CASE WHEN left_to_run.media_at IS NOT NULL THEN left_to_run.cats END,
      media_min_vram = CASE WHEN left_to_run.media_at IS NOT NULL THEN left_to_run.min_vram END,
      background_runnable_at = left_to_run.bg_at
    WHERE js.job_id = t.job_id;
    UPDATE jobs j SET
      status = 'running',
      started_at = coalesce(j.started_at, now()),
      finished_at = NULL,
      log = right(j.log || log_line_v1(t.task_type || ' claimed by ' || p_worker
                                       || ' (attempt ' || t.attempt || '/' || t.max_attempts || ')'), 65536),
      updated_at = now()
    WHERE j.id = t.job_id
    RETURNING j.type, j.params, j.hardware INTO job;
  END IF;

  RETURN QUERY
    SELECT t.id, t.job_id, t.execution_id, t.task_type, t.payload, t.attempt, t.max_attempts, t.lease_token,
           t.lease_expires_at, t.deadline_at, t.pool, t.placement, t.resource_category, t.vram_mb,
           t.timeout_seconds, job.type, job.params, job.hardware;
END
$$;

-- Fenced progress and log lines from a running stage: the task's progress (clamped to 0..100) and
-- detail, the job's weighted progress (never lower than before, below 100), and the lines (4,000
-- characters each; stage logs keep their last 1,000 lines). Returns whether it was accepted and
-- whether the job asks for cancellation.
CREATE OR REPLACE FUNCTION report_progress_v1(p_task bigint, p_token uuid, p_worker text, p_session uuid,
                                              p_progress float, p_detail jsonb, p_lines text[])
RETURNS TABLE (accepted boolean, cancel_requested boolean, reason text)
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
DECLARE
  w queue_workers%ROWTYPE;
  s job_schedule%ROWTYPE;
  t queue_tasks%ROWTYPE;
  why text;
BEGIN
  SELECT * INTO w FROM queue_workers q WHERE q.uid = p_worker;
  SELECT * INTO t FROM queue_tasks q WHERE q.id = p_task FOR UPDATE;
  SELECT * INTO s FROM job_schedule js WHERE js.job_id = t.job_id;
  why := fence_reason_v1(t, s, w, p_token, p_worker, p_session);
  IF why IS NOT NULL THEN
    IF t.id IS NOT NULL THEN
      PERFORM audit_v1(t, 'progress', false, why, p_token, p_worker, p_session);
    END IF;
    RETURN QUERY SELECT false, s.cancel_requested_at IS NOT NULL, why;
    RETURN;
  END IF;
  IF p_progress IS NOT NULL OR p_detail IS NOT NULL THEN
    UPDATE queue_tasks q SET progress = coalesce(least(100, greatest(0, p_progress)), q.progress),
                             progress_detail = coalesce(p_detail, q.progress_detail)
    WHERE q.id = p_task;
    -- Weighted by the work of each stage (15_progress); below 100 until completed, never lower,
    -- except in a split job (its stages are `cluster`): a restarted chunk gives its frames back.
    UPDATE jobs j SET progress = CASE
        WHEN t.placement = 'cluster' THEN least(99, floor(coalesce(job_progress_v1(t.job_id, t.execution_id), 0)))::smallint
        ELSE greatest(j.progress, least(99, floor(coalesce(job_progress_v1(t.job_id, t.execution_id), 0)))::smallint) END
    WHERE j.id = t.job_id AND j.status <> 'completed';
  END IF;
  IF p_lines IS NOT NULL AND cardinality(p_lines) > 0 THEN
    INSERT INTO queue_task_logs (task_id, at, message) SELECT p_task, now(), left(line, 4000) FROM unnest(p_lines) line;
    DELETE FROM queue_task_logs l WHERE l.task_id = p_task AND l.id <= (
      SELECT l2.id FROM queue_task_logs l2 WHERE l2.task_id = p_task ORDER BY l2.id DESC OFFSET 1000 LIMIT 1);
  END IF;
  RETURN QUERY SELECT true, s.cancel_requested_at IS NOT NULL, NULL::text;
END
$$;

-- Successful finish: the task completes and its buffered children and outputs are published in the
-- same transaction. If the job was cancelled meanwhile, the task ends cancelled and nothing is
-- published. A second finish under the same token (a retry after a lost commit) is idempotent.
-- Children are deduplicated per execution (dedupe_key_v1), outputs by name.
-- The three final writes (finish, fail, release) wait at most a second for a row lock: a worker
-- sends them on the connection its heartbeats use (workers/db.py), and a write stuck behind an
-- operator's transaction must not hold up the lease renewals of the worker's other stages
-- (RELIABILITY rule 4). A timed-out write is an error the worker retries until the lease deadline.
CREATE OR REPLACE FUNCTION finish_task_v1(p_task bigint, p_token uuid, p_worker text, p_session uuid,
                                          p_result jsonb, p_children jsonb, p_outputs jsonb)
RETURNS TABLE (outcome text, reason text)
LANGUAGE plpgsql
SET enable_seqscan = off
SET lock_timeout = '1s'
AS $$
DECLARE
  fw record;
  s job_schedule%ROWTYPE;
  t queue_tasks%ROWTYPE;
  inserted int := 0;
  published int := 0;
  released int := 0;
BEGIN
  SELECT * INTO fw FROM begin_fenced_write_v1(p_task, 'finish', p_token, p_worker, p_session);
  IF fw.reason IS NOT NULL THEN
    RETURN QUERY SELECT fw.outcome, fw.reason;
    RETURN;
  END IF;
  s := fw.s; t := fw.t;

  IF s.cancel_requested_at IS NOT NULL THEN
    UPDATE queue_tasks q SET state = 'cancelled', finished_at = now(), last_failure = 'cancelled by an operator'
    WHERE q.id = p_task RETURNING q.* INTO t;
    PERFORM audit_v1(t, 'finish', true, 'cancelled: no children published', p_token, p_worker, p_session);
    PERFORM refresh_job_v1(t.job_id, t.task_type || ' stopped: job cancelled');
    RETURN QUERY SELECT 'cancelled'::text, NULL::text;
    RETURN;
  END IF;

  UPDATE queue_tasks q SET state = 'completed', finished_at = now(), progress = 100, result = p_result
  WHERE q.id = p_task RETURNING q.* INTO t;

  -- Most finishes publish nothing; skipping the empty inserts spares opening every index they touch.
  IF jsonb_array_length(coalesce(p_children, '[]'::jsonb)) > 0 THEN
    WITH children AS (
      SELECT c.value AS spec, c.ordinality - 1 AS idx
        FROM jsonb_array_elements(coalesce(p_children, '[]'::jsonb)) WITH ORDINALITY c
    ), rows AS (
      SELECT spec ->> 'task_type' AS task_type,
             coalesce(spec -> 'payload', '{}'::jsonb) || jsonb_build_object('parent_task_id', t.id, 'index', idx) AS payload,
             coalesce((spec ->> 'wait_for_siblings')::boolean, false) AS wait,
             spec, idx
        FROM children
    ), ins AS (
      INSERT INTO queue_tasks (job_id, execution_id, task_type, payload, parent_task_id, dedupe_key, wait_for_siblings,
                               placement, pool, resource_category, vram_mb, state, available_at, attempt,
                               max_attempts, timeout_seconds, progress, progress_detail, created_at)
      SELECT t.job_id, t.execution_id, task_type, payload, t.id, dedupe_key_v1(task_type, payload), wait,
             coalesce(spec ->> 'placement', 'job'), coalesce(spec ->> 'pool', 'media'),
             coalesce(spec ->> 'resource_category', 'cpu'), coalesce((spec ->> 'vram_mb')::int, 0),
             CASE WHEN wait THEN 'blocked' ELSE 'pending' END, now(), 0,
             CASE WHEN task_type = 'webhook' THEN 8 ELSE (SELECT max_attempts FROM jobs WHERE id = t.job_id) END,
             coalesce((spec ->> 'timeout_seconds')::float, 600), 0, '{}', now() + (idx * interval '1 microsecond')
        FROM rows
      ORDER BY idx
      ON CONFLICT (job_id, execution_id, dedupe_key) DO NOTHING
      RETURNING 1)
    SELECT count(*) INTO inserted FROM ins;
  END IF;

  IF jsonb_array_length(coalesce(p_outputs, '[]'::jsonb)) > 0 THEN
    WITH outs AS (
      INSERT INTO job_outputs (job_id, execution_id, task_id, name, kind, storage_url, size_bytes, metadata, created_at)
      SELECT t.job_id, t.execution_id, t.id, o ->> 'name', coalesce(o ->> 'kind', 'file'),
             coalesce(o ->> 'storage_url', ''), coalesce((o ->> 'size_bytes')::bigint, 0),
             coalesce(o -> 'metadata', '{}'::jsonb), now()
        FROM jsonb_array_elements(coalesce(p_outputs, '[]'::jsonb)) o
      ON CONFLICT (job_id, execution_id, name) DO NOTHING
      RETURNING 1)
    SELECT count(*) INTO published FROM outs;
  END IF;

  -- A task's children are published only by its own finish, so only then can any be blocked.
  IF inserted > 0 THEN
    released := unblock_siblings_v1(t.id, t.execution_id);
  END IF;
  IF t.parent_task_id IS NOT NULL THEN
    released := released + unblock_siblings_v1(t.parent_task_id, t.execution_id);
  END IF;

  PERFORM audit_v1(t, 'finish', true, NULL, p_token, p_worker, p_session);
  IF inserted > 0 OR published > 0 THEN
    PERFORM audit_v1(t, 'publish', true, inserted || ' children, ' || published || ' outputs',
                     p_token, p_worker, p_session);
  END IF;
  -- A dispatch whose children are all `cluster` (a split transcode, DECISIONS 19) leaves no local
  -- work: the job goes back to the pending group, where every worker's claim walk sees its stages.
  IF inserted > 0 AND t.placement = 'dispatch' AND NOT EXISTS (
       SELECT 1 FROM jsonb_array_elements(p_children) c WHERE coalesce(c ->> 'placement', 'job') <> 'cluster') THEN
    UPDATE job_schedule SET assigned_worker_uid = NULL WHERE job_id = t.job_id RETURNING * INTO s;
  END IF;
  PERFORM refresh_job_v1(t.job_id, CASE WHEN t.task_type = 'webhook' THEN NULL
    ELSE t.task_type || ' completed on ' || p_worker
         || CASE WHEN inserted > 0 THEN ', ' || inserted || ' stage(s) queued' ELSE '' END END);
  IF inserted > 0 OR released > 0 THEN
    -- The job's own stages can only go to its assigned worker: wake that one, not the farm. A split
    -- job's stages (no assigned worker) go to any: wake one free worker per stage, sixteen at most.
    IF s.assigned_worker_uid IS NULL AND inserted > 1 THEN
      PERFORM notify_pool_v1('media', NULL) FROM generate_series(2, least(inserted, 16));
    END IF;
    PERFORM notify_pool_v1('media', s.assigned_worker_uid);
    PERFORM notify_pool_v1('background', s.assigned_worker_uid);
  END IF;
  RETURN QUERY SELECT 'completed'::text, NULL::text;
END
$$;

-- Failed attempt: retry_wait with the quartic backoff while attempts remain (and p_retryable), else
-- failed for good; cancelled when the job is being cancelled (retry_or_fail_v1). The retry is
-- stored in the same transaction that records the failure, and the job's log says when it runs.
CREATE OR REPLACE FUNCTION fail_task_v1(p_task bigint, p_token uuid, p_worker text, p_session uuid,
                                        p_error text, p_retryable boolean)
RETURNS TABLE (outcome text, reason text)
LANGUAGE plpgsql
SET enable_seqscan = off
SET lock_timeout = '1s'
AS $$
DECLARE
  fw record;
  s job_schedule%ROWTYPE;
  t queue_tasks%ROWTYPE;
BEGIN
  SELECT * INTO fw FROM begin_fenced_write_v1(p_task, 'fail', p_token, p_worker, p_session);
  IF fw.reason IS NOT NULL THEN
    RETURN QUERY SELECT fw.outcome, fw.reason;
    RETURN;
  END IF;
  s := fw.s;
  t := retry_or_fail_v1(fw.t, s.cancel_requested_at IS NOT NULL, p_retryable, left(p_error, 16000));
  PERFORM audit_v1(t, 'fail', true, t.state, p_token, p_worker, p_session);
  PERFORM refresh_job_v1(t.job_id, CASE WHEN t.task_type = 'webhook' THEN NULL
    ELSE t.task_type || ' attempt ' || t.attempt || ' failed on ' || p_worker || ': '
         || left(split_part(p_error, E'\n', 1), 300)
         || CASE t.state WHEN 'retry_wait' THEN ' (retry at ' || to_char(t.available_at AT TIME ZONE 'UTC', 'HH24:MI:SS') || ' UTC)'
                         WHEN 'failed' THEN ' (no attempts left)' ELSE '' END END);
  RETURN QUERY SELECT t.state, NULL::text;
END
$$;

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

-- The running stages of split jobs (placement cluster, not webhooks) on worker p_uid go back to
-- pending at once, without using up an attempt (as a release on SIGTERM): their leases are cleared,
-- so the worker's next heartbeat or progress write is refused and it kills their FFmpeg, and any
-- other worker claims them. A job row busy right now is skipped (SKIP LOCKED). Returns how many.
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
  IF current <> 'offline' THEN
    UPDATE queue_workers SET lifecycle = 'draining' WHERE uid = p_uid;
  END IF;
  moved := release_worker_jobs_v2(p_uid, 'evacuated', true);
  -- A split job is pinned to no worker: its stages running here are handed back one by one.
  moved := moved + hand_back_cluster_tasks_v1(p_uid);
  IF current = 'offline' AND moved = 0 THEN
    RAISE EXCEPTION USING ERRCODE = 'JE409', MESSAGE = 'worker ' || p_uid || ' is offline and holds no jobs to move';
  END IF;
  RETURN moved;
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

-- The hook for jobs split across the farm (DECISIONS 19): such a job runs its chunks on many
-- workers, so it cannot be dedicated to one. True when the job's params ask for chunks; `auto` is
-- decided at the dispatch, which does not split a dedicated job (workers/stages/split.py).
CREATE OR REPLACE FUNCTION job_split_across_farm_v1(p_params jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(p_params ->> 'split' = 'chunks', false)
$$;
