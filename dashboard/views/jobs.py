"""/dashboard/jobs: the job table, the create-job form, the job page and its output files."""

from __future__ import annotations

import json
import uuid
import zlib

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect
from django.utils import timezone

from dashboard.files import serve_output
from dashboard.forms import FormError, JobForm
from dashboard.job_inputs import job_inputs, output_counts
from dashboard.quality_chart import bitrate_vmaf_chart
from dashboard.views import disclosure
from dashboard.views.common import cheap_page_of, is_partial, operator_required, page, viewer_required
from media.jobtypes import JOB_TYPES
from media.models import MediaAsset
from media.quality import job_quality
from media.split_job import chunk_grid, job_split, progress_note
from media.submission import ValidationError as JobValidationError
from media.submission import create_job
from scheduler import queries
from scheduler.constants import HARDWARE_CHOICES, JOB_STATUSES, RESOURCE_CATEGORIES, TERMINAL_STATUSES
from scheduler.models import Job, JobOutput

PAGE_SIZE = 25
LOG_LINES = 200
TIMELINE_TASKS = 200
MAX_OUTPUTS = 500
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".gif", ".webp")
VIDEO_SUFFIXES = (".mp4", ".webm", ".m4v")


def _display_kind(name: str) -> str:
    """How the job page shows an output: an <img>, a playable <video>, or a link."""
    lowered = name.lower()
    if lowered.endswith(IMAGE_SUFFIXES):
        return "image"
    if lowered.endswith(VIDEO_SUFFIXES):
        return "video"
    return "file"


def _ids(raw: str) -> list[uuid.UUID]:
    found = []
    for part in raw.split(",")[:100]:
        try:
            found.append(uuid.UUID(part.strip()))
        except ValueError:
            continue
    return found


@viewer_required
def jobs(request):
    filters = {
        key: request.GET.get(key, "").strip()
        for key in ("status", "type", "resource_category", "worker", "ids")
    }

    def known(key: str, values) -> str | None:
        return filters[key] if filters[key] in values else None

    chosen = {
        "status": known("status", JOB_STATUSES),
        "type": known("type", JOB_TYPES),
        "category": known("resource_category", RESOURCE_CATEGORIES),
        "worker": filters["worker"] or None,
        "ids": _ids(filters["ids"]) if filters["ids"] else None,
    }
    # Newest first, with the live priority, worker and the most demanding category each job uses.
    result = cheap_page_of(
        lambda limit, offset: queries.job_list(limit=limit, offset=offset, with_category=True, **chosen),
        request,
        PAGE_SIZE,
    )
    live = any(job.status not in TERMINAL_STATUSES for job in result.items)
    ids = [job.id for job in result.items]
    context = {
        "page_obj": result,
        "inputs": job_inputs(ids),
        "output_counts": output_counts(ids),
        "filters": filters,
        "filtered": any(filters.values()),
        "live": live,
        "statuses": JOB_STATUSES,
        "types": sorted(JOB_TYPES),
        "categories": RESOURCE_CATEGORIES,
        "worker_uids": queries.worker_uids(limit=200),
    }
    if is_partial(request):
        return page(request, "dashboard/partials/jobs_table.html", context)
    return page(request, "dashboard/jobs.html", context)


def _timeline(job: Job, tasks: list[queries.TaskRow]) -> list[dict]:
    """Bars for the stage timeline: queued (created→started) and running (started→finished) spans,
    as percentages of the job's lifetime so far."""
    now = timezone.now()
    start = job.created_at
    end = job.finished_at or now
    for task in tasks:
        end = max(end, task.finished_at or (now if task.state == "running" else task.created_at))
    total = max((end - start).total_seconds(), 0.001)

    def pct(moment):
        return round(100 * max(0.0, (moment - start).total_seconds()) / total, 2)

    rows = []
    for task in tasks:
        began = task.started_at
        stopped = task.finished_at or (now if task.state == "running" else None)
        queued_until = (
            began
            or task.finished_at
            or (now if task.state in ("pending", "retry_wait", "blocked") else task.created_at)
        )
        rows.append(
            {
                "task": task,
                "queued_left": pct(task.created_at),
                "queued_width": max(0.3, pct(queued_until) - pct(task.created_at)),
                "run_left": pct(began) if began else None,
                "run_width": max(0.5, pct(stopped) - pct(began)) if began and stopped else 0,
                "duration": (stopped - began) if began and stopped else None,
            }
        )
    return rows


