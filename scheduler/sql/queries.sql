-- Read-side queries of the scheduler: the queue list, stats and worker overview.
-- Loaded by scheduler/queries.py; each query sits under a "-- name: <name>" header.

-- name: queue_list
-- One entry per unfinished job (plus failed jobs that can be retried), grouped by worker (assigned,
-- else targeted; NULL = pending) and in claim order within a group. include_finished (used with
-- job_id) builds the same entry for a job that has left the queue, e.g. after a cancel. The representative task is the
-- running one, else the next in claim order, else the failed one. waiting_reason is derived from the
-- same predicates the claim applies. chunks: a split job's chunks (total, done, running per worker).
SELECT
  j.id AS job_id, j.type, NULLIF(s.group_key, '') AS "group", rt.task_type AS stage, j.status AS state,
  rt.state AS task_state, s.priority, s.position, s.required_worker_uid, s.assigned_worker_uid, s.paused,
  rt.attempt, rt.max_attempts,
  CASE WHEN j.status = 'pending' THEN greatest(0, extract(epoch FROM now() - rt.available_at)) END AS waiting_seconds,
  rt.available_at, (j.status = 'failed' AND s.cancel_requested_at IS NULL) AS can_retry,
  CASE
    WHEN j.status NOT IN ('pending', 'retry_wait', 'paused') THEN NULL
    WHEN s.paused THEN 'paused by an operator'
    -- A dedicated job runs only on the worker bound to its reservation (55_reservations.sql).
    WHEN s.execution_mode = 'dedicated' AND NOT EXISTS (
           SELECT 1 FROM queue_reservations r JOIN queue_workers w ON w.uid = r.worker_uid
            WHERE r.id = s.reservation_id AND r.state = 'bound' AND w.reservation_id = r.id
              AND w.lifecycle = 'active' AND w.last_heartbeat_at >= now() - make_interval(secs => %(stale)s))
      THEN coalesce((
        SELECT CASE WHEN r.state = 'bound'
                 THEN 'waiting for dedicated worker ' || r.worker_uid || ', which is not sending heartbeats (reservation '
                      || left(r.id::text, 8) || '…, generation ' || r.generation || ')'
                 ELSE 'waiting for a dedicated worker (reservation ' || left(r.id::text, 8) || '…, requested '
                      || format_seconds_v2(extract(epoch FROM now() - r.requested_at)) || ' ago'
                      || CASE WHEN r.last_error <> '' THEN '; ' || r.last_error ELSE '' END || ')'
               END
          FROM queue_reservations r WHERE r.id = s.reservation_id), 'waiting for a dedicated worker')
    -- Pinned to a worker that is draining or silent: what the failover rules will do (release_jobs_v2);
    -- this matters more than a retry backoff, which ends sooner and would not let the job run anyway.
    WHEN s.assigned_worker_uid IS NOT NULL AND s.required_worker_uid IS NULL AND NOT EXISTS (
           SELECT 1 FROM queue_workers w WHERE w.uid = s.assigned_worker_uid
             AND w.lifecycle = 'active' AND w.last_heartbeat_at >= now() - make_interval(secs => %(lost)s))
      THEN coalesce((
        SELECT CASE
                 WHEN (w.lifecycle = 'draining' OR w.left_at IS NOT NULL) AND NOT other_worker_active_v2(w.uid)
                   THEN 'worker ' || w.uid || CASE WHEN w.lifecycle = 'draining' THEN ' is draining' ELSE ' has stopped' END
                        || ' and no other worker is active: the job resumes when ' || w.uid || ' or another worker starts'
                 WHEN w.lifecycle = 'draining' THEN 'worker ' || w.uid || ' is draining: the job moves to another worker within seconds'
                 WHEN w.left_at IS NOT NULL THEN 'worker ' || w.uid || ' has left: the job moves to another worker within seconds'
                 WHEN has_local_work_v2(s.job_id, s.execution_id)
                   THEN 'waiting up to ' || format_seconds_v2(%(reassign_after)s - extract(epoch FROM now() - w.last_heartbeat_at))
                        || ' for worker ' || w.uid || ' (has local work)'
                 ELSE 'worker ' || w.uid || ' is not sending heartbeats: the job moves to another worker '
                      || CASE WHEN w.last_heartbeat_at < now() - make_interval(secs => %(lost)s) THEN 'within seconds'
                              ELSE 'in ' || format_seconds_v2(%(lost)s - extract(epoch FROM now() - w.last_heartbeat_at)) END
               END
          FROM queue_workers w WHERE w.uid = s.assigned_worker_uid),
        'waiting for worker ' || s.assigned_worker_uid || ', which is unknown')
    WHEN rt.state = 'retry_wait' AND rt.available_at > now()
      THEN 'retry backoff after attempt ' || rt.attempt || ' until ' || to_char(rt.available_at AT TIME ZONE 'UTC', 'HH24:MI:SS') || ' UTC'
    WHEN rt.state = 'blocked' THEN 'waiting for sibling stages to complete'
    WHEN coalesce(s.assigned_worker_uid, s.required_worker_uid) IS NOT NULL AND NOT EXISTS (
           SELECT 1 FROM queue_workers w WHERE w.uid = coalesce(s.assigned_worker_uid, s.required_worker_uid)
             AND w.lifecycle = 'active' AND w.last_heartbeat_at >= now() - make_interval(secs => %(stale)s))
      THEN 'waiting for worker ' || coalesce(s.assigned_worker_uid, s.required_worker_uid) || ', which is '
           || coalesce((SELECT CASE WHEN w.lifecycle = 'active' THEN 'not sending heartbeats' ELSE w.lifecycle END
                          FROM queue_workers w WHERE w.uid = coalesce(s.assigned_worker_uid, s.required_worker_uid)), 'unknown')
    WHEN NOT EXISTS (SELECT 1 FROM queue_workers w WHERE w.lifecycle = 'active'
                       AND w.last_heartbeat_at >= now() - make_interval(secs => %(stale)s))
      THEN 'no active worker'
    WHEN s.required_category IS NOT NULL AND NOT EXISTS (
           SELECT 1 FROM queue_workers w WHERE w.lifecycle = 'active'
             AND w.last_heartbeat_at >= now() - make_interval(secs => %(stale)s)
             AND coalesce((w.category_limits ->> s.required_category)::int, 0) > 0)
      THEN 'no active worker has capacity in ' || s.required_category
    WHEN s.required_vram_mb > 0 AND NOT EXISTS (
           SELECT 1 FROM queue_workers w WHERE w.lifecycle = 'active'
             AND w.last_heartbeat_at >= now() - make_interval(secs => %(stale)s)
             AND w.vram_total_mb >= s.required_vram_mb)
      THEN 'needs ' || s.required_vram_mb || ' MB of VRAM; no active worker has that much'
    WHEN rt.pool = 'media' AND NOT EXISTS (
           SELECT 1 FROM queue_workers w WHERE w.lifecycle = 'active'
             AND w.last_heartbeat_at >= now() - make_interval(secs => %(stale)s)
             AND coalesce((w.category_limits ->> rt.resource_category)::int, 0) > 0)
      THEN 'no active worker has capacity in ' || rt.resource_category
    WHEN rt.vram_mb > 0 AND NOT EXISTS (
           SELECT 1 FROM queue_workers w WHERE w.lifecycle = 'active'
             AND w.last_heartbeat_at >= now() - make_interval(secs => %(stale)s) AND w.vram_total_mb >= rt.vram_mb)
      THEN 'needs ' || rt.vram_mb || ' MB of VRAM; no active worker has that much'
    WHEN coalesce(s.assigned_worker_uid, s.required_worker_uid) IS NOT NULL
      THEN 'waiting for a free ' || rt.resource_category || ' slot on ' || coalesce(s.assigned_worker_uid, s.required_worker_uid)
    ELSE 'waiting for a free ' || rt.resource_category || ' slot'
  END AS waiting_reason,
  j.progress, j.created_at, s.cancel_requested_at IS NOT NULL AS cancel_requested, rt.resource_category, rt.vram_mb,
  (SELECT row_to_json(r)::text FROM (
     SELECT x.id, x.job_id, x.state, x.worker_uid, x.generation, x.last_error, x.provision_attempts,
            x.created_at, x.requested_at, x.bound_at, x.ended_at, x.updated_at
       FROM queue_reservations x WHERE x.id = s.reservation_id) r) AS reservation,
  -- A split transcode is one entry: its chunks counted, and how many run on which worker.
  (SELECT CASE WHEN c.total > 0 THEN jsonb_build_object('total', c.total, 'done', c.done,
                                                        'running', coalesce(c.running, '{}'::jsonb)) END
     FROM (SELECT count(DISTINCT q.payload -> 'chunk' ->> 'index') AS total,
                  count(DISTINCT q.payload -> 'chunk' ->> 'index') FILTER (WHERE q.state = 'completed') AS done,
                  (SELECT jsonb_object_agg(r.claimed_by, r.n)
                     FROM (SELECT q2.claimed_by, count(*) AS n FROM queue_tasks q2
                            WHERE q2.job_id = s.job_id AND q2.execution_id = s.execution_id
                              AND q2.task_type = 'transcode.chunk' AND q2.state = 'running'
                            GROUP BY q2.claimed_by) r) AS running
             FROM queue_tasks q
            WHERE q.job_id = s.job_id AND q.execution_id = s.execution_id AND q.task_type = 'transcode.chunk') c
  ) AS chunks
