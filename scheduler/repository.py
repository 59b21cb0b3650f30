"""The only writer of queue state.

Every function here runs one named statement of `scheduler/sql/repository.sql` (each calls one
scheduler function of `scheduler/sql/functions/`) in one round trip, with named parameters, and maps
the result to a frozen dataclass by column name, and PostgreSQL errors to domain exceptions. Views,
the API, admin actions and workers call these; none of them writes queue rows with the ORM.

Functions run on the calling thread's Django connection. In autocommit mode each call is its own
transaction; a caller that must do work inside the same transaction (the worker renaming published
files while the finish holds its row locks) wraps the call in `transaction.atomic()`.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from typing import Any

import psycopg
from django.db import connection, transaction
from django.db.utils import DatabaseError

from scheduler import sqlfiles

QUERIES = sqlfiles.named_queries("repository.sql")
# Queries of several statements sent as one (the simple protocol: one round trip, one implicit
# transaction); their rows are the last statement's.
_SEVERAL_STATEMENTS = frozenset(name for name, sql in QUERIES.items() if ";" in sql)

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


def _execute(cursor, name: str, params: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Run the named statement; its rows as {column: value}. `cursor` is a Django cursor or, on the
    worker's hot path, a plain psycopg one (whose errors arrive untranslated by Django)."""
    try:
        cursor.execute(QUERIES[name], params)
    except (DatabaseError, psycopg.Error) as exc:
        translated = _translate(exc)
        if translated is exc:
            raise
        raise translated from exc
    if name in _SEVERAL_STATEMENTS:
        while cursor.nextset():
            pass
    # The column names straight from the result: psycopg's `description` builds a Column object
    # per column on every access (a few percent of a worker's CPU per stage).
    result = cursor.pgresult
    if result is None or not result.nfields:
        return []
    encoding = cursor.connection.info.encoding
    columns = [result.fname(i).decode(encoding) for i in range(result.nfields)]
    return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]


def _call(name: str, params: dict[str, Any] | None = None, cursor=None) -> list[dict[str, Any]]:
    """Run on `cursor` when given, else on this thread's Django connection."""
    if cursor is not None:
        return _execute(cursor, name, params)
    with connection.cursor() as own:
        return _execute(own, name, params)


def _call_several(
    name: str, params: dict[str, Any], conn: psycopg.Connection | None = None
) -> list[dict[str, Any]]:
    """A query of several statements in one message, on `conn` (a plain psycopg connection) or this
    thread's Django connection. Only the simple protocol takes several statements at once, so it
    goes through a client-side binding cursor whatever the connection's own binding (a worker binds
    on the server)."""
    with psycopg.ClientCursor(_plain(conn)) as cursor:
        return _execute(cursor, name, params)


def _plain(conn: psycopg.Connection | None) -> psycopg.Connection:
    """`conn`, or else this thread's Django connection as the plain psycopg one."""
    if conn is None:
        connection.ensure_connection()
        conn = connection.connection
    return conn


def _control(name: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """An operator control or enqueue: may refuse (409/422), so it runs in its own savepoint and a
    refusal never poisons the caller's surrounding transaction."""
    with transaction.atomic(), connection.cursor() as cursor:
        return _execute(cursor, name, params)


def _record(cls, row: dict[str, Any], **extra: Any):
    """A dataclass from a row, by column name (columns it has no field for are ignored)."""
    values = row | extra
    return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})


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


ENQUEUE_SQL = QUERIES["enqueue_job"]


def enqueue_arguments(job: NewJob, *, stale_seconds: float, notify: bool = True) -> dict[str, Any]:
    """ENQUEUE_SQL's parameters for a job, by name (the benchmarks send them in bulk)."""
    return {
        "job_type": job.job_type,
        "params": json.dumps(job.params),
        "priority": job.priority,
        "max_attempts": job.max_attempts,
        "webhook_url": job.webhook_url,
        "required_worker_uid": job.required_worker_uid,
        "hardware": job.hardware,
        "resource_category": job.resource_category,
        "vram_mb": job.vram_mb,
        "required_category": job.required_category,
        "required_vram_mb": job.required_vram_mb,
        "timeout_seconds": job.timeout_seconds,
        "created_by": job.created_by,
        "stale_seconds": stale_seconds,
        "notify": notify,
    }


