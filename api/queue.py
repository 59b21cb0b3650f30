"""/v2/queue: the live queue and the operator controls. Every control goes through
`scheduler.repository` and answers with the job's queue entry (built from the job even when the
action took it out of the queue, e.g. a cancel)."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from django.http import HttpRequest
from ninja import Query, Router

from api import paging
from api.errors import AUTH_ERRORS, responses
from api.jobs import pagination
from api.schemas import (
    MAX_LIMIT,
    MAX_PAGE,
    MoveIn,
    PriorityIn,
    QueueEntryOut,
    QueuePageOut,
    QueueState,
    Text,
)
from scheduler import queries, repository

router = Router(tags=["queue"])

ACTION_RESPONSES = {200: QueueEntryOut, **responses(*AUTH_ERRORS, 404, 409, 422)}


def as_dict(entry: queries.QueueEntry) -> dict:
    # Its fields are plain values (UUIDs, datetimes, strings, numbers): dataclasses.asdict, which
    # deep-copies each of them, took longer than the rest of a 100-entry page's serialization.
    return dict(vars(entry))


def entry(job_id: UUID) -> dict:
    found = queries.queue_entry(job_id, include_finished=True)
    if found is None:
        raise repository.JobNotFound("job not found")
    return as_dict(found)


@router.get("", response={200: QueuePageOut, **responses(*AUTH_ERRORS, 422)}, summary="The queue")
def list_queue(
    request: HttpRequest,
    page: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 1,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 100,
    worker: Annotated[
        Text | None,
        Query(
            max_length=200,
            description="Only this worker's group (jobs assigned to or targeted at it); an empty value selects "
            "the pending group (jobs no worker holds yet)",
        ),
    ] = None,
    state: Annotated[QueueState | None, Query(description="Only jobs with this status")] = None,
):
    """One entry per unfinished job, plus failed jobs that can be retried, ordered by group (the
    pending group first, then by worker uid) and claim order within a group (priority, then
    position). `waiting_seconds` is present only while the job is pending; `waiting_reason` says
    why a waiting job is not running."""
    offset = paging.offset_of(page, limit, "filter by worker or state to reach the entries further down")
    total = queries.queue_count(worker=worker, state=state)
    entries = queries.queue_list(worker=worker, state=state, limit=limit, offset=offset)
    return {"data": [as_dict(e) for e in entries], "pagination": pagination(page, limit, total)}


@router.get(
    "/{job_id}",
    response={200: QueueEntryOut, **responses(*AUTH_ERRORS, 404, 422)},
    summary="One job's queue entry",
)
def get_queue_entry(request: HttpRequest, job_id: UUID):
    return entry(job_id)


@router.post("/{job_id}/run-next", response=ACTION_RESPONSES, summary="Run next")
def run_next(request: HttpRequest, job_id: UUID):
    """Move the job to the front of its queue within its priority (same as move top)."""
    repository.run_next(job_id)
    return entry(job_id)


@router.patch("/{job_id}/priority", response=ACTION_RESPONSES, summary="Change priority")
def set_priority(request: HttpRequest, job_id: UUID, payload: PriorityIn):
    """Any non-terminal job; affects only its unclaimed tasks."""
    repository.set_priority(job_id, payload.priority)
    return entry(job_id)


@router.post("/{job_id}/move", response=ACTION_RESPONSES, summary="Move within its priority")
def move(request: HttpRequest, job_id: UUID, payload: MoveIn):
    """up/down swap past the neighbour in the job's group; top/bottom go beyond every job its
    claimers compare it with, at the same priority."""
    repository.move(job_id, payload.direction)
    return entry(job_id)


@router.post("/{job_id}/pause", response=ACTION_RESPONSES, summary="Pause")
def pause(request: HttpRequest, job_id: UUID):
    """No new task of the job is claimed; running ones finish."""
    repository.pause(job_id)
    return entry(job_id)


@router.post("/{job_id}/resume", response=ACTION_RESPONSES, summary="Resume")
def resume(request: HttpRequest, job_id: UUID):
    repository.resume(job_id)
    return entry(job_id)


@router.post("/{job_id}/cancel", response=ACTION_RESPONSES, summary="Cancel")
def cancel(request: HttpRequest, job_id: UUID):
    """Unclaimed tasks are cancelled now; running ones are told to stop at their next heartbeat."""
    repository.cancel(job_id)
    return entry(job_id)


@router.post("/{job_id}/retry", response=ACTION_RESPONSES, summary="Retry a failed job")
def retry(request: HttpRequest, job_id: UUID):
    """Only failed (not cancelled) jobs: failed stages start again; priority and position are kept."""
    repository.retry(job_id)
    return entry(job_id)


@router.post("/{job_id}/redispatch", response=ACTION_RESPONSES, summary="Redispatch on any worker")
def redispatch(request: HttpRequest, job_id: UUID):
    """Start a new execution: unfinished stages of the current one are cancelled, the worker
    assignment is cleared and a fresh dispatch is queued. Outputs of the old execution are not reused."""
    repository.redispatch(job_id, f"redispatched by {request.auth.username} via the API")
    return entry(job_id)
