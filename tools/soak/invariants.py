"""Every invariant of docs/reliability.md (from ../shared/RELIABILITY.md) as SQL.

Each check is one query that returns the violating rows; `check_all()` runs them and returns a named
pass/fail result with the number of violations and a few examples. They read only the queue's own
tables, chiefly the append-only `queue_fence_audit`, so they work on any database the scheduler has
written: after a soak, in a test that corrupts a state on purpose, or on a production copy.

Audit order. Every fenced write that can be accepted (finish, fail, release, progress) and the
recovery loop lock the task row before they write their audit row, so for one task the audit ids of
these operations follow the order in which the writes took effect. Rejected heartbeats do not lock
the task row, so they are left out of every ordering check.

A token that has been rejected once is dead for good, with two exceptions: every reason the fence
gives (task not running, another token, another or a superseded session, a newer execution or
reservation generation) can never become false again for that token, because tokens are random per
claim. "lease expired" and "execution deadline passed" are compared with the statement's `now()`
(its transaction's start), so a heartbeat that started just before the expiry and waited for the
row lock may still renew the lease after a write saw it expired; those two reasons are left out of
the "dead token" rule (a write after the lease was *recovered* is still caught: recovery concludes
the attempt).

Functions take a DB-API cursor (Django's or psycopg's) whose parameter style is `%s`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

CONCLUSIONS = ("finish", "fail", "release", "recover")  # operations that end an attempt
EXAMPLES = 5


@dataclass(frozen=True)
class InvariantResult:
    name: str
    description: str
    violations: int
    examples: list[Any] = field(default_factory=list)
    checked: int | None = None  # how many rows the check looked at, where that is meaningful
    skipped: str | None = None

    @property
    def passed(self) -> bool:
        return self.violations == 0

    def line(self) -> str:
        if self.skipped:
            return f"SKIP {self.name}: {self.skipped}"
        status = "PASS" if self.passed else "FAIL"
        seen = f" of {self.checked}" if self.checked is not None else ""
        text = f"{status} {self.name}: {self.violations} violation(s){seen} - {self.description}"
        if self.examples:
            text += f"\n       e.g. {self.examples}"
        return text


def _rows(cursor, query: str, params: Sequence[Any] = ()) -> list[tuple]:
    cursor.execute(query, params)
    return cursor.fetchall() if cursor.description else []


def _scalar(cursor, query: str, params: Sequence[Any] = ()) -> Any:
    rows = _rows(cursor, query, params)
    return rows[0][0] if rows else None


def _result(
    cursor,
    name: str,
    description: str,
    query: str,
    params: Sequence[Any] = (),
    checked_query: str | None = None,
    checked_params: Sequence[Any] = (),
) -> InvariantResult:
    rows = _rows(cursor, query, params)
    checked = _scalar(cursor, checked_query, checked_params) if checked_query else None
    examples = [row if len(row) > 1 else row[0] for row in rows[:EXAMPLES]]
    return InvariantResult(name, description, len(rows), [_plain(e) for e in examples], checked)


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return str(value)


# ---- nothing lost ---------------------------------------------------------------------------


def jobs_not_lost(cursor, expected_job_ids: Iterable[Any] | None = None) -> InvariantResult:
    """Every job we were told exists is there, with its schedule and at least one task in its
    current execution."""
    ids = [str(i) for i in expected_job_ids] if expected_job_ids is not None else None
    query = """
      WITH expected AS (SELECT unnest(%s::uuid[]) AS id)
      SELECT e.id, 'missing job' FROM expected e WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.id = e.id)
      UNION ALL
      SELECT j.id, 'no schedule' FROM jobs j WHERE NOT EXISTS (SELECT 1 FROM job_schedule s WHERE s.job_id = j.id)
      UNION ALL
      SELECT j.id, 'no task in its current execution' FROM jobs j JOIN job_schedule s ON s.job_id = j.id
       WHERE NOT EXISTS (SELECT 1 FROM queue_tasks q WHERE q.job_id = j.id AND q.execution_id = s.execution_id
                                                     AND q.task_type <> 'webhook')
    """
    return _result(
        cursor,
        "jobs_not_lost",
        "every enqueued job exists with its schedule and its tasks",
        query,
        [ids or []],
        "SELECT count(*) FROM jobs",
    )


def no_task_lost(cursor) -> InvariantResult:
    """After the drain: every task is terminal, except the waiting stages a failed job holds (a
    failed stage holds the rest of its execution until an operator retries it)."""
    query = """
      SELECT q.id, q.state, j.status FROM queue_tasks q
        JOIN jobs j ON j.id = q.job_id JOIN job_schedule s ON s.job_id = q.job_id
       WHERE q.state NOT IN ('completed', 'failed', 'cancelled')
         AND NOT (j.status = 'failed' AND q.execution_id = s.execution_id AND q.task_type <> 'webhook'
                  AND q.state IN ('pending', 'retry_wait', 'blocked'))
       ORDER BY q.id
    """
    return _result(
        cursor,
        "no_task_lost",
        "after the drain every task is completed, failed or cancelled (or held by its failed job)",
        query,
        (),
        "SELECT count(*) FROM queue_tasks",
    )


def jobs_terminal(cursor) -> InvariantResult:
    query = "SELECT id, status FROM jobs WHERE status NOT IN ('completed', 'failed', 'cancelled') ORDER BY id"
    return _result(
        cursor,
        "jobs_terminal",
        "after the drain every job is completed, failed or cancelled",
        query,
        (),
        "SELECT count(*) FROM jobs",
    )


def job_status_matches_tasks(cursor) -> InvariantResult:
    """The stored status agrees with the tasks of the job's current execution (webhooks excluded)."""
    query = """
      WITH t AS (
        SELECT j.id, j.status, s.cancel_requested_at IS NOT NULL AS cancelling,
               count(q.id) AS total,
               count(q.id) FILTER (WHERE q.state = 'completed') AS completed,
               count(q.id) FILTER (WHERE q.state = 'failed') AS failed,
               count(q.id) FILTER (WHERE q.state = 'running') AS running,
               count(q.id) FILTER (WHERE q.state IN ('pending', 'retry_wait', 'blocked')) AS waiting
          FROM jobs j JOIN job_schedule s ON s.job_id = j.id
          LEFT JOIN queue_tasks q ON q.job_id = j.id AND q.execution_id = s.execution_id AND q.task_type <> 'webhook'
         GROUP BY j.id, j.status, s.cancel_requested_at)
      SELECT id, status, total, completed, failed, running, waiting FROM t
       WHERE (status = 'completed' AND (total = 0 OR completed <> total))
          OR (status = 'failed' AND (failed = 0 OR running > 0))
          OR (status = 'cancelled' AND (NOT cancelling OR running > 0 OR waiting > 0))
          OR (status = 'running' AND running = 0)
          OR (status IN ('pending', 'retry_wait', 'paused') AND (running > 0 OR waiting = 0))
       ORDER BY id
    """
    return _result(
        cursor,
        "job_status_matches_tasks",
        "each job's stored status agrees with its current tasks",
        query,
        (),
        "SELECT count(*) FROM jobs",
    )


