"""Shared fixtures. Tests run against a real PostgreSQL: the server named by DATABASE_URL, or the
embedded one under var/ when it is unset. Never SQLite, never a mocked database."""

import os
import uuid

import pytest
from django.db import connection

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # playwright's sync API inside Django tests


@pytest.fixture(autouse=True, scope="session")
def _subprocesses_use_the_project_settings():
    """pytest-django exported DJANGO_SETTINGS_MODULE=tests.settings; the workers, web servers and
    commands the tests start run with the project's own settings, as they do in production. (Set
    here, not in tests/settings.py, so pytest-xdist's worker processes still get the test settings.)"""
    os.environ["DJANGO_SETTINGS_MODULE"] = "jetencode.settings"
    yield


@pytest.fixture(autouse=True)
def _reseed_migration_rows(request):
    """Transactional tests flush every table afterwards, migration-seeded rows included; put the
    scheduler singleton and the dashboard groups back before each database test."""
    marker = request.node.get_closest_marker("django_db")
    if marker is None:
        yield
        return
    transactional = (
        marker.kwargs.get("transaction", False)
        or "transactional_db" in request.fixturenames
        or "live_server" in request.fixturenames
    )
    request.getfixturevalue("transactional_db" if transactional else "db")
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO queue_scheduler_state (id, rebalances, updated_at) VALUES (1, 0, now()) ON CONFLICT DO NOTHING"
        )
    from scheduler.permissions import ensure_groups

    ensure_groups()
    yield


@pytest.fixture
def database_url():
    """A DATABASE_URL for subprocesses (workers) that points at this test run's database."""
    settings = connection.settings_dict
    host = settings["HOST"] or ""
    user = settings["USER"] or "postgres"
    if host.startswith("/"):
        return f"postgresql://{user}@/{settings['NAME']}?host={host}"
    port = settings["PORT"] or 5432
    password = f":{settings['PASSWORD']}" if settings.get("PASSWORD") else ""
    return f"postgresql://{user}{password}@{host}:{port}/{settings['NAME']}"


@pytest.fixture
def make_worker_row():
    """Register a worker session directly through the repository (no process): returns (uid, session)."""
    from scheduler import repository

    def make(uid=None, *, concurrency=4, limits=None, vram=0, background_slots=1):
        uid = uid or f"w-{uuid.uuid4().hex[:6]}"
        session = uuid.uuid4()
        repository.register_worker(
            repository.WorkerRegistration(
                uid=uid,
                session_id=session,
                hostname="test",
                pid=os.getpid(),
                version="test",
                concurrency=concurrency,
                background_slots=background_slots,
                category_limits=limits or {"cpu": concurrency},
                vram_total_mb=vram,
                capabilities={},
                workspace="/tmp",
            )
        )
        return uid, session

    return make


@pytest.fixture
def enqueue():
    from scheduler import repository

    def enqueue(job_type="noop", params=None, **kwargs):
        return repository.enqueue_job(repository.NewJob(job_type, params or {}, **kwargs), stale_seconds=60)

    return enqueue
