"""Read-side queries of the scheduler (scheduler/sql/queries.sql), returned as dataclasses/dicts.

Writes live in `scheduler.repository`; everything here is a plain SELECT.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import connection

from scheduler import sqlfiles


def load_queries() -> dict[str, str]:
    """{name: sql} of scheduler/sql/queries.sql, read once (scheduler.sqlfiles, the loader the
    repository shares)."""
    return sqlfiles.named_queries("queries.sql")


def _rows(name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    with connection.cursor() as cursor:
        cursor.execute(load_queries()[name], params)
        columns = [c.name for c in cursor.description]
        return [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]


def _decode(value: Any) -> Any:
    # Raw cursors return jsonb as text.
    return json.loads(value) if isinstance(value, str) else value


def _stale() -> float:
    return settings.JETENCODE["STALE_WORKER_SECONDS"]


@dataclass(frozen=True)
class QueueEntry:
    job_id: UUID
    type: str
    group: str | None
    stage: str | None
    state: str
    task_state: str | None
    priority: int
    position: int
    required_worker_uid: str | None
    assigned_worker_uid: str | None
    paused: bool
    attempt: int | None
    max_attempts: int | None
    waiting_seconds: float | None
    available_at: datetime | None
    can_retry: bool
    waiting_reason: str | None
    progress: int
    created_at: datetime
    cancel_requested: bool
    resource_category: str | None
    vram_mb: int | None
    reservation: dict[str, Any] | None = None  # the dedicated job's reservation (reservation_dict)
    chunks: dict | None = None  # a split job's chunks: {"total", "done", "running": {worker: n}}


RESERVATION_TIMES = ("created_at", "requested_at", "bound_at", "ended_at", "updated_at")


def reservation_dict(value: Any) -> dict[str, Any] | None:
    """A reservation as the queue entry and the job detail show it: id, job_id, state, worker_uid,
    generation, last_error, provision_attempts and its times (datetimes, or None)."""
    data = _decode(value)
    if not data:
        return None
    for key in RESERVATION_TIMES:
        if isinstance(data.get(key), str):
            data[key] = datetime.fromisoformat(data[key])
    for key in ("id", "job_id"):
        if isinstance(data.get(key), str):
            data[key] = UUID(data[key])
    return data


def job_reservations(job_id, limit: int = 10) -> list[dict[str, Any]]:
    """The job's reservations, newest first."""
    return [
        reservation_dict(dict(row))
        for row in _rows("job_reservations", {"job_id": str(job_id), "limit": limit})
    ]


def queue_list(
    *,
    worker: str | None = None,
    state: str | None = None,
    limit: int = 100,
    offset: int = 0,
    job_id=None,
    include_finished: bool = False,
) -> list[QueueEntry]:
    """Unfinished (and retryable failed) jobs, by group then claim order. worker='' selects pending.

    include_finished also returns jobs that have left the queue (completed, cancelled...): with
    job_id it builds the entry of any job, which is what a queue action answers with.
    """
    rows = _rows(
        "queue_list",
        {
            "stale": _stale(),
            "lost": settings.JETENCODE["LEASE_SECONDS"],
            "reassign_after": settings.JETENCODE["REASSIGN_AFTER_SECONDS"],
            "worker": worker,
            "state": state,
            "limit": limit,
            "offset": offset,
            "job_id": str(job_id) if job_id else None,
            "include_finished": include_finished,
        },
    )
    names = {f.name for f in fields(QueueEntry)}
    entries = []
    for row in rows:
        if row["waiting_seconds"] is not None:
            row["waiting_seconds"] = float(row["waiting_seconds"])
        row["reservation"] = reservation_dict(row["reservation"])
        row["chunks"] = _decode(row.get("chunks"))
        entries.append(QueueEntry(**{k: v for k, v in row.items() if k in names}))
    return entries


def queue_entry(job_id, *, include_finished: bool = False) -> QueueEntry | None:
    found = queue_list(job_id=job_id, limit=1, include_finished=include_finished)
    return found[0] if found else None


def queue_count(*, worker: str | None = None, state: str | None = None) -> int:
    """How many entries queue_list(worker=..., state=...) has in all (worker='' is the pending group)."""
    if worker is None:
        return _rows("queue_count", {"state": state})[0]["count"]
    return _rows("queue_count_group", {"worker": worker, "state": state})[0]["count"]


def workers_overview(uid: str | None = None) -> list[dict[str, Any]]:
    rows = _rows("workers_overview", {"stale": _stale(), "uid": uid})
    for row in rows:
        for key in ("category_limits", "system_sample", "capabilities", "running_by_category"):
            row[key] = _decode(row[key]) or {}
    return rows


