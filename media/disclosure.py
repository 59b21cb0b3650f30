"""What a viewer (read-only) may see: no secrets a URL carries, no machine paths, no argv, no tracebacks.

One filter for the API (every response to a caller who does not see everything, api.rendering) and
the dashboard (dashboard.views.disclosure), so the two cannot drift apart. Operators using their
session or an operate/fleet token see everything; viewers, and read-scope tokens whoever holds
them, get:

- webhook URLs as scheme and host only (`https://hooks.example.com`): receivers put their secret
  in the query string or, Slack-style, in the path; schemes are matched case-insensitively;
- other URLs without userinfo, query or fragment; `file://` storage URLs as the job's download path;
- log lines without FFmpeg command lines (wherever the command starts in the line, after a
  timestamp or a stage prefix), without absolute paths and with URLs cut as above;
- failures as their one line of words (media.failures), never the traceback;
- any value that is an absolute filesystem path (a worker's workspace, FFmpeg's location, a disk)
  as "…".

`for_viewer` walks a response (dicts, lists, strings) and rewrites those values; nothing else
changes shape. docs/security.md, "What viewers see".
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from media import failures

HIDDEN = "…"
HIDDEN_COMMAND = "(FFmpeg command hidden from viewers)"
# Any scheme, any case: HTTPS://, File://, s3://.
_URL = re.compile(r"(?i)\b[a-z][a-z0-9+.\-]*://[^\s'\"<>]*")
# An FFmpeg/ffprobe invocation anywhere in a line: the program (a bare name, a path, or a quoted
# list element as Python prints argv) followed by an option. Everything from there on is argv.
_COMMAND = re.compile(r"""(?i)[\[(]?['"]?[^\s'"]*\bff(?:mpeg|probe)\b[^\s'"]*['"]?,?\s+['"]?-""")
# An absolute path: a '/' that does not continue a word, a relative path or a URL, then at least
# one character. Matches `/srv/media/a.mp4`, `file:/etc/passwd`'s path, `"/work/x.py"`.
_ABSOLUTE_PATH = re.compile(r"(?<![\w.~/\-])/[^\s'\"/,;)\]][^\s'\",;)\]]*")
# Paths of this site's own pages and API: links, not filesystem paths.
SITE_PATHS = ("/v1/", "/v2/", "/dashboard/", "/admin/", "/metrics", "/healthz")
WEBHOOK_KEYS = frozenset({"webhook_url"})
FAILURE_KEYS = frozenset({"last_error", "last_failure", "error", "traceback"})
LOG_KEYS = frozenset({"log_tail", "log", "logs"})


def url_host_only(url: str) -> str:
    """scheme://host[:port] — what a viewer sees of a webhook URL (no path, query or credentials)."""
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return HIDDEN
    if not parts.scheme or not host:
        return HIDDEN
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme.lower()}://{host}:{port}" if port else f"{parts.scheme.lower()}://{host}"


def url_without_query(url: str) -> str:
    """scheme://host[:port]/path — no userinfo, query or fragment; a file:// URL loses its path."""
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return HIDDEN
    scheme = parts.scheme.lower()
    if scheme == "file":
        return "file://" + HIDDEN
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port else host
    return urlunsplit((scheme, netloc, parts.path, "", ""))


def log_line(line: str) -> str:
    """A stage or job log line (or any free text) as a viewer reads it."""
    command = _COMMAND.search(line)
    if command:
        line = line[: command.start()].rstrip() + (" " if command.start() else "") + HIDDEN_COMMAND
    out, last = [], 0
    for url in _URL.finditer(line):
        out.append(_ABSOLUTE_PATH.sub(HIDDEN, line[last : url.start()]))
        out.append(url_host_only(url.group()))
        last = url.end()
    out.append(_ABSOLUTE_PATH.sub(HIDDEN, line[last:]))
    return "".join(out)


def failure_line(failure: str | None) -> str | None:
    """A stored failure (message, then traceback) as a viewer reads it: one line, filtered."""
    line = failures.one_line(failure)
    return None if line is None else log_line(line)


def is_filesystem_path(value: str) -> bool:
    return value.startswith("/") and not value.startswith(SITE_PATHS) and not value.startswith("//")


def _log_entry(entry: Any) -> Any:
    """A job log line (a string) or a stage log line ({"at", "message"})."""
    if isinstance(entry, str):
        return log_line(entry)
    if isinstance(entry, dict) and isinstance(entry.get("message"), str):
        return {**entry, "message": log_line(entry["message"])}
    return entry


def storage_url(value: str, job_id: Any, name: Any) -> str:
    """Where an output is stored, for a viewer: a file:// URL becomes the dashboard's download path."""
    if value.lower().startswith("file:"):
        return f"/dashboard/jobs/{job_id}/outputs/{name}" if job_id and name else "file://" + HIDDEN
    return url_without_query(value) if "://" in value else value


def _value(key: str, value: Any, data: dict, job_id: Any) -> Any:
    if isinstance(value, str):
        if key in WEBHOOK_KEYS:
            return url_host_only(value) if value else value
        if key == "storage_url":
            return storage_url(value, job_id, data.get("name"))
        if key in FAILURE_KEYS:
            return failure_line(value) or ""
        if key in LOG_KEYS or key == "message":
            return "\n".join(log_line(line) for line in value.split("\n"))
        if _URL.match(value):
            return url_without_query(value)
        return HIDDEN if is_filesystem_path(value) else value
    if key in LOG_KEYS and isinstance(value, list):
        return [_log_entry(line) for line in value]
    if key == "argv":
        return []
    return for_viewer(value, job_id=job_id)


def for_viewer(data: Any, *, job_id: Any = None) -> Any:
    """A copy of a response (dicts, lists, strings) with what viewers may not see rewritten."""
    if isinstance(data, list | tuple):
        return [for_viewer(item, job_id=job_id) for item in data]
    if isinstance(data, str):
        return HIDDEN if is_filesystem_path(data) else data
    if not isinstance(data, dict):
        return data
    job_id = data.get("job_id") or job_id or (data.get("id") if "webhook_url" in data else None)
    return {key: _value(str(key), value, data, job_id) for key, value in data.items()}
