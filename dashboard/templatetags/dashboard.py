"""Formatting filters for the dashboard templates: durations, ages, sizes, badges, bars, job links."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from functools import lru_cache
from uuid import UUID

from django import template
from django.conf import settings
from django.urls import get_script_prefix, get_urlconf, reverse
from django.utils import timezone
from django.utils.html import escape, format_html
from django.utils.safestring import mark_safe

from media import failures
from scheduler.constants import TERMINAL_STATUSES

register = template.Library()

BADGE_CLASSES = {
    # job statuses and task states
    "pending": "b-pending",
    "blocked": "b-blocked",
    "running": "b-running",
    "retry_wait": "b-retry",
    "paused": "b-paused",
    "completed": "b-completed",
    "failed": "b-failed",
    "cancelled": "b-cancelled",
    # worker lifecycle
    "active": "b-completed",
    "draining": "b-retry",
    "offline": "b-cancelled",
    # asset validity
    "valid": "b-completed",
    "invalid": "b-failed",
    "unchecked": "b-blocked",
}


@register.filter
def duration(seconds) -> str:
    """0.43 -> '0.4s'; 65 -> '1m 05s'; 3700 -> '1h 01m'; None -> ''. Under a second in tenths, so a
    quick stage does not read "0s"."""
    if seconds is None or seconds == "":
        return ""
    if isinstance(seconds, timedelta):
        seconds = seconds.total_seconds()
    if 0 < float(seconds) < 1:
        return f"{max(0.1, float(seconds)):.1f}s"
    seconds = max(0, int(float(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    minutes, secs = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h"


@register.filter
def since(value: datetime | None) -> str:
    """Seconds from `value` until now (for |duration)."""
    if not value:
        return ""
    return str(max(0.0, (timezone.now() - value).total_seconds()))


@register.filter
def until(value: datetime | None) -> str:
    if not value:
        return ""
    return str(max(0.0, (value - timezone.now()).total_seconds()))


@register.filter
def ago(value: datetime | None) -> str:
    if not value:
        return "never"
    return duration((timezone.now() - value).total_seconds()) + " ago"


@register.filter
def elapsed(start: datetime | None, end: datetime | None = None) -> str:
    """Duration between two datetimes (end defaults to now)."""
    if not start:
        return ""
    return duration(((end or timezone.now()) - start).total_seconds())


@register.filter
def filesize(value) -> str:
    if value is None or value == "":
        return ""
    size = float(value)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1024 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return ""


@register.filter
def megabytes(value) -> str:
    if value is None:
        return ""
    value = int(value)
    return f"{value / 1024:.1f} GB" if value >= 1024 else f"{value} MB"


@register.filter
def badge(state) -> str:
    """A coloured status badge; the text stays readable without CSS."""
    if state is None or state == "":
        return ""
    state = str(state)
    return format_html(
        '<span class="badge {}">{}</span>', BADGE_CLASSES.get(state, "b-blocked"), state.replace("_", " ")
    )


@register.filter
def validity(asset) -> str:
    return "unchecked" if asset.valid is None else ("valid" if asset.valid else "invalid")


@register.filter
def is_terminal(state) -> bool:
    return state in TERMINAL_STATUSES


@register.filter
def short(value) -> str:
    """The first 8 characters of a UUID, enough to recognise a job on screen."""
    return str(value)[:8] if value else ""


@register.filter
def percent(part, whole) -> int:
    try:
        return max(0, min(100, round(100 * float(part) / float(whole))))
    except (TypeError, ValueError, ZeroDivisionError):
        return 0


@register.simple_tag
def bar(value, state: str = "", label: str = ""):
    """A progress bar 0-100 coloured by state, with its number as text for readers without CSS."""
    try:
        number = max(0, min(100, round(float(value or 0))))
    except (TypeError, ValueError):
        number = 0
    text = label or f"{number}%"
    return format_html(
        '<span class="bar {}" role="progressbar" aria-valuemin="0" aria-valuemax="100" aria-valuenow="{}">'
        '<span class="track"><span class="fill" style="width: {}%"></span></span><span class="num">{}</span></span>',
        BADGE_CLASSES.get(state, "b-none").replace("b-", "bar-"),
        number,
        number,
        text,
    )


@register.filter
def pretty_json(value) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


@register.filter
def get(mapping, key):
    if isinstance(mapping, dict):
        return mapping.get(key)
    return None


# ---- links to a job ------------------------------------------------------------------------------
# A page of the queue links each of its 100 rows to the job and gives operators up to six action
# forms per row. Reversing each of those URLs ({% url %}, ~600 per page) was most of the page's
# rendering time, yet a job's URL differs from another job's only in the id: each URL is reversed
# once, with a placeholder id, and a row's URL is that one with the row's id in its place. The cache
# is keyed by what reverse() depends on: the URLconf and the script prefix.
PLACEHOLDER_JOB_ID = UUID(int=0)
JOB_ACTIONS = ("retry", "run-next", "move", "priority", "pause", "resume", "cancel", "dedicate", "share")


def _url_parts(urlconf: str, name: str, args: tuple) -> tuple[str, str]:
    url = reverse(name, urlconf=urlconf, args=[PLACEHOLDER_JOB_ID, *args])
    head, found, tail = url.partition(str(PLACEHOLDER_JOB_ID))
    if not found:
        raise ValueError(f"the URL {name!r} does not contain its job id: {url!r}")
    return head, tail


@lru_cache(maxsize=16)
def _job_urls(urlconf: str, prefix: str) -> tuple[tuple[str, str], dict[str, tuple[str, str]]]:
    """The job page's URL parts, and each action's HTML-escaped (they go straight into markup)."""
    page = _url_parts(urlconf, "dashboard:job", ())
    actions = {}
    for action in JOB_ACTIONS:
        head, tail = _url_parts(urlconf, "dashboard:job_action", (action,))
        actions[action] = (escape(head), escape(tail))
    return page, actions


def _current_job_urls():
    return _job_urls(get_urlconf() or settings.ROOT_URLCONF, get_script_prefix())


def _job_id(value) -> str:
    # What the <uuid:job_id> converter accepts, written as it writes it; anything else: ValueError.
    return str(value if isinstance(value, UUID) else UUID(str(value)))


@register.filter
def job_url(job_id) -> str:
    """The job's dashboard page: what {% url 'dashboard:job' job_id %} gives."""
    (head, tail), _ = _current_job_urls()
    return f"{head}{_job_id(job_id)}{tail}"


