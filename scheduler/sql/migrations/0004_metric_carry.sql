-- Installed by migration 0004_metric_carry: the statements of scheduler/sql/functions/ that changed
-- since the migration before it (a delta, written by `python -m scheduler.sqlfiles delta`).
-- Never edit it: a later change ships in a new migration with a delta of its own.

-- Register a process start. The new session fences the previous one of the same uid at once: its
-- running tasks' leases are expired so the recovery loop can hand them on without waiting.
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
    last_heartbeat_at = now(), capabilities = EXCLUDED.capabilities, workspace = EXCLUDED.workspace;
  IF previous IS NOT NULL AND previous <> p_session THEN
    UPDATE queue_tasks SET lease_expires_at = now() - interval '1 millisecond'
    WHERE state = 'running' AND claimed_worker_session_id = previous;
  END IF;
  RETURN previous;
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
LANGUAGE plpgsql AS $$
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

-- Lock worker (share) -> job schedule -> task, and check the fence. Shared by finish/fail/release.
CREATE OR REPLACE FUNCTION lock_for_fenced_write_v1(p_task bigint, OUT w queue_workers, OUT s job_schedule,
                                                    OUT t queue_tasks)
LANGUAGE plpgsql AS $$
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
LANGUAGE plpgsql AS $$
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

  released := unblock_siblings_v1(t.id, t.execution_id);
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
    execution_id := redispatch_job_v1(c.job_id, 'worker ' || c.assigned_worker_uid || ' lost');
    RETURN NEXT;
  END LOOP;
END
$$;

CREATE OR REPLACE FUNCTION purge_history_v1(p_days int, p_batch int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
  ids uuid[];
BEGIN
  SELECT coalesce(array_agg(old.id), '{}') INTO ids FROM (
    SELECT j.id FROM jobs j
     WHERE j.status IN ('completed', 'failed', 'cancelled') AND j.finished_at < now() - make_interval(days => p_days)
       AND NOT EXISTS (SELECT 1 FROM queue_tasks q
                        WHERE q.job_id = j.id AND q.state IN ('pending', 'retry_wait', 'running', 'blocked'))
     ORDER BY j.finished_at LIMIT p_batch
     FOR UPDATE SKIP LOCKED) old;
  IF cardinality(ids) > 0 THEN
    DELETE FROM queue_task_logs WHERE task_id IN (SELECT id FROM queue_tasks WHERE job_id = ANY (ids));
    DELETE FROM queue_tasks WHERE job_id = ANY (ids);
    DELETE FROM job_outputs WHERE job_id = ANY (ids);
    DELETE FROM job_schedule WHERE job_id = ANY (ids);
    UPDATE media_assets SET source_job_id = NULL WHERE source_job_id = ANY (ids);
    UPDATE queue_reservations SET job_id = NULL WHERE job_id = ANY (ids);
    DELETE FROM jobs WHERE id = ANY (ids);
  END IF;
  -- Carry what the metrics count out of the rows about to go, so the counters stay monotonic.
  WITH gone AS (
    DELETE FROM queue_fence_audit WHERE at < now() - make_interval(days => p_days)
    RETURNING accepted, operation, reason)
  UPDATE queue_scheduler_state SET
    purged_rejected = purged_rejected + (SELECT count(*) FROM gone WHERE NOT accepted),
    purged_recoveries = purged_recoveries + (SELECT count(*) FROM gone WHERE accepted AND operation = 'recover'),
    purged_retries = purged_retries + (SELECT count(*) FROM gone
      WHERE accepted AND ((operation = 'fail' AND reason = 'retry_wait')
                          OR (operation = 'recover' AND reason LIKE 'retry\_wait:%')))
  WHERE id = 1;
  DELETE FROM queue_samples WHERE at < now() - make_interval(days => p_days);
  RETURN cardinality(ids);
END
$$;
