"""Deterministic regression tests for what the soak and its review found (see docs/reliability.md).

Each test forces the interleaving that went wrong with two real connections: one holds a lock while
the other runs the scheduler function into it, then the first changes the world and commits.
"""

from __future__ import annotations

import threading

import psycopg
import pytest

from scheduler import repository
from tests.kit.db import claim, lease_of, one
from tests.kit.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _wait_until_blocked(
    admin: psycopg.Connection, pid: int, seconds: float = 10.0, events: tuple[str, ...] = ("Lock",)
) -> None:
    def blocked() -> bool:
        row = admin.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()
        return bool(row and row[0] in events)

    wait_for(blocked, seconds, "the reassignment to wait for the lock", interval=0.02)


@pytest.fixture
def lost_worker_job(make_worker_row, enqueue):
    """A job whose dispatch completed on w-lost with one child still pending there (job placement,
    so only w-lost may run it), and w-lost silent for an hour."""
    worker = make_worker_row("w-lost", concurrency=2)
    job = enqueue("noop", {"children": 1})
    dispatch = claim(worker)
    child = repository.Child("noop", {"seconds": 0, "children": 0})
    assert repository.finish(lease_of(dispatch, worker), children=[child]).outcome == "completed"
    one(
        "UPDATE queue_workers SET last_heartbeat_at = now() - interval '1 hour' WHERE uid = 'w-lost' RETURNING 1"
    )
    assert one("SELECT status FROM jobs WHERE id = %s", [job]) == "pending"
    return worker, job


def _reassign_racing(database_url, change_under_the_lock):
    """Run release_jobs_v2 (the recovery loop's release pass) on one connection while another holds the scheduler lock, lets the
    reassignment read its candidates and block, then applies `change_under_the_lock(conn)` and
    commits. Returns what the reassignment returned."""
    holder = psycopg.connect(database_url)
    admin = psycopg.connect(database_url, autocommit=True)
    runner = psycopg.connect(database_url, autocommit=True)
    result: dict = {}
    try:
        holder.execute("SELECT 1 FROM queue_scheduler_state WHERE id = 1 FOR UPDATE")
        runner_pid = runner.info.backend_pid

        def run():
            try:
                result["rows"] = runner.execute("SELECT * FROM release_jobs_v2(30, 10, 50)").fetchall()
            except psycopg.Error as exc:
                result["error"] = exc

        thread = threading.Thread(target=run)
        thread.start()
        _wait_until_blocked(admin, runner_pid)
        change_under_the_lock(holder)
        holder.commit()
        thread.join(10)
        assert not thread.is_alive()
        return result
    finally:
        holder.close()
        admin.close()
        runner.close()


def test_reassignment_does_not_supersede_a_worker_that_came_back_and_claimed(database_url, lost_worker_job):
    """Found in review of reassign_lost_jobs_v1: it picked its candidates without locks and
    redispatch_job_v1 re-checked only 'completed/cancelled', so a worker that came back between the
    two had its freshly claimed stage cancelled and the job restarted from scratch."""
    (uid, session), job = lost_worker_job

    def worker_comes_back_and_claims(conn):
        conn.execute("SELECT worker_heartbeat_v1(%s, %s, NULL)", [uid, session])
        row = conn.execute("SELECT id FROM claim_task_v1(%s, %s, 'media', 30)", [uid, session]).fetchone()
        assert row is not None

    result = _reassign_racing(database_url, worker_comes_back_and_claims)
    assert "error" not in result, result
    assert result["rows"] == []
    assert one("SELECT execution_id FROM job_schedule WHERE job_id = %s", [job]) == 1
    assert one("SELECT status FROM jobs WHERE id = %s", [job]) == "running"
    assert one("SELECT count(*) FROM queue_tasks WHERE job_id = %s AND state = 'running'", [job]) == 1


