-- Every statement scheduler/repository.py runs: each calls one scheduler function
-- (scheduler/sql/functions/) in one round trip. Loaded by scheduler/sqlfiles.py; each query sits
-- under a "-- name: <name>" header and a one-line description, with named parameters (%(name)s).
-- Result columns are named after the fields of the repository's dataclasses, which are filled by
-- column name.

-- ---- Jobs ------------------------------------------------------------------------------------

-- name: enqueue_job
-- Insert a job, its schedule and its dispatch task; NOTIFY media workers when notify is true.
SELECT enqueue_job_v1(
  p_type => %(job_type)s, p_params => %(params)s::jsonb, p_priority => %(priority)s,
  p_max_attempts => %(max_attempts)s, p_webhook_url => %(webhook_url)s,
  p_required_worker => %(required_worker_uid)s, p_hardware => %(hardware)s,
  p_category => %(resource_category)s, p_vram => %(vram_mb)s, p_required_category => %(required_category)s,
  p_required_vram => %(required_vram_mb)s, p_timeout => %(timeout_seconds)s, p_created_by => %(created_by)s,
  p_stale_seconds => %(stale_seconds)s, p_notify => %(notify)s
) AS job_id

-- name: cancel_job
-- Request a job's cancellation: waiting stages end now, running ones when they next write.
SELECT cancel_job_v1(%(job_id)s) AS status

-- name: set_paused
-- Pause or resume a job's unclaimed stages.
SELECT set_paused_v1(%(job_id)s, %(paused)s) AS status

-- name: set_priority
-- Change a job's priority (-1000..1000).
SELECT set_priority_v1(%(job_id)s, %(priority)s) AS status

-- name: move_job
-- Move a job up, down, to the top or to the bottom of the jobs its claimers compare it with.
SELECT move_job_v1(%(job_id)s, %(direction)s) AS position

-- name: retry_job
-- Retry a failed job's failed stages from attempt zero (and reset its lost-worker count).
SELECT retry_job_v2(%(job_id)s) AS status

-- name: redispatch_job
-- Start a new execution of a job on any worker, counted as a manual reassignment.
SELECT redispatch_job_v2(%(job_id)s, 'manual', %(why)s) AS execution_id

-- ---- Reservations (dedicated execution) -------------------------------------------------------

-- name: reserve_job
-- Reserve a pending job for dedicated execution (idempotent: a dedicated job answers its reservation).
SELECT reserve_job_v1(%(job_id)s) AS reservation_id

-- name: unreserve_job
-- Return a dedicated job whose reservation nobody has bound to shared execution.
SELECT unreserve_job_v1(%(job_id)s) AS reservation_id

-- name: bind_reservation
-- Bind a reservation to a worker session (taking it over from a worker that no longer holds it).
SELECT bind_reservation_v2(%(reservation_id)s, %(worker_uid)s, %(session_id)s, %(stale_seconds)s) AS generation

-- name: finish_reservation
-- The bound worker asks whether its job is done: running, released, or lost: <why>.
SELECT finish_reservation_v1(%(reservation_id)s, %(worker_uid)s, %(session_id)s) AS answer

-- name: sweep_reservations
-- Maintenance: lost bound workers, timed-out requests, requests whose job ended.
SELECT * FROM sweep_reservations_v1(%(lost_seconds)s, %(timeout_seconds)s, %(batch)s)

-- name: take_provisioning
-- The provisioner loop takes the requested reservations that are due, with their jobs' facts.
SELECT * FROM take_provisioning_v1(%(batch)s, %(hold_seconds)s)

-- name: record_provisioning
-- What one provisioner run did, and when the next is due.
SELECT record_provisioning_v1(%(reservation_id)s, %(attempt)s, %(error)s, %(retry_seconds)s) AS recorded

-- name: target_refusal
-- Why a worker may not be named as a job's required worker right now (NULL when it may).
SELECT worker_accepts_targets_v1(%(worker_uid)s, %(stale_seconds)s) AS refusal

-- ---- Workers ---------------------------------------------------------------------------------

-- name: register_worker
-- Register a worker process's session, fencing the session it replaces.
SELECT register_worker_v1(
  p_uid => %(uid)s, p_session => %(session_id)s, p_hostname => %(hostname)s, p_pid => %(pid)s,
  p_version => %(version)s, p_concurrency => %(concurrency)s, p_background_slots => %(background_slots)s,
  p_limits => %(category_limits)s::jsonb, p_vram => %(vram_total_mb)s,
  p_capabilities => %(capabilities)s::jsonb, p_workspace => %(workspace)s
) AS previous_session_id

