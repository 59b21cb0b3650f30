"""/dashboard/: counts by state, capacity in use, and charts of throughput and queue depth drawn
from the per-minute samples the workers store (queue_samples)."""

from __future__ import annotations

from django.utils import timezone

from dashboard.charts import FIT_MAX_MINUTES, RESOLUTION, fitted_minutes, overview_charts, window_label
from dashboard.views.common import is_partial, page, viewer_required
from scheduler import queries, repository
from scheduler.constants import JOB_STATUSES


def samples_for(hours: int) -> list[dict]:
    """The window's per-minute samples. Until there are two (a fresh install: the workers record
    one a minute), this minute's is recorded now (idempotent per minute), so the charts start
    from the moment someone looks instead of staying blank."""
    rows = queries.samples(hours)
    if len(rows) < 2 and repository.record_sample():
        rows = queries.samples(hours)
    return rows


def chosen_hours(request) -> int | None:
    """?hours= when it names one of the windows, else None: the fitted default."""
    try:
        hours = int(request.GET.get("hours", ""))
    except ValueError:
        return None
    return hours if hours in RESOLUTION else None


@viewer_required
def overview(request):
    hours = chosen_hours(request)
    if hours is None:
        rows = samples_for(FIT_MAX_MINUTES // 60)
        minutes = fitted_minutes(rows[0]["at"] if rows else None, timezone.now())
    else:
        minutes = hours * 60
        rows = samples_for(hours)
    stats = queries.stats()
    workers = queries.workers_overview()
    lifecycles = {"active": 0, "draining": 0, "offline": 0}
    for worker in workers:
        lifecycles[worker["lifecycle"]] = lifecycles.get(worker["lifecycle"], 0) + 1
    by_status = stats["by_status"]
    context = {
        "hours": hours,
        "window_label": window_label(minutes),
        "windows": sorted(RESOLUTION),
        "counts": [(status, by_status.get(status, 0)) for status in JOB_STATUSES],
        "total_jobs": sum(by_status.values()),
        "stats": stats,
        "lifecycles": lifecycles,
        "media_slots": sum(w["concurrency"] for w in workers if w["lifecycle"] == "active"),
        "media_running": sum(w["media_running"] for w in workers),
        "vram_percent": round(100 * stats["vram_used_mb"] / stats["vram_total_mb"])
        if stats["vram_total_mb"]
        else 0,
        "jobs_by_type": sorted(stats["jobs_by_type"].items(), key=lambda item: -item[1]),
        "charts": overview_charts(rows, minutes, timezone.now()),
    }
    if is_partial(request):
        return page(request, "dashboard/partials/overview_live.html", context)
    return page(request, "dashboard/overview.html", context)
