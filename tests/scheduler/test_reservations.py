"""Dedicated execution in SQL (55_reservations.sql): both sides of a reservation are enforced by the
claim, binds are exclusive and fenced by generation, and the maintenance sweep returns lost
reservations to requested and timed-out ones to shared execution."""

import pytest

from scheduler import repository
from tests.kit.db import claim, expire_lease, job_status, lease_of, make_available, one, silence_worker, sql

pytestmark = pytest.mark.django_db


def bind(reservation, worker, stale=60.0):
    return repository.bind_reservation(reservation, worker[0], worker[1], stale_seconds=stale)


def reservation_row(rid):
    return one(
        "SELECT row_to_json(r) FROM queue_reservations r WHERE id = %s",
        [rid],
    )


def test_a_dedicated_job_runs_only_on_its_reserved_worker(make_worker_row, enqueue):
    shared = make_worker_row("shared")
    job = enqueue()
    reservation = repository.reserve_job(job)
    assert claim(shared) is None
    reserved = make_worker_row("reserved")
    assert bind(reservation, reserved) == 1
    assert claim(reserved).job_id == job


def test_a_reserved_worker_never_takes_shared_work_webhooks_included(make_worker_row, enqueue):
    shared = make_worker_row("shared")
    enqueue(webhook_url="https://example.com/hook")
    task = claim(shared)
    repository.finish(lease_of(task, shared))  # queues the shared job's webhook
    enqueue()  # and another shared job
    reserved = make_worker_row("reserved")
    dedicated = enqueue()
    reservation = repository.reserve_job(dedicated)
    bind(reservation, reserved)
    assert claim(reserved).job_id == dedicated
    assert claim(reserved) is None
    assert claim(reserved, pool="background") is None


def test_the_dedicated_jobs_own_webhook_runs_on_its_worker_which_then_releases_it(make_worker_row, enqueue):
    shared = make_worker_row("shared")
    job = enqueue(webhook_url="https://example.com/hook")
    reservation = repository.reserve_job(job)
    reserved = make_worker_row("reserved")
    bind(reservation, reserved)
    repository.finish(lease_of(claim(reserved), reserved))
    assert job_status(job) == "completed"
    assert claim(shared, pool="background") is None  # the webhook is the reserved worker's
    assert repository.finish_reservation(reservation, *reserved) == "running"
    webhook = claim(reserved, pool="background")
    assert webhook.task_type == "webhook"
    assert repository.finish_reservation(reservation, *reserved) == "running"
    repository.finish(lease_of(webhook, reserved))
    assert repository.finish_reservation(reservation, *reserved) == "released"
    assert reservation_row(reservation)["state"] == "released"
    assert one("SELECT execution_mode FROM job_schedule WHERE job_id = %s", [job]) == "shared"


def test_dedicating_is_idempotent_and_refused_where_it_cannot_apply(make_worker_row, enqueue):
    job = enqueue()
    first = repository.reserve_job(job)
    assert repository.reserve_job(job) == first
    assert one("SELECT count(*) FROM queue_reservations WHERE job_id = %s", [job]) == 1
    assert "waiting for a dedicated worker" in one("SELECT log FROM jobs WHERE id = %s", [job])

    worker = make_worker_row("w")
    targeted = enqueue(required_worker_uid="w")
    with pytest.raises(repository.ActionNotAllowed, match="targeted at worker w"):
        repository.reserve_job(targeted)
    running = enqueue(priority=10)
    assert claim(worker).job_id == running
    with pytest.raises(repository.ActionNotAllowed, match="running"):
        repository.reserve_job(running)
    split = enqueue(params={"split": "chunks", "chunk_seconds": 10})
    with pytest.raises(repository.ActionNotAllowed, match="split across the farm"):
        repository.reserve_job(split)
    # `auto` is decided at the dispatch, which keeps a dedicated job whole (workers/stages/split.py).
    assert repository.reserve_job(enqueue(params={"split": "auto"}))
    repository.cancel(split)
    with pytest.raises(repository.ActionNotAllowed, match="cancelled"):
        repository.reserve_job(split)
    with pytest.raises(repository.JobNotFound):
        repository.reserve_job("00000000-0000-0000-0000-000000000000")


def test_returning_to_shared_execution_only_while_unbound(make_worker_row, enqueue):
    shared = make_worker_row("shared")
    job = enqueue()
    reservation = repository.reserve_job(job)
    assert repository.unreserve_job(job) == reservation
    assert reservation_row(reservation)["state"] == "released"
    with pytest.raises(repository.ActionNotAllowed, match="not dedicated"):
        repository.unreserve_job(job)
    assert claim(shared).job_id == job  # nothing lost: it runs on shared workers now

    other = enqueue()
    bound = repository.reserve_job(other)
    bind(bound, make_worker_row("reserved"))
    with pytest.raises(repository.ActionNotAllowed, match="is bound to worker reserved"):
        repository.unreserve_job(other)


