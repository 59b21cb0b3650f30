"""Measurement 5: API and dashboard latency with 100,000 jobs in the system.

The history is bulk-inserted by SQL (`db.bulk_history`: about 70 % completed, 5 % failed, 2 %
cancelled, 2 % running, 21 % pending, over 21 priorities and ten registered workers). Requests go
through Django's test Client in this process: the whole middleware stack, URL routing, auth (an
API token from `ApiToken.issue` for /v2, a logged-in superuser's session for the dashboard), the
views and their SQL, and rendering — but no HTTP server or network, which add the same small
constant to every request.
"""

from __future__ import annotations

import time

from bench import db
from bench.claim_latency import register
from bench.stats import summary_ms

ENDPOINTS = [
    ("GET /v2/queue", "/v2/queue", "token"),
    ("GET /v2/jobs", "/v2/jobs", "token"),
    ("GET /dashboard/queue", "/dashboard/queue", "session"),
]


def measure(url: str, jobs_count: int, samples: int, log=print) -> dict:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    from api.models import ApiToken

    with db.connect(url) as conn:
        db.reset_queue(conn)
        started = time.monotonic()
        db.bulk_history(conn, jobs_count)
        for i in range(10):
            register(conn, f"bw{i}")
        db.analyze(conn)
        fill = time.monotonic() - started
        total = db.scalar(conn, "SELECT count(*) FROM jobs")
        unfinished = db.scalar(
            conn, "SELECT count(*) FROM jobs WHERE status NOT IN ('completed', 'cancelled')"
        )

    user_model = get_user_model()
    user = user_model.objects.filter(username="bench-admin").first()
    if user is None:
        user = user_model.objects.create_superuser(
            "bench-admin", "bench@example.invalid", "bench-password-not-secret"
        )
    _, raw = ApiToken.issue(user, "read", name="benchmark")
    # "localhost": the project's settings do not allow the test client's default host, testserver.
    token_client = Client(HTTP_AUTHORIZATION=f"Bearer {raw}", SERVER_NAME="localhost")
    session_client = Client(SERVER_NAME="localhost")
    session_client.force_login(user)

    out: dict = {
        "jobs": total,
        "unfinished_jobs": unfinished,
        "fill_seconds": round(fill, 1),
        "samples": samples,
        "transport": "django.test.Client (in-process, no HTTP server)",
        "endpoints": {},
    }
    for name, path, auth in ENDPOINTS:
        client = token_client if auth == "token" else session_client
        times = []
        size = 0
        warmup = min(5, samples)
        for index in range(samples + warmup):
            t0 = time.perf_counter()
            response = client.get(path)
            elapsed = time.perf_counter() - t0
            if response.status_code != 200:
                raise RuntimeError(f"{name}: HTTP {response.status_code}: {response.content[:300]!r}")
            size = len(response.content)
            if index >= warmup:
                times.append(elapsed)
        out["endpoints"][name] = {**summary_ms(times), "response_bytes": size}
        e = out["endpoints"][name]
        log(f"  {name}: p50 {e['p50_ms']} ms, p99 {e['p99_ms']} ms ({size:,} bytes)")
    connection.close()
    return out
