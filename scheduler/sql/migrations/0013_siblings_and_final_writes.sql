-- Installed by migration 0013_siblings_and_final_writes: the statements of scheduler/sql/functions/ that changed
-- since the migration before it (a delta, written by `python -m scheduler.sqlfiles delta`).
-- Never edit it: a later change ships in a new migration with a delta of its own.

-- Wake the worker that should claim a new task of the pool (no herd): p_worker when only it may
-- take the task (a job's own stages, a targeted job), else one active, fresh worker with a free
-- slot of that pool (the first of sixteen drawn at random), else every worker. The payload is '<pool>' or
-- '<pool>:<uid>#<n>'; a worker ignores notifications for other uids, so one enqueue costs about one
-- claim however many workers idle. <n> counts the transaction's targeted notifications: PostgreSQL
-- folds identical notifications of one transaction into one, and a worker claims once per
-- notification it gets, so a transaction that enqueues four jobs for one worker must reach it as
-- four notifications, not one (the counter is a transaction-local setting: no session state). Polling stays the correctness path: a worker that could not
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
  seq int;
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
  IF target IS NULL THEN
    PERFORM pg_notify('jetencode_queue_tasks', p_pool);
    RETURN;
  END IF;
  seq := coalesce(nullif(current_setting('jetencode.notify_seq', true), ''), '0')::int + 1;
  PERFORM set_config('jetencode.notify_seq', seq::text, true);
  PERFORM pg_notify('jetencode_queue_tasks', p_pool || ':' || target || '#' || seq);
END
$$;

-- Whether job p_job has, besides task p_task, a stage of the pool pinned to its worker (placement
-- 'job') that can run now, in the job's current execution. False when p_job is NULL.
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
     WHERE js.job_id = p_job AND q.id IS DISTINCT FROM p_task AND q.pool = p_pool AND q.placement = 'job'
       AND q.state IN ('pending', 'retry_wait') AND q.available_at <= now());
END
$$;

-- Whether anything of the pool has been runnable for p_worker for at least p_grace seconds, leaving
-- out one job (p_job) or task (p_task): the claimer's lock-free hints. One read, no lock, always on
-- the claim indexes (whatever statistics say: a sequential scan here would read the whole queue on
-- every idle poll, and inside a claim's transaction it would lengthen the serialized section).
-- After a claim (p_job and p_task given) the claimed job's own other runnable stages of the pool
-- count whatever their age: a finish that spawns several children announces them with one
-- notification (one claim), and only this worker can take the job's pinned stages, so without this
-- the second rendition of a transcode waited for the next idle poll. The caller's snapshot predates
-- the claim, in which the claimed task is still pending: hence `q.id <> p_task`.
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
         AND js.job_id IS DISTINCT FROM p_job)
      OR pinned_siblings_runnable_v1(p_job, p_task, 'media');
  END IF;
  RETURN EXISTS (
    SELECT 1 FROM queue_tasks q
     WHERE q.pool = 'background' AND q.state IN ('pending', 'retry_wait')
       AND q.available_at <= now() - make_interval(secs => p_grace)
       AND q.id IS DISTINCT FROM p_task)
    OR pinned_siblings_runnable_v1(p_job, p_task, 'background');
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
SET lock_timeout = '1s'
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