# ---- nothing stuck --------------------------------------------------------------------------


def nothing_running_past_lease(cursor, recovery_interval: float, slack: float) -> InvariantResult:
    """No task stays running past its lease expiry plus one recovery interval plus slack. A lease
    that ran out while PostgreSQL itself was down is counted from the server's start."""
    query = """
      SELECT id, claimed_by, round(extract(epoch FROM now() - lease_expires_at)::numeric, 1) AS seconds_past
        FROM queue_tasks
       WHERE state = 'running'
         AND greatest(lease_expires_at, pg_postmaster_start_time()) < now() - make_interval(secs => %s)
       ORDER BY lease_expires_at
    """
    return _result(
        cursor,
        "nothing_running_past_lease",
        f"no task runs past its lease + recovery interval ({recovery_interval:g}s) + slack ({slack:g}s)",
        query,
        [recovery_interval + slack],
        "SELECT count(*) FROM queue_tasks WHERE state = 'running'",
    )


# ---- attempts ---------------------------------------------------------------------------------


def attempts_within_limits(cursor) -> InvariantResult:
    query = """
      SELECT id, 'task' AS what, attempt, max_attempts FROM queue_tasks WHERE attempt < 0 OR attempt > max_attempts
      UNION ALL
      SELECT a.task_id, 'audit ' || a.operation, a.attempt, q.max_attempts
        FROM queue_fence_audit a JOIN queue_tasks q ON q.id = a.task_id
       WHERE a.accepted AND a.attempt > q.max_attempts
    """
    return _result(
        cursor,
        "attempts_within_limits",
        "0 <= attempt <= max_attempts, in every task and accepted write",
        query,
        (),
        "SELECT count(*) FROM queue_tasks",
    )


