"""What a viewer (read-only) may see of a job: no secrets a URL carries, no machine paths, no argv.

Operators see everything. A viewer sees webhook URLs without their query string (receivers often
put a token there) or credentials, `file://` storage URLs as the dashboard's download path instead
of the worker's filesystem path, and stage logs without FFmpeg command lines or absolute paths.
`for_viewer` walks an API response and rewrites those values; nothing else changes shape.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

_ABSOLUTE_PATH = re.compile(r"(?<![\w.~:/-])/(?:[^\s'\"/]+/)+")
_COMMAND_LINE = re.compile(r"^(?P<what>[^:]{1,80}): \S*ffmpeg\S*\s+-")
HIDDEN_COMMAND = "(FFmpeg command hidden from viewers)"


def url_without_query(url: str) -> str:
    """scheme://host[:port]/path — no userinfo, query or fragment."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def log_line(line: str) -> str:
    """A stage or job log line as a viewer reads it."""
    match = _COMMAND_LINE.match(line)
    if match:
        return f"{match.group('what')}: {HIDDEN_COMMAND}"
    line = re.sub(r"file://\S+", "file://…", line)
    return _ABSOLUTE_PATH.sub("…/", line)


def _log_entry(entry: Any) -> Any:
    """A job log line (a string) or a stage log line ({"at", "message"})."""
    if isinstance(entry, str):
        return log_line(entry)
    if isinstance(entry, dict) and isinstance(entry.get("message"), str):
        return {**entry, "message": log_line(entry["message"])}
    return entry


def _storage_url(value: str, job_id: Any, name: Any) -> str:
    if value.startswith("file://") and job_id and name:
        return f"/dashboard/jobs/{job_id}/outputs/{name}"
    if value.startswith("file://"):
        return "file://…"
    return url_without_query(value) if "?" in value else value


def for_viewer(data: Any, *, job_id: Any = None) -> Any:
    """A copy of an API response (dicts, lists, strings) with what viewers may not see rewritten."""
    if isinstance(data, list):
        return [for_viewer(item, job_id=job_id) for item in data]
    if not isinstance(data, dict):
        return data
    job_id = data.get("job_id") or job_id or (data.get("id") if "webhook_url" in data else None)
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key in ("webhook_url", "url") and isinstance(value, str) and value.startswith(("http:", "https:")):
            out[key] = url_without_query(value)
        elif key == "storage_url" and isinstance(value, str):
            out[key] = _storage_url(value, job_id, data.get("name"))
        elif key in ("last_error", "last_failure", "error") and isinstance(value, str):
            out[key] = log_line(value)
        elif key == "log_tail" and isinstance(value, list):
            out[key] = [_log_entry(line) for line in value]
        elif key == "argv":
            out[key] = []
        else:
            out[key] = for_viewer(value, job_id=job_id)
    return out
