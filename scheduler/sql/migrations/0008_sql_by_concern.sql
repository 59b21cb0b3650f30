-- Installed by migration 0008_sql_by_concern: the statements of scheduler/sql/functions/ that changed
-- since the migration before it (a delta, written by `python -m scheduler.sqlfiles delta`).
-- Never edit it: a later change ships in a new migration with a delta of its own.

-- The prologue of finish, fail and release. Locks the rows a fenced write of a stage's outcome
-- needs, in the canonical order: the task's worker (KEY SHARE: never waits behind that worker's
-- claims), the job's schedule row, the task; then checks the fence. reason NULL: the caller owns
-- the task and may write; s and t are the locked rows. Otherwise the caller answers (outcome,
-- reason) and writes nothing: 'rejected' and the fence's reason, audited as a rejected p_operation
-- (unless the task does not exist); or, for a finish replayed under the token that already
-- completed the task (a worker retrying after a lost commit), the task's state and 'already
-- recorded', not audited again. The locks are taken here rather than by calling
-- lock_for_fenced_write_v1: one PL/pgSQL call and one statement less per stage.
CREATE OR REPLACE FUNCTION begin_fenced_write_v1(p_task bigint, p_operation text, p_token uuid, p_worker text,
                                                 p_session uuid, OUT s job_schedule, OUT t queue_tasks,
                                                 OUT outcome text, OUT reason text)
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
DECLARE
  w queue_workers%ROWTYPE;
  job uuid;
  worker text;
BEGIN
  SELECT q.job_id, q.claimed_by INTO job, worker FROM queue_tasks q WHERE q.id = p_task;
  SELECT * INTO w FROM queue_workers q WHERE q.uid = worker FOR KEY SHARE;
  SELECT * INTO s FROM job_schedule js WHERE js.job_id = job FOR NO KEY UPDATE;
  SELECT * INTO t FROM queue_tasks q WHERE q.id = p_task FOR UPDATE;
  reason := fence_reason_v1(t, s, w, p_token, p_worker, p_session);
  IF reason IS NULL THEN
    RETURN;
  END IF;
  IF p_operation = 'finish' AND EXISTS (
       SELECT 1 FROM queue_fence_audit a
        WHERE a.task_id = p_task AND a.operation = 'finish' AND a.accepted AND a.lease_token = p_token) THEN
    outcome := t.state; reason := 'already recorded';
    RETURN;
  END IF;
  IF t.id IS NOT NULL THEN
    PERFORM audit_v1(t, p_operation, false, reason, p_token, p_worker, p_session);
  END IF;
  outcome := 'rejected';
END
$$;

-- The end of a failed attempt (a stage's error, an expired lease), written on the locked task in
-- the transaction that records the failure: cancelled when p_cancelled; retry_wait, available after
-- retry_delay_v1, while p_retryable and attempts remain; else failed for good, and the job's
-- last_error says why (a cluster task never speaks for its job). Returns the task as written.
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
  IF next_state = 'failed' AND t.placement <> 'cluster' THEN
    UPDATE jobs SET last_error = p_failure WHERE id = t.job_id;
  END IF;
  RETURN t;
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
  -- selection only, not for an fdatasync. Safe: the worker's next synchronous write (progress,
  -- heartbeat, finish) flushes the WAL up to and including this claim first, and a claim lost in a
  -- database crash leaves the task pending; the worker's later writes are then fenced out.
  PERFORM set_config('synchronous_commit', 'off', true);
  -- 2. Serialize selection with operator controls.
  PERFORM 1 FROM queue_scheduler_state st WHERE st.id = 1 FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION 'queue_scheduler_state singleton row is missing: run migrations or re-seed it';
  END IF;

  -- 3. The capacity guard counts this session's running tasks.
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
    IF used.background >= w.background_slots THEN
      RETURN;
    END IF;
    FOR cand IN
      SELECT q.id AS task_id, q.job_id
        FROM queue_tasks q JOIN job_schedule js ON js.job_id = q.job_id
       WHERE q.pool = 'background' AND q.state IN ('pending', 'retry_wait') AND q.available_at <= now()
         AND ((js.execution_mode = 'shared' AND w.reservation_id IS NULL)
              OR (js.execution_mode = 'dedicated' AND js.reservation_id = w.reservation_id))
         AND CASE q.placement WHEN 'cluster' THEN true
                              ELSE js.assigned_worker_uid = p_worker AND js.background_runnable_at IS NOT NULL END
       ORDER BY js.priority DESC, js.position, q.available_at, q.created_at, q.id
    LOOP
      SELECT * INTO s FROM job_schedule js WHERE js.job_id = cand.job_id FOR UPDATE SKIP LOCKED;
      CONTINUE WHEN NOT FOUND;
      SELECT * INTO t FROM queue_tasks q
      WHERE q.id = cand.task_id AND q.state IN ('pending', 'retry_wait') AND q.available_at <= now()
        AND q.execution_id = s.execution_id
        AND (q.placement = 'cluster'
             OR (s.assigned_worker_uid = p_worker AND NOT s.paused AND s.cancel_requested_at IS NULL
                 AND s.background_runnable_at IS NOT NULL))
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

  IF t.placement = 'cluster' THEN
    -- Cluster tasks (webhooks) never influence the job's derived columns.
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
       AND q.placement <> 'cluster';
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

