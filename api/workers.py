"""/v2/workers: what every worker is, has and runs; drain, evacuate or undrain one.

Drain, evacuate and undrain are fleet control: operate tokens and fleet tokens may use them
(api.auth.FLEET_OPERATIONS), so an autoscaler can hold a token that cannot steer the queue."""

from __future__ import annotations

from typing import Annotated, Any

from django.http import HttpRequest
from ninja import Path, Router

from api.errors import AUTH_ERRORS, responses
from api.schemas import EvacuationOut, Text, WorkerListOut, WorkerOut
from scheduler import queries, repository

router = Router(tags=["workers"])

Uid = Annotated[Text, Path(min_length=1, max_length=200, description="Worker uid")]


def worker_out(row: dict[str, Any], active_tasks: list[dict[str, Any]]) -> dict[str, Any]:
    limits = {k: int(v) for k, v in (row["category_limits"] or {}).items()}
    running = {k: int(v) for k, v in (row["running_by_category"] or {}).items()}
    return {
        "uid": row["uid"],
        "session_id": row["current_session_id"],
        "hostname": row["hostname"],
        "pid": row["pid"],
        "version": row["version"],
        "lifecycle": row["lifecycle"],
        "registered_at": row["registered_at"],
        "last_heartbeat_at": row["last_heartbeat_at"],
        "reservation_id": row["reservation_id"],
        "workspace": row["workspace"],
        "media": {"capacity": row["concurrency"], "running": row["media_running"]},
        "background": {"capacity": row["background_slots"], "running": row["background_running"]},
        "categories": {
            name: {"capacity": limits.get(name, 0), "running": running.get(name, 0)}
            for name in sorted(set(limits) | set(running))
        },
        "vram_total_mb": row["vram_total_mb"],
        "vram_used_mb": int(row["vram_used_mb"] or 0),
        "active_tasks": active_tasks,
        "system_sample": row["system_sample"] or {},
        "capabilities": row["capabilities"] or {},
    }


def _one(uid: str) -> dict[str, Any]:
    rows = queries.workers_overview(uid)
    if not rows:
        raise repository.JobNotFound("worker not found")
    return worker_out(rows[0], queries.worker_active_tasks(uid))


@router.get("", response={200: WorkerListOut, **responses(*AUTH_ERRORS)}, summary="List workers")
def list_workers(request: HttpRequest):
    """Lifecycle, session, last heartbeat, media and background capacity and utilization per
    category, VRAM, active tasks, the latest system sample and the capability catalog."""
    return {
        "data": [
            worker_out(row, queries.worker_active_tasks(row["uid"])) for row in queries.workers_overview()
        ]
    }


@router.get("/{uid}", response={200: WorkerOut, **responses(*AUTH_ERRORS, 404, 422)}, summary="Get a worker")
def get_worker(request: HttpRequest, uid: Uid):
    return _one(uid)


@router.post(
    "/{uid}/drain",
    response={200: WorkerOut, **responses(*AUTH_ERRORS, 404, 409, 422)},
    summary="Drain a worker",
)
def drain_worker(request: HttpRequest, uid: Uid):
    """Stop new claims on the worker; its running tasks finish. Jobs pinned to it move to other
    workers: those with nothing running at once, the others when their running stage ends. It also
    stops accepting targeted jobs. 409 when the worker is offline."""
    repository.drain_worker(uid)
    return _one(uid)


@router.post(
    "/{uid}/evacuate",
    response={200: EvacuationOut, **responses(*AUTH_ERRORS, 404, 409, 422)},
    summary="Evacuate a worker",
)
def evacuate_worker(request: HttpRequest, uid: Uid):
    """Drain the worker and move every job pinned to it now: running stages are stopped (fenced)
    and redone elsewhere in a new execution; a job whose dispatch had not completed is retried by
    any worker. Jobs targeted at this worker (`required_worker_uid`) stay. 409 when the worker is
    offline and holds no jobs."""
    moved = repository.evacuate_worker(uid)
    return {"jobs_moved": moved, "worker": _one(uid)}


@router.post(
    "/{uid}/undrain",
    response={200: WorkerOut, **responses(*AUTH_ERRORS, 404, 409, 422)},
    summary="Return a drained worker to service",
)
def undrain_worker(request: HttpRequest, uid: Uid):
    """Undo a drain or an evacuation: the worker claims work again (and accepts targeted jobs).
    Jobs that moved away stay where they went. Nothing to do for an active worker; 409 when the
    worker is offline (it comes back by starting again)."""
    repository.undrain_worker(uid)
    return _one(uid)
