"""Job creation: one function the API and the dashboard form share.

`create_job(user, payload)` validates everything a caller can get wrong — the type, its params, the
hardware and resource overrides, the targeted worker and the webhook URL — collects *all* field
errors into one `ValidationError`, and only then enqueues through `scheduler.repository` (which
writes the job, its schedule and its dispatch task in one transaction).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied

from media import jobtypes, quality, webhooks
from media.sources import guard
from scheduler import repository
from scheduler.constants import HARDWARE_CHOICES, MAX_VRAM_MB, RESOURCE_CATEGORIES
from scheduler.models import Job
from scheduler.permissions import can_operate

PRIORITY_RANGE = (-1000, 1000)
MAX_ATTEMPTS_RANGE = (1, 20)
MAX_WORKER_UID_LENGTH = 200
MAX_WEBHOOK_URL_LENGTH = 2048
MAX_PARAMS_DEPTH = 32

FIELDS = (
    "type",
    "params",
    "priority",
    "required_worker_uid",
    "max_attempts",
    "webhook_url",
    "hardware",
    "resource_category",
    "vram_mb",
)


class ValidationError(Exception):
    """Invalid job input. `errors` is `[{"field": ..., "message": ...}]`, one entry per problem."""

    def __init__(self, errors: list[dict[str, str]]):
        self.errors = errors
        super().__init__(summarize(errors))

    def as_dict(self) -> dict[str, list[str]]:
        """{field: [messages]} — the shape Django's `form.add_error` wants."""
        out: dict[str, list[str]] = {}
        for error in self.errors:
            out.setdefault(error["field"], []).append(error["message"])
        return out


def summarize(errors: list[dict[str, str]]) -> str:
    fields = list(dict.fromkeys(e["field"] for e in errors))
    if not fields:
        return "invalid input"
    return "invalid " + ", ".join(fields)


def text_problem(value: str) -> str | None:
    """Why a string cannot be stored in PostgreSQL text/jsonb (NUL, lone surrogates), or None."""
    if "\x00" in value:
        return "must not contain NUL characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode text"
    return None


def _json_problem(value: Any) -> str | None:
    """Walk a decoded JSON value iteratively: what PostgreSQL's jsonb would refuse, or None."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_PARAMS_DEPTH:
            return f"is nested more than {MAX_PARAMS_DEPTH} levels deep"
        if isinstance(item, str):
            problem = text_problem(item)
            if problem:
                return problem.replace("must", "strings must")
        elif isinstance(item, float) and not math.isfinite(item):
            return "must not contain NaN or Infinity"
        elif isinstance(item, Mapping):
            for key, child in item.items():
                if not isinstance(key, str) or text_problem(key):
                    return "keys must be valid text without NUL characters"
                stack.append((child, depth + 1))
        elif isinstance(item, list | tuple):
            stack.extend((child, depth + 1) for child in item)
    return None


def _int(
    payload: Mapping[str, Any], name: str, default: int | None, bounds: tuple[int, int], errors
) -> int | None:
    value = payload.get(name, default)
    if value is None:
        return default
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        errors.append({"field": name, "message": f"must be an integer from {low} to {high}"})
        return default
    return value


def _text(payload: Mapping[str, Any], name: str, max_length: int, errors) -> str | None:
    value = payload.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        errors.append({"field": name, "message": "must be a string"})
        return None
    problem = text_problem(value)
    if problem:
        errors.append({"field": name, "message": problem})
        return None
    if len(value) > max_length:
        errors.append({"field": name, "message": f"must be at most {max_length} characters"})
        return None
    return value


def _unknown_fields(payload: Mapping[str, Any], errors) -> None:
    for name in sorted(set(payload) - set(FIELDS)):
        errors.append({"field": str(name), "message": "unknown field"})


def _job_type(payload: Mapping[str, Any], errors) -> jobtypes.JobType | None:
    job_type = payload.get("type")
    if not isinstance(job_type, str) or not job_type:
        errors.append(
            {"field": "type", "message": "is required: one of " + ", ".join(sorted(jobtypes.JOB_TYPES))}
        )
        return None
    try:
        return jobtypes.get_job_type(job_type)
    except jobtypes.ParamsError as exc:
        errors.extend(exc.errors)
        return None


def _params(payload: Mapping[str, Any], jt: jobtypes.JobType | None, errors) -> dict[str, Any]:
    """The type's normalised params ({} until the type and the JSON are valid)."""
    params = payload.get("params")
    if params is None:
        params = {}
    if not isinstance(params, Mapping):
        errors.append({"field": "params", "message": "must be a JSON object"})
        return {}
    problem = _json_problem(params)
    if problem:
        errors.append({"field": "params", "message": problem})
    elif jt is not None:
        try:
            return jobtypes.validate_params(jt.name, dict(params))
        except jobtypes.ParamsError as exc:
            errors.extend(exc.errors)
    return {}


def _resource_request(payload: Mapping[str, Any], errors) -> tuple[Any, Any, Any]:
    """(hardware, resource_category, vram_mb) as asked; None for a bad hardware and False for a bad
    category or VRAM (each reported here, so the resource check skips them)."""
    hardware = payload.get("hardware") or "auto"
    if hardware not in HARDWARE_CHOICES:
        errors.append({"field": "hardware", "message": "must be one of " + ", ".join(HARDWARE_CHOICES)})
        hardware = None
    category = payload.get("resource_category")
    if category is not None and category not in RESOURCE_CATEGORIES:
        errors.append(
            {"field": "resource_category", "message": "must be one of " + ", ".join(RESOURCE_CATEGORIES)}
        )
        category = False
    vram_mb = payload.get("vram_mb")
    if vram_mb is not None and (
        isinstance(vram_mb, bool) or not isinstance(vram_mb, int) or not 0 <= vram_mb <= MAX_VRAM_MB
    ):
        errors.append({"field": "vram_mb", "message": f"must be an integer from 0 to {MAX_VRAM_MB}"})
        vram_mb = False
    return hardware, category, vram_mb