-- name: worker_heartbeat
-- A worker session's own heartbeat and system sample; returns its lifecycle.
SELECT worker_heartbeat_v1(%(uid)s, %(session_id)s, %(sample)s::jsonb) AS lifecycle

-- name: set_session_lifecycle
-- A worker session says draining or offline; its idle pinned jobs move in the same transaction.
SELECT set_session_lifecycle_v2(%(uid)s, %(session_id)s, %(lifecycle)s) AS moved

-- name: drain_worker
-- An operator drains a worker: it claims nothing new, its idle pinned jobs move at once.
SELECT drain_worker_v2(%(uid)s) AS lifecycle

-- name: evacuate_worker
-- An operator evacuates a worker: every job pinned to it moves now, running stages included.
SELECT evacuate_worker_v2(%(uid)s) AS moved

-- name: hand_back_cluster_tasks
-- The split-job stages an evacuated worker still runs go back to the queue (what evacuate skipped).
SELECT hand_back_cluster_tasks_v1(%(uid)s) AS moved

-- name: cluster_tasks_running
-- How many split-job stages a worker's current session runs.
SELECT cluster_tasks_running_v1(%(uid)s) AS running

-- name: undrain_worker
-- An operator returns a drained worker to service: it claims again.
SELECT undrain_worker_v1(%(uid)s) AS lifecycle

-- name: mark_stale_workers
-- Report workers silent for longer than stale_seconds as offline.
SELECT stale.uid FROM mark_stale_workers_v1(%(stale_seconds)s) AS stale(uid)

-- ---- Claim and fenced writes -----------------------------------------------------------------

-- name: claim_task
-- Claim one task of the pool for a free slot of this worker session, under a fresh lease; and, in
-- the same round trip, whether anything else of the pool has been runnable for this worker for
-- grace seconds (no lock): the claimer claims again at once while there is such a backlog, and asks
-- the hint first once there is none (younger work was announced to the worker that should take it).
SELECT c.*, runnable_for_v1(%(worker_uid)s, %(pool)s, %(grace)s, c.job_id, c.id) AS more_runnable
  FROM claim_task_v1(%(worker_uid)s, %(session_id)s, %(pool)s, %(lease_seconds)s) c

-- name: runnable_hint
-- Which pools have had something runnable for this worker for at least grace seconds (a read
-- without locks). Work younger than that was announced by a notification to the worker that should
-- claim it, so a poll leaves it alone: an idle poll that finds nothing here takes no lock, and polls
-- landing between an enqueue and its notified claim make no extra claims.
-- A function, although the same read as a plain prepared statement costs ~90 µs less server CPU
-- (~240 against ~330 µs in a backend woken once a second, docs/benchmarks.md): the plain
-- statement's generic plan, made while the tables were empty, is a sequential scan plus a sort and
-- is kept until the next ANALYZE; the function's SET enable_seqscan = off keeps it on the indexes.
SELECT * FROM runnable_pools_v1(%(worker_uid)s, %(grace)s)

-- name: session_heartbeating
-- Whether the uid's current session is still heartbeating (a restart then fences a live process).
SELECT EXISTS (
  SELECT 1 FROM queue_workers w
   WHERE w.uid = %(uid)s AND w.lifecycle <> 'offline'
     AND w.last_heartbeat_at > now() - make_interval(secs => %(stale_seconds)s)
) AS alive

-- name: heartbeat_tasks
-- Renew the leases of a session's running tasks (tasks: [{"id", "token"}]), each fenced.
SELECT * FROM heartbeat_tasks_v1(%(worker_uid)s, %(session_id)s, %(tasks)s::jsonb, %(lease_seconds)s)

