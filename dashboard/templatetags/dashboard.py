"""Formatting filters for the dashboard templates: durations, ages, sizes, badges, bars."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from django import template
from django.utils import timezone
from django.utils.html import format_html

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
TERMINAL = {"completed", "failed", "cancelled"}


@register.filter
def duration(seconds) -> str:
    """65 -> '1m 05s'; 3700 -> '1h 01m'; None -> ''."""
    if seconds is None or seconds == "":
        return ""
    if isinstance(seconds, timedelta):
        seconds = seconds.total_seconds()
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
    return state in TERMINAL


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