def one_conclusion_per_attempt(cursor) -> InvariantResult:
    """Each attempt (lease token) ends once: one accepted finish, fail, release or recovery. A
    second recovery of the same lease would count its attempt twice."""
    query = """
      SELECT task_id, lease_token, string_agg(operation, ',' ORDER BY id) AS conclusions
        FROM queue_fence_audit
       WHERE accepted AND operation IN ('finish', 'fail', 'release', 'recover')
       GROUP BY task_id, lease_token HAVING count(*) > 1
       ORDER BY task_id
    """
    return _result(
        cursor,
        "one_conclusion_per_attempt",
        "each lease token is concluded once (finish, fail, release or recovery), never recovered twice",
        query,
        (),
        "SELECT count(DISTINCT (task_id, lease_token)) FROM queue_fence_audit WHERE accepted",
    )


# What the failover functions write into the stages they fail when a job has lost its worker
# max_attempts times (release_job_v2): a policy, not a stage giving up early.
LOST_WORKER_FAILURE = "%: the job has lost its worker % times"  # a LIKE pattern (a parameter)


def failures_exhaust_attempts(cursor) -> InvariantResult:
    """A `noop` stage only fails for good after its last attempt (it has no permanent failures
    with valid params), so nothing gives up early and nothing retries forever. The one exception:
    a job that lost its worker max_attempts times fails its waiting stages whatever their attempt
    (so a stage that kills every worker it runs on cannot loop through the farm)."""
    query = """
      SELECT id, attempt, max_attempts FROM queue_tasks
       WHERE task_type = 'noop' AND state = 'failed' AND attempt < max_attempts
         AND coalesce(last_failure, '') NOT LIKE %s
       ORDER BY id
    """
    return _result(
        cursor,
        "failures_exhaust_attempts",
        "a noop stage fails for good only on its last attempt (or when its job lost its worker too often)",
        query,
        [LOST_WORKER_FAILURE],
        "SELECT count(*) FROM queue_tasks WHERE task_type = 'noop' AND state = 'failed'",
    )


# ---- completions --------------------------------------------------------------------------------


def one_accepted_finish_per_task(cursor) -> InvariantResult:
    query = """
      SELECT task_id, count(*) FROM queue_fence_audit
       WHERE operation = 'finish' AND accepted
       GROUP BY task_id HAVING count(*) > 1 ORDER BY task_id
    """
    return _result(
        cursor,
        "one_accepted_finish_per_task",
        "at most one accepted finish per task",
        query,
        (),
        "SELECT count(DISTINCT task_id) FROM queue_fence_audit WHERE operation = 'finish' AND accepted",
    )