def worker_active_tasks(uid: str) -> list[dict[str, Any]]:
    rows = _rows("worker_active_tasks", {"uid": uid})
    for row in rows:
        row["progress_detail"] = _decode(row["progress_detail"]) or {}
    return rows


def stats() -> dict[str, Any]:
    row = _rows("stats", {"stale": _stale()})[0]
    for key in ("by_status", "running_by_category", "avg_processing_seconds_by_type", "jobs_by_type"):
        row[key] = _decode(row[key]) or {}
    row["avg_processing_seconds_by_type"] = {
        k: float(v) for k, v in row["avg_processing_seconds_by_type"].items()
    }
    return row


def queue_depth() -> list[dict[str, Any]]:
    return _rows("queue_depth", {})


def samples(hours: int = 6) -> list[dict[str, Any]]:
    return _rows("samples", {"hours": hours})


def task_log_tails(job_id, lines: int = 20) -> dict[int, list[dict[str, Any]]]:
    """{task id: its last `lines` stage-log lines ({"at", "message"}), oldest first} for one job."""
    tails: dict[int, list[dict[str, Any]]] = {}
    for row in _rows("task_log_tails", {"job_id": str(job_id), "lines": lines}):
        tails.setdefault(row["task_id"], []).append({"at": row["at"], "message": row["message"]})
    return tails


def metrics_scalars(stuck_after_seconds: float) -> dict[str, Any]:
    return _rows("metrics_scalars", {"stuck_after": stuck_after_seconds})[0]


REASSIGNMENT_CAUSES = (
    "drained",
    "evacuated",
    "lost_in_dispatch",
    "lost_after_delay",
    "lost_reserved",
    "manual",
)


def reassignments() -> dict[str, int]:
    """Jobs moved off a worker so far, by cause (every cause present, 0 when none)."""
    counted = {row["cause"]: int(row["n"]) for row in _rows("reassignments", {})}
    return {cause: counted.get(cause, 0) for cause in REASSIGNMENT_CAUSES} | counted


def split_counts() -> dict[str, dict[str, int]]:
    """{"chunks": {state: n}, "chunks_ended_24h": {state: n}, "stitch_failures_24h": {reason: n}}."""
    out: dict[str, dict[str, int]] = {"chunks": {}, "chunks_ended_24h": {}, "stitch_failures_24h": {}}
    for row in _rows("split_counts", {}):
        out[row["what"]][row["state"]] = int(row["n"])
    return out


def claim_latency_histogram(buckets: list[float]) -> dict[str, Any]:
    row = _rows("claim_latency_histogram", {"buckets": [float(b) for b in buckets]})[0]
    row["buckets"] = list(row["buckets"] or [0] * len(buckets))
    return row


def stage_duration_histogram(buckets: list[float]) -> list[dict[str, Any]]:
    return _rows("stage_duration_histogram", {"buckets": [float(b) for b in buckets]})


def workers_by_lifecycle() -> dict[str, int]:
    return {row["lifecycle"]: row["n"] for row in _rows("workers_by_lifecycle", {"stale": _stale()})}


def workspace_fates(job_ids: list, grace_seconds: float) -> dict[str, dict[str, Any]]:
    """{job id (str): {status, ended_a_while_ago, execution_id}} for the jobs that still exist."""
    rows = _rows("workspace_fates", {"ids": [str(j) for j in job_ids], "grace": grace_seconds})
    return {str(row["job_id"]): row for row in rows}


# ---- jobs, their schedule and tasks: the API's and the dashboard's job pages ---------------------


@dataclass(frozen=True)
class JobRow:
    """A job as the job tables show it, with its live schedule (None fields when it has none)."""

    id: UUID
    type: str
    status: str
    progress: int
    priority: int  # the schedule's (live) priority, else the one requested at creation
    max_attempts: int
    hardware: str
    resource_category: str | None
    vram_mb: int | None
    webhook_url: str | None
    last_error: str | None
    manual_retry_count: int
    created_by_id: int | None
    created_by: str | None  # the creator's username
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    execution_id: int | None
    required_worker_uid: str | None
    assigned_worker_uid: str | None
    paused: bool | None
    cancel_requested_at: datetime | None
    category: str | None  # the most demanding category it uses (with_category)


def _job_filters(
    status: str | None = None,
    type: str | None = None,
    worker: str | None = None,
    ids: list | None = None,
    uses_category: str | None = None,
    category: str | None = None,
) -> dict[str, Any]:
    return {
        "status": status,
        "type": type,
        "worker": worker,
        "ids": None if ids is None else [str(i) for i in ids],
        "uses_category": uses_category,
        "category": category,
    }


