"""Recovery by liveness, lost workers, and recovery racing a late finish."""

import threading

import pytest
from django.db import connection, transaction

from scheduler import repository
from tests.kit.db import claim, expire_lease, job_status, lease_of, one, sql, task_state

pytestmark = pytest.mark.django_db


def test_an_expired_lease_goes_to_retry_wait_once(make_worker_row, enqueue):
    worker = make_worker_row()
    enqueue()
    task = claim(worker)
    expire_lease(task.id)
    assert repository.recover_expired() == [(task.id, "retry_wait")]
    assert repository.recover_expired() == []
    assert one("SELECT attempt FROM queue_tasks WHERE id = %s", [task.id]) == 1


def test_an_exhausted_task_fails_and_queues_one_webhook_which_never_recurses(make_worker_row, enqueue):
    worker = make_worker_row()
    job = enqueue(max_attempts=1, webhook_url="https://example.com/hook")
    task = claim(worker)
    expire_lease(task.id)
    assert repository.recover_expired() == [(task.id, "failed")]
    assert job_status(job) == "failed"
    webhook = claim(worker, pool="background")
    sql("UPDATE queue_tasks SET max_attempts = 1 WHERE id = %s", [webhook.id])
    expire_lease(webhook.id)
    assert repository.recover_expired() == [(webhook.id, "failed")]
    assert one("SELECT count(*) FROM queue_tasks WHERE task_type = 'webhook'") == 1


def test_a_cancelled_jobs_expired_task_ends_cancelled(make_worker_row, enqueue):
    worker = make_worker_row()
    job = enqueue()
    task = claim(worker)
    repository.cancel(job)
    assert job_status(job) == "running"  # the worker has not seen it yet
    expire_lease(task.id)
    repository.recover_expired()
    assert task_state(task.id) == "cancelled" and job_status(job) == "cancelled"


@pytest.mark.django_db(transaction=True)
def test_recovery_skips_a_task_whose_finish_is_in_flight(make_worker_row, enqueue):
    worker = make_worker_row()
    enqueue()
    task = claim(worker)
    lease = lease_of(task, worker)
    in_finish = threading.Event()
    release = threading.Event()
    outcome = {}

    def finisher():
        with transaction.atomic():
            outcome["finish"] = repository.finish(lease).outcome
            in_finish.set()
            release.wait(10)
            # The lease runs out while the finish transaction still holds the row locks.
        connection.close()

    thread = threading.Thread(target=finisher)
    thread.start()
    assert in_finish.wait(10)
    expire_lease_elsewhere = threading.Thread(target=lambda: None)
    expire_lease_elsewhere.start()
    assert repository.recover_expired() == []  # nothing expired yet, and the row is locked anyway
    release.set()
    thread.join(10)
    assert outcome["finish"] == "completed"
    assert task_state(task.id) == "completed"
    assert repository.recover_expired() == []


def test_a_late_finish_after_recovery_is_rejected(make_worker_row, enqueue):
    worker = make_worker_row()
    enqueue()
    task = claim(worker)
    expire_lease(task.id)
    repository.recover_expired()
    assert repository.finish(lease_of(task, worker)).outcome == "rejected"
    assert task_state(task.id) == "retry_wait"


def test_re_registering_expires_the_previous_sessions_leases(make_worker_row, enqueue):
    old = make_worker_row("box")
    enqueue()
    task = claim(old)
    make_worker_row("box")
    assert repository.recover_expired() == [(task.id, "retry_wait")]


def test_retention_purges_old_jobs_and_keeps_the_metric_counters_monotonic(make_worker_row, enqueue):
    worker = make_worker_row()
    job = enqueue()
    task = claim(worker)
    stale = lease_of(task, worker)
    expire_lease(task.id)
    repository.recover_expired()
    assert repository.finish(stale).outcome == "rejected"
    sql("UPDATE queue_tasks SET state = 'cancelled', finished_at = now() WHERE id = %s", [task.id])
    sql("UPDATE jobs SET status = 'cancelled', finished_at = now() - interval '40 days' WHERE id = %s", [job])
    sql("UPDATE queue_fence_audit SET at = now() - interval '40 days'")
    before = sql(
        "SELECT count(*) FILTER (WHERE NOT accepted), count(*) FILTER (WHERE operation = 'recover') FROM queue_fence_audit"
    )[0]
    assert repository.purge_history(30) == 1
    assert one("SELECT count(*) FROM jobs WHERE id = %s", [job]) == 0
    assert one("SELECT count(*) FROM queue_fence_audit") == 0
    assert sql("SELECT purged_rejected, purged_recoveries FROM queue_scheduler_state")[0] == before


def test_the_recovery_turn_goes_to_one_asker_per_period_and_counts_the_live_workers(make_worker_row):
    for _ in range(3):
        make_worker_row()
    silent = make_worker_row()
    sql("UPDATE queue_workers SET last_heartbeat_at = now() - interval '1 hour' WHERE uid = %s", [silent[0]])
    sql("UPDATE queue_scheduler_state SET last_recovery_at = NULL WHERE id = 1")
    first = repository.take_recovery_round(2.5, 60)
    second = repository.take_recovery_round(2.5, 60)
    assert (first.taken, second.taken) == (True, False)  # the second asker finds the pass just made
    assert first.live_workers == second.live_workers == 3  # the silent one is not counted


def test_a_large_farm_spaces_each_workers_recovery_asks(make_worker_row):
    from types import SimpleNamespace

    from workers.maintenance import ASKS_PER_INTERVAL, MAX_SPACING, Maintenance

    timing = SimpleNamespace(recovery_interval=5.0, stale_worker=60.0)
    worker = SimpleNamespace(uid="w-maint", timing=timing, log_extra={}, workspace_root=None)
    maintenance = Maintenance(worker)
    make_worker_row()
    maintenance.recover()
    assert maintenance.spacing == 1.0  # a small farm: every worker asks every interval
    for _ in range(2 * ASKS_PER_INTERVAL - 1):
        make_worker_row()
    maintenance.recover()
    assert maintenance.spacing == 2.0  # twenty live workers: each asks every other interval
    for _ in range(int(MAX_SPACING * ASKS_PER_INTERVAL)):
        make_worker_row()
    maintenance.recover()
    assert maintenance.spacing == MAX_SPACING
