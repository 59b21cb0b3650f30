-- Installed by migration 0012_weighted_progress: the statements of scheduler/sql/functions/ that changed
-- since the migration before it (a delta, written by `python -m scheduler.sqlfiles delta`).
-- Never edit it: a later change ships in a new migration with a delta of its own.

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