def enqueue_job(job: NewJob, *, stale_seconds: float, notify: bool = True) -> uuid.UUID:
    """Insert the job, its schedule and its dispatch task in one transaction; NOTIFY the workers."""
    rows = _control("enqueue_job", enqueue_arguments(job, stale_seconds=stale_seconds, notify=notify))
    return rows[0]["job_id"]


def cancel(job_id) -> str:
    return _control("cancel_job", {"job_id": job_id})[0]["status"]


def pause(job_id) -> str:
    return _control("set_paused", {"job_id": job_id, "paused": True})[0]["status"]


def resume(job_id) -> str:
    return _control("set_paused", {"job_id": job_id, "paused": False})[0]["status"]


def set_priority(job_id, priority: int) -> str:
    return _control("set_priority", {"job_id": job_id, "priority": priority})[0]["status"]


def move(job_id, direction: str) -> int:
    """Move within the job's comparable group: up | down | top | bottom. Returns the new position."""
    return _control("move_job", {"job_id": job_id, "direction": direction})[0]["position"]


def run_next(job_id) -> int:
    """Run Next is exactly Move To Top: the front of its queue within its priority."""
    return move(job_id, "top")


def retry(job_id) -> str:
    return _control("retry_job", {"job_id": job_id})[0]["status"]


def redispatch(job_id, why: str = "redispatched by an operator") -> int:
    """Start a new execution on any worker (the old one's unfinished stages are cancelled)."""
    return _control("redispatch_job", {"job_id": job_id, "why": why})[0]["execution_id"]


def reserve_job(job_id) -> uuid.UUID:
    """Dedicate a pending job (idempotent); 409 when it runs, ended, is targeted or split."""
    return _control("reserve_job", {"job_id": job_id})[0]["reservation_id"]


def unreserve_job(job_id) -> uuid.UUID:
    """Return a dedicated job nobody has bound to shared execution; its reservation ends released."""
    return _control("unreserve_job", {"job_id": job_id})[0]["reservation_id"]


def target_refusal(worker_uid: str, *, stale_seconds: float) -> str | None:
    """Why a worker may not be named as required_worker_uid right now (None when it may)."""
    rows = _call("target_refusal", {"worker_uid": worker_uid, "stale_seconds": stale_seconds})
    return rows[0]["refusal"]


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
    params = asdict(reg) | {
        "category_limits": json.dumps(reg.category_limits),
        "capabilities": json.dumps(reg.capabilities),
    }
    return _call("register_worker", params)[0]["previous_session_id"]


def worker_heartbeat(uid: str, session_id, sample: dict | None) -> str:
    """Refresh the worker's heartbeat and system sample; returns its lifecycle."""
    params = {"uid": uid, "session_id": session_id, "sample": _json(sample)}
    return _call("worker_heartbeat", params)[0]["lifecycle"]


def set_session_lifecycle(uid: str, session_id, lifecycle: str) -> int | None:
    """The session says draining or offline; its idle pinned jobs move to other workers in the
    same transaction. Returns how many moved, or None when the session is not current."""
    params = {"uid": uid, "session_id": session_id, "lifecycle": lifecycle}
    return _call("set_session_lifecycle", params)[0]["moved"]


def drain_worker(uid: str) -> str:
    """Claim nothing new; idle pinned jobs move at once, the others when their stage ends."""
    return _control("drain_worker", {"uid": uid})[0]["lifecycle"]


HAND_BACK_SECONDS = 5.0  # how long an evacuation keeps handing back split-job stages it had to skip