def _job_action_urls(job_id) -> dict[str, str]:
    """{action: {% url 'dashboard:job_action' job_id action %}, HTML-escaped} for every job action."""
    _, actions = _current_job_urls()
    job = _job_id(job_id)  # hex digits and hyphens: nothing to escape
    return {action: f"{head}{job}{tail}" for action, (head, tail) in actions.items()}


# ---- operator controls ---------------------------------------------------------------------------
# One plain form per action (each works without JavaScript; base.js posts them with fetch and
# refreshes the page's live sections). Built here, like the admin's change-list rows, rather than in
# a template: a queue page has 100 rows of them, and a template's per-variable and per-tag work for
# them took longer than the rest of the page. What goes in is escaped, a number or a job id.
CANCELLING = mark_safe(
    '<div class="controls" data-controls>\n  <span class="muted">cancelling…</span>\n</div>'
)
RETRY = '<button class="btn" data-act="retry">Retry</button>'
RUN_NEXT = (
    '<button class="btn" data-act="run-next" title="Run next: move to the top of its queue (within its'
    ' priority)">Run next</button>'
)
MOVE = (
    '<button class="btn icon" name="direction" value="up" data-act="up" title="Move up" aria-label="Move up">'
    "↑</button>"
    '<button class="btn icon" name="direction" value="down" data-act="down" title="Move down"'
    ' aria-label="Move down">↓</button>'
    '<button class="btn icon" name="direction" value="bottom" data-act="bottom" title="Move to the bottom"'
    ' aria-label="Move to the bottom">⤓</button>'
)
PRIORITY = (
    '<input type="number" name="priority" value="{priority}" min="-1000" max="1000" step="1"'
    ' aria-label="Priority" title="Priority: higher runs first (-1000..1000)">'
    '<button class="btn" data-act="priority">Set</button>'
)
RESUME = '<button class="btn" data-act="resume">Resume</button>'
PAUSE = '<button class="btn" data-act="pause">Pause</button>'
CANCEL = '<button class="btn danger" data-act="cancel">Cancel</button>'
DEDICATE = (
    '<button class="btn" data-act="dedicate" title="Reserve a worker of its own for this job: no shared worker'
    ' takes it; the provisioner starts one">Run on a dedicated worker</button>'
)
SHARE = (
    '<button class="btn" data-act="share" title="Return it to shared execution (no worker has bound its'
    ' reservation yet)">Share again</button>'
)
DEDICATE_CONFIRM = (
    ' data-confirm="Run this job on a dedicated worker? No shared worker takes it; a provisioner must start'
    ' one (it falls back to shared workers if none binds in time)."'
)


