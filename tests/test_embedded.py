"""Smoke test of the embedded PostgreSQL path (DATABASE_URL unset): the database server comes from the
pgserver wheel, migrations run on it, and the scheduler works end to end. CI runs this file alone
with `-m embedded` and no DATABASE_URL; the full suite runs against a server."""

import os

import pytest
from django.conf import settings
from django.db import connection

from jetencode import embedded_db
from scheduler import repository

pytestmark = [
    pytest.mark.embedded,
    pytest.mark.skipif(
        bool(os.environ.get("DATABASE_URL")), reason="DATABASE_URL is set: this run uses a server"
    ),
]


def test_the_embedded_server_is_running_and_shared():
    assert "running" in embedded_db.status()
    assert settings.DATABASES["default"]["HOST"].startswith("/")  # a Unix socket, never TCP


@pytest.mark.django_db
def test_the_scheduler_works_on_the_embedded_database(make_worker_row, enqueue):
    assert connection.vendor == "postgresql"
    worker = make_worker_row()
    job = enqueue("noop", {"seconds": 0})
    task = repository.claim(*worker, "media", 30)
    assert task.job_id == job
    assert repository.finish(repository.Lease.of(task, *worker)).outcome == "completed"
    with connection.cursor() as cursor:
        cursor.execute("SELECT status FROM jobs WHERE id = %s", [job])
        assert cursor.fetchone()[0] == "completed"
