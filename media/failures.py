"""A failure in one line, for the people outside: the API's `last_error`, the `job.failed` webhook's
`error`, the dashboard's summary line.

A stage failure is stored whole (`queue_tasks.last_failure`, `jobs.last_error`): the exception's
own line, then the Python traceback with the worker's file paths. Operators read that in the task
history (`GET /v2/jobs/{id}/tasks`, the job page's folded traceback). Integrators get what failed,
in words: the stage, then the exception's message without its class name, with the worker's
media, output and workspace directories taken out of paths, cut to a sentence's length.
"""

from __future__ import annotations

import re
from pathlib import Path

from django.conf import settings

MAX_CHARS = 300
# "RuntimeError: ", "workers.stages.base.PermanentFailure: ": a class name, not words.
_CLASS_PREFIX = re.compile(
    r"^(?:[A-Za-z_][\w]*\.)*[A-Z][\w]*(?:Error|Exception|Failure|Timeout|Cancelled|Lost)?: "
)
_UUID_DIR = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/"


def _roots() -> list[tuple[re.Pattern, str]]:
    """(pattern, replacement) for the directories a worker's paths start with, longest first."""
    patterns = []
    for name, job_scoped in (
        ("WORKSPACE_ROOT_DIR", True),
        ("OUTPUT_ROOT_DIR", True),
        ("MEDIA_ROOT_DIR", False),
    ):
        root = getattr(settings, name, None)
        if not root:
            continue
        prefix = re.escape(str(Path(root)).rstrip("/") + "/")
        # A workspace path is <root>/<job>/<execution>/<file>; an output path <root>/<job>/<file>.
        scoped = rf"{_UUID_DIR}(?:\d+/)?" if job_scoped else ""
        patterns.append((re.compile(prefix + scoped), ""))
    return patterns


def first_line(failure: str) -> str:
    """The exception's own line: the first line, or after a bare traceback its last unindented line."""
    lines = [line for line in failure.strip().splitlines() if line.strip()]
    if lines and lines[0].startswith("Traceback (most recent call last)"):
        unindented = [line for line in lines[1:] if not line[0].isspace()]
        return unindented[-1].strip() if unindented else ""
    return lines[0].strip() if lines else ""


def one_line(failure: str | None, stage: str | None = None) -> str | None:
    """`failure` (a stored last_failure / last_error) as one line of words, or None."""
    if not failure or not failure.strip():
        return None
    line = _CLASS_PREFIX.sub("", first_line(failure), count=1)
    for pattern, replacement in _roots():
        line = pattern.sub(replacement, line)
    line = line or "failed"
    if stage:
        line = f"{stage} failed: {line}"
    if len(line) > MAX_CHARS:
        line = line[: MAX_CHARS - 1].rstrip() + "…"
    return line