def evacuate_worker(uid: str) -> int:
    """Drain the worker and move every job pinned to it now (running stages are redone elsewhere),
    and hand its running split-job stages back to the queue. Returns how many jobs and stages moved;
    JobNotFound for an unknown uid, ActionNotAllowed for an offline worker with nothing to move.

    The hand-back skips a stage whose row is locked at that instant (mostly by the worker's own
    heartbeat, which then waits for the worker row the evacuation holds); such a stage would run to
    its end on the evacuated worker. So, once the evacuation has committed, the rest are handed back
    in transactions of their own, for at most HAND_BACK_SECONDS."""
    moved = _control("evacuate_worker", {"uid": uid})[0]["moved"]
    deadline = time.monotonic() + HAND_BACK_SECONDS
    while _call("cluster_tasks_running", {"uid": uid})[0]["running"] and time.monotonic() < deadline:
        time.sleep(0.05)
        moved += _control("hand_back_cluster_tasks", {"uid": uid})[0]["moved"]
    return moved


def undrain_worker(uid: str) -> str:
    """Return a drained (or evacuated) worker to service; JobNotFound for an unknown uid,
    ActionNotAllowed for an offline worker."""
    return _control("undrain_worker", {"uid": uid})[0]["lifecycle"]


def mark_stale_workers(stale_seconds: float) -> list[str]:
    return [row["uid"] for row in _call("mark_stale_workers", {"stale_seconds": stale_seconds})]


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
    # Something else of the pool had been runnable for this worker (for the claim's grace) as the
    # claim began: a backlog.
    more_runnable: bool = False


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

    def params(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "lease_token": self.lease_token,
            "worker_uid": self.worker_uid,
            "session_id": self.session_id,
        }


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


def claim(
    worker_uid: str,
    session_id,
    pool: str,
    lease_seconds: float,
    grace_seconds: float = 0.0,
    cursor=None,
) -> ClaimedTask | None:
    """Claim one task for one free slot of this session, or None. Raises SessionSuperseded.
    `more_runnable` says whether other work had been runnable for `grace_seconds` as it began."""
    params = {
        "worker_uid": worker_uid,
        "session_id": session_id,
        "pool": pool,
        "lease_seconds": lease_seconds,
        "grace": grace_seconds,
    }
    rows = _call("claim_task", params, cursor)
    if not rows:
        return None
    row = rows[0]
    # Raw cursors return jsonb as text (Django decodes JSON in the ORM layer only).
    for column in ("payload", "job_params"):
        if isinstance(row[column], str):
            row[column] = json.loads(row[column])
    return _record(ClaimedTask, row)


def runnable_hint(worker_uid: str, grace_seconds: float = 0.0, cursor=None) -> set[str]:
    """The pools that have had something runnable for this worker for at least `grace_seconds`
    (no lock taken): a pool left out has nothing for it that a notification did not announce."""
    row = _call("runnable_hint", {"worker_uid": worker_uid, "grace": grace_seconds}, cursor)[0]
    return {pool for pool in ("media", "background") if row[pool]}


def session_heartbeating(uid: str, stale_seconds: float) -> bool:
    """Whether the uid's current session has heartbeated within stale_seconds and is not offline."""
    return bool(_call("session_heartbeating", {"uid": uid, "stale_seconds": stale_seconds})[0]["alive"])


def heartbeat_tasks(
    worker_uid: str, session_id, leases: Iterable[Lease], lease_seconds: float
) -> list[TaskHeartbeat]:
    """Renew every lease of the session in one statement (each fenced on its own)."""
    body = json.dumps([{"id": lease.task_id, "token": str(lease.lease_token)} for lease in leases])
    params = {
        "worker_uid": worker_uid,
        "session_id": session_id,
        "tasks": body,
        "lease_seconds": lease_seconds,
    }
    return [_record(TaskHeartbeat, row) for row in _call("heartbeat_tasks", params)]


