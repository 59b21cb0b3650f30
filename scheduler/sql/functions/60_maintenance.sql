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
