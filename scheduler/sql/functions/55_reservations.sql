-- JetEncode scheduler, part 55: dedicated execution (docs/scheduler.md, "Dedicated execution").
--
-- An operator reserves a pending job: it becomes execution_mode 'dedicated' with a reservation, and
-- the claim (20_enqueue_and_claim) lets only a worker bound to that reservation take its tasks, its
-- webhook included, while a bound worker takes nothing else. Provisioning stays outside: a
-- provisioner (JETENCODE_PROVISIONER, run by `manage.py provision`) is handed the reservation and
-- starts a worker somewhere, which binds it (`runworker --reservation ID`). These functions only
-- record what happens:
--
--   requested --bind--> bound --job ended, nothing left to run--> released
--   requested --operator returns it to shared execution (DELETE)--> released
--   requested --nobody bound within JETENCODE_RESERVATION_TIMEOUT_SECONDS--> failed (job: shared)
--   bound --worker lost (silent for a lease, left, or replaced)--> requested (generation + 1 at the next bind)
--
-- A reservation's generation counts its binds. Rebinding fences the previous worker: its row loses
-- the reservation (its claims' claimed_reservation_id no longer matches: "worker reservation
-- generation changed") and turns draining, and the job moves off it as from a lost worker.
-- Lock order: worker rows (by uid) -> scheduler row -> job_schedule row -> queue_reservations row.

-- The hook for jobs split across the farm (DECISIONS 19): such a job runs its chunks on many
-- workers, so it cannot be dedicated to one. True when the job's params ask for chunks; `auto` is
-- decided at the dispatch, which does not split a dedicated job (workers/stages/split.py).
CREATE OR REPLACE FUNCTION job_split_across_farm_v1(p_params jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
  SELECT coalesce(p_params ->> 'split' = 'chunks', false)
$$;

-- Reserve a job for dedicated execution. Idempotent: a job that is dedicated already answers its
-- current reservation. JE404 for an unknown job; JE409 for one that is finished or cancelling,
-- running or dispatched to a worker, targeted at a worker, or split across the farm.
CREATE OR REPLACE FUNCTION reserve_job_v1(p_job uuid) RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
  s job_schedule%ROWTYPE := lock_job_for_control_v1(p_job, 'dedicate');
  j record;
  rid uuid := gen_random_uuid();
BEGIN
  IF s.execution_mode = 'dedicated' THEN
    RETURN s.reservation_id;
  END IF;
  SELECT status, params INTO j FROM jobs WHERE id = p_job;
  IF j.status = 'running' THEN
    RAISE EXCEPTION USING ERRCODE = 'JE409', MESSAGE = 'cannot dedicate: the job is running';
  END IF;
  IF s.assigned_worker_uid IS NOT NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'JE409',
      MESSAGE = 'cannot dedicate: the job is already dispatched to worker ' || s.assigned_worker_uid;
  END IF;
  IF s.required_worker_uid IS NOT NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'JE409',
      MESSAGE = 'cannot dedicate: the job is targeted at worker ' || s.required_worker_uid;
  END IF;
  IF job_split_across_farm_v1(j.params) THEN
    RAISE EXCEPTION USING ERRCODE = 'JE409', MESSAGE = 'cannot dedicate: the job is split across the farm';
  END IF;
  INSERT INTO queue_reservations (id, job_id, worker_uid, state, last_error, generation, provision_attempts,
                                  requested_at, next_provision_at, created_at, updated_at)
  VALUES (rid, p_job, NULL, 'requested', '', 0, 0, now(), now(), now(), now());
  UPDATE job_schedule SET execution_mode = 'dedicated', reservation_id = rid WHERE job_id = p_job;
  PERFORM refresh_job_v1(p_job, 'reserved for dedicated execution (reservation ' || rid || '): waiting for a dedicated worker');
  PERFORM pg_notify('jetencode_reservations', rid::text);
  RETURN rid;
END
$$;

-- The job of reservation r goes back to shared execution, keeping its place (priority, position,
-- completed stages): the caller holds its schedule row. r ends in p_state; p_why goes to the log.
CREATE OR REPLACE FUNCTION end_reservation_v1(p_reservation uuid, p_state text, p_error text, p_why text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  job uuid;
BEGIN
  UPDATE queue_reservations SET state = p_state, last_error = coalesce(p_error, last_error), ended_at = now(),
                                next_provision_at = NULL, updated_at = now()
   WHERE id = p_reservation
  RETURNING job_id INTO job;
  UPDATE job_schedule SET execution_mode = 'shared', reservation_id = NULL
   WHERE job_id = job AND reservation_id = p_reservation;
  IF FOUND THEN
    PERFORM refresh_job_v1(job, p_why);
    PERFORM pg_notify('jetencode_queue_tasks', 'media');
    PERFORM pg_notify('jetencode_queue_tasks', 'background');
  END IF;
END
$$;

-- An operator returns a dedicated job to shared execution while no worker has bound it (DELETE
-- /v2/queue/{id}/dedicate). JE404 unknown job; JE409 when the job is not dedicated, has finished,
-- or its reservation is bound. Returns the reservation, now released.
CREATE OR REPLACE FUNCTION unreserve_job_v1(p_job uuid) RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
  s job_schedule%ROWTYPE := lock_job_for_control_v1(p_job, 'return to shared execution');
  r queue_reservations%ROWTYPE;
BEGIN
  IF s.execution_mode <> 'dedicated' THEN
    RAISE EXCEPTION USING ERRCODE = 'JE409', MESSAGE = 'the job is not dedicated: it already runs on shared workers';
  END IF;
  SELECT * INTO r FROM queue_reservations WHERE id = s.reservation_id FOR UPDATE;
  IF r.state = 'bound' THEN
    RAISE EXCEPTION USING ERRCODE = 'JE409',
      MESSAGE = 'cannot return to shared execution: reservation ' || r.id || ' is bound to worker ' || r.worker_uid;
  END IF;
  PERFORM end_reservation_v1(r.id, 'released', NULL,
                             'returned to shared execution by an operator (reservation ' || r.id || ')');
  RETURN r.id;
END
$$;

-- Whether reservation r's bound worker still holds it: the session that bound it is current, the
-- row still carries the reservation, it has not said offline, and it beat within p_silent_seconds.
CREATE OR REPLACE FUNCTION reservation_holder_alive_v1(r queue_reservations, p_silent_seconds float)
RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT coalesce((SELECT w.current_session_id = r.worker_session_id AND w.reservation_id = r.id
                          AND w.lifecycle <> 'offline'
                          AND w.last_heartbeat_at >= now() - make_interval(secs => p_silent_seconds)
                     FROM queue_workers w WHERE w.uid = r.worker_uid), false)
$$;

-- Take reservation p_reservation away from its bound worker (lost, left or replaced): the worker
-- row loses the reservation and turns draining (fenced: its claims' reservation generation no
-- longer matches, and it claims nothing more), the job moves off it as from a lost worker
-- (release_job_v2, cause lost_reserved: the dispatch retried, or a new execution), and the
-- reservation waits for a new worker. A job that has ended releases the reservation instead. The
-- caller holds the worker row, the job's schedule row and the reservation row.
CREATE OR REPLACE FUNCTION unbind_lost_reservation_v1(p_reservation uuid, p_why text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  r queue_reservations%ROWTYPE;
  st text;
BEGIN
  SELECT * INTO r FROM queue_reservations WHERE id = p_reservation;
  UPDATE queue_workers SET reservation_id = NULL,
                           lifecycle = CASE WHEN lifecycle = 'active' THEN 'draining' ELSE lifecycle END
   WHERE uid = r.worker_uid AND reservation_id = r.id;
  SELECT status INTO st FROM jobs WHERE id = r.job_id;
  IF st IS NULL OR st IN ('completed', 'failed', 'cancelled') THEN
    PERFORM end_reservation_v1(r.id, 'released', p_why, 'reservation ' || r.id || ' released: ' || p_why);
    RETURN 'released';
  END IF;
  UPDATE queue_reservations SET state = 'requested', worker_uid = NULL, worker_session_id = NULL,
                                last_error = p_why, requested_at = now(), next_provision_at = now(),
                                provision_attempts = 0, updated_at = now()
   WHERE id = r.id;
  PERFORM release_job_v2(r.job_id, r.worker_uid, 'lost_reserved', true, -1);
  PERFORM refresh_job_v1(r.job_id, 'reservation ' || r.id || ' (generation ' || r.generation || '): ' || p_why
                                   || '; waiting for a new dedicated worker');
  PERFORM pg_notify('jetencode_reservations', r.id::text);
  RETURN 'requested';
END
$$;

-- Bind reservation p_reservation to worker p_worker's current session p_session (`runworker
-- --reservation`). The worker then claims only the reserved job's tasks. A reservation bound to a
-- worker that no longer holds it (silent for p_stale_seconds, left, or replaced) is taken over:
-- the old worker is fenced (unbind_lost_reservation_v1). JE410: the session is not current; JE404:
-- unknown reservation; JE409: bound to another live worker, no longer requested (released,
-- failed), its job has ended, or this worker holds another reservation. Binding the same session
-- again answers the same generation. Returns the generation (1 for the first bind).
CREATE OR REPLACE FUNCTION bind_reservation_v2(p_reservation uuid, p_worker text, p_session uuid,
                                               p_stale_seconds float) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
  seen queue_reservations%ROWTYPE;
  r queue_reservations%ROWTYPE;
  w queue_workers%ROWTYPE;
  st text;
BEGIN
  SELECT * INTO seen FROM queue_reservations WHERE id = p_reservation;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'JE404', MESSAGE = 'reservation ' || p_reservation || ' not found';
  END IF;
  -- Worker rows first, in uid order: this worker's and the previous holder's.
  PERFORM 1 FROM queue_workers WHERE uid IN (p_worker, seen.worker_uid) ORDER BY uid FOR NO KEY UPDATE;
  SELECT * INTO w FROM queue_workers WHERE uid = p_worker;
  IF NOT FOUND OR w.current_session_id IS DISTINCT FROM p_session THEN
    RAISE EXCEPTION USING ERRCODE = 'JE410', MESSAGE = 'uid taken over by a newer session: ' || p_worker;
  END IF;
  IF seen.job_id IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'JE409', MESSAGE = 'reservation ' || p_reservation || ' has no job any more';
  END IF;
  PERFORM lock_schedule_for_control_v1(seen.job_id);
  SELECT * INTO r FROM queue_reservations WHERE id = p_reservation FOR UPDATE;
  IF r.worker_uid IS DISTINCT FROM seen.worker_uid THEN
    RAISE EXCEPTION USING ERRCODE = 'JE409', MESSAGE = 'reservation ' || r.id || ' changed while binding; try again';
  END IF;
  IF r.state = 'bound' AND r.worker_uid = p_worker AND r.worker_session_id = p_session THEN
    RETURN r.generation;
  END IF;
  IF w.reservation_id IS NOT NULL AND w.reservation_id <> r.id THEN
    RAISE EXCEPTION USING ERRCODE = 'JE409',
      MESSAGE = 'worker ' || p_worker || ' is bound to another reservation (' || w.reservation_id || ')';
  END IF;
  IF r.state NOT IN ('requested', 'bound') THEN
    RAISE EXCEPTION USING ERRCODE = 'JE409',
      MESSAGE = 'reservation ' || r.id || ' is ' || r.state || ', no longer requested'
                || CASE WHEN r.last_error <> '' THEN ' (' || r.last_error || ')' ELSE '' END;
  END IF;
  SELECT status INTO st FROM jobs WHERE id = r.job_id;
  IF st IN ('completed', 'failed', 'cancelled') THEN
    RAISE EXCEPTION USING ERRCODE = 'JE409', MESSAGE = 'reservation ' || r.id || ': its job is ' || st;
  END IF;
  IF r.state = 'bound' THEN
    IF reservation_holder_alive_v1(r, p_stale_seconds) THEN
      RAISE EXCEPTION USING ERRCODE = 'JE409',
        MESSAGE = 'reservation ' || r.id || ' is bound to worker ' || r.worker_uid
                  || ', which is alive (generation ' || r.generation || ')';
    END IF;
    PERFORM unbind_lost_reservation_v1(r.id, 'worker ' || r.worker_uid || ' no longer holds it (taken over by '
                                             || p_worker || ')');
  END IF;
  UPDATE queue_workers SET reservation_id = r.id WHERE uid = p_worker;
  UPDATE queue_reservations SET state = 'bound', worker_uid = p_worker, worker_session_id = p_session,
                                generation = generation + 1, bound_at = now(), next_provision_at = NULL,
                                updated_at = now()
   WHERE id = r.id
  RETURNING * INTO r;
  PERFORM refresh_job_v1(r.job_id, 'reservation ' || r.id || ' bound to worker ' || p_worker
                                   || ' (generation ' || r.generation || ')');
  PERFORM pg_notify('jetencode_queue_tasks', 'media');
  RETURN r.generation;
END
$$;

-- The bound worker asks, once its job may have ended, whether it is done: 'running' while the job
-- has not ended or any of its tasks runs or is due now (its terminal webhook's first delivery
-- included); 'released' once it is done (the reservation ends and the job is shared again, so a
-- webhook retry due later goes to any worker); otherwise 'lost: <why>' (the reservation was taken
-- from this session: stop).
CREATE OR REPLACE FUNCTION finish_reservation_v1(p_reservation uuid, p_worker text, p_session uuid) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
  r queue_reservations%ROWTYPE;
  busy boolean;
BEGIN
  SELECT * INTO r FROM queue_reservations WHERE id = p_reservation;
  IF NOT FOUND OR r.state <> 'bound' OR r.worker_uid IS DISTINCT FROM p_worker
     OR r.worker_session_id IS DISTINCT FROM p_session THEN
    RETURN 'lost: reservation ' || p_reservation || ' is now ' || coalesce(r.state, 'gone')
           || coalesce(' (worker ' || r.worker_uid || ', generation ' || r.generation || ')', '')
           || ': this worker no longer holds it';
  END IF;
  busy := NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = r.job_id AND j.status IN ('completed', 'failed', 'cancelled'))
          OR EXISTS (SELECT 1 FROM queue_tasks q
                      WHERE q.job_id = r.job_id
                        AND (q.state = 'running' OR (q.state IN ('pending', 'retry_wait') AND q.available_at <= now())));
  IF busy THEN
    RETURN 'running';
  END IF;
  PERFORM lock_schedule_for_control_v1(r.job_id);
  SELECT * INTO r FROM queue_reservations WHERE id = p_reservation FOR UPDATE;
  IF r.state <> 'bound' OR r.worker_session_id IS DISTINCT FROM p_session THEN
    RETURN 'running';  -- changed meanwhile: the next ask sees how
  END IF;
  PERFORM end_reservation_v1(r.id, 'released', NULL,
                             'reservation ' || r.id || ' released by worker ' || p_worker || ' (generation '
                             || r.generation || '): the job has ended');
  RETURN 'released';
END
$$;

-- The workers' timed maintenance (every worker's recovery round): bound reservations whose worker
-- no longer holds them (silent for p_lost_seconds, left or replaced) go back to requested (or end,
-- if their job has ended); requested ones nobody bound for p_timeout_seconds fail and their job
-- returns to shared execution, losing nothing; requested ones whose job ended or was purged are
-- released. Busy rows are left to the next round. Returns what changed.
CREATE OR REPLACE FUNCTION sweep_reservations_v1(p_lost_seconds float, p_timeout_seconds float, p_batch int)
RETURNS TABLE (reservation_id uuid, job_id uuid, outcome text, detail text)
LANGUAGE plpgsql AS $$
DECLARE
  c record;
  r queue_reservations%ROWTYPE;
  why text;
BEGIN
  FOR c IN
    SELECT x.id, x.job_id, x.worker_uid FROM queue_reservations x LEFT JOIN jobs j ON j.id = x.job_id
     WHERE (x.state = 'bound' AND NOT reservation_holder_alive_v1(x, p_lost_seconds))
        OR (x.state = 'requested' AND (x.requested_at < now() - make_interval(secs => p_timeout_seconds)
                                       OR j.id IS NULL OR j.status IN ('completed', 'failed', 'cancelled')))
     ORDER BY x.updated_at LIMIT p_batch
  LOOP
    BEGIN
      PERFORM 1 FROM queue_workers w WHERE w.uid = c.worker_uid FOR NO KEY UPDATE SKIP LOCKED;
      IF c.job_id IS NOT NULL THEN
        PERFORM lock_schedule_for_control_v1(c.job_id, 0);
      END IF;
      SELECT * INTO r FROM queue_reservations x WHERE x.id = c.id FOR UPDATE SKIP LOCKED;
      CONTINUE WHEN NOT FOUND;
      reservation_id := r.id; job_id := r.job_id;
      IF r.state = 'bound' AND NOT reservation_holder_alive_v1(r, p_lost_seconds) THEN
        why := 'worker ' || r.worker_uid || ' lost its reservation (' || coalesce((
                 SELECT CASE WHEN w.current_session_id IS DISTINCT FROM r.worker_session_id THEN 'a new process took its uid'
                             WHEN w.lifecycle = 'offline' THEN 'it went offline'
                             WHEN w.reservation_id IS DISTINCT FROM r.id THEN 'its row lost the binding'
                             ELSE 'no heartbeat for ' || format_seconds_v2(extract(epoch FROM now() - w.last_heartbeat_at)) END
                   FROM queue_workers w WHERE w.uid = r.worker_uid), 'its row is gone') || ')';
        outcome := unbind_lost_reservation_v1(r.id, why);
        detail := why;
        RETURN NEXT;
      ELSIF r.state = 'requested' AND r.job_id IS NULL THEN
        UPDATE queue_reservations SET state = 'released', ended_at = now(), next_provision_at = NULL, updated_at = now()
         WHERE id = r.id;
        outcome := 'released'; detail := 'its job was purged';
        RETURN NEXT;
      ELSIF r.state = 'requested' AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = r.job_id
                                                 AND j.status IN ('completed', 'failed', 'cancelled')) THEN
        PERFORM end_reservation_v1(r.id, 'released', NULL, 'reservation ' || r.id || ' released: the job has ended');
        outcome := 'released'; detail := 'the job has ended';
        RETURN NEXT;
      ELSIF r.state = 'requested' AND r.requested_at < now() - make_interval(secs => p_timeout_seconds) THEN
        why := 'no worker bound it within ' || format_seconds_v2(p_timeout_seconds)
               || CASE WHEN r.last_error <> '' THEN ' (last: ' || r.last_error || ')' ELSE '' END;
        PERFORM end_reservation_v1(r.id, 'failed', why,
                                   'reservation ' || r.id || ' failed: ' || why
                                   || '; the job returns to shared execution and keeps its place (nothing is lost)');
        outcome := 'failed'; detail := why;
        RETURN NEXT;
      END IF;
    EXCEPTION WHEN SQLSTATE 'JE409' OR SQLSTATE 'JE404' OR deadlock_detected THEN
      CONTINUE;
    END;
  END LOOP;
END
$$;

-- The provisioner loop takes up to p_batch requested reservations that are due (next_provision_at),
-- skipping those another loop holds, and holds each for p_hold_seconds (the provisioner's deadline
-- and a little more) so two loops do not run it at once. Returns each with the facts of its job
-- and the attempt number record_provisioning_v1 is told.
CREATE OR REPLACE FUNCTION take_provisioning_v1(p_batch int, p_hold_seconds float)
RETURNS TABLE (reservation_id uuid, attempt int, generation int, requested_at timestamptz, job_id uuid,
               job_type text, params jsonb, priority int, hardware text, resource_category text, vram_mb int,
               required_category text, required_vram_mb int)
LANGUAGE plpgsql AS $$
DECLARE
  c record;
BEGIN
  FOR c IN
    SELECT r.id FROM queue_reservations r
     WHERE r.state = 'requested' AND r.next_provision_at <= now() AND r.job_id IS NOT NULL
     ORDER BY r.next_provision_at LIMIT p_batch
     FOR UPDATE SKIP LOCKED
  LOOP
    UPDATE queue_reservations r SET provision_attempts = r.provision_attempts + 1,
                                    next_provision_at = now() + make_interval(secs => p_hold_seconds),
                                    updated_at = now()
     WHERE r.id = c.id
    RETURNING r.id, r.provision_attempts, r.generation, r.requested_at
      INTO reservation_id, attempt, generation, requested_at;
    SELECT j.id, j.type, j.params, s.priority, j.hardware, j.resource_category, j.vram_mb,
           s.required_category, s.required_vram_mb
      INTO job_id, job_type, params, priority, hardware, resource_category, vram_mb,
           required_category, required_vram_mb
      FROM queue_reservations r JOIN jobs j ON j.id = r.job_id JOIN job_schedule s ON s.job_id = j.id
     WHERE r.id = c.id;
    RETURN NEXT;
  END LOOP;
END
$$;

-- What a provisioner run did (p_error NULL: it succeeded): recorded in last_error, and the next run
-- is due in p_retry_seconds (the loop's backoff; after a success, a check that the worker came up).
-- Ignored when the reservation moved on meanwhile (bound, ended, or a later attempt).
CREATE OR REPLACE FUNCTION record_provisioning_v1(p_reservation uuid, p_attempt int, p_error text,
                                                  p_retry_seconds float) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  UPDATE queue_reservations SET last_error = coalesce(p_error, ''),
                                provisioned_at = CASE WHEN p_error IS NULL THEN now() ELSE provisioned_at END,
                                next_provision_at = now() + make_interval(secs => p_retry_seconds),
                                updated_at = now()
   WHERE id = p_reservation AND state = 'requested' AND provision_attempts = p_attempt;
  RETURN FOUND;
END
$$;