FROM job_schedule s
JOIN jobs j ON j.id = s.job_id
LEFT JOIN LATERAL (
  SELECT q.task_type, q.state, q.attempt, q.max_attempts, q.available_at, q.pool, q.resource_category, q.vram_mb
    FROM queue_tasks q
   WHERE q.job_id = s.job_id AND q.execution_id = s.execution_id AND q.task_type <> 'webhook'
   ORDER BY CASE q.state WHEN 'running' THEN 0 WHEN 'pending' THEN 1 WHEN 'retry_wait' THEN 1
                         WHEN 'blocked' THEN 2 WHEN 'failed' THEN 3 ELSE 4 END,
            q.available_at, q.created_at, q.id
   LIMIT 1
) rt ON true
WHERE (j.status IN ('pending', 'running', 'retry_wait', 'paused')
       OR (j.status = 'failed' AND s.cancel_requested_at IS NULL)
       OR %(include_finished)s)
  AND (%(worker)s::text IS NULL OR s.group_key = %(worker)s)
  AND (%(state)s::text IS NULL OR j.status = %(state)s)
  AND (%(job_id)s::uuid IS NULL OR j.id = %(job_id)s)
-- Ordered like the schedule_group_order index ('' = pending sorts first), so a page walks the
-- index and stops instead of sorting every unfinished job.
ORDER BY s.group_key, s.priority DESC, s.position, s.job_id
LIMIT %(limit)s OFFSET %(offset)s;