def job_context(job: Job) -> dict:
    tasks = queries.job_tasks(job.id, limit=TIMELINE_TASKS + 1)
    stage_logs = queries.job_stage_logs(job.id, LOG_LINES)
    log_lines = job.log.splitlines()[-LOG_LINES:]
    outputs = list(JobOutput.objects.filter(job=job).order_by("execution_id", "name")[:MAX_OUTPUTS])
    for output in outputs:
        output.display = _display_kind(output.name)
    schedule = queries.job_schedule(job.id)
    entry = queries.queue_entry(job.id) if job.status not in ("completed", "cancelled") else None
    terminal = job.status in TERMINAL_STATUSES and not any(t.state == "running" for t in tasks)
    return {
        "job": job,
        "schedule": schedule,
        "entry": entry,
        "reservation": next(iter(queries.job_reservations(job.id, limit=1)), None),
        "timeline": _timeline(job, tasks[:TIMELINE_TASKS]),
        "more_tasks": len(tasks) > TIMELINE_TASKS,
        "log_lines": log_lines,
        "stage_logs": stage_logs,
        # A stage that failed says so at the end of the stage logs (it may have written nothing).
        "stage_failures": [t for t in tasks[:TIMELINE_TASKS] if t.state == "failed" and t.last_failure],
        "outputs": outputs,
        "media_outputs": [o for o in outputs if o.display != "file"],
        "file_outputs": [o for o in outputs if o.display == "file"],
        "terminal": terminal,
        "failed_stage": next(
            (
                t.task_type
                for t in tasks
                if t.state == "failed"
                and t.task_type != "webhook"
                and t.execution_id == schedule.execution_id
            ),
            None,
        )
        if schedule
        else None,
        "log_sig": f"{len(job.log)}:{stage_logs[-1]['task_id'] if stage_logs else 0}:{len(stage_logs)}:{stage_logs[-1]['at'].timestamp() if stage_logs else 0}",
        "outputs_sig": ",".join(f"{o.id}" for o in outputs),
        **quality_context(job),
        **split_context(job),
    }


def quality_context(job: Job) -> dict:
    """The measured quality (issue 16) for templates/dashboard/partials/job_quality.html."""
    measured = job_quality(job.id)
    return {
        "quality": measured,
        "quality_chart": bitrate_vmaf_chart(measured),
        "quality_sig": str(zlib.crc32(json.dumps(measured, sort_keys=True).encode())) if measured else "none",
    }


def split_context(job: Job) -> dict:
    """A split transcode's plan, chunk grid and progress note for partials/job_split.html."""
    split = job_split(job.id)
    grid = chunk_grid(job.id) if split else None
    if grid and split:
        frames = {c["index"]: c["last_frame"] - c["first_frame"] + 1 for c in split["chunks"]}
        for row in grid["rows"]:
            row["frames"] = frames.get(row["index"])
    note = progress_note(job.id) if split else None
    state = json.dumps([split, grid, note], sort_keys=True, default=str)
    return {
        "split": split,
        "split_grid": grid,
        "progress_note": note,
        "split_sig": str(zlib.crc32(state.encode())),
    }


@viewer_required
def job_detail(request, job_id):
    job = get_object_or_404(Job.objects.select_related("created_by"), pk=job_id)
    context = disclosure.job_context(request.user, job_context(job))
    if is_partial(request):
        return page(request, "dashboard/partials/job_live.html", context)
    return page(request, "dashboard/job.html", context)


@viewer_required
def job_output(request, job_id, name):
    get_object_or_404(Job.objects.only("id"), pk=job_id)
    return serve_output(request, job_id, name)


DEFAULT_TYPE = "transcode"  # what an operator most often creates (noop is the scheduler's test job)
MAX_PICKER_ASSETS = 200


def _asset_choices():
    """The library as the input picker shows it: newest first, with thumbnail and duration."""
    return list(
        MediaAsset.objects.order_by("-created_at").values(
            "id", "title", "path", "thumbnail", "duration_seconds", "width", "height", "valid"
        )[:MAX_PICKER_ASSETS]
    )


def _form_for(request) -> JobForm:
    """?from=<job id>: that job's type, params and options (Re-run); else ?type= (default transcode)."""
    try:
        source = Job.objects.filter(pk=uuid.UUID(request.GET.get("from", ""))).first()
    except ValueError:
        source = None
    if source is not None and source.type in JOB_TYPES:
        form = JobForm.for_type(source.type)
        form.prefill(source)
        form.rerun_of = source.id
        return form
    job_type = request.GET.get("type") or DEFAULT_TYPE
    return JobForm.for_type(job_type if job_type in JOB_TYPES else DEFAULT_TYPE)


def _new_context(form: JobForm) -> dict:
    return {
        "form": form,
        "worker_choices": queries.worker_uids(live=True),
        "assets": _asset_choices(),
        "hardware": HARDWARE_CHOICES,
        "categories": RESOURCE_CATEGORIES,
    }


@viewer_required
def job_new(request):
    """GET: the form for ?type= (default transcode) or ?from= (a re-run). POST (operators only):
    create the job and open it."""
    if request.method == "POST":
        return _create(request)
    return page(request, "dashboard/job_new.html", _new_context(_form_for(request)))


@operator_required
def _create(request):
    job_type = request.POST.get("type", "")
    form = JobForm.for_type(job_type if job_type in JOB_TYPES else DEFAULT_TYPE)
    if job_type not in JOB_TYPES:
        form.add_errors([{"field": "type", "message": f"unknown job type {job_type!r}"}])
        return page(request, "dashboard/job_new.html", _new_context(form), status=422)
    try:
        job = create_job(request.user, form.payload(request.POST))
    except (FormError, JobValidationError) as exc:
        form.add_errors(exc.errors)
        return page(request, "dashboard/job_new.html", _new_context(form), status=422)
    messages.success(request, f"Created {job.type} {str(job.id)[:8]}.")
    return redirect("dashboard:job", job.id)
