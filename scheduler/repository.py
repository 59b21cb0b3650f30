"""The only writer of queue state.

Every function here calls one SQL function from `scheduler/sql/functions_v1.sql` in one round trip
and maps the result to a frozen dataclass, and PostgreSQL errors to domain exceptions. Views, the
API, admin actions and workers call these; none of them writes queue rows with the ORM.

Functions run on the calling thread's Django connection. In autocommit mode each call is its own
transaction; a caller that must do work inside the same transaction (the worker renaming published
files while the finish holds its row locks) wraps the call in `transaction.atomic()`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.utils import DatabaseError

# ---- Errors ---------------------------------------------------------------------------------


class SchedulerError(Exception):
    pass


class JobNotFound(SchedulerError):
    pass


class ActionNotAllowed(SchedulerError):
    """The action does not apply in the job's (or worker's) current state: HTTP 409."""


class InvalidArgument(SchedulerError):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class SessionSuperseded(SchedulerError):
    """A newer process registered the same worker uid: this session must stop ("uid taken over")."""


def _translate(exc: DatabaseError) -> Exception:
    cause = exc.__cause__ or exc
    sqlstate = getattr(cause, "sqlstate", None)
    diag = getattr(cause, "diag", None)
    primary = (diag.message_primary if diag else None) or str(cause)
    detail = diag.message_detail if diag else None
    if sqlstate == "JE404":
        return JobNotFound(primary)
    if sqlstate == "JE409":
        return ActionNotAllowed(primary)
    if sqlstate == "JE410":
        return SessionSuperseded(primary)
    if sqlstate == "JE422":
        return InvalidArgument(primary, detail or "invalid")
    return exc


def _call(sql: str, params: Sequence[Any] = ()) -> list[tuple]:
    try:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if cursor.description else []
    except DatabaseError as exc:
        translated = _translate(exc)
        if translated is exc:
            raise
        raise translated from exc


def _control(sql: str, params: Sequence[Any] = ()) -> list[tuple]:
    """An operator control or enqueue: may refuse (409/422), so it runs in its own savepoint and a
    refusal never poisons the caller's surrounding transaction."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if cursor.description else []
    except DatabaseError as exc:
        translated = _translate(exc)
        if translated is exc:
            raise
        raise translated from exc


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


# ---- Jobs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class NewJob:
    job_type: str
    params: dict[str, Any] = field(default_factory=dict)
    priority: int = 0
    max_attempts: int = 4
    webhook_url: str | None = None
    required_worker_uid: str | None = None
    hardware: str = "auto"
    resource_category: str | None = None
    vram_mb: int | None = None
    required_category: str | None = None  # a GPU dispatch: only workers with this category may take it
    required_vram_mb: int = 0
    timeout_seconds: float = 600
    created_by: int | None = None


ENQUEUE_SQL = "SELECT enqueue_job_v1(%s, %s::jsonb, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"


def enqueue_arguments(job: NewJob, *, stale_seconds: float, notify: bool = True) -> list:
    """enqueue_job_v1's arguments for a job, in order (the benchmarks send them in bulk)."""
    return [
        job.job_type,
        json.dumps(job.params),
        job.priority,
        job.max_attempts,
        job.webhook_url,
        job.required_worker_uid,
        job.hardware,
        job.resource_category,
        job.vram_mb,
        job.required_category,
        job.required_vram_mb,
        job.timeout_seconds,
        job.created_by,
        stale_seconds,
        notify,
    ]


def enqueue_job(job: NewJob, *, stale_seconds: float, notify: bool = True) -> uuid.UUID:
    """Insert the job, its schedule and its dispatch task in one transaction; NOTIFY the workers."""
    rows = _control(ENQUEUE_SQL, enqueue_arguments(job, stale_seconds=stale_seconds, notify=notify))
    return rows[0][0]


def cancel(job_id) -> str:
    return _control("SELECT cancel_job_v1(%s)", [job_id])[0][0]


def pause(job_id) -> str:
    return _control("SELECT set_paused_v1(%s, true)", [job_id])[0][0]


def resume(job_id) -> str:
    return _control("SELECT set_paused_v1(%s, false)", [job_id])[0][0]


def set_priority(job_id, priority: int) -> str:
    return _control("SELECT set_priority_v1(%s, %s)", [job_id, priority])[0][0]


def move(job_id, direction: str) -> int:
    """Move within the job's comparable group: up | down | top | bottom. Returns the new position."""
    return _control("SELECT move_job_v1(%s, %s)", [job_id, direction])[0][0]


def run_next(job_id) -> int:
    """Run Next is exactly Move To Top: the front of its queue within its priority."""
    return move(job_id, "top")