-- name: queue_count
-- How many entries queue_list has in all groups, for the API's pagination and /v2/stats: jobs in a
-- queue state (pending, running, retry_wait, paused, failed) less the failed ones whose cancel was
-- requested. The first count reads only the jobs_status_created index, the second only jobs that
-- had a cancel requested, instead of joining every job to its schedule (a hash join of two
-- sequential scans, 50-200 ms with 100,000 jobs). It relies on every job having its job_schedule
-- row, which enqueue_job_v1 inserts and purge_history_v1 deletes with the job.
SELECT
  (SELECT count(*) FROM jobs j
    WHERE j.status IN ('pending', 'running', 'retry_wait', 'paused', 'failed')
      AND (%(state)s::text IS NULL OR j.status = %(state)s))
  - (SELECT count(*) FROM job_schedule s JOIN jobs j ON j.id = s.job_id
      WHERE s.cancel_requested_at IS NOT NULL AND j.status = 'failed'
        AND (%(state)s::text IS NULL OR %(state)s::text = 'failed')) AS count;

-- name: queue_count_group
-- queue_count for one group (a worker uid, '' = the pending group).
SELECT count(*)
FROM job_schedule s JOIN jobs j ON j.id = s.job_id
WHERE (j.status IN ('pending', 'running', 'retry_wait', 'paused')
       OR (j.status = 'failed' AND s.cancel_requested_at IS NULL))
  AND s.group_key = %(worker)s
  AND (%(state)s::text IS NULL OR j.status = %(state)s);

