-- Installed by migration 0016_sample_once_a_minute: scheduler/sql/functions/*.sql concatenated in order, as
-- they were when the migration was written. A snapshot: never edit it; a later change to the
-- functions ships in a new migration with a snapshot of its own.

-- ==== 10_helpers_and_fence.sql ====

-- JetEncode scheduler, part 10: the building blocks every transition shares, and the fence.
--
-- The scheduler's current SQL, in reading order (scheduler/sql/functions/):
--   10_helpers_and_fence      retry delay, dedupe keys, the audit, the fence, the locks, job status
--   15_progress               a job's progress, weighted by the work of its stages
--   20_enqueue_and_claim      workers register and beat, jobs enter, slots claim
--   30_fenced_writes          what a claimed stage writes: heartbeats, progress, finish, fail, release
--   40_recovery_and_failover  expired leases, stale workers, jobs moving off drained or lost workers
--   50_operator_controls      cancel, pause, priority, moves, retry, reservations
--   60_maintenance            retention and per-minute samples
--   90_superseded_v1          v1 functions that v2 replaced, kept for workers of the previous release
-- Every change to queue state is one call to one of these functions, made by
-- scheduler/repository.py (its statements are named in scheduler/sql/repository.sql).
--
-- These files hold only CREATE OR REPLACE FUNCTION. Tables, columns and sequences live in the
-- Django migrations; a migration that installs functions runs a snapshot of its own
-- (scheduler/sql/migrations/NNNN_*.sql: these files concatenated when it was written), so migrating
-- an old database installs what each step installed then. An edit here therefore ships in a new
-- migration with a new snapshot; tests/scheduler/test_migrations.py fails until it does.
--
-- Versions. Names carry a version (claim_task_v1). A release that changes a function's signature or
-- contract adds *_v2 beside it: workers of the previous release keep calling *_v1 during a rolling
-- deploy, and the v1 is dropped one release later (90_superseded_v1.sql lists the ones waiting). A
-- change that keeps the contract (a refactor, a faster plan) replaces the function under its name.
--
-- Canonical lock order, everywhere: worker row -> queue_scheduler_state (claims and operator
-- controls) -> job_schedule row -> queue_tasks rows. Heartbeats and finishes skip the scheduler row.
-- Every time is PostgreSQL's now(); the application clock is never trusted.
--
-- The write path (enqueue, claim, progress, heartbeat, finish, fail, release, refresh) runs with
-- `SET enable_seqscan = off`: PL/pgSQL plans its statements once per session and keeps them, and a
-- plan made while the queue's statistics say it is empty (a fresh queue after ANALYZE, or one
-- autovacuum analyzed while drained) turns every primary-key lookup into a sequential scan until
-- the next ANALYZE (~20 whole-table scans per stage, measured in docs/benchmarks.md).
--
-- Write-path helpers are PL/pgSQL, not SQL: a SQL function that cannot be inlined (an INSERT or
-- UPDATE can't) is parsed and planned again on every call, while PL/pgSQL keeps its plans for the
-- session. On a noop stage that was ~1 ms of PostgreSQL CPU out of ~4. Read-only SQL helpers are
-- inlined into their callers' plans instead.
--
-- Errors raised for the repository to map:
--   JE404  the job does not exist            JE409  the action does not apply in the job's state
--   JE410  the worker session was replaced   JE422  invalid argument (message names the field)

-- Retry delay: n = completed attempt - 1, delay = min(n^4 + 15 s, 1 h). No jitter. The one formula
-- every retry uses (failed attempts and expired leases); the soak harness scales it by replacing it.
CREATE OR REPLACE FUNCTION retry_delay_v1(p_attempt int) RETURNS interval
LANGUAGE sql IMMUTABLE AS $$
  SELECT make_interval(secs => least(power(greatest(p_attempt - 1, 0), 4) + 15, 3600))
$$;

-- Children and webhooks are deduplicated by SHA-256(task type, 0x1f, canonical payload): the same
-- type and payload always give the same key, so a retried parent publishes nothing twice.
-- jsonb's text form is canonical (keys sorted, whitespace normalised). STABLE, like convert_to: a
-- SQL function is inlined into its caller's plan only if it is no less volatile than its body;
-- declared IMMUTABLE it was called out of line and planned afresh on every insert.
CREATE OR REPLACE FUNCTION dedupe_key_v1(p_type text, p_payload jsonb) RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT encode(sha256(convert_to(p_type, 'UTF8') || '\x1f'::bytea || convert_to(p_payload::text, 'UTF8')), 'hex')
$$;

-- One line of a job's log: the UTC time (PostgreSQL's clock, to the second), the message and a
-- newline. Callers append it and keep the log's last 64 KiB (right(log || line, 65536)).
CREATE OR REPLACE FUNCTION log_line_v1(p_message text) RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z" ') || p_message || E'\n'
$$;

-- Append-only audit of fenced writes: one row per accepted completion, failure, release,
-- publication and recovery, and per rejection (heartbeats and progress included), with the lease
-- the writer presented. Nothing updates or deletes these rows except retention (purge_history_v1).
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

-- The fence: NULL when the caller still owns the task, else the first condition that fails. The
-- caller owns a task while it runs under the caller's lease token, uid and current session, in the
-- job's current execution and reservation generation, before its lease and deadline pass.
CREATE OR REPLACE FUNCTION fence_reason_v1(t queue_tasks, s job_schedule, w queue_workers,
                                           p_token uuid, p_worker text, p_session uuid) RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT CASE
    WHEN t.id IS NULL THEN 'task does not exist'
    WHEN t.state <> 'running' THEN 'task is ' || t.state
    WHEN t.lease_token IS DISTINCT FROM p_token THEN 'lease token is not current'
    WHEN t.claimed_by IS DISTINCT FROM p_worker THEN 'task is claimed by another worker'
    WHEN w.uid IS NULL OR w.current_session_id IS DISTINCT FROM p_session THEN 'worker session is not current'
    WHEN t.claimed_worker_session_id IS DISTINCT FROM p_session THEN 'task was claimed by another session'
    WHEN t.execution_id <> s.execution_id THEN 'execution generation changed'
    WHEN t.claimed_reservation_id IS DISTINCT FROM s.reservation_id THEN 'job reservation generation changed'
    WHEN t.claimed_reservation_id IS DISTINCT FROM w.reservation_id THEN 'worker reservation generation changed'
    WHEN t.lease_expires_at <= now() THEN 'lease expired'
    WHEN t.deadline_at <= now() THEN 'execution deadline passed'
  END
$$;

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

-- Operator controls and job moves take the scheduler lock, then the job's schedule row, and return
-- that row locked (JE404 when the job does not exist). A finish holds the schedule row while it
-- publishes (renames or copies outputs), so waiting for it *while holding the scheduler lock* would
-- stall every claim in the cluster. Instead the row is tried with NOWAIT; when it is busy the
-- subtransaction rolls back, which releases the scheduler lock, and we retry every 20 ms for
-- p_patience_ms, then refuse with JE409 ("the job is busy").
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

-- Recompute what the claim index and the job row derive from the job's tasks: runnable columns,
-- status, progress, timestamps; append p_log to the job log; insert the terminal webhook when the job
-- enters a terminal status. Called by every transition, after it has locked the job_schedule row
-- (the enqueue and the claim write the same result directly; tests/scheduler/test_write_path.py
-- checks that a full refresh afterwards changes nothing). Cluster-placement tasks (webhooks) never
-- influence the job's status. completed and cancelled are final; failed is left only by a retry.
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
    -- Weighted by the work of each stage (15_progress); 100 only once completed, never lower.
    progress = CASE WHEN new_status = 'completed' THEN 100
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

-- A job execution starts with one dispatch task: media pool, cpu category, no VRAM, available now
-- (enqueue_job_v1 writes the job's derived columns from exactly these facts). One per execution:
-- its dedupe key is the execution's.
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

-- ==== 15_progress.sql ====

-- JetEncode scheduler, part 15: a job's progress, weighted by the work its stages do.
--
-- A job's stages appear as it runs (a transcode's dispatch spawns its renditions, its packaging
-- spawns the upload), so an average over the stages that exist reads 100 % the moment the dispatch
-- completes. Instead each job type has a plan: a share of the job per stage group (the dispatch,
-- then each child task type), fixed when the job is created, so a group that has not appeared yet
-- holds its share at 0 % and nothing that appears later can push the figure back. Within a group
-- the tasks are weighted by their work: media duration × pixels (a 1080p rendition weighs 2.25× a
-- 720p one of the same clip), 1 where a payload has neither. All of a parent's children are
-- inserted in one transaction, so a group's set of tasks never grows once it has appeared.
--
-- job progress = Σ share(g) × progress(g) / Σ share(g), progress(g) = Σ w·p / Σ w over the group's
-- tasks of the current execution (completed counts 100; cancelled tasks and webhooks don't count).
-- The callers floor it, keep it from going down within an execution (greatest with the stored
-- value) and cap it at 99 until the job completes. docs/api.md, "Progress", explains it to users.

-- The shares of a job type's stage groups: {"dispatch": n, "<task type>": n, ...}; NULL for a type
-- without a plan (its progress is then the plain average over its stages). Shares are relative.
CREATE OR REPLACE FUNCTION progress_plan_v1(p_type text, p_params jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  RETURN CASE p_type
    -- noop: the dispatch and each child sleep `seconds`: one share each.
    WHEN 'noop' THEN jsonb_build_object('dispatch', 1, 'noop',
      CASE WHEN jsonb_typeof(p_params -> 'children') = 'number' THEN (p_params ->> 'children')::numeric ELSE 0 END)
    -- transcode / reencode_streaming: measuring quality (media.quality) is one decode of the source
    -- plus libvmaf on the scored frames, about a third of an encode's CPU; share 0 (left out) when
    -- `quality_metrics` is [] and the stage never runs (its share then goes back to the encodes).
    WHEN 'transcode' THEN jsonb_build_object('dispatch', 5,
      'transcode.rendition', CASE WHEN p_params -> 'quality_metrics' = '[]'::jsonb THEN 75 ELSE 65 END,
      'transcode.thumbnail', 2,
      'transcode.quality', CASE WHEN p_params -> 'quality_metrics' = '[]'::jsonb THEN 0 ELSE 10 END,
      'transcode.package', 8, 'transcode.upload', 10)
    WHEN 'scan' THEN '{"dispatch": 50, "validate": 50}'::jsonb
    WHEN 'public_scan' THEN '{"dispatch": 50, "validate": 50}'::jsonb
    WHEN 'validate' THEN '{"dispatch": 100}'::jsonb
    WHEN 'reencode_streaming' THEN jsonb_build_object('dispatch', 5,
      'reencode_streaming.encode', CASE WHEN p_params -> 'quality_metrics' = '[]'::jsonb THEN 85 ELSE 70 END,
      'reencode_streaming.quality', CASE WHEN p_params -> 'quality_metrics' = '[]'::jsonb THEN 0 ELSE 15 END,
      'library.register', 10)
    WHEN 'compile_random' THEN '{"dispatch": 10, "compile_random.render": 90}'::jsonb
    WHEN 'compile_quad' THEN '{"dispatch": 10, "compile_quad.render": 90}'::jsonb
    WHEN 'compile_mega' THEN '{"dispatch": 10, "compile_mega.render": 90}'::jsonb
    WHEN 'compile_gif' THEN '{"dispatch": 100}'::jsonb
    WHEN 'digest_generate' THEN '{"dispatch": 5, "digest_generate.analyze": 45, "digest_generate.render": 50}'::jsonb
    WHEN 'clip_generate' THEN '{"dispatch": 5, "clip_generate.detect": 45, "clip_generate.cut": 50}'::jsonb
    WHEN 'highlight_generate' THEN
      '{"dispatch": 5, "highlight_generate.analyze": 45, "highlight_generate.render": 50}'::jsonb
    WHEN 'tag_generation' THEN '{"dispatch": 5, "tag_generation.analyze": 90, "library.update": 5}'::jsonb
    WHEN 'scene_extract' THEN '{"dispatch": 5, "scene_extract.detect": 90, "library.update": 5}'::jsonb
    WHEN 'thumbnail_generate' THEN '{"dispatch": 95, "library.update": 5}'::jsonb
    WHEN 'move_to_library' THEN '{"dispatch": 100}'::jsonb
  END;
END
$$;

-- The work a task stands for within its group: media seconds × pixels / (1280 × 720), each factor
-- 1 when the payload does not say (durations count at least 0.1 s).
CREATE OR REPLACE FUNCTION task_weight_v1(p_payload jsonb) RETURNS float
LANGUAGE sql IMMUTABLE AS $$
  SELECT greatest(CASE WHEN jsonb_typeof(p_payload -> 'duration') = 'number'
                       THEN (p_payload ->> 'duration')::float ELSE 1 END, 0.1)
       * CASE WHEN jsonb_typeof(p_payload -> 'width') = 'number' AND jsonb_typeof(p_payload -> 'height') = 'number'
              THEN greatest((p_payload ->> 'width')::float * (p_payload ->> 'height')::float, 1) / 921600.0
              ELSE 1 END
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
    SELECT CASE WHEN q.placement = 'dispatch' THEN 'dispatch' ELSE q.task_type END AS grp,
           task_weight_v1(q.payload) AS w,
           CASE WHEN q.state = 'completed' THEN 100 ELSE q.progress END AS p
      FROM queue_tasks q
     WHERE q.job_id = p_job AND q.execution_id = p_execution AND q.placement <> 'cluster'
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

-- ==== 20_enqueue_and_claim.sql ====

-- JetEncode scheduler, part 20: how work comes in and is taken. Workers register a session and
-- send heartbeats; jobs are enqueued with their first (dispatch) task; a free slot claims the next
-- task it may run, in one round trip (docs/scheduler.md, "The claim").

-- ---- Workers ---------------------------------------------------------------------------------

-- Register a process start. The new session fences the previous one of the same uid at once: its
-- running tasks' leases are expired so the recovery loop can hand them on without waiting. The
-- worker row ends active with this session's capacity (and no left_at: a new process has not left).
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
    left_at = NULL;
  IF previous IS NOT NULL AND previous <> p_session THEN
    UPDATE queue_tasks SET lease_expires_at = now() - interval '1 millisecond'
    WHERE state = 'running' AND claimed_worker_session_id = previous;
  END IF;
  RETURN previous;
END
$$;

-- The worker's own heartbeat: its last_heartbeat_at and system sample, and an offline worker is
-- active again. Fenced on the session: JE410 when a newer session took the uid over (the caller
-- must stop). Returns the worker's lifecycle (draining tells a worker to claim nothing new).
CREATE OR REPLACE FUNCTION worker_heartbeat_v1(p_uid text, p_session uuid, p_sample jsonb) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  result text;
BEGIN
  UPDATE queue_workers SET
    last_heartbeat_at = now(),
    system_sample = coalesce(p_sample, system_sample),
    lifecycle = CASE WHEN lifecycle = 'offline' THEN 'active' ELSE lifecycle END
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

-- ==== 30_fenced_writes.sql ====

-- JetEncode scheduler, part 30: what a claimed stage writes while it runs and when it ends.
--
-- Every write here is fenced: it is accepted only while the writer still owns the task
-- (fence_reason_v1: token, uid, current session, execution, reservation generations, lease and
-- deadline); otherwise it changes nothing, returns the reason and leaves a rejection in
-- queue_fence_audit. Finish, fail and release share their prologue (begin_fenced_write_v1) and
-- return (outcome, reason): the task's new state, or 'rejected' and why.

-- Renew the leases of all of one session's running tasks in one statement (each still fenced).
-- Returns one row per task asked about: accepted, and whether its job asks for cancellation;
-- each refusal is audited with its reason. JE410 when the session is not the worker's current one.
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

-- A worker session's whole heartbeat in one statement, so an idle worker's beat is one round trip:
-- the leases of its running tasks first (heartbeat_tasks_v1: they are what a slow beat would cost),
-- then its own row and system sample (worker_heartbeat_v1). Returns the worker's lifecycle and one
-- answer per task asked about ({task_id, accepted, cancel_requested, reason}); JE410 when the
-- session is not the worker's current one.
CREATE OR REPLACE FUNCTION worker_beat_v1(p_worker text, p_session uuid, p_tasks jsonb, p_lease_seconds float,
                                          p_sample jsonb)
RETURNS TABLE (lifecycle text, answers jsonb)
LANGUAGE plpgsql AS $$
BEGIN
  answers := '[]';
  IF jsonb_array_length(p_tasks) > 0 THEN
    SELECT coalesce(jsonb_agg(to_jsonb(h)), '[]') INTO answers
      FROM heartbeat_tasks_v1(p_worker, p_session, p_tasks, p_lease_seconds) h;
  END IF;
  lifecycle := worker_heartbeat_v1(p_worker, p_session, p_sample);
  RETURN NEXT;
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
    -- Weighted by the work of each stage (15_progress); below 100 until completed, never lower.
    UPDATE jobs j SET progress = greatest(j.progress,
                                          least(99, floor(coalesce(job_progress_v1(t.job_id, t.execution_id), 0)))::smallint)
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

-- Let sibling stages waiting on a parent's other children run once all of those have completed.
-- Returns how many became pending (zero until the last sibling completes; the finishes of one job
-- are serialized by its schedule lock, so exactly one finish releases them).
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

-- ==== 40_recovery_and_failover.sql ====

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
--   evacuated         an operator evacuated the worker: every pinned job moves, running stages included
--   lost_in_dispatch  the worker is lost (no heartbeat for a lease) and the job has no local work
--   lost_after_delay  the worker is lost longer than JETENCODE_REASSIGN_AFTER_SECONDS and the job has
--                     local work
--   manual            an operator's redispatch
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
    PERFORM refresh_job_v1(t.job_id, CASE WHEN t.placement = 'cluster' THEN NULL
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
   WHERE job_id = p_job AND execution_id = s.execution_id AND placement <> 'cluster'
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
   WHERE q.job_id = p_job AND q.execution_id = s.execution_id AND q.placement <> 'cluster';
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
    ELSE p_cause END;

  IF p_cause LIKE 'lost\_%' AND s.lost_workers >= j.max_attempts THEN
    UPDATE queue_tasks SET state = 'failed', finished_at = now(),
                           last_failure = why || ': the job has lost its worker ' || s.lost_workers || ' times'
     WHERE job_id = p_job AND execution_id = s.execution_id AND placement <> 'cluster'
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
-- purpose (drained: it said offline itself, left_at) or lost. A worker is lost when it has sent no heartbeat for p_lost_seconds (the lease: by then every
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
                 THEN 'drained'
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
-- coming back for its local work. Returns how many jobs moved.
CREATE OR REPLACE FUNCTION set_session_lifecycle_v2(p_uid text, p_session uuid, p_lifecycle text) RETURNS int
LANGUAGE plpgsql AS $$
BEGIN
  UPDATE queue_workers SET lifecycle = p_lifecycle, last_heartbeat_at = now(),
                           left_at = CASE WHEN p_lifecycle = 'offline' THEN now() ELSE left_at END
   WHERE uid = p_uid AND current_session_id = p_session;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  IF p_lifecycle = 'active' THEN
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
  UPDATE queue_workers SET lifecycle = 'draining' WHERE uid = p_uid AND lifecycle <> 'offline'
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

-- Evacuate: drain the worker (unless it is offline already) and move every job pinned to it now,
-- running stages included (they are fenced out and redone in the new execution). JE404 for an
-- unknown worker, JE409 for an offline one with nothing to move. Returns how many jobs moved.
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
  IF current = 'offline' AND moved = 0 THEN
    RAISE EXCEPTION USING ERRCODE = 'JE409', MESSAGE = 'worker ' || p_uid || ' is offline and holds no jobs to move';
  END IF;
  RETURN moved;
END
$$;

-- ==== 50_operator_controls.sql ====

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
   WHERE job_id = p_job AND execution_id = s.execution_id AND placement <> 'cluster'
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
   WHERE job_id = p_job AND execution_id = s.execution_id AND state = 'failed' AND placement <> 'cluster';
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

-- ---- Reservations: the seam for dedicated execution. No provisioning here. -------------------

-- Reserve a job that has not been dispatched yet for dedicated execution (JE409 once dispatched):
-- only a worker bound to the returned reservation may claim it.
CREATE OR REPLACE FUNCTION reserve_job_v1(p_job uuid) RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
  s job_schedule%ROWTYPE := lock_job_for_control_v1(p_job, 'reserve');
  rid uuid := gen_random_uuid();
BEGIN
  IF s.assigned_worker_uid IS NOT NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'JE409', MESSAGE = 'cannot reserve: the job is already dispatched';
  END IF;
  INSERT INTO queue_reservations (id, job_id, worker_uid, state, last_error, created_at, updated_at)
  VALUES (rid, p_job, NULL, 'requested', '', now(), now());
  UPDATE job_schedule SET execution_mode = 'dedicated', reservation_id = rid WHERE job_id = p_job;
  PERFORM refresh_job_v1(p_job, 'reserved for dedicated execution (' || rid || ')');
  RETURN rid;
END
$$;

-- Bind a reservation to a worker (JE404 when either is unknown): the worker then claims only the
-- reserved job's tasks, and the media workers are notified.
CREATE OR REPLACE FUNCTION bind_reservation_v1(p_reservation uuid, p_worker text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  UPDATE queue_workers SET reservation_id = p_reservation WHERE uid = p_worker;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'JE404', MESSAGE = 'worker not found';
  END IF;
  UPDATE queue_reservations SET worker_uid = p_worker, state = 'bound', updated_at = now() WHERE id = p_reservation;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'JE404', MESSAGE = 'reservation not found';
  END IF;
  PERFORM pg_notify('jetencode_queue_tasks', 'media');
END
$$;

-- ==== 60_maintenance.sql ====

-- JetEncode scheduler, part 60: maintenance run by every worker's timed loops: retention and the
-- per-minute samples behind the dashboard's charts. Both are safe to run from many workers at once.

-- Retention: delete up to p_batch jobs that ended more than p_days ago (with their tasks, logs,
-- outputs and schedule; library assets and reservations that point at them are kept, unlinked),
-- skipping any still locked or with live tasks, and the audit rows and samples older than p_days.
-- What the metrics count is carried out of the audit rows first (queue_scheduler_state.purged_*),
-- so the counters stay monotonic. Returns how many jobs went.
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

-- Record this minute's sample once (jobs by status now; jobs completed and failed, and stages
-- completed, in the previous minute). Returns true when this call wrote it, NULL when another
-- worker already had. Every worker asks once a minute, so the minute is looked up first: the
-- counts are taken once per minute across the farm, not once per worker (in PL/pgSQL, so the
-- INSERT's plan is kept for the session instead of made on every call).
CREATE OR REPLACE FUNCTION record_sample_v1() RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
  this_minute timestamptz := date_trunc('minute', now());
  recorded boolean;
BEGIN
  IF EXISTS (SELECT 1 FROM queue_samples s WHERE s.at = this_minute) THEN
    RETURN NULL;
  END IF;
  INSERT INTO queue_samples (at, pending, running, retry_wait, paused, completed, failed, stages_completed)
  SELECT this_minute,
         count(*) FILTER (WHERE status = 'pending'),
         count(*) FILTER (WHERE status = 'running'),
         count(*) FILTER (WHERE status = 'retry_wait'),
         count(*) FILTER (WHERE status = 'paused'),
         (SELECT count(*) FROM jobs WHERE status = 'completed' AND finished_at >= this_minute - interval '1 minute' AND finished_at < this_minute),
         (SELECT count(*) FROM jobs WHERE status = 'failed' AND finished_at >= this_minute - interval '1 minute' AND finished_at < this_minute),
         (SELECT count(*) FROM queue_tasks WHERE state = 'completed' AND finished_at >= this_minute - interval '1 minute' AND finished_at < this_minute)
    FROM jobs WHERE status IN ('pending', 'running', 'retry_wait', 'paused')
  ON CONFLICT (at) DO NOTHING
  RETURNING true INTO recorded;
  RETURN recorded;
END
$$;

-- ==== 90_superseded_v1.sql ====

-- JetEncode scheduler, part 90: v1 functions that newer ones superseded. Nothing in this release
-- calls them. The public ones stay for workers and web processes of the previous release, which
-- still call them during a rolling deploy (docs/operations.md, "Upgrades and rolling deploys"), and
-- are dropped one release later with a migration of their own:
--
--   set_session_lifecycle_v1  -> set_session_lifecycle_v2 (leaving also releases idle pinned jobs)
--   drain_worker_v1           -> drain_worker_v2 (idle pinned jobs move at once)
--   redispatch_job_v1         -> redispatch_job_v2 (counted by cause; the job's own dispatch timeout)
--   reassign_lost_jobs_v1     -> release_jobs_v2 (the failover rules of 40_recovery_and_failover)
--   lock_for_fenced_write_v1  -> begin_fenced_write_v1 (the same locks, and the fence, in one call);
--                                tests/scheduler/test_write_path.py still lists it among the hot
--                                functions (enable_seqscan off), so it goes when that list does

-- The session itself says draining/offline (shutdown). Fenced on the session: true when it is the
-- current one, NULL otherwise.
CREATE OR REPLACE FUNCTION set_session_lifecycle_v1(p_uid text, p_session uuid, p_lifecycle text) RETURNS boolean
LANGUAGE sql AS $$
  UPDATE queue_workers SET lifecycle = p_lifecycle, last_heartbeat_at = now()
  WHERE uid = p_uid AND current_session_id = p_session
  RETURNING true
$$;

-- An operator drains a worker: it finishes what it runs and claims nothing new. JE409 for an
-- offline worker, JE404 for an unknown one. Returns its lifecycle (draining).
CREATE OR REPLACE FUNCTION drain_worker_v1(p_uid text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  result text;
BEGIN
  UPDATE queue_workers SET lifecycle = 'draining' WHERE uid = p_uid AND lifecycle <> 'offline'
  RETURNING lifecycle INTO result;
  IF NOT FOUND THEN
    IF EXISTS (SELECT 1 FROM queue_workers WHERE uid = p_uid) THEN
      RAISE EXCEPTION USING ERRCODE = 'JE409', MESSAGE = 'worker ' || p_uid || ' is offline';
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'JE404', MESSAGE = 'worker not found';
  END IF;
  RETURN result;
END
$$;

-- Start a new execution of a job: the old execution's unfinished tasks are cancelled, the
-- assignment is cleared and a fresh dispatch queued. Outputs of the old execution are never reused.
-- JE409 for a finished or cancelling job. Returns the new execution.
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
