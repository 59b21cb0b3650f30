-- JetEncode scheduler, part 10: the building blocks every transition shares, and the fence.
--
-- The scheduler's current SQL, in reading order (scheduler/sql/functions/):
--   10_helpers_and_fence      retry delay, dedupe keys, the audit, the fence, the locks, job status
--   15_progress               a job's progress, weighted by the work of its stages
--   20_enqueue_and_claim      workers register and beat, jobs enter, slots claim
--   30_fenced_writes          what a claimed stage writes: heartbeats, progress, finish, fail, release
--   40_recovery_and_failover  expired leases, stale workers, jobs moving off drained or lost workers
--   50_operator_controls      cancel, pause, priority, moves, retry
--   55_reservations           dedicated execution: reserve, bind, provision, time out, release
--   60_maintenance            retention and per-minute samples
--   90_superseded_v1          v1 functions that v2 replaced, kept for workers of the previous release
-- Every change to queue state is one call to one of these functions, made by
-- scheduler/repository.py (its statements are named in scheduler/sql/repository.sql).
--
-- These files hold only CREATE OR REPLACE FUNCTION. Tables, columns and sequences live in the
-- Django migrations; a migration that installs functions runs a file of its own
-- (scheduler/sql/migrations/NNNN_*.sql: the statements of these files that changed since the
-- migration before, scheduler/sqldelta.py), so migrating an old database installs what each step
-- installed then. An edit here therefore ships in a new migration with a delta of its own
-- (`python -m scheduler.sqlfiles delta NNNN_name`); tests/scheduler/test_migrations.py fails until it does.
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