-- name: workers_overview
-- Workers with their effective lifecycle (an active worker without a recent heartbeat is offline),
-- utilization per pool and category and the VRAM their running tasks use.
SELECT
  w.uid, w.current_session_id, w.hostname, w.pid, w.version,
  CASE WHEN w.lifecycle = 'active' AND (w.last_heartbeat_at IS NULL
            OR w.last_heartbeat_at < now() - make_interval(secs => %(stale)s)) THEN 'offline'
       ELSE w.lifecycle END AS lifecycle,
  w.registered_at, w.last_heartbeat_at, w.concurrency, w.background_slots, w.category_limits, w.vram_total_mb,
  w.system_sample, w.capabilities, w.workspace, w.reservation_id,
  coalesce(r.media, 0) AS media_running, coalesce(r.background, 0) AS background_running,
  coalesce(r.by_category, '{}'::jsonb) AS running_by_category, coalesce(r.vram, 0) AS vram_used_mb
FROM queue_workers w
LEFT JOIN LATERAL (
  SELECT count(*) FILTER (WHERE q.pool = 'media') AS media,
         count(*) FILTER (WHERE q.pool = 'background') AS background,
         (SELECT jsonb_object_agg(c.resource_category, c.n) FROM (
            SELECT q2.resource_category, count(*) AS n FROM queue_tasks q2
             WHERE q2.state = 'running' AND q2.claimed_worker_session_id = w.current_session_id AND q2.pool = 'media'
             GROUP BY q2.resource_category) c) AS by_category,
         sum(q.vram_mb) FILTER (WHERE q.pool = 'media') AS vram
    FROM queue_tasks q
   WHERE q.state = 'running' AND q.claimed_worker_session_id = w.current_session_id
) r ON true
WHERE (%(uid)s::text IS NULL OR w.uid = %(uid)s)
ORDER BY w.uid;

-- name: worker_active_tasks
-- The tasks a worker's current session is running, oldest first, with their job's type.
SELECT q.id, q.job_id, q.task_type, q.pool, q.resource_category, q.vram_mb, q.attempt, q.max_attempts,
       q.progress, q.progress_detail, q.started_at, q.lease_expires_at, j.type AS job_type
FROM queue_tasks q JOIN queue_workers w ON w.current_session_id = q.claimed_worker_session_id
JOIN jobs j ON j.id = q.job_id
WHERE w.uid = %(uid)s AND q.state = 'running'
ORDER BY q.started_at;

-- name: stats
-- Totals for /v2/stats: jobs by status and type, running stages by category, VRAM, last-hour and 24-hour figures.
SELECT
  (SELECT coalesce(jsonb_object_agg(status, n), '{}'::jsonb) FROM (SELECT status, count(*) AS n FROM jobs GROUP BY status) x) AS by_status,
  (SELECT coalesce(jsonb_object_agg(resource_category, n), '{}'::jsonb) FROM (
     SELECT resource_category, count(*) AS n FROM queue_tasks WHERE state = 'running' AND pool = 'media'
      GROUP BY resource_category) x) AS running_by_category,
  (SELECT coalesce(sum(vram_mb), 0) FROM queue_tasks WHERE state = 'running' AND pool = 'media') AS vram_used_mb,
  (SELECT coalesce(sum(vram_total_mb), 0) FROM queue_workers WHERE lifecycle = 'active'
      AND last_heartbeat_at >= now() - make_interval(secs => %(stale)s)) AS vram_total_mb,
  (SELECT coalesce(jsonb_object_agg(type, round(secs::numeric, 3)), '{}'::jsonb) FROM (
     SELECT type, avg(extract(epoch FROM finished_at - started_at)) AS secs FROM jobs
      WHERE status = 'completed' AND started_at IS NOT NULL AND finished_at > now() - interval '24 hours'
      GROUP BY type) x) AS avg_processing_seconds_by_type,
  (SELECT coalesce(jsonb_object_agg(type, n), '{}'::jsonb) FROM (SELECT type, count(*) AS n FROM jobs GROUP BY type) x) AS jobs_by_type,
  (SELECT count(*) FROM jobs WHERE status = 'completed' AND finished_at > now() - interval '1 hour') AS completed_last_hour,
  (SELECT count(*) FROM jobs WHERE status = 'failed' AND finished_at > now() - interval '1 hour') AS failed_last_hour;

