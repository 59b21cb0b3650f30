"""The workspace sweep removes what no stage will read again, and nothing else."""

import logging
import uuid
from types import SimpleNamespace

import pytest

from tests.kit.db import sql
from workers import workspaces

pytestmark = pytest.mark.django_db


def _dirs(root, job, *executions):
    for execution in executions:
        path = root / str(job) / str(execution)
        path.mkdir(parents=True)
        (path / "file.bin").write_bytes(b"x")


def _end(job, status, seconds_ago):
    sql(
        "UPDATE jobs SET status = %s, finished_at = now() - make_interval(secs => %s) WHERE id = %s",
        [status, seconds_ago, job],
    )


def test_the_sweep_removes_ended_purged_and_superseded_work_only(tmp_path, enqueue):
    completed, cancelled, failed, pending, just_completed, moved = (enqueue() for _ in range(6))
    purged = uuid.uuid4()
    _end(completed, "completed", 600)
    _end(cancelled, "cancelled", 600)
    _end(failed, "failed", 600)
    _end(just_completed, "completed", 5)
    sql("UPDATE job_schedule SET execution_id = 3 WHERE job_id = %s", [moved])
    for job in (completed, cancelled, failed, pending, just_completed, purged):
        _dirs(tmp_path, job, 1)
    _dirs(tmp_path, moved, 1, 2, 3)
    (tmp_path / "scratch").mkdir()
    (tmp_path / str(pending) / "notes").mkdir()

    removed = workspaces.sweep(tmp_path)

    assert sorted(removed) == sorted(
        [
            tmp_path / str(completed),
            tmp_path / str(cancelled),
            tmp_path / str(purged),
            tmp_path / str(moved) / "1",
            tmp_path / str(moved) / "2",
        ]
    )
    for path in removed:
        assert not path.exists()
    kept = [
        tmp_path / str(failed) / "1",  # an operator's retry resumes this execution
        tmp_path / str(pending) / "1",
        tmp_path / str(pending) / "notes",
        tmp_path / str(just_completed) / "1",  # a slot may still be finishing in it
        tmp_path / str(moved) / "3",
        tmp_path / "scratch",
    ]
    for path in kept:
        assert path.is_dir(), path


def test_an_empty_root_needs_no_query(tmp_path, django_assert_num_queries):
    with django_assert_num_queries(0):
        assert workspaces.sweep(tmp_path) == []


def test_the_maintenance_thread_sweeps_its_workers_root(tmp_path, enqueue, caplog):
    from workers.maintenance import Maintenance

    job = enqueue()
    _end(job, "completed", 600)
    _dirs(tmp_path, job, 1)
    worker = SimpleNamespace(uid="w-sweep", workspace_root=tmp_path, log_extra={})
    with caplog.at_level(logging.INFO, logger="jetencode.worker"):
        Maintenance(worker).sweep_workspaces()
    assert not (tmp_path / str(job)).exists()
    assert "workspaces: removed 1 directory" in caplog.text
