"""The benchmark's own database: created on the server named by DATABASE_URL, migrated by the real
`manage.py migrate`, reset between measurements, and filled in bulk by SQL where a measurement needs
a large queue (the same way tests/scheduler/test_claim_plan.py does it)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SERVER_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
DEFAULT_DATABASE = "jetencode_bench"

# Everything a measurement leaves behind; the scheduler singleton and the auth tables stay.
QUEUE_TABLES = (
    "queue_task_logs",
    "queue_fence_audit",
    "job_outputs",
    "queue_tasks",
    "job_schedule",
    "queue_reservations",
    "media_assets",
    "jobs",
    "queue_samples",
    "queue_workers",
)


# Read once, at import: the bench later points DATABASE_URL at its own database for Django.
_SERVER_URL = os.environ.get("DATABASE_URL") or DEFAULT_SERVER_URL


def server_url() -> str:
    """The server to create the bench database on (DATABASE_URL as it was when the bench started)."""
    return _SERVER_URL


def database_url(name: str, base: str | None = None) -> str:
    """`base` (a postgresql:// URL) with its database name replaced by `name`."""
    parts = urlsplit(base or server_url())
    if parts.scheme not in ("postgres", "postgresql"):
        raise SystemExit(f"DATABASE_URL must be a postgresql:// URL (got {parts.scheme}://...)")
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def connect(url: str, **kwargs) -> psycopg.Connection:
    kwargs.setdefault("autocommit", True)
    kwargs.setdefault("application_name", "jetencode-bench")
    return psycopg.connect(url, **kwargs)


def create_database(name: str, *, log=print) -> str:
    """Drop and re-create `name`, migrate it with `manage.py migrate`; return its URL."""
    url = database_url(name)
    with connect(server_url()) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    started = time.monotonic()
    migrate(url)
    log(f"database {name}: created and migrated in {time.monotonic() - started:.1f}s")
    return url


def migrate(url: str) -> None:
    """`manage.py migrate` against the database at `url`, in a process of its own."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "migrate", "--noinput"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": url, "JETENCODE_APPLICATION_NAME": "jetencode-bench-migrate"},
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"manage.py migrate failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
        )


def drop_database(name: str) -> None:
    with connect(server_url()) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def reset_queue(conn: psycopg.Connection, *, analyze_empty: bool = False) -> None:
    """Empty every queue table (no worker may be running) and re-seed the singleton.

    TRUNCATE leaves the tables "never analyzed" (reltuples = -1), as on a fresh install, and the
    planner then assumes a few pages. `analyze_empty` instead records statistics of the empty
    tables, as autovacuum does on a queue that was (nearly) empty when it ran: plans cached from
    then on believe the tables are tiny (see the stale-statistics throughput run)."""
    conn.execute("TRUNCATE " + ", ".join(QUEUE_TABLES) + " RESTART IDENTITY CASCADE")
    conn.execute(
        "INSERT INTO queue_scheduler_state (id, rebalances, updated_at) VALUES (1, 0, now()) ON CONFLICT DO NOTHING"
    )
    if analyze_empty:
        analyze(conn)


def analyze(conn: psycopg.Connection) -> None:
    conn.execute("VACUUM (ANALYZE) jobs, job_schedule, queue_tasks, queue_workers, queue_fence_audit")


def scalar(conn: psycopg.Connection, query: str, params=()) -> object:
    row = conn.execute(query, params).fetchone()
    return row[0] if row else None


# ---- bulk setup --------------------------------------------------------------------------------


def bulk_pending_jobs(
    conn: psycopg.Connection,
    count: int,
    *,
    workers: int = 10,
    targeted: float = 0.1,
    assigned: float = 0.1,
    priorities: int = 21,
) -> None:
    """Add `count` pending jobs with one pending task each, like test_claim_plan's setup but spread
    wider: priorities -10..10, a share targeted at (required_worker_uid) and a share already assigned
    to (a pending job-placement stage) one of `workers` worker uids `bw0`..`bw{n-1}`; the rest wait
    for any worker. The derived claim columns are written as refresh_job_v1 would write them."""
    conn.execute(
        """CREATE TEMP TABLE IF NOT EXISTS bench_new_jobs (id uuid PRIMARY KEY, priority int, kind text, uid text)"""
    )
    conn.execute("TRUNCATE bench_new_jobs")
    conn.execute(
        """INSERT INTO bench_new_jobs (id, priority, kind, uid)
           SELECT gen_random_uuid(), (i %% %(p)s) - %(p)s / 2,
                  CASE WHEN r < %(a)s THEN 'assigned' WHEN r < %(a)s + %(t)s THEN 'targeted' ELSE 'pending' END,
                  'bw' || floor(random() * %(w)s)::int
             FROM (SELECT i, random() AS r FROM generate_series(1, %(n)s) i) g""",
        {"n": count, "p": priorities, "a": assigned, "t": targeted, "w": workers},
    )
    conn.execute(
        """INSERT INTO jobs (id, type, params, status, priority, max_attempts, hardware, progress, log,
                             manual_retry_count, created_at, updated_at)
           SELECT id, 'noop', '{"seconds": 0, "children": 0, "fail_attempts": 0}', 'pending', priority, 4, 'auto',
                  0, '', 0, now(), now()
             FROM bench_new_jobs"""
    )
    conn.execute(
        """INSERT INTO job_schedule (job_id, execution_id, priority, position, required_worker_uid,
                                     assigned_worker_uid, execution_mode, paused, required_vram_mb, updated_at,
                                     media_runnable_at, media_categories, media_min_vram)
           SELECT id, 1, priority, nextval('job_position_seq') * 1024,
                  CASE WHEN kind = 'targeted' THEN uid END, CASE WHEN kind = 'assigned' THEN uid END,
                  'shared', false, 0, now(), now(), '["cpu"]', 0
             FROM bench_new_jobs"""
    )
    conn.execute(
        """INSERT INTO queue_tasks (job_id, execution_id, task_type, payload, dedupe_key, wait_for_siblings,
                                    placement, pool, resource_category, vram_mb, state, available_at, attempt,
                                    max_attempts, timeout_seconds, progress, progress_detail, created_at)
           SELECT id, 1, CASE WHEN kind = 'assigned' THEN 'noop.child' ELSE 'noop' END,
                  CASE WHEN kind = 'assigned' THEN '{"stage": 2}'::jsonb ELSE '{}'::jsonb END,
                  dedupe_key_v1(CASE WHEN kind = 'assigned' THEN 'noop.child' ELSE 'dispatch' END, '{"execution": 1}'),
                  false, CASE WHEN kind = 'assigned' THEN 'job' ELSE 'dispatch' END, 'media', 'cpu', 0, 'pending',
                  now(), 0, 4, 600, 0, '{}', now()
             FROM bench_new_jobs"""
    )
    conn.execute("DROP TABLE bench_new_jobs")


def bulk_history(conn: psycopg.Connection, count: int) -> None:
    """`count` jobs in a realistic mix for the read paths (API, dashboard): most finished, some
    pending (queued dispatch), some running (a claimed dispatch), some failed."""
    conn.execute(
        "CREATE TEMP TABLE IF NOT EXISTS bench_hist (id uuid PRIMARY KEY, status text, prio int, uid text)"
    )
    conn.execute("TRUNCATE bench_hist")
    conn.execute(
        """INSERT INTO bench_hist
           SELECT gen_random_uuid(),
                  CASE WHEN r < 0.70 THEN 'completed' WHEN r < 0.75 THEN 'failed' WHEN r < 0.77 THEN 'cancelled'
                       WHEN r < 0.79 THEN 'running' ELSE 'pending' END,
                  (i %% 21) - 10, 'bw' || floor(random() * 10)::int
             FROM (SELECT i, random() AS r FROM generate_series(1, %s) i) g""",
        [count],
    )
    conn.execute(
        """INSERT INTO jobs (id, type, params, status, priority, max_attempts, hardware, progress, log,
                             manual_retry_count, created_at, updated_at, started_at, finished_at)
           SELECT id, 'noop', '{"seconds": 0, "children": 0, "fail_attempts": 0}', status, prio, 4, 'auto',
                  CASE WHEN status = 'completed' THEN 100 ELSE 0 END, '', 0,
                  now() - make_interval(secs => random() * 86400 * 7), now(),
                  CASE WHEN status <> 'pending' THEN now() END,
                  CASE WHEN status IN ('completed', 'failed', 'cancelled') THEN now() END
             FROM bench_hist"""
    )
    conn.execute(
        """INSERT INTO job_schedule (job_id, execution_id, priority, position, assigned_worker_uid, execution_mode,
                                     paused, required_vram_mb, updated_at, media_runnable_at, media_categories,
                                     media_min_vram)
           SELECT id, 1, prio, nextval('job_position_seq') * 1024,
                  CASE WHEN status <> 'pending' THEN uid END, 'shared', false, 0, now(),
                  CASE WHEN status = 'pending' THEN now() END, CASE WHEN status = 'pending' THEN '["cpu"]'::jsonb END,
                  CASE WHEN status = 'pending' THEN 0 END
             FROM bench_hist"""
    )
    conn.execute(
        """INSERT INTO queue_tasks (job_id, execution_id, task_type, payload, dedupe_key, wait_for_siblings,
                                    placement, pool, resource_category, vram_mb, state, available_at, attempt,
                                    max_attempts, timeout_seconds, progress, progress_detail, created_at,
                                    claimed_by, claimed_worker_session_id, lease_token, lease_expires_at,
                                    deadline_at, started_at, finished_at, last_failure)
           SELECT id, 1, 'noop', '{}', dedupe_key_v1('dispatch', '{"execution": 1}'), false, 'dispatch', 'media',
                  'cpu', 0, status, now(), CASE WHEN status = 'pending' THEN 0 ELSE 1 END, 4, 600,
                  CASE WHEN status = 'completed' THEN 100 ELSE 0 END, '{}', now(),
                  CASE WHEN status <> 'pending' THEN uid END,
                  CASE WHEN status = 'running' THEN gen_random_uuid() END,
                  CASE WHEN status = 'running' THEN gen_random_uuid() END,
                  CASE WHEN status = 'running' THEN now() + interval '1 day' END,
                  CASE WHEN status = 'running' THEN now() + interval '1 day' END,
                  CASE WHEN status <> 'pending' THEN now() END,
                  CASE WHEN status IN ('completed', 'failed', 'cancelled') THEN now() END,
                  CASE WHEN status = 'failed' THEN 'RuntimeError: benchmark history' END
             FROM bench_hist"""
    )
    conn.execute("DROP TABLE bench_hist")
