"""Fenced writes: a stale owner changes nothing, and every rejection is audited."""

import uuid

import pytest
from django.db import transaction

from scheduler import repository
from tests.kit.db import claim, expire_lease, lease_of, make_available, one, sql, task_state

pytestmark = pytest.mark.django_db


def _attempt_everything(lease):
    """Every fenced write a stale owner might try; returns the outcomes."""
    return {
        "heartbeat": repository.heartbeat_tasks(lease.worker_uid, lease.session_id, [lease], 30)[0].accepted,
        "progress": repository.report_progress(lease, 50, lines=["late line"]).accepted,
        "finish": repository.finish(lease, children=[repository.Child("noop", {"late": True})]).accepted,
        "fail": repository.fail(lease, "late failure").accepted,
        "release": repository.release(lease, "late release").accepted,
    }


def _children_of(task_id):
    return one("SELECT count(*) FROM queue_tasks WHERE parent_task_id = %s", [task_id])


def test_an_old_token_is_rejected_after_the_task_was_reclaimed(make_worker_row, enqueue):
    worker = make_worker_row()
    enqueue()
    first = claim(worker)
    expire_lease(first.id)
    repository.recover_expired()
    make_available(first.id)
    second = claim(worker)
    assert second.id == first.id and second.attempt == 2
    outcomes = _attempt_everything(lease_of(first, worker))
    assert not any(outcomes.values()), outcomes
    assert _children_of(first.id) == 0
    assert task_state(first.id) == "running"  # still the second attempt's
    reasons = {
        r[0]
        for r in sql("SELECT reason FROM queue_fence_audit WHERE NOT accepted AND task_id = %s", [first.id])
    }
    assert reasons == {"lease token is not current"}
    assert repository.finish(lease_of(second, worker)).outcome == "completed"


def test_an_old_session_is_rejected(make_worker_row, enqueue):
    old = make_worker_row("box")
    enqueue()
    task = claim(old)
    make_worker_row("box")  # the process restarted: a new session of the same uid
    with pytest.raises(repository.SessionSuperseded), transaction.atomic():
        repository.heartbeat_tasks("box", old[1], [lease_of(task, old)], 30)
    lease = lease_of(task, old)
    assert not repository.report_progress(lease, 10).accepted
    assert repository.finish(lease, children=[repository.Child("noop")]).outcome == "rejected"
    assert repository.fail(lease, "x").outcome == "rejected"
    assert _children_of(task.id) == 0


def test_an_expired_lease_is_rejected_even_before_recovery(make_worker_row, enqueue):
    worker = make_worker_row()
    enqueue()
    task = claim(worker)
    expire_lease(task.id)
    outcomes = _attempt_everything(lease_of(task, worker))
    assert not any(outcomes.values())
    assert one("SELECT reason FROM queue_fence_audit WHERE operation = 'finish'") == "lease expired"


def test_a_new_execution_fences_the_old_one(make_worker_row, enqueue):
    worker = make_worker_row()
    job = enqueue()
    task = claim(worker)
    repository.redispatch(job, "test")
    lease = lease_of(task, worker)
    assert repository.finish(lease, children=[repository.Child("noop")]).outcome == "rejected"
    assert one("SELECT execution_id FROM job_schedule WHERE job_id = %s", [job]) == 2
    fresh = claim(worker)
    assert fresh.execution_id == 2 and fresh.placement == "dispatch"


def test_a_random_token_is_rejected(make_worker_row, enqueue):
    worker = make_worker_row()
    enqueue()
    task = claim(worker)
    forged = repository.Lease(task.id, uuid.uuid4(), worker[0], worker[1])
    assert repository.finish(forged).outcome == "rejected"
    assert task_state(task.id) == "running"


def test_a_replayed_finish_is_idempotent(make_worker_row, enqueue):
    worker = make_worker_row()
    enqueue()
    task = claim(worker)
    lease = lease_of(task, worker)
    children = [repository.Child("noop", {"i": 1})]
    assert repository.finish(lease, children=children).outcome == "completed"
    again = repository.finish(lease, children=children)
    assert again.outcome == "completed" and again.reason == "already recorded"
    assert _children_of(task.id) == 1
    assert one("SELECT count(*) FROM queue_fence_audit WHERE operation = 'finish' AND accepted") == 1


def test_cancellation_reaches_the_heartbeat_and_the_finish_publishes_nothing(make_worker_row, enqueue):
    worker = make_worker_row()
    job = enqueue()
    task = claim(worker)
    lease = lease_of(task, worker)
    repository.cancel(job)
    beat = repository.heartbeat_tasks(worker[0], worker[1], [lease], 30)[0]
    assert beat.accepted and beat.cancel_requested
    assert repository.finish(lease, children=[repository.Child("noop")]).outcome == "cancelled"
    assert _children_of(task.id) == 0
    assert one("SELECT status FROM jobs WHERE id = %s", [job]) == "cancelled"
