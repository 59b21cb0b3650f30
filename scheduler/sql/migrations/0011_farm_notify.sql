-- Installed by migration 0011_farm_notify: the statements of scheduler/sql/functions/ that changed
-- since the migration before it (a delta, written by `python -m scheduler.sqlfiles delta`).
-- Never edit it: a later change ships in a new migration with a delta of its own.

-- The terminal webhook: cluster placement (any ordinary worker), background pool, its own attempt
-- limit (8). Its key includes the manual-retry count so a retried job can notify again, and only
-- once per status and retry however often it is asked for.
CREATE OR REPLACE FUNCTION enqueue_webhook_v1(p_job uuid, p_execution int, p_status text, p_url text,
                                              p_manual_retry int) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  payload jsonb := jsonb_build_object(
    'event', 'job.' || p_status, 'url', p_url, 'manual_retry', p_manual_retry,
    'webhook_id', 'msg_' || replace(p_job::text, '-', '') || '_' || p_status || '_' || p_manual_retry);
BEGIN
  INSERT INTO queue_tasks (job_id, execution_id, task_type, payload, dedupe_key, wait_for_siblings, placement,
                           pool, resource_category, vram_mb, state, available_at, attempt, max_attempts,
                           timeout_seconds, progress, progress_detail, created_at)
  VALUES (p_job, p_execution, 'webhook', payload, dedupe_key_v1('webhook', payload), false, 'cluster',
          'background', 'cpu', 0, 'pending', now(), 0, 8, 60, 0, '{}', now())
  ON CONFLICT (job_id, execution_id, dedupe_key) DO NOTHING;
  PERFORM notify_pool_v1('background');
END
$$;

-- Wake the worker that should claim a new task of the pool (no herd): p_worker when only it may
-- take the task (a job's own stages, a targeted job), else one active, fresh worker with a free
-- slot of that pool (the first of sixteen drawn at random), else every worker. The payload is '<pool>' or
-- '<pool>:<uid>'; a worker ignores notifications for other uids, so one enqueue costs about one
-- claim however many workers idle. Polling stays the correctness path: a worker that could not
-- take the task after all (its slot filled meanwhile, a category it lacks) leaves it to the next
-- poll of any worker. Finding the worker reads queue_workers and counts the running tasks of at
-- most sixteen of them, outside the scheduler lock.
CREATE OR REPLACE FUNCTION notify_pool_v1(p_pool text, p_worker text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql
-- queue_workers is small and read whole: a sequential scan, even inside enqueue_job_v1 (which turns
-- them off), and no JIT (a disabled scan's 1e10 cost would make every enqueue JIT-compile: 300 ms).
SET enable_seqscan = on
SET jit = off
AS $$
DECLARE
  target text := p_worker;
BEGIN
  IF target IS NULL THEN
    -- Sixteen active workers at random, then the first of them with a free slot: the running tasks
    -- are counted for those sixteen only, so the cost does not grow with the farm.
    SELECT w.uid INTO target
      FROM (SELECT * FROM queue_workers w
             WHERE w.lifecycle = 'active' AND w.reservation_id IS NULL
               AND w.last_heartbeat_at > now() - interval '30 seconds'
             ORDER BY random()
             LIMIT 16) w
     WHERE CASE WHEN p_pool = 'media' THEN w.concurrency ELSE w.background_slots END > (
             SELECT count(*) FROM queue_tasks q
              WHERE q.claimed_worker_session_id = w.current_session_id AND q.state = 'running'
                AND q.pool = p_pool)
     LIMIT 1;
  END IF;
  PERFORM pg_notify('jetencode_queue_tasks', p_pool || coalesce(':' || target, ''));
END
$$;

-- Enqueue a job, its schedule and its dispatch task in one transaction (JE422 when the required
-- worker may not take it), and NOTIFY one media worker (notify_pool_v1) unless p_notify is false. The position comes
-- from a sequence, without the scheduler lock, so enqueues never wait on claims. Returns the job id.
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
  IF p_notify AND p_required_category IS NOT NULL AND p_required_worker IS NULL THEN
    PERFORM pg_notify('jetencode_queue_tasks', 'media');  -- a GPU dispatch: whoever has the category
  ELSIF p_notify THEN
    PERFORM notify_pool_v1('media', p_required_worker);
  END IF;
  RETURN new_id;
END
$$;

-- Whether anything of the pool has been runnable for p_worker for at least p_grace seconds, leaving
-- out one job (p_job) or task (p_task): the claimer's lock-free hints. One read, no lock, always on
-- the claim indexes (whatever statistics say: a sequential scan here would read the whole queue on
-- every idle poll, and inside a claim's transaction it would lengthen the serialized section).
CREATE OR REPLACE FUNCTION runnable_for_v1(p_worker text, p_pool text, p_grace float,
                                           p_job uuid DEFAULT NULL, p_task bigint DEFAULT NULL)
RETURNS boolean
-- PL/pgSQL, so each session plans the two reads once (a SQL function with SET clauses is not
-- inlined and would be planned again on every call: at 100 idle workers that tripled the idle CPU).
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
BEGIN
  IF p_pool = 'media' THEN
    RETURN EXISTS (
      SELECT 1 FROM job_schedule js
       WHERE js.group_key IN (p_worker, '')
         AND js.media_runnable_at <= now() - make_interval(secs => p_grace)
         AND js.job_id IS DISTINCT FROM p_job);
  END IF;
  RETURN EXISTS (
    SELECT 1 FROM queue_tasks q
     WHERE q.pool = 'background' AND q.state IN ('pending', 'retry_wait')
       AND q.available_at <= now() - make_interval(secs => p_grace)
       AND q.id IS DISTINCT FROM p_task);
END
$$;

-- The idle poll's hint: runnable_for_v1 for both pools in one call (one function call's set-up, its
-- SET clauses included, instead of two).
CREATE OR REPLACE FUNCTION runnable_pools_v1(p_worker text, p_grace float)
RETURNS TABLE (media boolean, background boolean)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
BEGIN
  media := EXISTS (
    SELECT 1 FROM job_schedule js
     WHERE js.group_key IN (p_worker, '') AND js.media_runnable_at <= now() - make_interval(secs => p_grace));
  background := EXISTS (
    SELECT 1 FROM queue_tasks q
     WHERE q.pool = 'background' AND q.state IN ('pending', 'retry_wait')
       AND q.available_at <= now() - make_interval(secs => p_grace));
  RETURN NEXT;
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
    -- The job's own stages can only go to its assigned worker: wake that one, not the farm.
    PERFORM notify_pool_v1('media', s.assigned_worker_uid);
    PERFORM notify_pool_v1('background', s.assigned_worker_uid);
  END IF;
  RETURN QUERY SELECT 'completed'::text, NULL::text;
END
$$;
