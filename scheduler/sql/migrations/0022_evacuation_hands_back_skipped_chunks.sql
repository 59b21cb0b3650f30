-- Installed by migration 0022_evacuation_hands_back_skipped_chunks: the statements of scheduler/sql/functions/ that changed
-- since the migration before it (a delta, written by `python -m scheduler.sqlfiles delta`).
-- Never edit it: a later change ships in a new migration with a delta of its own.

-- How many split-job stages (placement cluster, not webhooks) the worker's current session still
-- runs: what an evacuation's hand-back skipped because their rows were locked at that instant
-- (scheduler.repository.evacuate_worker tries again, each time in a transaction of its own).
CREATE OR REPLACE FUNCTION cluster_tasks_running_v1(p_uid text) RETURNS int
LANGUAGE sql STABLE AS $$
  SELECT count(*)::int FROM queue_tasks q
   WHERE q.claimed_worker_session_id = (SELECT w.current_session_id FROM queue_workers w WHERE w.uid = p_uid)
     AND q.state = 'running' AND q.placement = 'cluster' AND q.task_type <> 'webhook'
$$;
