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
    -- A split job's stages count in the groups of the unsplit stages they stand for: the group their
    -- payload names, else a split transcode's.
    SELECT CASE WHEN q.placement = 'dispatch' THEN 'dispatch'
                WHEN q.payload ? 'progress_group' THEN q.payload ->> 'progress_group'
                WHEN q.task_type = 'transcode.chunk' THEN 'transcode.rendition'
                WHEN q.task_type = 'transcode.audio' THEN 'transcode.thumbnail'
                WHEN q.task_type IN ('transcode.chunk_quality', 'transcode.split_quality') THEN 'transcode.quality'
                ELSE q.task_type END AS grp,
           task_weight_v1(q.payload) AS w,
           CASE WHEN q.state = 'completed' THEN 100 ELSE q.progress END AS p
      FROM queue_tasks q
     WHERE q.job_id = p_job AND q.execution_id = p_execution AND q.task_type <> 'webhook'
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