def worker_beat(
    worker_uid: str,
    session_id,
    leases: Iterable[Lease],
    lease_seconds: float,
    sample: dict | None,
    *,
    lock_timeout: str,
    statement_timeout: str,
    conn: psycopg.Connection | None = None,
) -> tuple[str, list[TaskHeartbeat]]:
    """A worker's whole heartbeat in one round trip, under its own lock and statement timeouts:
    the leases renewed as `heartbeat_tasks` does, then the worker row as `worker_heartbeat` does
    (with no lease to renew, the worker row alone in one statement: `idle_beat`, without a
    statement timeout). Returns (lifecycle, one answer per lease)."""
    leases = list(leases)
    params = {
        "worker_uid": worker_uid,
        "session_id": session_id,
        "tasks": json.dumps([{"id": lease.task_id, "token": str(lease.lease_token)} for lease in leases]),
        "lease_seconds": lease_seconds,
        "sample": _json(sample),
        "lock_timeout": lock_timeout,
        "statement_timeout": statement_timeout,
    }
    if leases:
        rows = _call_several("worker_beat", params, conn)
    else:
        with _plain(conn).cursor() as cursor:
            rows = _call("idle_beat", params, cursor)
    if not rows:  # the idle beat's UPDATE found no row of this session
        raise SessionSuperseded(f"uid taken over by a newer session: {worker_uid}")
    row = rows[0]
    answers = row["answers"]
    if isinstance(answers, str):  # Django's connections load jsonb as text (its JSONField decodes)
        answers = json.loads(answers)
    return row["lifecycle"], [_record(TaskHeartbeat, answer) for answer in answers]


def report_progress(
    lease: Lease, progress: float | None = None, detail: dict | None = None, lines: Sequence[str] = ()
) -> TaskHeartbeat:
    params = lease.params() | {"progress": progress, "detail": _json(detail), "lines": list(lines) or None}
    row = _call("report_progress", params)[0]
    return _record(TaskHeartbeat, row, task_id=lease.task_id, cancel_requested=bool(row["cancel_requested"]))


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
    cursor=None,
) -> FenceResult:
    """Complete the task and publish its children and outputs in one transaction (fenced)."""
    params = _finish_params(lease, result, children, outputs)
    return _record(FenceResult, _call("finish_task", params, cursor)[0])


def _finish_params(lease: Lease, result, children: Sequence[Child], outputs: Sequence[Output]) -> dict:
    child_specs = [{k: v for k, v in asdict(c).items() if v is not None} for c in children]
    return lease.params() | {
        "result": _json(result),
        "children": json.dumps(child_specs),
        "outputs": json.dumps([asdict(o) for o in outputs]),
    }


def finish_many(
    finishes: Sequence[tuple[Lease, dict | None, Sequence[Child], Sequence[Output]]], cursor=None
) -> list[FenceResult]:
    """Finishes of one session, (lease, result, children, outputs) each, in one statement: each
    fenced on its own as `finish` is, all committed together (none, when one raises), in the order
    given. The worker's group commit (workers/finishes.py)."""
    rows = [_finish_params(*finish) for finish in finishes]
    params = {
        "task_ids": [row["task_id"] for row in rows],
        "lease_tokens": [row["lease_token"] for row in rows],
        "results": [row["result"] for row in rows],
        "children": [row["children"] for row in rows],
        "outputs": [row["outputs"] for row in rows],
        "worker_uid": rows[0]["worker_uid"],
        "session_id": rows[0]["session_id"],
    }
    return [_record(FenceResult, row) for row in _call("finish_tasks", params, cursor)]


def fail(lease: Lease, error: str, *, retryable: bool = True) -> FenceResult:
    params = lease.params() | {"error": error, "retryable": retryable}
    return _record(FenceResult, _call("fail_task", params)[0])


def release(lease: Lease, why: str) -> FenceResult:
    """Hand a task back (shutdown): pending again without using up an attempt."""
    return _record(FenceResult, _call("release_task", lease.params() | {"why": why})[0])


# ---- Maintenance ----------------------------------------------------------------------------


