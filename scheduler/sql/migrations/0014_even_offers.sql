-- Installed by migration 0014_even_offers: the statements of scheduler/sql/functions/ that changed
-- since the migration before it (a delta, written by `python -m scheduler.sqlfiles delta`).
-- Never edit it: a later change ships in a new migration with a delta of its own.

-- Wake the worker that should claim a new task of the pool (no herd): p_worker when only it may
-- take the task (a job's own stages, a targeted job), else an active, fresh worker with a free slot
-- of that pool, else every worker. The payload is '<pool>' or '<pool>:<uid>#<n>'; a worker ignores
-- notifications for other uids, so one enqueue costs about one claim however many workers idle.
--
-- The free slots are read once per transaction and handed out one notification each: sixteen
-- active workers drawn at random, their running tasks counted (the cost does not grow with the
-- farm), kept as {uid: free slots not yet offered} in a transaction-local setting (no session
-- state). Each task goes to the worker with the most slots still unoffered, so a transaction that
-- enqueues eight jobs onto two idle 4-slot workers wakes each for four (before, every job drew its
-- own worker, and a worker offered fewer jobs than it had free slots left the rest of the burst to
-- its next poll). Once the offers are used up the task is announced to every worker ('<pool>'):
-- the farm is full, and whichever slot comes free first claims it.
--
-- <n> counts the transaction's targeted notifications: PostgreSQL folds identical notifications of
-- one transaction into one, and a worker claims once per notification it gets, so four jobs for one
-- worker must reach it as four notifications. Polling stays the correctness path: a worker that
-- could not take the task after all (its slot filled meanwhile, a category it lacks) leaves it to
-- the next poll of any worker. All of this runs outside the scheduler lock.
CREATE OR REPLACE FUNCTION notify_pool_v1(p_pool text, p_worker text DEFAULT NULL) RETURNS void
LANGUAGE plpgsql
-- queue_workers is small and read whole: a sequential scan, even inside enqueue_job_v1 (which turns
-- them off), and no JIT (a disabled scan's 1e10 cost would make every enqueue JIT-compile: 300 ms).
SET enable_seqscan = on
SET jit = off
AS $$
DECLARE
  target text := p_worker;
  offers_setting text := 'jetencode.notify_offers_' || p_pool;
  offers jsonb;
  seq int;
BEGIN
  IF target IS NULL THEN
    offers := nullif(current_setting(offers_setting, true), '')::jsonb;
    IF offers IS NULL THEN
      SELECT coalesce(jsonb_object_agg(f.uid, f.free), '{}'::jsonb) INTO offers
        FROM (SELECT w.uid,
                     CASE WHEN p_pool = 'media' THEN w.concurrency ELSE w.background_slots END - (
                       SELECT count(*) FROM queue_tasks q
                        WHERE q.claimed_worker_session_id = w.current_session_id AND q.state = 'running'
                          AND q.pool = p_pool) AS free
                FROM (SELECT * FROM queue_workers w
                       WHERE w.lifecycle = 'active' AND w.reservation_id IS NULL
                         AND w.last_heartbeat_at > now() - interval '30 seconds'
                       ORDER BY random()
                       LIMIT 16) w) f
       WHERE f.free > 0;
    END IF;
    -- Ties at random: the offers are kept sorted by uid, and one-job transactions would otherwise
    -- always wake the same idle worker.
    SELECT o.key INTO target FROM jsonb_each_text(offers) o ORDER BY o.value::int DESC, random() LIMIT 1;
    IF target IS NOT NULL THEN
      offers := CASE WHEN (offers ->> target)::int > 1
                     THEN jsonb_set(offers, ARRAY[target], to_jsonb((offers ->> target)::int - 1))
                     ELSE offers - target END;
    END IF;
    PERFORM set_config(offers_setting, offers::text, true);
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
