"""Operator actions: POST only, CSRF-checked by the middleware, `can_operate` checked here, and
every change made by `scheduler.repository` (the only writer of queue state).

An action that does not apply in the job's state comes back from the repository as
ActionNotAllowed, whose message is the reason; it is shown to the operator as is (409).
"""

from __future__ import annotations

from django.urls import reverse

from dashboard.views.common import answer, operator_required
from scheduler import queries, repository
from scheduler.models import Job

MOVE_DIRECTIONS = ("up", "down", "top", "bottom")


def _label(job_id) -> str:
    job_type = Job.objects.filter(pk=job_id).values_list("type", flat=True).first() or "job"
    return f"{job_type} {str(job_id)[:8]}"


def _entry(job_id) -> dict | None:
    entry = queries.queue_entry(job_id)
    if entry is None:
        return None
    return {
        "state": entry.state,
        "priority": entry.priority,
        "position": entry.position,
        "paused": entry.paused,
    }


def _cancel(job_id, request):
    state = repository.cancel(job_id)
    return f"Cancel requested for {_label(job_id)}" + (
        " (it stops at its next heartbeat)" if state == "running" else ""
    )


def _pause(job_id, request):
    repository.pause(job_id)
    return f"Paused {_label(job_id)}: its unclaimed stages wait until it is resumed"


def _resume(job_id, request):
    repository.resume(job_id)
    return f"Resumed {_label(job_id)}"


def _retry(job_id, request):
    repository.retry(job_id)
    return f"Retrying {_label(job_id)}: its failed stages start again"


def _run_next(job_id, request):
    repository.run_next(job_id)
    return f"{_label(job_id)} moved to the top of its queue"


def _move(job_id, request):
    direction = request.POST.get("direction", "")
    if direction not in MOVE_DIRECTIONS:
        raise repository.InvalidArgument("direction", "must be one of up, down, top, bottom")
    repository.move(job_id, direction)
    return f"Moved {_label(job_id)} {direction}"


def _priority(job_id, request):
    raw = request.POST.get("priority", "").strip()
    try:
        priority = int(raw)
    except ValueError:
        raise repository.InvalidArgument("priority", "must be an integer from -1000 to 1000") from None
    if not -1000 <= priority <= 1000:
        raise repository.InvalidArgument("priority", "must be an integer from -1000 to 1000")
    repository.set_priority(job_id, priority)
    return f"Priority of {_label(job_id)} set to {priority}"


def _redispatch(job_id, request):
    execution = repository.redispatch(
        job_id, f"redispatched from the dashboard by {request.user.get_username()}"
    )
    return f"Redispatched {_label(job_id)}: execution {execution} starts on any worker"


def _dedicate(job_id, request):
    reservation = repository.reserve_job(job_id)
    return (
        f"{_label(job_id)} waits for a dedicated worker (reservation {str(reservation)[:8]}…): "
        "no shared worker will take it"
    )


def _share(job_id, request):
    repository.unreserve_job(job_id)
    return f"{_label(job_id)} runs on shared workers again"


JOB_ACTIONS = {
    "cancel": _cancel,
    "pause": _pause,
    "resume": _resume,
    "retry": _retry,
    "run-next": _run_next,
    "move": _move,
    "priority": _priority,
    "redispatch": _redispatch,
    "dedicate": _dedicate,
    "share": _share,
}


@operator_required
def job_action(request, job_id, action):
    fallback = reverse("dashboard:queue")
    handler = JOB_ACTIONS.get(action)
    if handler is None:
        return answer(request, f"Unknown action {action!r}", status=404, fallback=fallback)
    try:
        message = handler(job_id, request)
    except repository.JobNotFound:
        return answer(request, "Job not found", status=404, fallback=fallback)
    except repository.ActionNotAllowed as exc:
        return answer(request, str(exc), status=409, fallback=fallback)
    except repository.InvalidArgument as exc:
        return answer(
            request,
            f"{exc.field}: {exc.message}",
            status=422,
            fallback=fallback,
            extra={"errors": [{"field": exc.field, "message": exc.message}]},
        )
    return answer(request, message, fallback=fallback, extra={"job": _entry(job_id)})


def _worker_action(request, uid, act, says, key: str):
    """Run `act(uid)` on a worker and answer with `says(result)`, the result under `key`."""
    fallback = reverse("dashboard:worker", args=[uid])
    try:
        result = act(uid)
    except repository.JobNotFound:
        return answer(request, f"Worker {uid} not found", status=404, fallback=fallback)
    except repository.ActionNotAllowed as exc:
        return answer(request, str(exc), status=409, fallback=fallback)
    return answer(request, says(result), fallback=fallback, extra={key: result})


@operator_required
def worker_drain(request, uid):
    def says(lifecycle):
        return f"Worker {uid} is {lifecycle}: it finishes what it runs and claims nothing new"

    return _worker_action(request, uid, repository.drain_worker, says, "lifecycle")


@operator_required
def worker_evacuate(request, uid):
    def says(moved):
        return f"Worker {uid} evacuated: {moved} job(s) moved to other workers; it claims nothing new"

    return _worker_action(request, uid, repository.evacuate_worker, says, "jobs_moved")


@operator_required
def worker_undrain(request, uid):
    """Return a drained or evacuated worker to service (the API's POST /v2/workers/{uid}/undrain)."""

    def says(lifecycle):
        return f"Worker {uid} is {lifecycle}: it claims work again"

    return _worker_action(request, uid, repository.undrain_worker, says, "lifecycle")
