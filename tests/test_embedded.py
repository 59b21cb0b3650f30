"""Smoke test of the embedded PostgreSQL path (DATABASE_URL unset): the database server comes from the
pgserver wheel, migrations run on it, and the scheduler works end to end; `embedded_db status`
reports on the server without starting it. CI runs this file alone with `-m embedded` and no
DATABASE_URL; the full suite runs against a server (and skips what needs the embedded one)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from jetencode import embedded_db
from scheduler import repository

BASE_DIR = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.embedded
on_the_embedded_server = pytest.mark.skipif(
    bool(os.environ.get("DATABASE_URL")), reason="DATABASE_URL is set: this run uses a server"
)


def test_embedded_db_status_reports_without_starting_the_server(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE")}
    env["JETENCODE_EMBEDDED_PGDATA"] = str(tmp_path / "pgdata")
    env["JETENCODE_VAR_DIR"] = str(tmp_path / "var")
    result = subprocess.run(
        [sys.executable, "manage.py", "embedded_db", "status"],
        cwd=BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"stopped (data directory {tmp_path / 'pgdata'})"
    assert not (tmp_path / "pgdata").exists()


@on_the_embedded_server
def test_the_embedded_server_is_running_and_shared():
    assert "running" in embedded_db.status()
    assert settings.DATABASES["default"]["HOST"].startswith("/")  # a Unix socket, never TCP


@on_the_embedded_server
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