-- name: queue_depth
-- Runnable and running work by task state, pool and category (for /metrics); the tasks of a paused
-- job that are not running count as 'paused', not as work a slot could take.
SELECT CASE WHEN t.state <> 'running' AND s.paused THEN 'paused' ELSE t.state END AS state,
       t.pool, t.resource_category, count(*) AS n
FROM queue_tasks t JOIN job_schedule s ON s.job_id = t.job_id
WHERE t.state IN ('blocked', 'pending', 'retry_wait', 'running')
GROUP BY 1, 2, 3;

-- name: samples
-- The per-minute queue samples of the last %(hours)s hours, oldest first.
SELECT at, pending, running, retry_wait, paused, completed, failed, stages_completed
FROM queue_samples WHERE at >= now() - make_interval(hours => %(hours)s) ORDER BY at;

-- name: task_log_tails
-- The last %(lines)s stage-log lines of every task of one job (all executions), oldest first.
SELECT x.task_id, x.at, x.message
FROM (
  SELECT l.task_id, l.id, l.at, l.message, row_number() OVER (PARTITION BY l.task_id ORDER BY l.id DESC) AS rn
    FROM queue_task_logs l JOIN queue_tasks q ON q.id = l.task_id
   WHERE q.job_id = %(job_id)s
) x
WHERE x.rn <= %(lines)s
ORDER BY x.task_id, x.id;

-- name: metrics_scalars
-- Everything /metrics reports as a single number, read at scrape time. The *_total values count
-- rows of the append-only fence audit plus what retention carried out of it (so they never go down).
SELECT
  (SELECT count(*) FROM queue_fence_audit WHERE NOT accepted)
    + (SELECT purged_rejected FROM queue_scheduler_state WHERE id = 1) AS stale_writes_rejected,
  (SELECT count(*) FROM queue_fence_audit WHERE accepted AND operation = 'recover')
    + (SELECT purged_recoveries FROM queue_scheduler_state WHERE id = 1) AS recoveries,
  (SELECT count(*) FROM queue_fence_audit
    WHERE accepted AND ((operation = 'fail' AND reason = 'retry_wait')
                        OR (operation = 'recover' AND reason LIKE 'retry\_wait:%%')))
    + (SELECT purged_retries FROM queue_scheduler_state WHERE id = 1) AS retries,
  -- The longest any runnable, unpaused job has been waiting for a slot (0 when none waits).
  (SELECT coalesce(extract(epoch FROM now() - min(least(media_runnable_at, background_runnable_at))), 0)
     FROM job_schedule WHERE least(media_runnable_at, background_runnable_at) <= now()) AS oldest_pending_seconds,
  (SELECT count(*) FROM queue_tasks
    WHERE state = 'running' AND lease_expires_at < now() - make_interval(secs => %(stuck_after)s)) AS stuck_running,
  (SELECT extract(epoch FROM last_recovery_at) FROM queue_scheduler_state WHERE id = 1) AS last_recovery_at;

-- name: reassignments
-- Jobs moved off a worker, by cause (counted by the failover functions in the scheduler row).
SELECT r.key AS cause, r.value::bigint AS n
  FROM queue_scheduler_state st, jsonb_each_text(st.reassignments) r
 WHERE st.id = 1;

