-- JetEncode scheduler, part 20: how work comes in and is taken. Workers register a session and
-- send heartbeats; jobs are enqueued with their first (dispatch) task; a free slot claims the next
-- task it may run, in one round trip (docs/scheduler.md, "The claim").

-- ---- Workers ---------------------------------------------------------------------------------

-- Register a process start. The new session fences the previous one of the same uid at once: its
-- running tasks' leases are expired so the recovery loop can hand them on without waiting. The
-- worker row ends active with this session's capacity (and no left_at: a new process has not left;
-- no drained_at: an operator's drain ends when the process it drained is replaced),
-- bound to no reservation: a binding belongs to the session that made it (bind_reservation_v2), so a
-- restarted process of a uid that once ran dedicated work is an ordinary worker again.
-- Returns the session it replaced, if any.
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
    last_heartbeat_at = now(), capabilities = EXCLUDED.capabilities, workspace = EXCLUDED.workspace,
    left_at = NULL, reservation_id = NULL, drained_at = NULL;
  IF previous IS NOT NULL AND previous <> p_session THEN
    UPDATE queue_tasks SET lease_expires_at = now() - interval '1 millisecond'
    WHERE state = 'running' AND claimed_worker_session_id = previous;
  END IF;
  RETURN previous;
END
$$;

-- The worker's own heartbeat: its last_heartbeat_at and system sample, and an offline worker is
-- back: active again, or draining when its session was drained (drained_at; a drained worker that
-- missed heartbeats for a moment must not start claiming again). Fenced on the session: JE410 when a newer session took the uid over (the caller
-- must stop). Returns the worker's lifecycle (draining tells a worker to claim nothing new).
CREATE OR REPLACE FUNCTION worker_heartbeat_v1(p_uid text, p_session uuid, p_sample jsonb) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  result text;
BEGIN
  UPDATE queue_workers SET
    last_heartbeat_at = now(),
    system_sample = coalesce(p_sample, system_sample),
    lifecycle = CASE WHEN lifecycle <> 'offline' THEN lifecycle
                     WHEN drained_at IS NOT NULL THEN 'draining' ELSE 'active' END
  WHERE uid = p_uid AND current_session_id = p_session
  RETURNING lifecycle INTO result;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'JE410', MESSAGE = 'uid taken over by a newer session: ' || p_uid;
  END IF;
  RETURN result;
END
$$;

-- A worker may take targeted dispatch only while active and fresh: NULL when it may, else why not
-- (unknown, draining, offline or silent for p_stale_seconds).
CREATE OR REPLACE FUNCTION worker_accepts_targets_v1(p_uid text, p_stale_seconds float) RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT CASE
    WHEN w.uid IS NULL THEN 'unknown worker'
    WHEN w.lifecycle = 'draining' THEN 'worker is draining'
    WHEN w.lifecycle = 'offline' OR w.last_heartbeat_at < now() - make_interval(secs => p_stale_seconds)
      THEN 'worker is offline (no heartbeat since ' || coalesce(to_char(w.last_heartbeat_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS'), 'never') || ' UTC)'
  END
  FROM (SELECT 1) one LEFT JOIN queue_workers w ON w.uid = p_uid
$$;

-- ---- Enqueue ---------------------------------------------------------------------------------

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

-- ---- Claim -----------------------------------------------------------------------------------

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