def finish_under_current_token(cursor) -> InvariantResult:
    """Each completed task has exactly one accepted completing finish, made under the task's final
    lease token, session, worker, attempt and execution; an accepted finish ends its task completed
    (or cancelled, when the job was being cancelled) for good."""
    query = """
      SELECT q.id, 'completed without exactly one matching finish', count(a.id)
        FROM queue_tasks q
        LEFT JOIN queue_fence_audit a ON a.task_id = q.id AND a.operation = 'finish' AND a.accepted
                                     AND a.reason = ''
                                     AND a.lease_token = q.lease_token
                                     AND a.session_id IS NOT DISTINCT FROM q.claimed_worker_session_id
                                     AND a.worker_uid IS NOT DISTINCT FROM q.claimed_by
                                     AND a.attempt = q.attempt AND a.execution_id = q.execution_id
       WHERE q.state = 'completed'
       GROUP BY q.id HAVING count(a.id) <> 1
      UNION ALL
      SELECT a.task_id, 'accepted finish but the task is ' || q.state, 1
        FROM queue_fence_audit a JOIN queue_tasks q ON q.id = a.task_id
       WHERE a.operation = 'finish' AND a.accepted
         AND q.state <> CASE WHEN a.reason LIKE 'cancelled%%' THEN 'cancelled' ELSE 'completed' END
      UNION ALL
      SELECT a.task_id, 'accepted finish under a token that is not the final one', 1
        FROM queue_fence_audit a JOIN queue_tasks q ON q.id = a.task_id
       WHERE a.operation = 'finish' AND a.accepted AND a.lease_token IS DISTINCT FROM q.lease_token
    """
    return _result(
        cursor,
        "finish_under_current_token",
        "every completion was accepted once, under the token current at that moment (the final one)",
        query,
        (),
        "SELECT count(*) FROM queue_tasks WHERE state = 'completed'",
    )


# ---- children -------------------------------------------------------------------------------------


def _requested_children_sql() -> str:
    # What a noop stage asks for: its payload's params if it carries any, else the job's params.
    return """
      CASE WHEN q.payload ?| array['seconds', 'fail_attempts', 'children']
           THEN coalesce((q.payload ->> 'children')::int, 0)
           ELSE coalesce((j.params ->> 'children')::int, 0) END
    """


def exact_children(cursor) -> InvariantResult:
    """For each completed noop stage, exactly the children it asked for: as many as requested,
    indexes 0..n-1, no duplicates, all in its own job and execution."""
    query = f"""
      WITH parents AS (
        SELECT q.id, q.job_id, q.execution_id, {_requested_children_sql()} AS requested
          FROM queue_tasks q JOIN jobs j ON j.id = q.job_id
         WHERE q.task_type = 'noop' AND q.state = 'completed'),
      kids AS (
        SELECT p.id, p.requested,
               count(c.id) AS n,
               count(DISTINCT c.payload ->> 'index') AS distinct_indexes,
               min((c.payload ->> 'index')::int) AS lo, max((c.payload ->> 'index')::int) AS hi,
               count(c.id) FILTER (WHERE c.job_id <> p.job_id OR c.execution_id <> p.execution_id
                                      OR (c.payload ->> 'parent_task_id')::bigint IS DISTINCT FROM p.id) AS misplaced
          FROM parents p LEFT JOIN queue_tasks c ON c.parent_task_id = p.id
         GROUP BY p.id, p.requested)
      SELECT id, requested, n, distinct_indexes, lo, hi, misplaced FROM kids
       WHERE n <> requested OR distinct_indexes <> requested OR misplaced > 0
          OR (requested > 0 AND (lo <> 0 OR hi <> requested - 1))
       ORDER BY id
    """
    return _result(
        cursor,
        "exact_children",
        "each completed parent has exactly the children it asked for (count, indexes 0..n-1, no duplicates)",
        query,
        (),
        "SELECT count(*) FROM queue_tasks WHERE task_type = 'noop' AND state = 'completed'",
    )


def children_only_from_completed_parents(cursor) -> InvariantResult:
    """No child of a failed, fenced or cancelled attempt: every child's parent completed, its
    accepted finish published it, and no two children share a parent and an index."""
    query = """
      SELECT c.id, 'parent is ' || coalesce(p.state, 'missing') FROM queue_tasks c
        LEFT JOIN queue_tasks p ON p.id = c.parent_task_id
       WHERE c.parent_task_id IS NOT NULL AND (p.id IS NULL OR p.state <> 'completed')
      UNION ALL
      SELECT min(c.id), 'duplicate index ' || (c.payload ->> 'index') FROM queue_tasks c
       WHERE c.parent_task_id IS NOT NULL
       GROUP BY c.parent_task_id, c.payload ->> 'index' HAVING count(*) > 1
      UNION ALL
      SELECT p.id, 'children without an accepted publication' FROM queue_tasks p
       WHERE EXISTS (SELECT 1 FROM queue_tasks c WHERE c.parent_task_id = p.id)
         AND NOT EXISTS (SELECT 1 FROM queue_fence_audit a WHERE a.task_id = p.id AND a.operation = 'publish'
                                                            AND a.accepted AND a.lease_token = p.lease_token)
    """
    return _result(
        cursor,
        "children_only_from_completed_parents",
        "children come only from a completed parent's accepted publication, once per index",
        query,
        (),
        "SELECT count(*) FROM queue_tasks WHERE parent_task_id IS NOT NULL",
    )