def _resource_choice(
    jt: jobtypes.JobType | None, hardware, category, vram_mb, errors
) -> jobtypes.ResourceChoice | None:
    if jt is None or hardware is None or category is False or vram_mb is False:
        return None
    try:
        return jobtypes.resolve_resource(jt.name, hardware, category, vram_mb)
    except jobtypes.ParamsError as exc:
        errors.extend(exc.errors)
        return None


def _required_worker(payload: Mapping[str, Any], errors) -> str | None:
    worker_uid = _text(payload, "required_worker_uid", MAX_WORKER_UID_LENGTH, errors)
    if worker_uid is not None:
        refusal = repository.target_refusal(
            worker_uid, stale_seconds=settings.JETENCODE["STALE_WORKER_SECONDS"]
        )
        if refusal:
            errors.append({"field": "required_worker_uid", "message": f"{refusal}: {worker_uid}"})
    return worker_uid


def _webhook_url(payload: Mapping[str, Any], errors) -> str | None:
    webhook_url = _text(payload, "webhook_url", MAX_WEBHOOK_URL_LENGTH, errors)
    if webhook_url is not None:
        try:
            webhooks.check_url(webhook_url)
        except webhooks.UnsafeWebhookURL as exc:
            errors.append({"field": "webhook_url", "message": str(exc)})
    return webhook_url


def _input_url_reachable(params: Mapping[str, Any], errors) -> None:
    """An input_url's host (each of input_urls') must resolve to addresses fetches may reach
    (checked again by the worker at every connection: DNS may answer differently by then)."""
    named = [("input_url", "input_url", params.get("input_url"))]
    named += [("input_urls", f"input_urls[{i}]", url) for i, url in enumerate(params.get("input_urls") or [])]
    for field, name, url in named:
        if not url:
            continue
        try:
            guard.check_url(url, guard.Policy.from_settings())
        except guard.UnsafeSourceURL as exc:
            errors.append({"field": f"params.{field}", "message": f"{name} {exc}"})


def build_new_job(payload: Mapping[str, Any], *, created_by: int | None = None) -> repository.NewJob:
    """Validate a job request and turn it into the repository's NewJob. Raises ValidationError.

    Each field's check appends its problems to one list, so the caller hears of every bad field at
    once. The targeted worker is checked here too (unknown, stale or draining → an error on
    `required_worker_uid`); the enqueue function checks it again under its own transaction.
    """
    errors: list[dict[str, str]] = []
    _unknown_fields(payload, errors)
    jt = _job_type(payload, errors)
    params = _params(payload, jt, errors)
    _input_url_reachable(params, errors)
    priority = _int(payload, "priority", 0, PRIORITY_RANGE, errors)
    max_attempts = _int(payload, "max_attempts", 4, MAX_ATTEMPTS_RANGE, errors)
    hardware, category, vram_mb = _resource_request(payload, errors)
    choice = _resource_choice(jt, hardware, category, vram_mb, errors)
    if jt is not None and hardware == "gpu" and not errors:  # issue 16: HEVC/AV1 on a GPU
        catalogs = quality.live_worker_catalogs(settings.JETENCODE["STALE_WORKER_SECONDS"])
        errors.extend(jobtypes.gpu_codec_errors(jt.name, params, hardware, catalogs))
    worker_uid = _required_worker(payload, errors)
    webhook_url = _webhook_url(payload, errors)
    if errors:
        raise ValidationError(errors)
    assert jt is not None and choice is not None
    return repository.NewJob(
        job_type=jt.name,
        params=params,
        priority=priority,
        max_attempts=max_attempts,
        webhook_url=webhook_url,
        required_worker_uid=worker_uid,
        hardware=hardware,
        resource_category=category,
        vram_mb=vram_mb,
        # DECISIONS 8: a job that asked for a GPU may only be dispatched by a worker that has one.
        required_category=choice.category if choice.use_gpu else None,
        required_vram_mb=choice.vram_mb if choice.use_gpu else 0,
        created_by=created_by,
    )


def create_job(user, payload: Mapping[str, Any]) -> Job:
    """Validate and enqueue a job on behalf of `user` (None for system callers).

    Raises PermissionDenied when the user may not operate the queue, and ValidationError (with
    every bad field) for invalid input. Returns the new Job (schedule preloaded).
    """
    if user is not None and not can_operate(user):
        raise PermissionDenied("creating jobs needs the operate permission")
    if hasattr(payload, "model_dump"):
        payload = payload.model_dump(exclude_unset=True)
    new_job = build_new_job(payload, created_by=getattr(user, "pk", None))
    try:
        job_id = repository.enqueue_job(
            new_job,
            stale_seconds=settings.JETENCODE["STALE_WORKER_SECONDS"],
            notify=settings.JETENCODE["NOTIFY"],
        )
    except repository.InvalidArgument as exc:
        # The worker went stale or started draining between the check and the insert.
        raise ValidationError([{"field": exc.field, "message": exc.message}]) from exc
    return Job.objects.select_related("schedule").get(pk=job_id)