def test_reassignment_does_not_restart_a_job_that_failed_meanwhile(database_url, lost_worker_job):
    """The same race, when the stage fails for good meanwhile: the failed job must stay failed
    (only an operator's retry leaves 'failed'), not be restarted as a new execution."""
    (uid, session), job = lost_worker_job

    def worker_comes_back_and_fails(conn):
        conn.execute("SELECT worker_heartbeat_v1(%s, %s, NULL)", [uid, session])
        task, token = conn.execute(
            "SELECT id, lease_token FROM claim_task_v1(%s, %s, 'media', 30)", [uid, session]
        ).fetchone()
        outcome = conn.execute(
            "SELECT outcome FROM fail_task_v1(%s, %s, %s, %s, 'broken', false)", [task, token, uid, session]
        ).fetchone()[0]
        assert outcome == "failed"
        conn.execute(
            "UPDATE queue_workers SET last_heartbeat_at = now() - interval '1 hour' WHERE uid = %s", [uid]
        )

    result = _reassign_racing(database_url, worker_comes_back_and_fails)
    assert "error" not in result, result
    assert result["rows"] == []
    assert one("SELECT status FROM jobs WHERE id = %s", [job]) == "failed"
    assert one("SELECT execution_id FROM job_schedule WHERE job_id = %s", [job]) == 1


def test_reassignment_skips_a_job_finished_meanwhile_instead_of_failing_the_batch(
    database_url, lost_worker_job, enqueue, make_worker_row
):
    """A candidate that was cancelled meanwhile made redispatch_job_v1 raise JE409, which aborted
    the whole reassignment statement: no other lost job of the batch was reassigned that round."""
    _, job = lost_worker_job

    def operator_cancels(conn):
        conn.execute("SELECT cancel_job_v1(%s)", [job])

    result = _reassign_racing(database_url, operator_cancels)
    assert "error" not in result, result
    assert result["rows"] == []
    assert one("SELECT status FROM jobs WHERE id = %s", [job]) == "cancelled"


def test_reassignment_still_moves_a_job_whose_worker_is_lost(lost_worker_job):
    _, job = lost_worker_job
    assert [release.job_id for release in repository.release_jobs(30, 10)] == [job]
    assert one("SELECT execution_id FROM job_schedule WHERE job_id = %s", [job]) == 2
    assert one("SELECT assigned_worker_uid FROM job_schedule WHERE job_id = %s", [job]) is None


def test_an_open_finish_transaction_and_an_operator_click_do_not_stall_other_claims(
    database_url, make_worker_row, enqueue
):
    """A worker publishes outputs inside its finish transaction (the S3 backend copies the object
    there). While that transaction is open, an operator pauses the same job: lock_job_for_control_v1
    takes queue_scheduler_state FOR UPDATE, then waits for the job's schedule row. A claim by any
    other worker, for any other job, then waits for the scheduler row until the copy ends."""
    finishing_worker = make_worker_row("w-finishing", concurrency=2)
    other_worker = make_worker_row("w-other", concurrency=2)
    busy_job = enqueue("noop", {})
    task = claim(finishing_worker)
    assert task.job_id == busy_job
    enqueue("noop", {})  # unrelated work for the other worker

    finisher = psycopg.connect(database_url)
    operator = psycopg.connect(database_url, autocommit=True)
    claimer = psycopg.connect(database_url, autocommit=True)
    admin = psycopg.connect(database_url, autocommit=True)
    try:
        uid, session = finishing_worker
        outcome = finisher.execute(
            "SELECT outcome FROM finish_task_v1(%s, %s, %s, %s, NULL, '[]', '[]')",
            [task.id, task.lease_token, uid, session],
        ).fetchone()[0]
        assert outcome == "completed"  # ...and the transaction stays open: the copy is running

        def operator_pauses():
            try:
                operator.execute("SELECT set_paused_v1(%s, true)", [busy_job])
            except psycopg.Error:
                pass  # once the finish commits the job is completed: "cannot pause" is right

        pause = threading.Thread(target=operator_pauses, daemon=True)
        pause.start()
        # The control finds the row busy and waits for it *without* the scheduler lock (pg_sleep
        # between NOWAIT attempts): a Timeout wait, where it used to be a Lock wait.
        _wait_until_blocked(admin, operator.info.backend_pid, events=("Lock", "Timeout"))

        claimed: dict = {}

        def other_claim():
            claimed["row"] = claimer.execute(
                "SELECT id FROM claim_task_v1(%s, %s, 'media', 30)", list(other_worker)
            ).fetchone()

        thread = threading.Thread(target=other_claim, daemon=True)
        thread.start()
        thread.join(3.0)
        stalled = thread.is_alive()
        finisher.commit()
        thread.join(10)
        pause.join(10)
        assert not stalled, "a claim for an unrelated job waited for another job's finish transaction"
    finally:
        for conn in (finisher, operator, claimer, admin):
            conn.close()
