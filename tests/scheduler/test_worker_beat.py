"""repository.worker_beat: a worker's whole heartbeat in one message (its lock and statement
timeouts, then worker_beat_v1; with no lease to renew, the idle beat's plain UPDATE), with the
answers heartbeat_tasks gives and the worker row's refresh, its settings for that transaction only,
and a lock wait bounded by them."""

import time

import psycopg
import pytest
from django.db import connection

from scheduler import repository
from tests.kit.db import claim, database_url, expire_lease, lease_of, one, sql

pytestmark = pytest.mark.django_db(transaction=True)


def beat(worker, leases, sample=None, lock_timeout="800ms"):
    return repository.worker_beat(
        worker[0], worker[1], leases, 30, sample, lock_timeout=lock_timeout, statement_timeout="5s"
    )


def test_a_beat_renews_leases_reports_cancellation_and_rejects_a_lost_one(make_worker_row, enqueue):
    worker = make_worker_row()
    kept_job, lost_job = enqueue(), enqueue()
    kept, lost = claim(worker), claim(worker)
    assert {kept.job_id, lost.job_id} == {kept_job, lost_job}
    repository.cancel(kept.job_id)
    expire_lease(lost.id)
    before = one("SELECT lease_expires_at FROM queue_tasks WHERE id = %s", [kept.id])

    lifecycle, answers = beat(worker, [lease_of(kept, worker), lease_of(lost, worker)], {"cpu_percent": 7})

    assert lifecycle == "active"
    by_task = {answer.task_id: answer for answer in answers}
    assert by_task[kept.id].accepted and by_task[kept.id].cancel_requested
    assert not by_task[lost.id].accepted and by_task[lost.id].reason
    assert one("SELECT lease_expires_at FROM queue_tasks WHERE id = %s", [kept.id]) > before
    assert one("SELECT system_sample ->> 'cpu_percent' FROM queue_workers WHERE uid = %s", [worker[0]]) == "7"
    audited = one(
        "SELECT count(*) FROM queue_fence_audit WHERE task_id = %s AND operation = 'heartbeat' AND NOT accepted",
        [lost.id],
    )
    assert audited == 1


def test_an_idle_beat_refreshes_the_worker_row_and_an_old_session_is_superseded(make_worker_row):
    old = make_worker_row("box")
    sql("UPDATE queue_workers SET last_heartbeat_at = now() - interval '1 hour' WHERE uid = 'box'")
    assert beat(old, []) == ("active", [])
    assert one("SELECT now() - last_heartbeat_at < interval '1 minute' FROM queue_workers WHERE uid = 'box'")
    make_worker_row("box")  # the process restarted: a new session of the same uid
    with pytest.raises(repository.SessionSuperseded):
        beat(old, [])


def test_the_timeouts_last_for_the_beat_only_and_bound_its_lock_wait(make_worker_row):
    worker = make_worker_row()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('lock_timeout'), current_setting('statement_timeout'),"
            " current_setting('synchronous_commit')"
        )
        defaults = cursor.fetchone()
    beat(worker, [])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('lock_timeout'), current_setting('statement_timeout'),"
            " current_setting('synchronous_commit')"
        )
        assert cursor.fetchone() == defaults  # no session state left behind (PgBouncer's transaction mode)

    with psycopg.connect(database_url()) as holder:  # a transaction holding the worker row
        holder.execute("SELECT 1 FROM queue_workers WHERE uid = %s FOR UPDATE", [worker[0]])
        started = time.monotonic()
        with pytest.raises(psycopg.errors.LockNotAvailable):
            beat(worker, [], lock_timeout="300ms")
        waited = time.monotonic() - started
    assert waited < 5, waited  # gave up after its lock timeout, not after the holder let go
    assert beat(worker, [])[0] == "active"


@pytest.mark.parametrize("control", ["drain_worker", "evacuate_worker"])
@pytest.mark.parametrize("with_leases", [False, True], ids=["idle beat", "beat with a lease"])
def test_a_drained_worker_that_went_silent_comes_back_draining_not_claiming(
    control, with_leases, make_worker_row, enqueue
):
    """An operator drained the worker; it missed heartbeats long enough to be reported offline.
    Its next heartbeat must bring it back draining: before, it came back active and claimed again."""
    drained = make_worker_row()
    make_worker_row()  # another worker, active and fresh: the one the drained worker's jobs move to
    enqueue()
    running = claim(drained) if with_leases else None
    getattr(repository, control)(drained[0])
    sql(
        "UPDATE queue_workers SET last_heartbeat_at = now() - interval '1 minute' WHERE uid = %s",
        [drained[0]],
    )
    assert repository.mark_stale_workers(30) == [drained[0]]

    lifecycle, _ = beat(drained, [lease_of(running, drained)] if running else [])

    assert lifecycle == "draining"
    assert one("SELECT lifecycle FROM queue_workers WHERE uid = %s", [drained[0]]) == "draining"
    enqueue()
    assert claim(drained) is None
    # An undrain ends it; so does a new process (a registration), for the next time it goes silent.
    assert repository.undrain_worker(drained[0]) == "active"
    sql(
        "UPDATE queue_workers SET last_heartbeat_at = now() - interval '1 minute' WHERE uid = %s",
        [drained[0]],
    )
    repository.mark_stale_workers(30)
    assert beat(drained, [])[0] == "active"


def test_a_worker_that_was_not_drained_comes_back_active(make_worker_row):
    worker = make_worker_row()
    sql(
        "UPDATE queue_workers SET last_heartbeat_at = now() - interval '1 minute' WHERE uid = %s", [worker[0]]
    )
    assert repository.mark_stale_workers(30) == [worker[0]]
    assert beat(worker, [])[0] == "active"
    repository.drain_worker(worker[0])
    again = make_worker_row(worker[0])  # a new process of the same uid: the drain ended with the old one
    assert sql("SELECT lifecycle, drained_at FROM queue_workers WHERE uid = %s", [again[0]]) == [
        ("active", None)
    ]