def retry(job_id) -> str:
    return _control("SELECT retry_job_v2(%s)", [job_id])[0][0]


def redispatch(job_id, why: str = "redispatched by an operator") -> int:
    """Start a new execution on any worker (the old one's unfinished stages are cancelled)."""
    return _control("SELECT redispatch_job_v2(%s, 'manual', %s)", [job_id, why])[0][0]


def reserve_job(job_id) -> uuid.UUID:
    return _control("SELECT reserve_job_v1(%s)", [job_id])[0][0]


def bind_reservation(reservation_id, worker_uid: str) -> None:
    _control("SELECT bind_reservation_v1(%s, %s)", [reservation_id, worker_uid])


def target_refusal(worker_uid: str, *, stale_seconds: float) -> str | None:
    """Why a worker may not be named as required_worker_uid right now (None when it may)."""
    return _call("SELECT worker_accepts_targets_v1(%s, %s)", [worker_uid, stale_seconds])[0][0]


# ---- Workers --------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerRegistration:
    uid: str
    session_id: uuid.UUID
    hostname: str
    pid: int
    version: str
    concurrency: int
    background_slots: int
    category_limits: dict[str, int]
    vram_total_mb: int
    capabilities: dict[str, Any]
    workspace: str


def register_worker(reg: WorkerRegistration) -> uuid.UUID | None:
    """Register a process start; returns the session it replaced (now fenced), if any."""
    return _call(
        "SELECT register_worker_v1(%s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s, %s::jsonb, %s)",
        [
            reg.uid,
            reg.session_id,
            reg.hostname,
            reg.pid,
            reg.version,
            reg.concurrency,
            reg.background_slots,
            json.dumps(reg.category_limits),
            reg.vram_total_mb,
            json.dumps(reg.capabilities),
            reg.workspace,
        ],
    )[0][0]


def worker_heartbeat(uid: str, session_id, sample: dict | None) -> str:
    """Refresh the worker's heartbeat and system sample; returns its lifecycle."""
    return _call("SELECT worker_heartbeat_v1(%s, %s, %s::jsonb)", [uid, session_id, _json(sample)])[0][0]


def set_session_lifecycle(uid: str, session_id, lifecycle: str) -> int | None:
    """The session says draining or offline; its idle pinned jobs move to other workers in the
    same transaction. Returns how many moved, or None when the session is not current."""
    return _call("SELECT set_session_lifecycle_v2(%s, %s, %s)", [uid, session_id, lifecycle])[0][0]


def drain_worker(uid: str) -> str:
    """Claim nothing new; idle pinned jobs move at once, the others when their stage ends."""
    return _control("SELECT drain_worker_v2(%s)", [uid])[0][0]


def evacuate_worker(uid: str) -> int:
    """Drain the worker and move every job pinned to it now (running stages are redone elsewhere).
    Returns how many jobs moved; JobNotFound for an unknown uid, ActionNotAllowed for an offline
    worker with nothing to move."""
    return _control("SELECT evacuate_worker_v2(%s)", [uid])[0][0]


def mark_stale_workers(stale_seconds: float) -> list[str]:
    return [r[0] for r in _call("SELECT * FROM mark_stale_workers_v1(%s)", [stale_seconds])]


# ---- Claim and fenced writes ----------------------------------------------------------------


@dataclass(frozen=True)
class ClaimedTask:
    id: int
    job_id: uuid.UUID
    execution_id: int
    task_type: str
    payload: dict[str, Any]
    attempt: int
    max_attempts: int
    lease_token: uuid.UUID
    lease_expires_at: datetime
    deadline_at: datetime
    pool: str
    placement: str
    resource_category: str
    vram_mb: int
    timeout_seconds: float
    job_type: str
    job_params: dict[str, Any]
    job_hardware: str


@dataclass(frozen=True)
class Lease:
    """Who is writing: every fenced write carries all of it."""

    task_id: int
    lease_token: uuid.UUID
    worker_uid: str
    session_id: uuid.UUID

    @classmethod
    def of(cls, task: ClaimedTask, worker_uid: str, session_id) -> Lease:
        return cls(task.id, task.lease_token, worker_uid, session_id)

    def args(self) -> list:
        return [self.task_id, self.lease_token, self.worker_uid, self.session_id]


@dataclass(frozen=True)
class FenceResult:
    outcome: str  # completed | cancelled | retry_wait | failed | pending | rejected
    reason: str | None = None

    @property
    def accepted(self) -> bool:
        return self.outcome != "rejected"


@dataclass(frozen=True)
class TaskHeartbeat:
    task_id: int
    accepted: bool
    cancel_requested: bool
    reason: str | None