-- name: split_counts
-- Split transcodes for /metrics: unfinished chunks by state; chunks that ended in the last 24 hours
-- by state (the finished-at index); chunks the stitches of the last 24 hours sent back for a wrong
-- frame count, and stitch attempts that failed.
SELECT 'chunks' AS what, state, count(*) AS n
  FROM queue_tasks WHERE task_type = 'transcode.chunk' AND state IN ('pending', 'running', 'retry_wait', 'blocked')
 GROUP BY state
UNION ALL
SELECT 'chunks_ended_24h', state, count(*)
  FROM queue_tasks WHERE finished_at > now() - interval '24 hours' AND task_type = 'transcode.chunk'
 GROUP BY state
UNION ALL
SELECT 'stitch_failures_24h', 'chunk_mismatch', coalesce(sum(jsonb_array_length(result -> 'redo')), 0)
  FROM queue_tasks WHERE finished_at > now() - interval '24 hours' AND task_type = 'transcode.stitch'
   AND jsonb_typeof(result -> 'redo') = 'array'
UNION ALL
SELECT 'stitch_failures_24h', 'stitch_failed', count(*)
  FROM queue_tasks WHERE finished_at > now() - interval '24 hours' AND task_type = 'transcode.stitch'
   AND state = 'failed';

-- name: claim_latency_histogram
-- Cumulative bucket counts of (claim time - time the task became runnable) for tasks claimed in
-- the last five minutes: running ones and ones that have finished since (both reachable through
-- partial indexes; a claim whose attempt failed into retry_wait is left out until its next claim).
WITH d AS (
  SELECT greatest(0, extract(epoch FROM started_at - available_at))::float8 AS s
    FROM queue_tasks
   WHERE started_at >= now() - interval '5 minutes'
     AND (state = 'running' OR finished_at >= now() - interval '5 minutes')
)
SELECT (SELECT count(*) FROM d) AS n, (SELECT coalesce(sum(s), 0) FROM d)::float8 AS total,
       (SELECT array_agg(c ORDER BY le) FROM (
          SELECT b.le, (SELECT count(*) FROM d WHERE d.s <= b.le) AS c
            FROM unnest(%(buckets)s::float8[]) AS b(le)) x) AS buckets;

-- name: stage_duration_histogram
-- Per task type, cumulative bucket counts of (finished - started) for tasks finished in the last hour.
WITH d AS (
  SELECT task_type, greatest(0, extract(epoch FROM finished_at - started_at))::float8 AS s
    FROM queue_tasks
   WHERE finished_at >= now() - interval '1 hour' AND started_at IS NOT NULL
)
SELECT t.task_type, t.n, t.total,
       (SELECT array_agg(c ORDER BY le) FROM (
          SELECT b.le, (SELECT count(*) FROM d WHERE d.task_type = t.task_type AND d.s <= b.le) AS c
            FROM unnest(%(buckets)s::float8[]) AS b(le)) x) AS buckets
FROM (SELECT task_type, count(*) AS n, sum(s)::float8 AS total FROM d GROUP BY task_type) t
ORDER BY t.task_type;

-- name: workers_by_lifecycle
-- Effective lifecycle, as workers_overview computes it (an active worker without a recent heartbeat is offline).
SELECT CASE WHEN lifecycle = 'active' AND (last_heartbeat_at IS NULL
                 OR last_heartbeat_at < now() - make_interval(secs => %(stale)s)) THEN 'offline'
            ELSE lifecycle END AS lifecycle, count(*) AS n
FROM queue_workers GROUP BY 1;

-- name: workspace_fates
-- What a worker's workspace sweep needs to know of the jobs it has directories for: a job missing
-- here was purged; a job ended (completed or cancelled) a while ago needs its workspace no more; an
-- execution below the job's current one was superseded (the job moved to another worker).
SELECT j.id AS job_id, j.status,
       j.finished_at IS NOT NULL AND j.finished_at < now() - make_interval(secs => %(grace)s) AS ended_a_while_ago,
       s.execution_id
FROM jobs j JOIN job_schedule s ON s.job_id = j.id
WHERE j.id = ANY (%(ids)s::uuid[]);