def recover_expired(batch: int = 100) -> list[tuple[int, str]]:
    """(task id, new state) of each running task whose lease or deadline had passed."""
    return [(row["task_id"], row["outcome"]) for row in _call("recover_expired", {"batch": batch})]


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
    params = {"lost_seconds": lost_seconds, "reassign_after": reassign_after, "batch": batch}
    return [_record(Release, row) for row in _call("release_jobs", params)]


# ---- Reservations: the worker's and the provisioner's side ---------------------------------------


def bind_reservation(reservation_id, worker_uid: str, session_id, *, stale_seconds: float) -> int:
    """Bind the reservation to this worker session; its generation. JobNotFound: unknown;
    ActionNotAllowed: bound to a live worker, no longer requested, or its job ended."""
    params = {
        "reservation_id": reservation_id,
        "worker_uid": worker_uid,
        "session_id": session_id,
        "stale_seconds": stale_seconds,
    }
    return _control("bind_reservation", params)[0]["generation"]


def finish_reservation(reservation_id, worker_uid: str, session_id) -> str:
    """'running' (the job has work left), 'released' (done: drain), or 'lost: <why>'."""
    params = {"reservation_id": reservation_id, "worker_uid": worker_uid, "session_id": session_id}
    return _call("finish_reservation", params)[0]["answer"]


@dataclass(frozen=True)
class ReservationChange:
    """What the maintenance sweep did to one reservation."""

    reservation_id: uuid.UUID
    job_id: uuid.UUID | None
    outcome: str  # requested (its worker was lost) | released | failed (timed out)
    detail: str


def sweep_reservations(
    lost_seconds: float, timeout_seconds: float, batch: int = 50
) -> list[ReservationChange]:
    params = {"lost_seconds": lost_seconds, "timeout_seconds": timeout_seconds, "batch": batch}
    return [_record(ReservationChange, row) for row in _call("sweep_reservations", params)]


@dataclass(frozen=True)
class ProvisionRequest:
    """A requested reservation the provisioner loop took, with its job's facts."""

    reservation_id: uuid.UUID
    attempt: int
    generation: int
    requested_at: datetime
    job_id: uuid.UUID
    job_type: str
    params: dict[str, Any]
    priority: int
    hardware: str
    resource_category: str | None
    vram_mb: int | None
    required_category: str | None
    required_vram_mb: int


def take_provisioning(batch: int, hold_seconds: float) -> list[ProvisionRequest]:
    rows = _call("take_provisioning", {"batch": batch, "hold_seconds": hold_seconds})
    # Django's connection hands jsonb over as text.
    return [
        _record(
            ProvisionRequest,
            row,
            params=json.loads(row["params"]) if isinstance(row["params"], str) else row["params"],
        )
        for row in rows
    ]


def record_provisioning(reservation_id, attempt: int, error: str | None, retry_seconds: float) -> bool:
    """Record one provisioner run (error None: it succeeded); False when the reservation moved on."""
    params = {
        "reservation_id": reservation_id,
        "attempt": attempt,
        "error": error,
        "retry_seconds": retry_seconds,
    }
    return bool(_call("record_provisioning", params)[0]["recorded"])


def purge_history(days: int, batch: int = 500) -> int:
    return _call("purge_history", {"days": days, "batch": batch})[0]["purged"]


def record_sample() -> bool:
    rows = _call("record_sample")
    return bool(rows and rows[0]["recorded"])


@dataclass(frozen=True)
class RecoveryTurn:
    taken: bool  # the pass is this worker's to make (recorded now)
    live_workers: int  # active workers that heartbeated within stale_seconds


def take_recovery_round(every_seconds: float, stale_seconds: float) -> RecoveryTurn:
    """This worker's turn at the recovery pass (recorded now), unless any worker started one within
    `every_seconds`; and how many workers are alive to ask for it."""
    row = _call("take_recovery_round", {"every": every_seconds, "stale_seconds": stale_seconds})[0]
    return RecoveryTurn(bool(row["taken"]), int(row["live_workers"]))


def note_recovery_ran() -> None:
    _call("note_recovery_ran")


__all__ = [name for name in dir() if not name.startswith("_")] + ["transaction"]
