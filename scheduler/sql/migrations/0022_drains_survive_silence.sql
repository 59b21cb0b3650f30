-- Installed by migration 0022_drains_survive_silence: the statements of scheduler/sql/functions/ that changed
-- since the migration before it (a delta, written by `python -m scheduler.sqlfiles delta`).
-- Never edit it: a later change ships in a new migration with a delta of its own.

-- Register a process start. The new session fences the previous one of the same uid at once: its
-- running tasks' leases are expired so the recovery loop can hand them on without waiting. The
-- worker row ends active with this session's capacity (and no left_at: a new process has not left;
-- no drained_at: an operator's drain ends when the process it drained is replaced),
-- bound to no reservation: a binding belongs to the session that made it (bind_reservation_v2), so a
-- restarted process of a uid that once ran dedicated work is an ordinary worker again.
-- Returns the session it replaced, if any.
CREATE OR REPLACE FUNCTION register_worker_v1(
  p_uid text, p_session uuid, p_hostname text, p_pid int, p_version text, p_concurrency int,
  p_background_slots int, p_limits jsonb, p_vram int, p_capabilities jsonb, p_workspace text
) RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
  previous uuid;
BEGIN
  SELECT current_session_id INTO previous FROM queue_workers WHERE uid = p_uid FOR UPDATE;
  INSERT INTO queue_workers (uid, current_session_id, hostname, pid, version, concurrency, background_slots,
                             category_limits, vram_total_mb, lifecycle, registered_at, last_heartbeat_at,
                             system_sample, capabilities, workspace)
  VALUES (p_uid, p_session, p_hostname, p_pid, p_version, p_concurrency, p_background_slots, p_limits, p_vram,
          'active', now(), now(), '{}', p_capabilities, p_workspace)
  ON CONFLICT (uid) DO UPDATE SET
    current_session_id = EXCLUDED.current_session_id, hostname = EXCLUDED.hostname, pid = EXCLUDED.pid,
    version = EXCLUDED.version, concurrency = EXCLUDED.concurrency,
    background_slots = EXCLUDED.background_slots, category_limits = EXCLUDED.category_limits,
    vram_total_mb = EXCLUDED.vram_total_mb, lifecycle = 'active', registered_at = now(),
    last_heartbeat_at = now(), capabilities = EXCLUDED.capabilities, workspace = EXCLUDED.workspace,
    left_at = NULL, reservation_id = NULL, drained_at = NULL;
  IF previous IS NOT NULL AND previous <> p_session THEN
    UPDATE queue_tasks SET lease_expires_at = now() - interval '1 millisecond'
    WHERE state = 'running' AND claimed_worker_session_id = previous;
  END IF;
  RETURN previous;
END
$$;

-- The worker's own heartbeat: its last_heartbeat_at and system sample, and an offline worker is
-- back: active again, or draining when its session was drained (drained_at; a drained worker that
-- missed heartbeats for a moment must not start claiming again). Fenced on the session: JE410 when a newer session took the uid over (the caller
-- must stop). Returns the worker's lifecycle (draining tells a worker to claim nothing new).
CREATE OR REPLACE FUNCTION worker_heartbeat_v1(p_uid text, p_session uuid, p_sample jsonb) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  result text;
BEGIN
  UPDATE queue_workers SET
    last_heartbeat_at = now(),
    system_sample = coalesce(p_sample, system_sample),
    lifecycle = CASE WHEN lifecycle <> 'offline' THEN lifecycle
                     WHEN drained_at IS NOT NULL THEN 'draining' ELSE 'active' END
  WHERE uid = p_uid AND current_session_id = p_session
  RETURNING lifecycle INTO result;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'JE410', MESSAGE = 'uid taken over by a newer session: ' || p_uid;
  END IF;
  RETURN result;
END
$$;

-- The session itself says draining or offline (SIGTERM, the end of a drain). Fenced on the session:
-- NULL when it is not the current one. Leaving releases the worker's idle pinned jobs in the same
-- transaction (cause drained); stages still running when it began draining are handed back before
-- it says offline, so by then every pinned job is idle. Saying offline also records left_at, so a
-- job that could not move at that moment (busy finishing a webhook, a hand-back that failed) is
-- still treated as drained by the release pass, not as lost: a worker that left on purpose is not
-- coming back for its local work. With no other worker active nothing moves (other_worker_active_v2):
-- the jobs wait for this uid's return or for another worker. Returns how many jobs moved.
CREATE OR REPLACE FUNCTION set_session_lifecycle_v2(p_uid text, p_session uuid, p_lifecycle text) RETURNS int
LANGUAGE plpgsql AS $$
BEGIN
  UPDATE queue_workers SET lifecycle = p_lifecycle, last_heartbeat_at = now(),
                           left_at = CASE WHEN p_lifecycle = 'offline' THEN now() ELSE left_at END,
                           drained_at = CASE WHEN p_lifecycle = 'draining' THEN coalesce(drained_at, now())
                                             WHEN p_lifecycle = 'active' THEN NULL ELSE drained_at END
   WHERE uid = p_uid AND current_session_id = p_session;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  IF p_lifecycle = 'active' OR NOT other_worker_active_v2(p_uid) THEN
    RETURN 0;
  END IF;
  RETURN release_worker_jobs_v2(p_uid, 'drained', false);