-- Successful finish: the task completes and its buffered children and outputs are published in the
-- same transaction. If the job was cancelled meanwhile, the task ends cancelled and nothing is
-- published. A second finish under the same token (a retry after a lost commit) is idempotent.
-- Children are deduplicated per execution (dedupe_key_v1), outputs by name.
CREATE OR REPLACE FUNCTION finish_task_v1(p_task bigint, p_token uuid, p_worker text, p_session uuid,
                                          p_result jsonb, p_children jsonb, p_outputs jsonb)
RETURNS TABLE (outcome text, reason text)
LANGUAGE plpgsql
SET enable_seqscan = off
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
  PERFORM refresh_job_v1(t.job_id, CASE WHEN t.placement = 'cluster' THEN NULL
    ELSE t.task_type || ' completed on ' || p_worker
         || CASE WHEN inserted > 0 THEN ', ' || inserted || ' stage(s) queued' ELSE '' END END);
  IF inserted > 0 OR released > 0 THEN
    PERFORM pg_notify('jetencode_queue_tasks', 'media');
    PERFORM pg_notify('jetencode_queue_tasks', 'background');
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
  PERFORM refresh_job_v1(t.job_id, CASE WHEN t.placement = 'cluster' THEN NULL
    ELSE t.task_type || ' attempt ' || t.attempt || ' failed on ' || p_worker || ': '
         || left(split_part(p_error, E'\n', 1), 300)
         || CASE t.state WHEN 'retry_wait' THEN ' (retry at ' || to_char(t.available_at AT TIME ZONE 'UTC', 'HH24:MI:SS') || ' UTC)'
                         WHEN 'failed' THEN ' (no attempts left)' ELSE '' END END);
  RETURN QUERY SELECT t.state, NULL::text;
END
$$;

-- Hand a task back on shutdown: pending again (cancelled if the job is being cancelled), without
-- using up an attempt, its lease cleared; the pool is notified so another slot takes it at once.
CREATE OR REPLACE FUNCTION release_task_v1(p_task bigint, p_token uuid, p_worker text, p_session uuid, p_why text)
RETURNS TABLE (outcome text, reason text)
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
DECLARE
  fw record;
  s job_schedule%ROWTYPE;
  t queue_tasks%ROWTYPE;
  next_state text;
BEGIN
  SELECT * INTO fw FROM begin_fenced_write_v1(p_task, 'release', p_token, p_worker, p_session);
  IF fw.reason IS NOT NULL THEN
    RETURN QUERY SELECT fw.outcome, fw.reason;
    RETURN;
  END IF;
  s := fw.s; t := fw.t;
  next_state := CASE WHEN s.cancel_requested_at IS NOT NULL THEN 'cancelled' ELSE 'pending' END;
  UPDATE queue_tasks q SET state = next_state, attempt = greatest(q.attempt - 1, 0), available_at = now(),
                           lease_token = NULL, lease_expires_at = NULL, deadline_at = NULL, progress = 0,
                           finished_at = CASE WHEN next_state = 'cancelled' THEN now() END
  WHERE q.id = p_task RETURNING q.* INTO t;
  PERFORM audit_v1(t, 'release', true, p_why, p_token, p_worker, p_session);
  PERFORM refresh_job_v1(t.job_id, t.task_type || ' handed back by ' || p_worker || ': ' || p_why);
  PERFORM pg_notify('jetencode_queue_tasks', t.pool);
  RETURN QUERY SELECT next_state, NULL::text;
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
    PERFORM refresh_job_v1(t.job_id, CASE WHEN t.placement = 'cluster' THEN NULL
                                          ELSE t.task_type || ' ' || why || ' -> ' || t.state END);
    task_id := t.id; outcome := t.state;
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