def test_a_live_binding_is_exclusive_and_a_lost_one_is_taken_over_with_a_new_generation(
    make_worker_row, enqueue
):
    job = enqueue()
    reservation = repository.reserve_job(job)
    first = make_worker_row("first")
    assert bind(reservation, first) == 1
    assert bind(reservation, first) == 1  # the same session again: nothing changes
    second = make_worker_row("second")
    with pytest.raises(repository.ActionNotAllowed, match="bound to worker first, which is alive"):
        bind(reservation, second)

    task = claim(first)
    silence_worker("first")
    assert bind(reservation, second) == 2
    assert one("SELECT reservation_id FROM queue_workers WHERE uid = 'first'") is None
    assert one("SELECT lifecycle FROM queue_workers WHERE uid = 'first'") == "draining"
    # The old generation's writes are rejected; the job runs again on the new worker.
    lease = lease_of(task, first)
    assert not repository.report_progress(lease, 10).accepted
    assert repository.finish(lease).outcome == "rejected"
    again = claim(second)
    assert again.job_id == job and again.execution_id == 2
    assert claim(first) is None


def test_binding_a_reservation_that_is_no_longer_requested_is_refused(make_worker_row, enqueue):
    job = enqueue()
    reservation = repository.reserve_job(job)
    repository.unreserve_job(job)
    with pytest.raises(repository.ActionNotAllowed, match="released, no longer requested"):
        bind(reservation, make_worker_row("late"))
    with pytest.raises(repository.JobNotFound):
        bind("00000000-0000-0000-0000-000000000000", make_worker_row("other"))


def test_the_sweep_returns_a_lost_workers_reservation_and_fails_an_unbound_one(make_worker_row, enqueue):
    job = enqueue()
    reservation = repository.reserve_job(job)
    worker = make_worker_row("reserved")
    bind(reservation, worker)
    task = claim(worker)
    expire_lease(task.id)
    silence_worker("reserved")
    repository.recover_expired(10)
    changes = repository.sweep_reservations(lost_seconds=4, timeout_seconds=600)
    assert [(c.reservation_id, c.outcome) for c in changes] == [(reservation, "requested")]
    assert "no heartbeat" in changes[0].detail
    row = reservation_row(reservation)
    assert (row["state"], row["worker_uid"], row["generation"]) == ("requested", None, 1)
    assert one("SELECT assigned_worker_uid FROM job_schedule WHERE job_id = %s", [job]) is None

    # Nobody binds it: once the timeout passes it fails and the job is shared again.
    sql(
        "UPDATE queue_reservations SET requested_at = now() - interval '11 minutes' WHERE id = %s",
        [reservation],
    )
    changes = repository.sweep_reservations(lost_seconds=4, timeout_seconds=600)
    assert [(c.outcome, c.detail) for c in changes] == [("failed", changes[0].detail)]
    assert "no worker bound it within 10m00s" in changes[0].detail
    assert reservation_row(reservation)["state"] == "failed"
    assert one("SELECT execution_mode FROM job_schedule WHERE job_id = %s", [job]) == "shared"
    assert "nothing is lost" in one("SELECT log FROM jobs WHERE id = %s", [job])
    make_available(task.id)  # the lost attempt's retry backoff is not what this test is about
    shared = make_worker_row("shared")
    assert claim(shared).job_id == job


def test_provisioning_is_taken_once_and_its_result_recorded(enqueue):
    job = enqueue(params={"x": 1})
    reservation = repository.reserve_job(job)
    (taken,) = repository.take_provisioning(10, hold_seconds=30)
    assert (taken.reservation_id, taken.attempt, taken.job_id, taken.params) == (
        reservation,
        1,
        job,
        {"x": 1},
    )
    assert repository.take_provisioning(10, hold_seconds=30) == []  # held while it runs
    assert repository.record_provisioning(reservation, 1, "exit 3: no capacity", retry_seconds=0)
    assert reservation_row(reservation)["last_error"] == "exit 3: no capacity"
    (again,) = repository.take_provisioning(10, hold_seconds=30)
    assert again.attempt == 2
    assert not repository.record_provisioning(reservation, 1, None, retry_seconds=0)  # a stale attempt


def test_a_reregistered_uid_is_not_bound_any_more(make_worker_row, enqueue):
    job = enqueue()
    reservation = repository.reserve_job(job)
    bind(reservation, make_worker_row("reserved"))
    replaced = make_worker_row("reserved")  # a new process of the same uid
    assert one("SELECT reservation_id FROM queue_workers WHERE uid = 'reserved'") is None
    (change,) = repository.sweep_reservations(lost_seconds=4, timeout_seconds=600)
    assert change.outcome == "requested" and "a new process took its uid" in change.detail
    assert bind(reservation, replaced) == 2