-- name: job_list
-- Jobs newest first, a page (limit NULL: all) of the API's and the dashboard's job tables, with
-- their live schedule; each filter NULL means any. uses_category (the API's): jobs that asked for
-- the category or have a stage in it; category (the dashboard's): the most demanding category a job
-- uses (its GPU requirement, else its stages' top one, else cpu), also returned when with_category.
-- The filters are job_count's, word for word. (A filter left NULL folds away, and with it the
-- schedule join when nothing else reads it: an unfiltered count reads the jobs table alone.)
SELECT j.id, j.type, j.status, j.progress, coalesce(s.priority, j.priority) AS priority,
       j.max_attempts, j.hardware, j.resource_category, j.vram_mb, j.webhook_url, j.last_error,
       j.manual_retry_count, j.created_by_id, j.created_at, j.updated_at, j.started_at, j.finished_at,
       s.execution_id, s.required_worker_uid, s.assigned_worker_uid, s.paused, s.cancel_requested_at,
       CASE WHEN %(with_category)s THEN coalesce(
         s.required_category,
         (SELECT t.resource_category FROM queue_tasks t
           WHERE t.job_id = j.id AND t.task_type <> 'webhook'
           ORDER BY CASE t.resource_category WHEN 'gpu_ai' THEN 2 WHEN 'gpu_encode' THEN 1 ELSE 0 END DESC
           LIMIT 1),
         'cpu') END AS category
FROM jobs j
LEFT JOIN job_schedule s ON s.job_id = j.id
WHERE (%(status)s::text IS NULL OR j.status = %(status)s)
  AND (%(type)s::text IS NULL OR j.type = %(type)s)
  AND (%(worker)s::text IS NULL OR s.assigned_worker_uid = %(worker)s OR s.required_worker_uid = %(worker)s)
  AND (%(ids)s::uuid[] IS NULL OR j.id = ANY (%(ids)s::uuid[]))
  AND (%(uses_category)s::text IS NULL OR j.resource_category = %(uses_category)s
       OR s.required_category = %(uses_category)s
       OR j.id IN (SELECT t.job_id FROM queue_tasks t
                    WHERE t.resource_category = %(uses_category)s AND t.task_type <> 'webhook'))
  AND (%(category)s::text IS NULL OR coalesce(
         s.required_category,
         (SELECT t.resource_category FROM queue_tasks t
           WHERE t.job_id = j.id AND t.task_type <> 'webhook'
           ORDER BY CASE t.resource_category WHEN 'gpu_ai' THEN 2 WHEN 'gpu_encode' THEN 1 ELSE 0 END DESC
           LIMIT 1),
         'cpu') = %(category)s)
  -- Keyset paging: after the last job of the previous page, in this order.
  AND (%(after_created_at)s::timestamptz IS NULL
       OR (j.created_at, j.id) < (%(after_created_at)s::timestamptz, %(after_id)s::uuid))
ORDER BY j.created_at DESC, j.id DESC
LIMIT %(limit)s OFFSET %(offset)s;

-- name: job_count
-- How many jobs job_list has in all for the same filters (the API's page count).
SELECT count(*) AS count
FROM jobs j
LEFT JOIN job_schedule s ON s.job_id = j.id
WHERE (%(status)s::text IS NULL OR j.status = %(status)s)
  AND (%(type)s::text IS NULL OR j.type = %(type)s)
  AND (%(worker)s::text IS NULL OR s.assigned_worker_uid = %(worker)s OR s.required_worker_uid = %(worker)s)
  AND (%(ids)s::uuid[] IS NULL OR j.id = ANY (%(ids)s::uuid[]))
  AND (%(uses_category)s::text IS NULL OR j.resource_category = %(uses_category)s
       OR s.required_category = %(uses_category)s
       OR j.id IN (SELECT t.job_id FROM queue_tasks t
                    WHERE t.resource_category = %(uses_category)s AND t.task_type <> 'webhook'))
  AND (%(category)s::text IS NULL OR coalesce(
         s.required_category,
         (SELECT t.resource_category FROM queue_tasks t
           WHERE t.job_id = j.id AND t.task_type <> 'webhook'
           ORDER BY CASE t.resource_category WHEN 'gpu_ai' THEN 2 WHEN 'gpu_encode' THEN 1 ELSE 0 END DESC
           LIMIT 1),
         'cpu') = %(category)s);

-- name: job_schedule
-- One job's schedule row: its current execution, live priority, worker, pause and cancel request.
SELECT job_id, execution_id, priority, position, required_worker_uid, assigned_worker_uid, paused,
       cancel_requested_at, execution_mode, required_category, required_vram_mb
FROM job_schedule WHERE job_id = %(job_id)s;

-- name: failed_stages
-- The task type of the failed stage of each of the given jobs, in the job's current execution (a
-- webhook never speaks for its job); the latest to fail when several did.
SELECT DISTINCT ON (t.job_id) t.job_id, t.task_type
FROM queue_tasks t
JOIN job_schedule s ON s.job_id = t.job_id AND s.execution_id = t.execution_id
WHERE t.job_id = ANY (%(ids)s::uuid[]) AND t.state = 'failed' AND t.task_type <> 'webhook'
ORDER BY t.job_id, t.finished_at DESC NULLS LAST, t.id DESC;

-- name: job_tasks
-- One job's tasks in delivery order (execution, then creation): all executions or one
-- (execution_id), webhook deliveries included or not (with_cluster), at most `limit` (NULL:
-- all); payload, result and progress detail only when full (else NULL: the dashboard's timeline).
SELECT id, job_id, execution_id, task_type, placement, pool, resource_category, vram_mb, state,
       attempt, max_attempts, claimed_by, progress, last_failure, available_at, created_at,
       started_at, finished_at, heartbeat_at, lease_expires_at, deadline_at, parent_task_id,
       wait_for_siblings,
       CASE WHEN %(full)s THEN payload END AS payload,
       CASE WHEN %(full)s THEN result END AS result,
       CASE WHEN %(full)s THEN progress_detail END AS progress_detail
FROM queue_tasks
WHERE job_id = %(job_id)s
  AND (%(execution_id)s::int IS NULL OR execution_id = %(execution_id)s)
  AND (%(with_cluster)s OR task_type <> 'webhook')
ORDER BY execution_id, created_at, id
LIMIT %(limit)s;

-- name: job_stage_logs
-- The newest %(lines)s stage-log lines of one job, newest first: the newest lines of each of its
-- tasks (index task_logs_by_task), then the newest of those; never a walk over the whole log table.
SELECT l.at, l.message, l.task_id, t.task_type
FROM queue_tasks t
CROSS JOIN LATERAL (
  SELECT l.id, l.at, l.message, l.task_id FROM queue_task_logs l
   WHERE l.task_id = t.id ORDER BY l.id DESC LIMIT %(lines)s) l
WHERE t.job_id = %(job_id)s
ORDER BY l.id DESC
LIMIT %(lines)s;

-- name: worker_uids
-- Worker uids in order, at most `limit` (NULL: all): every registered worker, or (live) only the
-- active ones with a heartbeat within the stale threshold (those a job can be targeted at).
SELECT uid FROM queue_workers
WHERE NOT %(live)s
   OR (lifecycle = 'active' AND last_heartbeat_at >= now() - make_interval(secs => %(stale)s))
ORDER BY uid
LIMIT %(limit)s;

-- name: job_reservations
-- A job's reservations, newest first (the job detail shows the latest).
SELECT x.id, x.job_id, x.state, x.worker_uid, x.generation, x.last_error, x.provision_attempts,
       x.created_at, x.requested_at, x.bound_at, x.ended_at, x.updated_at
FROM queue_reservations x WHERE x.job_id = %(job_id)s
ORDER BY x.created_at DESC, x.id
LIMIT %(limit)s;

-- name: worker_of_process
-- The uid of the active worker session that process `pid` on `hostname` registered, if any (the
-- run command waits for its worker's row before it says JetEncode is up).
SELECT uid FROM queue_workers
WHERE hostname = %(hostname)s AND pid = %(pid)s AND lifecycle = 'active'
LIMIT 1;