def _usernames(user_ids: set) -> dict[int, str]:
    if not user_ids:
        return {}
    from django.contrib.auth import get_user_model

    User = get_user_model()
    return dict(User._default_manager.filter(pk__in=user_ids).values_list("pk", User.USERNAME_FIELD))


def job_list(
    *,
    limit: int | None,
    offset: int = 0,
    with_category: bool = False,
    after: tuple[Any, Any] | None = None,
    **filters: Any,
) -> list[JobRow]:
    """Jobs newest first (job_list in queries.sql: the filters and the two category filters);
    `after` = (created_at, id) of the last job of the previous page (keyset paging)."""
    after_at, after_id = after if after is not None else (None, None)
    params = {"with_category": with_category, "limit": limit, "offset": offset}
    params.update(after_created_at=after_at, after_id=None if after_id is None else str(after_id))
    rows = _rows("job_list", {**_job_filters(**filters), **params})
    names = _usernames({row["created_by_id"] for row in rows if row["created_by_id"] is not None})
    return [JobRow(**row, created_by=names.get(row["created_by_id"])) for row in rows]


def job_count(**filters: Any) -> int:
    """How many jobs job_list(**filters) has in all."""
    return _rows("job_count", _job_filters(**filters))[0]["count"]


def job_row(job_id) -> JobRow | None:
    found = job_list(ids=[job_id], limit=1)
    return found[0] if found else None


@dataclass(frozen=True)
class ScheduleRow:
    job_id: UUID
    execution_id: int
    priority: int
    position: int
    required_worker_uid: str | None
    assigned_worker_uid: str | None
    paused: bool
    cancel_requested_at: datetime | None
    execution_mode: str
    required_category: str | None
    required_vram_mb: int


def job_schedule(job_id) -> ScheduleRow | None:
    rows = _rows("job_schedule", {"job_id": str(job_id)})
    return ScheduleRow(**rows[0]) if rows else None


@dataclass(frozen=True)
class TaskRow:
    """One stage delivery of a job; payload, result and progress_detail are None unless full."""

    id: int
    job_id: UUID
    execution_id: int
    task_type: str
    placement: str
    pool: str
    resource_category: str
    vram_mb: int
    state: str
    attempt: int
    max_attempts: int
    claimed_by: str | None
    progress: float
    last_failure: str | None
    available_at: datetime
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    heartbeat_at: datetime | None
    lease_expires_at: datetime | None
    deadline_at: datetime | None
    parent_task_id: int | None
    wait_for_siblings: bool
    payload: Any
    result: Any
    progress_detail: Any


def job_tasks(
    job_id,
    *,
    execution_id: int | None = None,
    with_cluster: bool = True,
    full: bool = False,
    limit: int | None = None,
) -> list[TaskRow]:
    """A job's tasks in delivery order (job_tasks in queries.sql)."""
    rows = _rows(
        "job_tasks",
        {
            "job_id": str(job_id),
            "execution_id": execution_id,
            "with_cluster": with_cluster,
            "full": full,
            "limit": limit,
        },
    )
    for row in rows:
        for key in ("payload", "result", "progress_detail"):
            row[key] = _decode(row[key])
    return [TaskRow(**row) for row in rows]


def failed_stages(job_ids: list) -> dict[UUID, str]:
    """{job id: task type of its failed stage} for those of `job_ids` that have one (one query):
    what the API's job summaries and the webhooks' `error` name as the stage that failed."""
    if not job_ids:
        return {}
    rows = _rows("failed_stages", {"ids": [str(j) for j in job_ids]})
    return {row["job_id"]: row["task_type"] for row in rows}


def job_stage_logs(job_id, lines: int) -> list[dict[str, Any]]:
    """The newest `lines` stage-log lines of a job ({"at", "message", "task_id", "task_type"}),
    oldest first."""
    rows = _rows("job_stage_logs", {"job_id": str(job_id), "lines": lines})
    rows.reverse()
    return rows


def worker_uids(*, live: bool = False, limit: int | None = None) -> list[str]:
    """Worker uids in order: all of them, or (live) the active ones with a fresh heartbeat."""
    return [row["uid"] for row in _rows("worker_uids", {"live": live, "stale": _stale(), "limit": limit})]


def worker_of_process(hostname: str, pid: int) -> str | None:
    """The uid that process `pid` on `hostname` registered as an active worker, else None."""
    rows = _rows("worker_of_process", {"hostname": hostname, "pid": pid})
    return rows[0]["uid"] if rows else None
