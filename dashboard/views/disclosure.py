"""The dashboard's side of the viewer filter: the same rules as the API (media.disclosure), applied
to the job and worker pages' contexts for users who may not operate. Operators see everything."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from media import disclosure
from scheduler.permissions import can_operate


def sees_everything(user) -> bool:
    return can_operate(user)


def job_context(user, context: dict[str, Any]) -> dict[str, Any]:
    """The job page's context for `user`: for a viewer, a copy with the webhook URL as scheme and
    host, failures as one line (no traceback), logs without argv, paths or URL secrets, and no
    storage location (viewers download through the dashboard's own link)."""
    if sees_everything(user):
        return context
    context = dict(context)
    job = copy.copy(context["job"])  # an unsaved copy: the template reads attributes
    job.webhook_url = disclosure.url_host_only(job.webhook_url) if job.webhook_url else job.webhook_url
    job.last_error = disclosure.failure_line(job.last_error) or ""
    job.log = ""
    context["job"] = job
    context["log_lines"] = [disclosure.log_line(line) for line in context.get("log_lines", [])]
    context["stage_logs"] = [
        {**entry, "message": disclosure.log_line(entry["message"])} for entry in context.get("stage_logs", [])
    ]
    context["timeline"] = [_timeline_row(row) for row in context.get("timeline", [])]
    for key in ("outputs", "media_outputs", "file_outputs"):
        context[key] = [_output(o) for o in context.get(key, [])]
    return context


def _timeline_row(row: dict[str, Any]) -> dict[str, Any]:
    task = row["task"]
    fields = {"last_failure": disclosure.failure_line(task.last_failure) or ""}
    for name in ("payload", "result"):
        if getattr(task, name, None):
            fields[name] = disclosure.for_viewer(getattr(task, name))
    return {**row, "task": dataclasses.replace(task, **fields)}


def _output(output):
    shown = copy.copy(output)
    shown.storage_url = ""
    return shown


def worker(user, described: dict[str, Any]) -> dict[str, Any]:
    """A worker as the worker pages show it: for a viewer, no filesystem paths (workspace, FFmpeg,
    disks) anywhere in it."""
    return described if sees_everything(user) else disclosure.for_viewer(described)