# ---- fencing ----------------------------------------------------------------------------------------


def no_stale_write_accepted(
    cursor, probe_violations: int = 0, probe_examples: Sequence[Any] = ()
) -> InvariantResult:
    """No write took effect under a stale token: no accepted write of a token after that token was
    rejected or after its attempt had ended (its publication is part of its own finish), and no
    publication without the accepted finish of the same token. `probe_violations` adds the stale
    writes a soak made on purpose and saw accepted."""
    query = """
      SELECT r.id, r.task_id, r.operation, 'after ' || p.operation || CASE WHEN p.accepted THEN '' ELSE ' rejected' END
        FROM queue_fence_audit r
        JOIN LATERAL (
          SELECT p.operation, p.accepted FROM queue_fence_audit p
           WHERE p.task_id = r.task_id AND p.lease_token = r.lease_token AND p.id < r.id
             AND p.operation <> 'heartbeat'
             AND ((NOT p.accepted AND p.reason NOT IN ('lease expired', 'execution deadline passed'))
                  OR (p.operation IN ('finish', 'fail', 'release', 'recover')
                      AND NOT (r.operation = 'publish' AND p.operation = 'finish')))
           ORDER BY p.id LIMIT 1) p ON true
       WHERE r.accepted AND r.operation IN ('finish', 'fail', 'release', 'publish', 'progress')
      UNION ALL
      SELECT r.id, r.task_id, r.operation, 'publication without its accepted finish'
        FROM queue_fence_audit r
       WHERE r.accepted AND r.operation = 'publish'
         AND NOT EXISTS (SELECT 1 FROM queue_fence_audit f WHERE f.task_id = r.task_id AND f.lease_token = r.lease_token
                                                           AND f.operation = 'finish' AND f.accepted AND f.id < r.id)
       ORDER BY 1
    """
    result = _result(
        cursor,
        "no_stale_write_accepted",
        "no write took effect under a stale token (audit order, and the soak's own stale-write probes)",
        query,
        (),
        "SELECT count(*) FROM queue_fence_audit WHERE NOT accepted",
    )
    if probe_violations:
        examples = (
            list(result.examples)
            + [_plain(tuple(e)) if isinstance(e, (list, tuple)) else e for e in probe_examples]
        )[:EXAMPLES]
        result = InvariantResult(
            result.name, result.description, result.violations + probe_violations, examples, result.checked
        )
    return result


def no_write_to_superseded_execution(cursor) -> InvariantResult:
    """Once a job has moved to a new execution (a lost worker, a drain or an evacuation, a
    redispatch), nothing more of the old one takes effect: every task of a superseded execution is
    completed (before the move) or cancelled (by it), and no write on a task of execution e is
    accepted after the first audited write of a later execution of the same job.

    Audit order works across the tasks of one job: every fenced write and the recovery loop lock the
    job's schedule row before they write their audit row, and the move itself locks that row too, so
    the first audit row of execution e+1 comes after the move has committed, and any accepted write
    of execution e after it is one the fence let through although the execution had changed.
    Webhook deliveries are left out: they report a status the job had, and may
    be delivered after it moved on."""
    query = """
      WITH firsts AS (
        SELECT a.job_id, a.execution_id, min(a.id) AS first_id FROM queue_fence_audit a
         GROUP BY a.job_id, a.execution_id)
      SELECT a.task_id, a.id, a.operation || ' accepted in execution ' || a.execution_id
                              || ' after execution ' || f.execution_id || ' began'
        FROM queue_fence_audit a
        JOIN queue_tasks q ON q.id = a.task_id AND q.task_type <> 'webhook'
        JOIN LATERAL (SELECT f.execution_id FROM firsts f
                       WHERE f.job_id = a.job_id AND f.execution_id > a.execution_id AND f.first_id < a.id
                       ORDER BY f.first_id LIMIT 1) f ON true
       WHERE a.accepted AND a.operation IN ('finish', 'fail', 'release', 'publish', 'progress', 'recover')
      UNION ALL
      SELECT q.id, NULL, 'task of superseded execution ' || q.execution_id || ' (now ' || s.execution_id
                         || ') is ' || q.state
        FROM queue_tasks q JOIN job_schedule s ON s.job_id = q.job_id
       WHERE q.execution_id < s.execution_id AND q.task_type <> 'webhook'
         AND q.state NOT IN ('completed', 'cancelled')
       ORDER BY 1
    """
    return _result(
        cursor,
        "no_write_to_superseded_execution",
        "a superseded execution is closed: its tasks completed or cancelled, no write accepted after the next began",
        query,
        (),
        "SELECT count(*) FROM queue_tasks q JOIN job_schedule s ON s.job_id = q.job_id "
        "WHERE q.execution_id < s.execution_id AND q.task_type <> 'webhook'",
    )