def _dedication_form(entry, form) -> str | None:
    """Run on a dedicated worker (a pending job no worker holds), or share a dedicated one again
    while no worker has bound its reservation; the SQL refuses what does not apply (409)."""
    reservation = entry.reservation
    if reservation:
        return form("share", SHARE) if reservation.get("state") == "requested" else None
    if (
        entry.state in ("pending", "paused", "retry_wait")
        and not entry.assigned_worker_uid
        and not entry.required_worker_uid
    ):
        return form("dedicate", DEDICATE, DEDICATE_CONFIRM)
    return None


@register.simple_tag(takes_context=True)
def job_controls(context, entry) -> str:
    """The operator controls of one queue entry (a `scheduler.queries.QueueEntry`). Render them only
    for operators; every action checks the permission again on the server."""
    if entry.cancel_requested:
        return CANCELLING
    urls = _job_action_urls(entry.job_id)
    # What {% csrf_token %} renders: the page's token (one per request) in a hidden field.
    token = context.get("csrf_token")
    csrf = (
        f'<input type="hidden" name="csrfmiddlewaretoken" value="{escape(token)}">'
        if token and token != "NOTPROVIDED"
        else ""
    )

    def form(action: str, body: str, attrs: str = "") -> str:
        return f'<form method="post" action="{urls[action]}" data-action{attrs}>{csrf}{body}</form>'

    if entry.state == "failed":
        forms = [form("retry", RETRY)] if entry.can_retry else []
    else:
        forms = [
            form("run-next", RUN_NEXT),
            form("move", MOVE, ' class="group"'),
            form("priority", PRIORITY.format(priority=int(entry.priority)), ' class="group prio"'),
            form("resume", RESUME) if entry.paused else form("pause", PAUSE),
            form("cancel", CANCEL, ' data-confirm="Cancel this job?"'),
        ]
        dedication = _dedication_form(entry, form)
        if dedication:
            forms.append(dedication)
    return mark_safe('<div class="controls" data-controls>\n' + "".join(f"  {f}\n" for f in forms) + "</div>")


@register.filter
def stage_name(task_type) -> str:
    """A task or job type that wraps only between its words, after a dot or an underscore
    (`highlight_<wbr>generate.<wbr>analyze`), never inside one."""
    if not task_type:
        return ""
    words = re.split(r"(?<=[._])", str(task_type))
    return mark_safe(f'<span class="stage-name">{"<wbr>".join(escape(w) for w in words if w)}</span>')


@register.filter
def error_summary(failure) -> str:
    """A stored failure (message, then traceback) as its one line of words (media.failures)."""
    return failures.one_line(failure) or ""


@register.filter
def has_traceback(failure) -> bool:
    return bool(failure) and "\n" in str(failure).strip()