def claim(worker_uid: str, session_id, pool: str, lease_seconds: float) -> ClaimedTask | None:
    """Claim one task for one free slot of this session, or None. Raises SessionSuperseded."""
    rows = _call("SELECT * FROM claim_task_v1(%s, %s, %s, %s)", [worker_uid, session_id, pool, lease_seconds])
    if not rows:
        return None
    row = list(rows[0])
    # Raw cursors return jsonb as text (Django decodes JSON in the ORM layer only).
    for index in (4, 16):
        if isinstance(row[index], str):
            row[index] = json.loads(row[index])
    return ClaimedTask(*row)


def heartbeat_tasks(
    worker_uid: str, session_id, leases: Iterable[Lease], lease_seconds: float
) -> list[TaskHeartbeat]:
    """Renew every lease of the session in one statement (each fenced on its own)."""
    body = json.dumps([{"id": lease.task_id, "token": str(lease.lease_token)} for lease in leases])
    rows = _call(
        "SELECT * FROM heartbeat_tasks_v1(%s, %s, %s::jsonb, %s)",
        [worker_uid, session_id, body, lease_seconds],
    )
    return [TaskHeartbeat(*row) for row in rows]


def report_progress(
    lease: Lease, progress: float | None = None, detail: dict | None = None, lines: Sequence[str] = ()
) -> TaskHeartbeat:
    rows = _call(
        "SELECT * FROM report_progress_v1(%s, %s, %s, %s, %s, %s::jsonb, %s)",
        [*lease.args(), progress, _json(detail), list(lines) or None],
    )
    accepted, cancel_requested, reason = rows[0]
    return TaskHeartbeat(lease.task_id, accepted, bool(cancel_requested), reason)


@dataclass(frozen=True)
class Child:
    """A stage published atomically with its parent's successful finish."""

    task_type: str
    payload: dict[str, Any] = field(default_factory=dict)
    placement: str = "job"
    pool: str = "media"
    resource_category: str = "cpu"
    vram_mb: int = 0
    timeout_seconds: float | None = None
    wait_for_siblings: bool = False


@dataclass(frozen=True)
class Output:
    name: str
    kind: str = "file"
    size_bytes: int = 0
    storage_url: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)


def finish(
    lease: Lease,
    result: dict | None = None,
    children: Sequence[Child] = (),
    outputs: Sequence[Output] = (),
) -> FenceResult:
    """Complete the task and publish its children and outputs in one transaction (fenced)."""
    child_specs = [{k: v for k, v in asdict(c).items() if v is not None} for c in children]
    rows = _call(
        "SELECT * FROM finish_task_v1(%s, %s, %s, %s, %s::jsonb, %s::jsonb, %s::jsonb)",
        [*lease.args(), _json(result), json.dumps(child_specs), json.dumps([asdict(o) for o in outputs])],
    )
    return FenceResult(*rows[0])


def fail(lease: Lease, error: str, *, retryable: bool = True) -> FenceResult:
    rows = _call("SELECT * FROM fail_task_v1(%s, %s, %s, %s, %s, %s)", [*lease.args(), error, retryable])
    return FenceResult(*rows[0])


def release(lease: Lease, why: str) -> FenceResult:
    """Hand a task back (shutdown): pending again without using up an attempt."""
    rows = _call("SELECT * FROM release_task_v1(%s, %s, %s, %s, %s)", [*lease.args(), why])
    return FenceResult(*rows[0])


# ---- Maintenance ----------------------------------------------------------------------------


def recover_expired(batch: int = 100) -> list[tuple[int, str]]:
    return _call("SELECT * FROM recover_expired_v1(%s)", [batch])


@dataclass(frozen=True)
class Release:
    """A job moved off a worker by the recovery loop's release pass."""

    job_id: uuid.UUID
    execution_id: int
    cause: str  # drained | lost_in_dispatch | lost_after_delay
    worker_uid: str


def release_jobs(lost_seconds: float, reassign_after: float, batch: int = 50) -> list[Release]:
    """Move jobs off draining workers and lost ones (silent for `lost_seconds`; those with local
    work only after `reassign_after`)."""
    rows = _call("SELECT * FROM release_jobs_v2(%s, %s, %s)", [lost_seconds, reassign_after, batch])
    return [Release(*row) for row in rows]


def purge_history(days: int, batch: int = 500) -> int:
    return _call("SELECT purge_history_v1(%s, %s)", [days, batch])[0][0]


def record_sample() -> bool:
    rows = _call("SELECT record_sample_v1()")
    return bool(rows and rows[0][0])


def note_recovery_ran() -> None:
    _call("UPDATE queue_scheduler_state SET last_recovery_at = now() WHERE id = 1")


__all__ = [name for name in dir() if not name.startswith("_")] + ["transaction"]