-- name: worker_beat
-- A worker's heartbeat in one round trip (tasks: [{"id", "token"}]): its lock and statement timeouts
-- for this transaction only (no session state: PgBouncer's transaction mode), then the beat.
SELECT set_config('lock_timeout', %(lock_timeout)s, true), set_config('statement_timeout', %(statement_timeout)s, true);
SELECT * FROM worker_beat_v1(%(worker_uid)s, %(session_id)s, %(tasks)s::jsonb, %(lease_seconds)s, %(sample)s::jsonb)

-- name: idle_beat
-- The heartbeat of a worker with no lease to renew (what an idle farm sends): the worker row only,
-- as worker_heartbeat_v1 writes it, by a plain UPDATE (no row: the session was superseded). One
-- statement, so a worker connection prepares it once: its transaction-local settings come from the
-- subquery it joins, which is evaluated for the row before the UPDATE writes (or waits for) it.
-- The commit does not wait for the WAL flush: a beat lost in a database crash only leaves
-- last_heartbeat_at one beat older and renews nothing a stage relies on (a beat with leases goes
-- through worker_beat and commits synchronously: the worker's own lease deadline follows it). No
-- statement_timeout (a statement cannot set its own): with no flush to wait for, what could hold
-- it is a lock, and lock_timeout bounds that. In a backend woken every few seconds, ~0.5 ms of
-- server CPU against 1.0-1.3 ms for worker_beat (docs/benchmarks.md, "Fifth round").
UPDATE queue_workers w
   SET last_heartbeat_at = now(),
       system_sample = coalesce(%(sample)s::jsonb, w.system_sample),
       lifecycle = CASE WHEN w.lifecycle <> 'offline' THEN w.lifecycle
                        WHEN w.drained_at IS NOT NULL THEN 'draining' ELSE 'active' END
  FROM (SELECT set_config('lock_timeout', %(lock_timeout)s, true),
               set_config('synchronous_commit', 'off', true)) settings
 WHERE w.uid = %(worker_uid)s AND w.current_session_id = %(session_id)s
RETURNING w.lifecycle, '[]'::jsonb AS answers

-- name: report_progress
-- Fenced progress, detail and log lines of a running stage.
SELECT * FROM report_progress_v1(%(task_id)s, %(lease_token)s, %(worker_uid)s, %(session_id)s,
                                 %(progress)s, %(detail)s::jsonb, %(lines)s)

-- name: finish_task
-- Fenced finish: complete the task and publish its children and outputs in one transaction.
SELECT * FROM finish_task_v1(%(task_id)s, %(lease_token)s, %(worker_uid)s, %(session_id)s,
                             %(result)s::jsonb, %(children)s::jsonb, %(outputs)s::jsonb)

-- name: finish_tasks
-- Several fenced finishes of one session in one statement (the worker's group commit): each row is
-- finish_task_v1 on its own, in the order given (the caller sorts by job), and the statement is one
-- transaction, so all of them commit together or none does.
SELECT f.outcome, f.reason
  FROM unnest(%(task_ids)s::bigint[], %(lease_tokens)s::uuid[], %(results)s::text[]::jsonb[],
              %(children)s::text[]::jsonb[], %(outputs)s::text[]::jsonb[])
       WITH ORDINALITY AS g(task_id, lease_token, result, children, outputs, n)
 CROSS JOIN LATERAL finish_task_v1(g.task_id, g.lease_token, %(worker_uid)s, %(session_id)s,
                                   g.result, g.children, g.outputs) f
 ORDER BY g.n

-- name: fail_task
-- Fenced failure: retry with backoff while attempts remain (and retryable), else failed.
SELECT * FROM fail_task_v1(%(task_id)s, %(lease_token)s, %(worker_uid)s, %(session_id)s,
                           %(error)s, %(retryable)s)

-- name: release_task
-- Fenced hand-back on shutdown: pending again without using up an attempt.
SELECT * FROM release_task_v1(%(task_id)s, %(lease_token)s, %(worker_uid)s, %(session_id)s, %(why)s)

-- ---- Maintenance -----------------------------------------------------------------------------

-- name: recover_expired
-- Move up to batch running tasks whose lease or deadline passed to retry_wait, failed or cancelled.
SELECT * FROM recover_expired_v1(%(batch)s)

-- name: release_jobs
-- The recovery loop's release pass: move jobs off draining and lost workers.
SELECT * FROM release_jobs_v2(%(lost_seconds)s, %(reassign_after)s, %(batch)s)

-- name: purge_history
-- Retention: delete up to batch jobs that ended more than days ago, and old audit rows and samples.
SELECT purge_history_v1(%(days)s, %(batch)s) AS purged

-- name: record_sample
-- Record this minute's queue sample once across all workers (recorded NULL when already taken).
SELECT record_sample_v1() AS recorded

-- name: take_recovery_round
-- A worker's turn at the recovery pass, unless one started within every seconds (any worker's):
-- records the pass (what /metrics reports). Returns whether the pass is this worker's to make, and
-- how many workers have heartbeated within stale_seconds (each spaces its asks by that count, so a
-- large farm asks a few times an interval instead of once per worker).
WITH taken AS (
  UPDATE queue_scheduler_state SET last_recovery_at = now()
   WHERE id = 1 AND (last_recovery_at IS NULL OR last_recovery_at <= now() - make_interval(secs => %(every)s))
  RETURNING id
)
SELECT EXISTS (SELECT 1 FROM taken) AS taken,
       (SELECT count(*) FROM queue_workers w
         WHERE w.lifecycle = 'active' AND w.last_heartbeat_at > now() - make_interval(secs => %(stale_seconds)s))
         AS live_workers

-- name: note_recovery_ran
-- Remember when a recovery pass last ran (/metrics reports how long ago).
UPDATE queue_scheduler_state SET last_recovery_at = now() WHERE id = 1
