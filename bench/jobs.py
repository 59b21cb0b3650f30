"""Enqueueing from the benchmark: the same enqueue_job_v1 call the API makes, on a raw connection.

The arguments come from `media.submission.build_new_job` (the validation the API and dashboard
share), so a benchmark job is exactly what `POST /v2/jobs` would have queued; only the transport
differs (batches of enqueues in one statement, so the producer is not the bottleneck).
"""

from __future__ import annotations

import os
import time

import psycopg

from scheduler import repository

# The repository's own statement (scheduler/sql/repository.sql, named parameters), and the same
# call once per row of a series: `count` enqueues in one statement.
ENQUEUE = repository.ENQUEUE_SQL
ENQUEUE_MANY = f"{ENQUEUE} FROM generate_series(1, %(count)s)"


def setup_django(url: str) -> None:
    """Configure Django in this process for the bench database (ORM, services, test Client)."""
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "jetencode.settings")
    os.environ.setdefault("JETENCODE_APPLICATION_NAME", "jetencode-bench")
    os.environ.setdefault("JETENCODE_SIMPLE_STATIC", "true")  # templates need no collectstatic manifest
    import django

    django.setup()


def job_args(payload: dict, *, notify: bool = True) -> dict:
    """ENQUEUE's parameters for an API-style payload ({"type": ..., "params": ...})."""
    from django.conf import settings

    from media import submission

    job = submission.build_new_job(payload)
    return repository.enqueue_arguments(
        job, stale_seconds=settings.JETENCODE["STALE_WORKER_SECONDS"], notify=notify
    )


def raw_args(job_type: str, params: dict, *, priority: int = 0, notify: bool = True) -> dict:
    """Parameters for a job type the API does not know (the bench's own `bench_probe`)."""
    job = repository.NewJob(job_type, params, priority=priority, max_attempts=1)
    return repository.enqueue_arguments(job, stale_seconds=60.0, notify=notify)


def enqueue_many(conn: psycopg.Connection, args: dict, count: int, batch: int = 100) -> float:
    """Enqueue `count` jobs, `batch` per transaction. Returns the seconds it took."""
    started = time.perf_counter()
    left = count
    while left > 0:
        n = min(batch, left)
        conn.execute(ENQUEUE_MANY, args | {"count": n})
        left -= n
    return time.perf_counter() - started


def wait_for(
    conn: psycopg.Connection, query: str, params, target: int, timeout: float, poll: float = 0.1
) -> int:
    """Poll `query` (a count) until it reaches `target`; return the last count (may be short on timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        value = conn.execute(query, params).fetchone()[0]
        if value >= target or time.monotonic() > deadline:
            return value
        time.sleep(poll)