END
$$;

-- An operator drains a worker (API, dashboard, admin): it finishes what it runs and claims nothing
-- new; its idle pinned jobs move at once, the others as soon as their running stage ends (the
-- recovery loop's release pass).
CREATE OR REPLACE FUNCTION drain_worker_v2(p_uid text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  result text;
BEGIN
  UPDATE queue_workers SET lifecycle = 'draining', drained_at = coalesce(drained_at, now())
   WHERE uid = p_uid AND lifecycle <> 'offline'
  RETURNING lifecycle INTO result;
  IF NOT FOUND THEN
    IF EXISTS (SELECT 1 FROM queue_workers WHERE uid = p_uid) THEN
      RAISE EXCEPTION USING ERRCODE = 'JE409', MESSAGE = 'worker ' || p_uid || ' is offline';
    END IF;
    RAISE EXCEPTION USING ERRCODE = 'JE404', MESSAGE = 'worker not found';
  END IF;
  PERFORM release_worker_jobs_v2(p_uid, 'drained', false);
  RETURN result;
END
$$;

-- How many split-job stages (placement cluster, not webhooks) the worker's current session still
-- runs: what an evacuation's hand-back skipped because their rows were locked at that instant
-- (scheduler.repository.evacuate_worker tries again, each time in a transaction of its own).
CREATE OR REPLACE FUNCTION cluster_tasks_running_v1(p_uid text) RETURNS int
LANGUAGE sql STABLE AS $$
  SELECT count(*)::int FROM queue_tasks q
   WHERE q.claimed_worker_session_id = (SELECT w.current_session_id FROM queue_workers w WHERE w.uid = p_uid)
     AND q.state = 'running' AND q.placement = 'cluster' AND q.task_type <> 'webhook'
$$;

-- Evacuate: drain the worker (unless it is offline already) and move every job pinned to it now,
-- running stages included (they are fenced out and redone in the new execution). JE404 for an
-- unknown worker, JE409 for an offline one with nothing to move. Returns how many jobs moved, plus the split-job stages it
-- handed back (hand_back_cluster_tasks_v1).
CREATE OR REPLACE FUNCTION evacuate_worker_v2(p_uid text) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
  current text;
  moved int;
BEGIN
  SELECT lifecycle INTO current FROM queue_workers WHERE uid = p_uid FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'JE404', MESSAGE = 'worker not found';
  END IF;
  -- An offline worker stays offline, but if its session comes back it comes back draining.
  UPDATE queue_workers SET lifecycle = CASE WHEN current = 'offline' THEN 'offline' ELSE 'draining' END,
                           drained_at = coalesce(drained_at, now())
   WHERE uid = p_uid;
  moved := release_worker_jobs_v2(p_uid, 'evacuated', true);
  -- A split job is pinned to no worker: its stages running here are handed back one by one.
  moved := moved + hand_back_cluster_tasks_v1(p_uid);
  IF current = 'offline' AND moved = 0 THEN
    RAISE EXCEPTION USING ERRCODE = 'JE409', MESSAGE = 'worker ' || p_uid || ' is offline and holds no jobs to move';
  END IF;
  RETURN moved;
END
$$;

-- Undrain: an operator returns a drained (or evacuated) worker to service: it claims again. Jobs that
-- moved away stay where they went. Idempotent for an active worker; JE404 for an unknown worker,
-- JE409 for an offline one (a worker comes back by starting again, which registers it active).
CREATE OR REPLACE FUNCTION undrain_worker_v1(p_uid text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  current text;
BEGIN
  SELECT lifecycle INTO current FROM queue_workers WHERE uid = p_uid FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'JE404', MESSAGE = 'worker not found';
  END IF;
  IF current = 'offline' THEN
    RAISE EXCEPTION USING ERRCODE = 'JE409', MESSAGE = 'worker ' || p_uid || ' is offline: it returns to service when it starts again';
  END IF;
  UPDATE queue_workers SET lifecycle = 'active', drained_at = NULL WHERE uid = p_uid AND lifecycle = 'draining';
  RETURN 'active';
END
$$;