# ---- outputs ----------------------------------------------------------------------------------------


def outputs_published_once(cursor) -> InvariantResult:
    """Each output is published once per (job, execution, name) and never partially: only by a
    completed task of that execution, whose accepted finish recorded the publication."""
    query = """
      SELECT min(o.id), 'published ' || count(*) || ' times: ' || o.name FROM job_outputs o
       GROUP BY o.job_id, o.execution_id, o.name HAVING count(*) > 1
      UNION ALL
      SELECT o.id, 'task ' || o.task_id || ' is ' || coalesce(q.state, 'missing') FROM job_outputs o
        LEFT JOIN queue_tasks q ON q.id = o.task_id
       WHERE q.id IS NULL OR q.state <> 'completed' OR q.job_id <> o.job_id OR q.execution_id <> o.execution_id
      UNION ALL
      SELECT o.id, 'no accepted publication by task ' || o.task_id FROM job_outputs o
       WHERE NOT EXISTS (SELECT 1 FROM queue_fence_audit a WHERE a.task_id = o.task_id AND a.operation = 'publish'
                                                            AND a.accepted)
    """
    return _result(
        cursor,
        "outputs_published_once",
        "every output published once, only by its completed task's accepted finish",
        query,
        (),
        "SELECT count(*) FROM job_outputs",
    )


# ---- all of them ------------------------------------------------------------------------------------


def split_jobs_whole(cursor) -> InvariantResult:
    """A completed split transcode (issue 33) had every chunk of its final execution encoded and
    accepted, and published its renditions: nothing was stitched from a missing or lost chunk."""
    query = """
      WITH split AS (
        SELECT q.job_id, count(DISTINCT q.payload -> 'chunk' ->> 'index') AS chunks,
               count(DISTINCT q.payload -> 'chunk' ->> 'index') FILTER (WHERE q.state = 'completed') AS done
          FROM queue_tasks q
          JOIN job_schedule s ON s.job_id = q.job_id AND s.execution_id = q.execution_id
          JOIN jobs j ON j.id = q.job_id AND j.status = 'completed'
         WHERE q.task_type = 'transcode.chunk'
         GROUP BY q.job_id)
      SELECT job_id, chunks, done FROM split
       WHERE done <> chunks
          OR NOT EXISTS (SELECT 1 FROM job_outputs o WHERE o.job_id = split.job_id AND o.name LIKE 'renditions/%%')
       ORDER BY job_id
    """
    return _result(
        cursor,
        "split_jobs_whole",
        "a completed split transcode had every chunk accepted and published its renditions",
        query,
        (),
        "SELECT count(DISTINCT job_id) FROM queue_tasks WHERE task_type = 'transcode.chunk'",
    )


