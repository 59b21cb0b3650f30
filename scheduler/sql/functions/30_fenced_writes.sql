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
  -- A dispatch whose children are all `cluster` (a split transcode, DECISIONS 19) leaves no local
  -- work: the job goes back to the pending group, where every worker's claim walk sees its stages.
  IF inserted > 0 AND t.placement = 'dispatch' AND NOT EXISTS (
       SELECT 1 FROM jsonb_array_elements(p_children) c WHERE coalesce(c ->> 'placement', 'job') <> 'cluster') THEN
    UPDATE job_schedule SET assigned_worker_uid = NULL WHERE job_id = t.job_id RETURNING * INTO s;
  END IF;
  PERFORM refresh_job_v1(t.job_id, CASE WHEN t.task_type = 'webhook' THEN NULL
    ELSE t.task_type || ' completed on ' || p_worker
         || CASE WHEN inserted > 0 THEN ', ' || inserted || ' stage(s) queued' ELSE '' END
         -- A stage's word for the job's own log (its result's `job_log`), e.g. why a split
         -- transcode took the unsplit path: the operator reads it without opening stage logs.
         || coalesce(': ' || left(p_result ->> 'job_log', 500), '') END);
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
