-- Installed by migration 0016_sample_once_a_minute: the statements of scheduler/sql/functions/ that changed
-- since the migration before it (a delta, written by `python -m scheduler.sqlfiles delta`).
-- Never edit it: a later change ships in a new migration with a delta of its own.

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
