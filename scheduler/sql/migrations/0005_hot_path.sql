-- Installed by migration 0005_hot_path: the statements of scheduler/sql/functions/ that changed
-- since the migration before it (a delta, written by `python -m scheduler.sqlfiles delta`).
-- Never edit it: a later change ships in a new migration with a delta of its own.

-- Children and webhooks are deduplicated by SHA-256(task type, 0x1f, canonical payload).
-- jsonb's text form is canonical (keys sorted, whitespace normalised). STABLE, like convert_to: a
-- SQL function is inlined into its caller's plan only if it is no less volatile than its body;
-- declared IMMUTABLE it was called out of line and planned afresh on every insert.
CREATE OR REPLACE FUNCTION dedupe_key_v1(p_type text, p_payload jsonb) RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT encode(sha256(convert_to(p_type, 'UTF8') || '\x1f'::bytea || convert_to(p_payload::text, 'UTF8')), 'hex')
$$;

-- Append-only audit of fenced writes (accepted completions, failures, releases, publications,
-- recoveries; every rejection).
--
-- Write-path helpers are PL/pgSQL, not SQL: a SQL function that cannot be inlined (an INSERT or
-- UPDATE can't) is parsed and planned again on every call, while PL/pgSQL keeps its plans for the
-- session. On a noop stage that was ~1 ms of PostgreSQL CPU out of ~4.
CREATE OR REPLACE FUNCTION audit_v1(p_task queue_tasks, p_operation text, p_accepted boolean, p_reason text,
                                    p_token uuid, p_worker text, p_session uuid) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO queue_fence_audit (at, task_id, job_id, operation, accepted, reason, lease_token, worker_uid,
                                 session_id, attempt, execution_id)
  VALUES (now(), p_task.id, p_task.job_id, p_operation, p_accepted, coalesce(p_reason, ''), p_token, p_worker,
          p_session, p_task.attempt, p_task.execution_id);
END
$$;

-- Recompute what the claim index and the job row derive from the job's tasks: runnable columns,
-- status, progress, timestamps; append p_log to the job log; insert the terminal webhook when the job
-- enters a terminal status. Called by every transition, after it has locked the job_schedule row.
-- Cluster-placement tasks (webhooks) never influence the job's status.
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
    min(available_at) FILTER (WHERE state IN ('pending', 'retry_wait') AND pool = 'background') AS bg_at,
    avg(CASE WHEN state = 'completed' THEN 100 ELSE progress END) FILTER (WHERE state <> 'cancelled') AS progress
  INTO a
  FROM queue_tasks
  WHERE job_id = p_job AND execution_id = s.execution_id AND placement <> 'cluster';

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
    progress = CASE WHEN new_status = 'completed' THEN 100
                    ELSE greatest(progress, least(100, floor(coalesce(a.progress, 0)))::smallint) END,
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

-- A job execution starts with one dispatch task: media pool, cpu category, no VRAM, available now
-- (enqueue_job_v1 writes the job's derived columns from exactly these facts).
CREATE OR REPLACE FUNCTION insert_dispatch_v1(p_job uuid, p_execution int, p_type text, p_max_attempts int,
                                              p_timeout float) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO queue_tasks (job_id, execution_id, task_type, payload, dedupe_key, wait_for_siblings, placement,
                           pool, resource_category, vram_mb, state, available_at, attempt, max_attempts,
                           timeout_seconds, progress, progress_detail, created_at)
  VALUES (p_job, p_execution, p_type, '{}', dedupe_key_v1('dispatch', jsonb_build_object('execution', p_execution)),
          false, 'dispatch', 'media', 'cpu', 0, 'pending', now(), 0, p_max_attempts, p_timeout, 0, '{}', now());
END
$$;

-- Enqueue a job, its schedule and its dispatch task in one transaction. The position comes from a
-- sequence, without the scheduler lock, so enqueues never wait on claims.
CREATE OR REPLACE FUNCTION enqueue_job_v1(
  p_type text, p_params jsonb, p_priority int, p_max_attempts int, p_webhook_url text,
  p_required_worker text, p_hardware text, p_category text, p_vram int,
  p_required_category text, p_required_vram int, p_timeout float, p_created_by int, p_stale_seconds float,
  p_notify boolean DEFAULT true
) RETURNS uuid
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
DECLARE
  new_id uuid := gen_random_uuid();
  refusal text;
BEGIN
  IF p_required_worker IS NOT NULL THEN
    refusal := worker_accepts_targets_v1(p_required_worker, p_stale_seconds);
    IF refusal IS NOT NULL THEN
      RAISE EXCEPTION USING ERRCODE = 'JE422', MESSAGE = 'required_worker_uid',
        DETAIL = refusal || ': ' || p_required_worker;
    END IF;
  END IF;
  -- A new job has exactly one task, its pending dispatch (insert_dispatch_v1), so the columns
  -- refresh_job_v1 derives are written directly: pending, runnable now in the cpu category.
  INSERT INTO jobs (id, type, params, status, priority, max_attempts, hardware, resource_category, vram_mb,
                    webhook_url, progress, log, manual_retry_count, created_by_id, created_at, updated_at)
  VALUES (new_id, p_type, p_params, 'pending', p_priority, p_max_attempts, p_hardware, p_category, p_vram,
          p_webhook_url, 0, log_line_v1('created ' || p_type || coalesce(' for worker ' || p_required_worker, '')),
          0, p_created_by, now(), now());
  INSERT INTO job_schedule (job_id, execution_id, priority, position, required_worker_uid, assigned_worker_uid,
                            execution_mode, paused, required_category, required_vram_mb,
                            media_runnable_at, media_categories, media_min_vram, updated_at)
  VALUES (new_id, 1, p_priority, nextval('job_position_seq') * 1024, p_required_worker, NULL, 'shared', false,
          p_required_category, coalesce(p_required_vram, 0), now(), '["cpu"]', 0, now());
  PERFORM insert_dispatch_v1(new_id, 1, p_type, p_max_attempts, p_timeout);
  IF p_notify THEN
    PERFORM pg_notify('jetencode_queue_tasks', 'media');
  END IF;
  RETURN new_id;
END
$$;

-- The claim: one round trip, the design's seven steps.
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

  -- 7. Dispatch establishes the assignment; the task gets a fresh lease. Commit returns it.
  IF t.placement = 'dispatch' AND s.assigned_worker_uid IS NULL THEN
    UPDATE job_schedule js SET assigned_worker_uid = p_worker WHERE js.job_id = s.job_id;
  END IF;
  UPDATE queue_tasks q SET
    state = 'running', attempt = q.attempt + 1, lease_token = gen_random_uuid(),
    claimed_by = p_worker, claimed_worker_session_id = p_session, claimed_reservation_id = w.reservation_id,
    lease_expires_at = now() + make_interval(secs => p_lease_seconds),
    deadline_at = now() + make_interval(secs => q.timeout_seconds),
    heartbeat_at = now(), started_at = now(), finished_at = NULL, progress = 0
  WHERE q.id = t.id
  RETURNING q.* INTO t;
  PERFORM refresh_job_v1(t.job_id, CASE WHEN t.placement = 'cluster' THEN NULL
    ELSE t.task_type || ' claimed by ' || p_worker || ' (attempt ' || t.attempt || '/' || t.max_attempts || ')' END);

  RETURN QUERY
    SELECT t.id, t.job_id, t.execution_id, t.task_type, t.payload, t.attempt, t.max_attempts, t.lease_token,
           t.lease_expires_at, t.deadline_at, t.pool, t.placement, t.resource_category, t.vram_mb,
           t.timeout_seconds, j.type, j.params, j.hardware
      FROM jobs j WHERE j.id = t.job_id;
END
$$;

-- Renew the leases of all of one session's running tasks in one statement (each still fenced).
-- Returns one row per task asked about: accepted, and whether its job asks for cancellation.
CREATE OR REPLACE FUNCTION heartbeat_tasks_v1(p_worker text, p_session uuid, p_tasks jsonb, p_lease_seconds float)
RETURNS TABLE (task_id bigint, accepted boolean, cancel_requested boolean, reason text)
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
DECLARE
  w queue_workers%ROWTYPE;
  renewed_ids bigint[];
  cancelling_ids bigint[];
  r record;
  t queue_tasks%ROWTYPE;
  s job_schedule%ROWTYPE;
BEGIN
  -- KEY SHARE: never waits behind this worker's own claims (which hold FOR NO KEY UPDATE on the
  -- row); a re-registration that commits meanwhile expires the old session's leases afterwards.
  SELECT * INTO w FROM queue_workers q WHERE q.uid = p_worker FOR KEY SHARE;
  IF NOT FOUND OR w.current_session_id IS DISTINCT FROM p_session THEN
    RAISE EXCEPTION USING ERRCODE = 'JE410', MESSAGE = 'uid taken over by a newer session: ' || p_worker;
  END IF;
  WITH wanted AS (
    SELECT (x ->> 'id')::bigint AS id, (x ->> 'token')::uuid AS token FROM jsonb_array_elements(p_tasks) x
  ), renewed AS (
    UPDATE queue_tasks q SET lease_expires_at = now() + make_interval(secs => p_lease_seconds), heartbeat_at = now()
      FROM wanted, job_schedule js
     WHERE q.id = wanted.id AND q.lease_token = wanted.token AND q.state = 'running'
       AND q.claimed_by = p_worker AND q.claimed_worker_session_id = p_session
       AND js.job_id = q.job_id AND js.execution_id = q.execution_id
       AND q.claimed_reservation_id IS NOT DISTINCT FROM js.reservation_id
       AND q.claimed_reservation_id IS NOT DISTINCT FROM w.reservation_id
       AND q.lease_expires_at > now() AND q.deadline_at > now()
    RETURNING q.id, js.cancel_requested_at IS NOT NULL AS cancel
  )
  SELECT coalesce(array_agg(renewed.id), '{}'), coalesce(array_agg(renewed.id) FILTER (WHERE renewed.cancel), '{}')
    INTO renewed_ids, cancelling_ids FROM renewed;

  FOR r IN SELECT (x ->> 'id')::bigint AS id, (x ->> 'token')::uuid AS token FROM jsonb_array_elements(p_tasks) x LOOP
    task_id := r.id;
    IF r.id = ANY (renewed_ids) THEN
      accepted := true; cancel_requested := r.id = ANY (cancelling_ids); reason := NULL;
    ELSE
      SELECT * INTO t FROM queue_tasks q WHERE q.id = r.id;
      SELECT * INTO s FROM job_schedule js WHERE js.job_id = t.job_id;
      reason := coalesce(fence_reason_v1(t, s, w, r.token, p_worker, p_session), 'lease not renewed');
      IF t.id IS NOT NULL THEN
        PERFORM audit_v1(t, 'heartbeat', false, reason, r.token, p_worker, p_session);
      END IF;
      accepted := false; cancel_requested := coalesce(s.cancel_requested_at IS NOT NULL, false);
    END IF;
    RETURN NEXT;
  END LOOP;
END
$$;

-- Fenced progress and log lines from a running stage. Stage logs keep their last 1,000 lines.
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
    UPDATE jobs j SET progress = greatest(j.progress, least(100, floor(coalesce((
        SELECT avg(CASE WHEN q.state = 'completed' THEN 100 ELSE q.progress END)
          FROM queue_tasks q
         WHERE q.job_id = t.job_id AND q.execution_id = t.execution_id AND q.placement <> 'cluster'
           AND q.state <> 'cancelled'), 0)))::smallint)
    WHERE j.id = t.job_id;
  END IF;
  IF p_lines IS NOT NULL AND cardinality(p_lines) > 0 THEN
    INSERT INTO queue_task_logs (task_id, at, message) SELECT p_task, now(), left(line, 4000) FROM unnest(p_lines) line;
    DELETE FROM queue_task_logs l WHERE l.task_id = p_task AND l.id <= (
      SELECT l2.id FROM queue_task_logs l2 WHERE l2.task_id = p_task ORDER BY l2.id DESC OFFSET 1000 LIMIT 1);
  END IF;
  RETURN QUERY SELECT true, s.cancel_requested_at IS NOT NULL, NULL::text;
END
$$;

-- Let sibling stages waiting on a parent's other children run once all of those have completed.
CREATE OR REPLACE FUNCTION unblock_siblings_v1(p_parent bigint, p_execution int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
  released int;
BEGIN
  UPDATE queue_tasks b SET state = 'pending', available_at = now()
   WHERE b.parent_task_id = p_parent AND b.execution_id = p_execution AND b.state = 'blocked'
     AND NOT EXISTS (SELECT 1 FROM queue_tasks x
                      WHERE x.parent_task_id = p_parent AND x.execution_id = p_execution
                        AND NOT x.wait_for_siblings AND x.state <> 'completed');
  GET DIAGNOSTICS released = ROW_COUNT;
  RETURN released;
END
$$;

-- Lock worker (share) -> job schedule -> task, and check the fence. Shared by finish/fail/release.
CREATE OR REPLACE FUNCTION lock_for_fenced_write_v1(p_task bigint, OUT w queue_workers, OUT s job_schedule,
                                                    OUT t queue_tasks)
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
DECLARE
  job uuid;
BEGIN
  SELECT * INTO w FROM queue_workers q WHERE q.uid = (SELECT claimed_by FROM queue_tasks WHERE id = p_task) FOR KEY SHARE;
  SELECT q.job_id INTO job FROM queue_tasks q WHERE q.id = p_task;
  SELECT * INTO s FROM job_schedule js WHERE js.job_id = job FOR NO KEY UPDATE;
  SELECT * INTO t FROM queue_tasks q WHERE q.id = p_task FOR UPDATE;
END
$$;

-- Successful finish: the task completes and its buffered children and outputs are published in the
-- same transaction. If the job was cancelled meanwhile, the task ends cancelled and nothing is
-- published. A second finish under the same token (a retry after a lost commit) is idempotent.
CREATE OR REPLACE FUNCTION finish_task_v1(p_task bigint, p_token uuid, p_worker text, p_session uuid,
                                          p_result jsonb, p_children jsonb, p_outputs jsonb)
RETURNS TABLE (outcome text, reason text)
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
DECLARE
  lk record;
  w queue_workers%ROWTYPE;
  s job_schedule%ROWTYPE;
  t queue_tasks%ROWTYPE;
  why text;
  inserted int := 0;
  published int := 0;
  released int := 0;
BEGIN
  SELECT * INTO lk FROM lock_for_fenced_write_v1(p_task);
  w := lk.w; s := lk.s; t := lk.t;
  why := fence_reason_v1(t, s, w, p_token, p_worker, p_session);
  IF why IS NOT NULL THEN
    -- Idempotent replay: this very token already completed the task.
    IF EXISTS (SELECT 1 FROM queue_fence_audit a
                WHERE a.task_id = p_task AND a.operation = 'finish' AND a.accepted AND a.lease_token = p_token) THEN
      RETURN QUERY SELECT t.state, 'already recorded'::text;
      RETURN;
    END IF;
    IF t.id IS NOT NULL THEN
      PERFORM audit_v1(t, 'finish', false, why, p_token, p_worker, p_session);
    END IF;
    RETURN QUERY SELECT 'rejected'::text, why;
    RETURN;
  END IF;

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

  WITH outs AS (
    INSERT INTO job_outputs (job_id, execution_id, task_id, name, kind, storage_url, size_bytes, metadata, created_at)
    SELECT t.job_id, t.execution_id, t.id, o ->> 'name', coalesce(o ->> 'kind', 'file'),
           coalesce(o ->> 'storage_url', ''), coalesce((o ->> 'size_bytes')::bigint, 0),
           coalesce(o -> 'metadata', '{}'::jsonb), now()
      FROM jsonb_array_elements(coalesce(p_outputs, '[]'::jsonb)) o
    ON CONFLICT (job_id, execution_id, name) DO NOTHING
    RETURNING 1)
  SELECT count(*) INTO published FROM outs;

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

-- Failed attempt: retry_wait with the quartic backoff while attempts remain, else failed for good.
-- The retry is stored in the same transaction that records the failure.
CREATE OR REPLACE FUNCTION fail_task_v1(p_task bigint, p_token uuid, p_worker text, p_session uuid,
                                        p_error text, p_retryable boolean)
RETURNS TABLE (outcome text, reason text)
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
DECLARE
  lk record;
  s job_schedule%ROWTYPE;
  t queue_tasks%ROWTYPE;
  why text;
  next_state text;
BEGIN
  SELECT * INTO lk FROM lock_for_fenced_write_v1(p_task);
  t := lk.t; s := lk.s;
  why := fence_reason_v1(lk.t, lk.s, lk.w, p_token, p_worker, p_session);
  IF why IS NOT NULL THEN
    IF t.id IS NOT NULL THEN
      PERFORM audit_v1(t, 'fail', false, why, p_token, p_worker, p_session);
    END IF;
    RETURN QUERY SELECT 'rejected'::text, why;
    RETURN;
  END IF;
  next_state := CASE
    WHEN s.cancel_requested_at IS NOT NULL THEN 'cancelled'
    WHEN p_retryable AND t.attempt < t.max_attempts THEN 'retry_wait'
    ELSE 'failed' END;
  UPDATE queue_tasks q SET
    state = next_state,
    available_at = CASE WHEN next_state = 'retry_wait' THEN now() + retry_delay_v1(q.attempt) ELSE q.available_at END,
    finished_at = CASE WHEN next_state = 'retry_wait' THEN NULL ELSE now() END,
    last_failure = left(p_error, 16000)
  WHERE q.id = p_task RETURNING q.* INTO t;
  PERFORM audit_v1(t, 'fail', true, next_state, p_token, p_worker, p_session);
  PERFORM refresh_job_v1(t.job_id, CASE WHEN t.placement = 'cluster' THEN NULL
    ELSE t.task_type || ' attempt ' || t.attempt || ' failed on ' || p_worker || ': '
         || left(split_part(p_error, E'\n', 1), 300)
         || CASE next_state WHEN 'retry_wait' THEN ' (retry at ' || to_char(t.available_at AT TIME ZONE 'UTC', 'HH24:MI:SS') || ' UTC)'
                            WHEN 'failed' THEN ' (no attempts left)' ELSE '' END END);
  IF next_state = 'failed' AND t.placement <> 'cluster' THEN
    UPDATE jobs SET last_error = left(p_error, 16000) WHERE id = t.job_id;
  END IF;
  RETURN QUERY SELECT next_state, NULL::text;
END
$$;

-- Hand a task back on shutdown: pending again, without using up an attempt.
CREATE OR REPLACE FUNCTION release_task_v1(p_task bigint, p_token uuid, p_worker text, p_session uuid, p_why text)
RETURNS TABLE (outcome text, reason text)
LANGUAGE plpgsql
SET enable_seqscan = off
AS $$
DECLARE
  lk record;
  s job_schedule%ROWTYPE;
  t queue_tasks%ROWTYPE;
  why text;
  next_state text;
BEGIN
  SELECT * INTO lk FROM lock_for_fenced_write_v1(p_task);
  t := lk.t; s := lk.s;
  why := fence_reason_v1(lk.t, lk.s, lk.w, p_token, p_worker, p_session);
  IF why IS NOT NULL THEN
    IF t.id IS NOT NULL THEN
      PERFORM audit_v1(t, 'release', false, why, p_token, p_worker, p_session);
    END IF;
    RETURN QUERY SELECT 'rejected'::text, why;
    RETURN;
  END IF;
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

-- Operator controls take the scheduler lock, then the job's schedule row. A finish holds that row
-- while it publishes (renames or copies outputs), so waiting for it *while holding the scheduler
-- lock* would stall every claim in the cluster. Instead the row is tried with NOWAIT; when it is
-- busy the subtransaction rolls back, which releases the scheduler lock, and we retry shortly.
CREATE OR REPLACE FUNCTION lock_schedule_for_control_v1(p_job uuid, p_patience_ms int DEFAULT 2000)
RETURNS job_schedule
LANGUAGE plpgsql AS $$
DECLARE
  s job_schedule%ROWTYPE;
  waited int := 0;
BEGIN
  LOOP
    BEGIN
      PERFORM 1 FROM queue_scheduler_state WHERE id = 1 FOR UPDATE;
      IF NOT FOUND THEN
        RAISE EXCEPTION 'queue_scheduler_state singleton row is missing: run migrations or re-seed it';
      END IF;
      SELECT * INTO s FROM job_schedule WHERE job_id = p_job FOR NO KEY UPDATE NOWAIT;
      IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'JE404', MESSAGE = 'job not found';
      END IF;
      RETURN s;
    EXCEPTION WHEN lock_not_available THEN
      NULL;
    END;
    IF waited >= p_patience_ms THEN
      RAISE EXCEPTION USING ERRCODE = 'JE409', MESSAGE = 'the job is busy (one of its stages is finishing); try again';
    END IF;
    PERFORM pg_sleep(0.02);
    waited := waited + 20;
  END LOOP;
END
$$;

-- Start a new execution of a job: the old execution's unfinished tasks are cancelled, the
-- assignment is cleared and a fresh dispatch queued. Outputs of the old execution are never reused.
DROP FUNCTION IF EXISTS redispatch_job_v1(uuid, text);

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
