"""/v2/stats: the numbers behind the dashboard's overview."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Router

from api.errors import AUTH_ERRORS, responses
from api.schemas import StatsOut
from scheduler import queries
from scheduler.constants import JOB_STATUSES, RESOURCE_CATEGORIES

router = Router(tags=["stats"])


@router.get("", response={200: StatsOut, **responses(*AUTH_ERRORS)}, summary="Queue and job statistics")
def get_stats(request: HttpRequest):
    """Jobs by status, running stages by resource category, VRAM used and available on live
    workers, average processing time by type (last 24 h), jobs by type, and jobs completed and
    failed in the last hour."""
    row = queries.stats()
    used, total = int(row["vram_used_mb"]), int(row["vram_total_mb"])
    return {
        "by_status": {status: int(row["by_status"].get(status, 0)) for status in JOB_STATUSES},
        "running_by_category": {c: int(row["running_by_category"].get(c, 0)) for c in RESOURCE_CATEGORIES},
        "vram_used_mb": used,
        "vram_total_mb": total,
        "vram_available_mb": max(total - used, 0),
        "avg_processing_seconds_by_type": row["avg_processing_seconds_by_type"],
        "jobs_by_type": {k: int(v) for k, v in row["jobs_by_type"].items()},
        "completed_last_hour": row["completed_last_hour"],
        "failed_last_hour": row["failed_last_hour"],
        "queue_length": queries.queue_count(),
    }
