"""Shared fixtures. Tests run against a real PostgreSQL: the server named by DATABASE_URL, or the
embedded one under var/ when it is unset. Never SQLite, never a mocked database.

The helpers these fixtures are built from live in tests/kit/; the fixtures here are the suite's
common vocabulary:
- the cast (tests/kit/personas.py): `alice` (admin), `bob` (operator), `charlie` (viewer), `dave`
  (no group), and each one's logged-in dashboard client: `admin_client` (alice; it replaces
  pytest-django's fixture of that name), `operator_client`, `viewer_client`, `nogroup_client`;
- the queue without processes: `make_worker_row`, `worker` (one live worker row), `enqueue`;
- worker processes: `start_worker(uid, *runworker_args, env=None, ready=True, database_url=None)
  -> WorkerProcess`, with the environment of `worker_env`, which a folder's conftest.py overrides
  to add what its workers need; every worker is killed at teardown, before the test database is
  flushed, and its output is printed when the test failed;
- `fast_retries`: retry backoffs a tenth as long (1.5 s after a first attempt), for the fault tests
  whose assertions are about what happens after a retry, not about when.
"""

import os
import sys
import uuid

import pytest
from django.db import connection
from django.test import Client

from tests.kit import personas
from tests.kit.db import database_url as this_runs_database_url
from tests.kit.workers import Workers, worker_environment

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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the test item (rep_setup, rep_call), so fixtures can tell at
    teardown whether the test failed."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


# ---- the cast ---------------------------------------------------------------------------------


@pytest.fixture
def alice(db):
    """A superuser: may see and change everything, the Django admin included."""
    return personas.persona("alice")


@pytest.fixture
def bob(db):
    """In Operators: may see everything and act on the queue, jobs, workers and library; no admin."""
    return personas.persona("bob")


@pytest.fixture
def charlie(db):
    """In Viewers: may look everywhere, sees no controls, every change refused (403)."""
    return personas.persona("charlie")


@pytest.fixture
def dave(db):
    """An account without a group: may log in, sees nothing (403)."""
    return personas.persona("dave")


def _logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def admin_client(alice):
    """alice's session (this replaces pytest-django's `admin_client`, so every superuser is alice)."""
    return _logged_in(alice)


@pytest.fixture
def operator_client(bob):
    return _logged_in(bob)


@pytest.fixture
def viewer_client(charlie):
    return _logged_in(charlie)


@pytest.fixture
def nogroup_client(dave):
    return _logged_in(dave)


# ---- the queue, without processes ---------------------------------------------------------------


@pytest.fixture
def database_url():
    """A DATABASE_URL for subprocesses (workers) that points at this test run's database."""
    return this_runs_database_url()


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
def worker(make_worker_row):
    """A live worker row (no process), four cpu slots: (uid, session)."""
    return make_worker_row("w-test", concurrency=4)


@pytest.fixture
def enqueue():
    """enqueue(job_type="noop", params=None, **NewJob fields) -> the job id, as the repository enqueues it."""
    from scheduler import repository

    def enqueue(job_type="noop", params=None, **kwargs):
        return repository.enqueue_job(repository.NewJob(job_type, params or {}, **kwargs), stale_seconds=60)

    return enqueue


# ---- worker processes ----------------------------------------------------------------------------


@pytest.fixture
def worker_env(database_url, tmp_path):
    """The environment of this test's worker processes (tests/kit/workers.py: short timings, the
    test stages, media/output/workspace roots under tmp_path)."""
    return worker_environment(database_url, tmp_path)


@pytest.fixture
def fast_retries(transactional_db):
    """retry_delay_v1 scaled by 0.1 in this test's database (what the soak does), the original put
    back at teardown. For tests of recovery and fencing that would otherwise sit out a 15 s backoff
    they do not measure. The formula, and the retry times a failed attempt stores, are tested in
    tests/scheduler/test_children_and_retries.py."""
    from tools.soak.harness import RetryDelayScale

    with RetryDelayScale(0.1):
        yield


@pytest.fixture
def start_worker(worker_env, tmp_path, request):
    """start_worker(uid, *runworker_args, env=None, ready=True, database_url=None) -> WorkerProcess:
    a real `manage.py runworker` (tests/kit/workers.py, `Workers.start`)."""
    workers = Workers(worker_env, tmp_path)
    yield workers.start
    workers.stop_all()
    report = getattr(request.node, "rep_call", None)
    if workers.started and (report is None or report.failed):
        sys.stderr.write(f"\n{workers.logs()}\n")