def check_all(
    cursor,
    *,
    expected_job_ids: Iterable[Any] | None = None,
    drained: bool = True,
    recovery_interval: float = 5.0,
    slack: float = 5.0,
    probe_violations: int = 0,
    probe_examples: Sequence[Any] = (),
) -> list[InvariantResult]:
    """Run every invariant. `drained=False` (the queue still moves) skips the after-drain ones."""
    results = [jobs_not_lost(cursor, expected_job_ids)]
    if drained:
        results += [no_task_lost(cursor), jobs_terminal(cursor)]
    else:
        for name in ("no_task_lost", "jobs_terminal"):
            results.append(InvariantResult(name, "", 0, skipped="the queue has not drained"))
    results += [
        job_status_matches_tasks(cursor),
        nothing_running_past_lease(cursor, recovery_interval, slack),
        attempts_within_limits(cursor),
        one_conclusion_per_attempt(cursor),
        failures_exhaust_attempts(cursor),
        one_accepted_finish_per_task(cursor),
        finish_under_current_token(cursor),
        exact_children(cursor),
        children_only_from_completed_parents(cursor),
        no_stale_write_accepted(cursor, probe_violations, probe_examples),
        no_write_to_superseded_execution(cursor),
        outputs_published_once(cursor),
        split_jobs_whole(cursor),
    ]
    return results


def stuck_running(cursor, grace_seconds: float) -> list[tuple]:
    """Running tasks whose lease ran out more than `grace_seconds` ago (sampled during a soak)."""
    return _rows(
        cursor,
        """
      SELECT id, claimed_by, round(extract(epoch FROM now() - lease_expires_at)::numeric, 1)
        FROM queue_tasks
       WHERE state = 'running'
         AND greatest(lease_expires_at, pg_postmaster_start_time()) < now() - make_interval(secs => %s)
       ORDER BY lease_expires_at LIMIT 20
    """,
        [grace_seconds],
    )


def pinned_to_departed_workers(
    cursor, lease_seconds: float, reassign_after: float, grace_seconds: float
) -> list[tuple]:
    """Idle jobs that should be moving off their worker (sampled during a soak): unfinished, not
    cancelling, not targeted, nothing running in the current execution, and pinned to a worker that
    is draining while another worker is active, or silent longer than its failover delay (the lease without local work,
    `reassign_after` with it: a completed job-placement stage) + `grace_seconds`. Silence is counted
    from PostgreSQL's start when the server itself was down.

    Returns (job id, worker uid, session, 'draining' or 'silent', seconds): for a draining worker the
    seconds are left to the caller (None: it knows since when it has seen the pair); for a silent
    one they say how far past its bound the job is."""
    return _rows(
        cursor,
        """
      WITH idle AS (
        SELECT s.job_id, s.execution_id, w.uid, w.current_session_id, w.lifecycle,
               greatest(w.last_heartbeat_at, pg_postmaster_start_time()) AS heard_at,
               EXISTS (SELECT 1 FROM queue_tasks q WHERE q.job_id = s.job_id AND q.execution_id = s.execution_id
                                                  AND q.state = 'completed' AND q.placement = 'job') AS local_work
          FROM job_schedule s
          JOIN queue_workers w ON w.uid = s.assigned_worker_uid
          JOIN jobs j ON j.id = s.job_id
         WHERE j.status IN ('pending', 'retry_wait', 'paused')
           AND s.cancel_requested_at IS NULL AND s.required_worker_uid IS NULL
           AND NOT EXISTS (SELECT 1 FROM queue_tasks q WHERE q.job_id = s.job_id AND q.execution_id = s.execution_id
                                                         AND q.state = 'running' AND q.task_type <> 'webhook'))
      -- With no other worker active a drained worker's jobs wait for it (other_worker_active_v2).
      SELECT job_id, uid, current_session_id, 'draining', NULL::numeric FROM idle
       WHERE lifecycle = 'draining' AND other_worker_active_v2(uid)
      UNION ALL
      SELECT job_id, uid, current_session_id, 'silent',
             round(extract(epoch FROM now() - heard_at)::numeric
                   - CASE WHEN local_work THEN %s ELSE %s END - %s, 1)
        FROM idle
       WHERE lifecycle <> 'draining'
         AND heard_at < now() - make_interval(secs => CASE WHEN local_work THEN %s ELSE %s END + %s)
       ORDER BY 1 LIMIT 50
    """,
        [reassign_after, lease_seconds, grace_seconds, reassign_after, lease_seconds, grace_seconds],
    )
