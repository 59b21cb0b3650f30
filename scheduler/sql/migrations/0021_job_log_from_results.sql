-- Installed by migration 0021_job_log_from_results: the statements of scheduler/sql/functions/ that changed
-- since the migration before it (a delta, written by `python -m scheduler.sqlfiles delta`).
-- Never edit it: a later change ships in a new migration with a delta of its own.

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
