"""/v2/jobs: create jobs and follow them."""

from __future__ import annotations

import math
from dataclasses import asdict
from functools import cache
from typing import Annotated
from uuid import UUID

from django.http import HttpRequest, HttpResponse
from django.urls import get_script_prefix
from ninja import Query, Router, Status

from api import paging
from api.errors import AUTH_ERRORS, responses
from api.schemas import (
    MAX_LIMIT,
    MAX_PAGE,
    JobDetailOut,
    JobIn,
    JobPageOut,
    JobStatus,
    JobTypeListOut,
    ResourceCategory,
    TaskListOut,
    Text,
)
from media import failures, links, submission
from media.jobtypes import JOB_TYPES
from media.quality import job_quality
from media.split_job import job_split, progress_note
from scheduler import queries
from scheduler.models import Job, JobOutput
from scheduler.repository import JobNotFound

router = Router(tags=["jobs"])

JOB_LOG_TAIL_LINES = 100
TASK_LOG_TAIL_LINES = 20


def pagination(page: int, limit: int, total: int) -> dict[str, int]:
    return {"page": page, "limit": limit, "total": total, "total_pages": math.ceil(total / limit)}


def job_summary(job: queries.JobRow, failed_stage: str | None = None) -> dict:
    # last_error is one line of words (media.failures); the traceback stays in the task history.
    return {
        "id": job.id,
        "type": job.type,
        "status": job.status,
        "progress": job.progress,
        "priority": job.priority,
        "max_attempts": job.max_attempts,
        "hardware": job.hardware,
        "resource_category": job.resource_category,
        "vram_mb": job.vram_mb,
        "required_worker_uid": job.required_worker_uid,
        "assigned_worker_uid": job.assigned_worker_uid,
        "webhook_url": job.webhook_url,
        "last_error": failures.one_line(job.last_error, failed_stage),
        "manual_retry_count": job.manual_retry_count,
        "created_by": job.created_by,
        "created_at": job.created_at,
        "updated_at": job.updated_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
    }


def _stage(task: queries.TaskRow) -> dict:
    return {
        "id": task.id,
        "task_type": task.task_type,
        "placement": task.placement,
        "pool": task.pool,
        "state": task.state,
        "progress": task.progress,
        "attempt": task.attempt,
        "max_attempts": task.max_attempts,
        "resource_category": task.resource_category,
        "vram_mb": task.vram_mb,
        "worker_uid": task.claimed_by,
        "available_at": task.available_at,
        "started_at": task.started_at,
        "finished_at": task.finished_at,
        "last_failure": failures.one_line(task.last_failure),
    }


def output_entry(request: HttpRequest, output: JobOutput) -> dict:
    return {
        "name": output.name,
        "kind": output.kind,
        "size_bytes": output.size_bytes,
        "storage_url": output.storage_url,
        "download_url": request.build_absolute_uri(
            links.output_path(output.job_id, output.name, get_script_prefix())
        ),
        "metadata": output.metadata,
        "task_id": output.task_id,
        "execution_id": output.execution_id,
        "created_at": output.created_at,
    }


def job_detail(request: HttpRequest, job: queries.JobRow) -> dict:
    stages = queries.job_tasks(job.id, execution_id=job.execution_id, with_cluster=False)
    outputs = JobOutput.objects.filter(job_id=job.id, execution_id=job.execution_id).order_by("name")
    entry = queries.queue_entry(job.id)
    params, log = Job.objects.values_list("params", "log").get(pk=job.id)
    lines = log.splitlines()[-JOB_LOG_TAIL_LINES:]
    failed_stage = next((t.task_type for t in stages if t.state == "failed"), None)
    return {
        **job_summary(job, failed_stage),
        "params": params,
        "execution_id": job.execution_id,
        "paused": job.paused,
        "cancel_requested": job.cancel_requested_at is not None,
        "attempt": entry.attempt if entry else None,
        "stages": [_stage(t) for t in stages],
        "outputs": [output_entry(request, o) for o in outputs],
        "log_tail": lines,
        "queue": asdict(entry) if entry else None,
        "reservation": next(iter(queries.job_reservations(job.id, limit=1)), None),
        "quality": job_quality(job.id, job.execution_id),
        "split": job_split(job.id, job.execution_id),
        "progress_note": progress_note(job.id, job.execution_id),
    }


def get_job(job_id: UUID) -> queries.JobRow:
    job = queries.job_row(job_id)
    if job is None:
        raise JobNotFound("job not found")
    return job


