"""System endpoints: /v1/sysinfo (this API process's host), /healthz and /metrics.

/healthz and /metrics need no credentials (load balancers and Prometheus call them); restrict
/metrics by network in the deployment if its numbers are sensitive.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
from django.conf import settings
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse
from ninja import Router, Status

from api import metrics
from api.errors import AUTH_ERRORS, ErrorOut, responses
from api.schemas import HealthOut, SysinfoOut

router = Router()

SAMPLE_MAX_AGE_SECONDS = 5.0
_lock = threading.Lock()
_latest: dict[str, Any] | None = None
_latest_at = 0.0
_process: psutil.Process | None = None


def _this_process() -> psutil.Process:
    """psutil's handle on this process, renewed after a fork (gunicorn --preload)."""
    global _process
    if _process is None or _process.pid != os.getpid():
        _process = psutil.Process(os.getpid())
        _process.cpu_percent(interval=None)  # measures since the previous call: prime it
    return _process


psutil.cpu_percent(interval=None)  # likewise for the machine


def _disk_path() -> Path:
    for candidate in (settings.OUTPUT_ROOT_DIR, settings.VAR_DIR, settings.BASE_DIR):
        if Path(candidate).exists():
            return Path(candidate)
    return Path("/")


def take_sample() -> dict[str, Any]:
    memory = psutil.virtual_memory()
    path = _disk_path()
    disk = psutil.disk_usage(str(path))
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - not on every platform
        load = None
    proc = _this_process()
    with proc.oneshot():
        process = {
            "pid": proc.pid,
            "rss_bytes": proc.memory_info().rss,
            "cpu_percent": proc.cpu_percent(interval=None),
            "threads": proc.num_threads(),
        }
    return {
        "sampled_at": datetime.now(UTC),
        "hostname": socket.gethostname(),
        "cpu_percent": psutil.cpu_percent(interval=None),
        "cpu_count": psutil.cpu_count() or 1,
        "load_average": load,
        "memory": {
            "total_bytes": memory.total,
            "available_bytes": memory.available,
            "used_bytes": memory.used,
            "percent": memory.percent,
        },
        "disk": {
            "path": str(path),
            "total_bytes": disk.total,
            "used_bytes": disk.used,
            "free_bytes": disk.free,
            "percent": disk.percent,
        },
        "process": process,
    }


def latest_sample() -> dict[str, Any]:
    """The process keeps its latest sample in memory and refreshes it when it is older than 5 s."""
    global _latest, _latest_at
    with _lock:
        if _latest is None or time.monotonic() - _latest_at >= SAMPLE_MAX_AGE_SECONDS:
            _latest, _latest_at = take_sample(), time.monotonic()
        return _latest


@router.get(
    "/v1/sysinfo",
    response={200: SysinfoOut, **responses(*AUTH_ERRORS)},
    tags=["system"],
    summary="This API process's host: CPU, memory, disk",
)
def sysinfo(request: HttpRequest):
    """The latest CPU, memory and disk sample of the machine serving this request (refreshed at
    most every 5 seconds). Workers report their own samples in `GET /v2/workers`."""
    return latest_sample()


@router.get(
    "/healthz",
    auth=None,
    response={200: HealthOut, 503: HealthOut, 500: ErrorOut},
    tags=["system"],
    summary="Liveness and database check (no auth)",
)
def healthz(request: HttpRequest):
    """200 when the database answers a query, 503 otherwise."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError:
        return Status(503, {"status": "unavailable", "database": "unreachable"})
    return {"status": "ok", "database": "ok"}


@router.get(
    "/metrics",
    auth=None,
    response={200: None, 503: ErrorOut, 500: ErrorOut},
    tags=["system"],
    summary="Prometheus metrics (no auth)",
    openapi_extra={
        "responses": {
            200: {
                "description": "Prometheus text exposition format",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            }
        }
    },
)
def metrics_view(request: HttpRequest):
    """Queue depth by state, pool and category; jobs by status; running stages by category; VRAM;
    workers by lifecycle; stale writes rejected, recoveries and retries; the oldest pending wait;
    stuck running tasks; the last recovery run; claim-latency and stage-duration histograms.
    Computed from the database at scrape time."""
    body, content_type = metrics.render()
    return HttpResponse(body, content_type=content_type)