@router.post(
    "",
    response={201: JobDetailOut, **responses(*AUTH_ERRORS, 413, 422)},
    summary="Create a job",
    openapi_extra={
        "responses": {
            201: {
                "headers": {
                    "Location": {
                        "description": "The new job's URL (GET /v2/jobs/{id})",
                        "schema": {"type": "string"},
                    }
                }
            }
        }
    },
)
def create_job(request: HttpRequest, payload: JobIn, response: HttpResponse):
    """Validate the type, its params, the resource overrides, the targeted worker and the webhook
    URL, then enqueue. Every invalid field is named in one 422. `Location` names the new job."""
    job = submission.create_job(request.auth.user, payload.model_dump(exclude_unset=True))
    response["Location"] = f"{get_script_prefix()}v2/jobs/{job.id}"
    return Status(201, job_detail(request, get_job(job.id)))


@router.get("", response={200: JobPageOut, **responses(*AUTH_ERRORS, 422)}, summary="List jobs, newest first")
def list_jobs(
    request: HttpRequest,
    page: Annotated[
        int,
        Query(
            ge=1,
            le=MAX_PAGE,
            description=f"At most {MAX_PAGE}: follow pagination.next_cursor, or filter, to reach older jobs",
        ),
    ] = 1,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = 20,
    status: Annotated[JobStatus | None, Query()] = None,
    type: Annotated[Text | None, Query(max_length=64, description="Job type")] = None,
    resource_category: Annotated[
        ResourceCategory | None,
        Query(
            description="Jobs with a stage in this category, or that asked for it (override or GPU requirement)"
        ),
    ] = None,
    worker: Annotated[
        Text | None, Query(max_length=200, description="Jobs assigned to or targeted at this worker uid")
    ] = None,
    cursor: Annotated[
        str | None,
        Query(
            pattern=paging.CURSOR_PATTERN,
            description="Continue after the last job of a page: its pagination.next_cursor",
        ),
    ] = None,
):
    """Newest first. Pages by `page` up to page 501 (an offset of at most 250,000 jobs at the
    largest limit); past that, and for any long walk, follow `pagination.next_cursor`, which costs
    the same on every page."""
    filters = {
        "status": status or None,
        "type": type or None,
        "uses_category": resource_category or None,
        "worker": worker or None,
    }
    offset = paging.offset_of(
        page, limit, "follow pagination.next_cursor, or filter by status, type or worker"
    )
    after = paging.parse_cursor(cursor) if cursor else None
    jobs = queries.job_list(limit=limit, offset=offset, after=after, **filters)
    stages = queries.failed_stages([job.id for job in jobs if job.status == "failed"])
    # Viewers and read tokens get every response through media.disclosure (api.rendering).
    next_cursor = paging.cursor_of(jobs[-1].created_at, jobs[-1].id) if len(jobs) == limit else None
    return {
        "data": [job_summary(job, stages.get(job.id)) for job in jobs],
        "pagination": {**pagination(page, limit, queries.job_count(**filters)), "next_cursor": next_cursor},
    }


@router.get(
    "/{job_id}", response={200: JobDetailOut, **responses(*AUTH_ERRORS, 404, 422)}, summary="Get a job"
)
def get_job_detail(request: HttpRequest, job_id: UUID):
    """Status, progress, params, timestamps, attempts, the stages of the current execution with
    their states and progress, published outputs, the job log tail and the queue entry."""
    return job_detail(request, get_job(job_id))


@router.get(
    "/{job_id}/tasks",
    response={200: TaskListOut, **responses(*AUTH_ERRORS, 404, 422)},
    summary="Full task history of a job",
)
def list_job_tasks(
    request: HttpRequest,
    job_id: UUID,
    log_lines: Annotated[
        int, Query(ge=0, le=200, description="Stage-log lines per task")
    ] = TASK_LOG_TAIL_LINES,
):
    """Every task of every execution (webhook deliveries included), oldest first, with its last
    failure and the tail of its stage log."""
    job = get_job(job_id)
    tails = queries.task_log_tails(job.id, log_lines) if log_lines else {}
    tasks = queries.job_tasks(job.id, full=True)
    data = [
        {
            **_stage(t),
            "last_failure": t.last_failure,  # whole, traceback included: the operator's view
            "execution_id": t.execution_id,
            "parent_task_id": t.parent_task_id,
            "wait_for_siblings": t.wait_for_siblings,
            "payload": t.payload,
            "result": t.result,
            "progress_detail": t.progress_detail or {},
            "created_at": t.created_at,
            "heartbeat_at": t.heartbeat_at,
            "lease_expires_at": t.lease_expires_at,
            "deadline_at": t.deadline_at,
            "log_tail": tails.get(t.id, []),
        }
        for t in tasks
    ]
    return {"job_id": job.id, "data": data}


types_router = Router(tags=["jobs"])


@cache
def _job_types() -> JobTypeListOut:
    # Static for the life of the process; building the params JSON schemas is not free.
    return JobTypeListOut(data=[jt.summary() for jt in JOB_TYPES.values()])


@types_router.get("", response={200: JobTypeListOut, **responses(*AUTH_ERRORS)}, summary="List job types")
def list_job_types(request: HttpRequest):
    """Every job type with its stages, resource defaults and the JSON schema of its params."""
    return _job_types()
