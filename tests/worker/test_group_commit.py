"""Group commit (workers/finishes.py): finishes queued by several slots are written by whichever
slot gets the connection first, in one transaction; each keeps its own fence and outcome, and a
group that fails is written again finish by finish."""

import uuid

import pytest

from scheduler import repository
from tests.kit.db import sql
from workers.finishes import GroupCommit, _Finish

pytestmark = pytest.mark.django_db(transaction=True)


def claimed(make_worker_row, enqueue, count):
    uid, session = make_worker_row(concurrency=count)
    for _ in range(count):
        enqueue("noop", {"seconds": 0})
    tasks = [repository.claim(uid, session, "media", 30.0) for _ in range(count)]
    assert all(tasks)
    return [(t, repository.Lease.of(t, uid, session)) for t in tasks]


def queue(group, task, lease, result=None):
    """What a slot does before its turn on the connection comes: its finish waits in the queue."""
    waiting = _Finish(task.job_id, lease, result, [], [])
    group._queued.append(waiting)
    return waiting


def states():
    return sorted(r[0] for r in sql("SELECT state FROM queue_tasks"))


def test_the_slot_that_gets_the_connection_writes_every_queued_finish_in_one_transaction(
    make_worker_row, enqueue
):
    (t1, l1), (t2, l2), (t3, l3) = claimed(make_worker_row, enqueue, 3)
    group = GroupCommit()
    first, second = queue(group, t1, l1, {"n": 1}), queue(group, t2, l2, {"n": 2})
    assert group.finish(t3.job_id, l3, {"n": 3}, [], []).outcome == "completed"
    assert first.done.is_set() and second.done.is_set()
    assert (first.outcome.outcome, second.outcome.outcome) == ("completed", "completed")
    assert (group.groups, group.grouped) == (1, 3)
    assert states() == ["completed"] * 3
    assert sorted(r[0] for r in sql("SELECT (result ->> 'n')::int FROM queue_tasks")) == [1, 2, 3]
    # Three finishes, one commit: the three completions share one transaction id.
    assert len(sql("SELECT DISTINCT xmin::text FROM queue_tasks")) == 1


def test_each_finish_in_a_group_keeps_its_own_fence(make_worker_row, enqueue):
    (t1, l1), (t2, l2) = claimed(make_worker_row, enqueue, 2)
    stale = repository.Lease(l1.task_id, uuid.uuid4(), l1.worker_uid, l1.session_id)
    group = GroupCommit()
    rejected = queue(group, t1, stale)
    assert group.finish(t2.job_id, l2, None, [], []).outcome == "completed"
    assert rejected.outcome.outcome == "rejected"
    assert states() == ["completed", "running"]


def test_a_group_that_fails_is_written_again_finish_by_finish(make_worker_row, enqueue):
    (t1, l1), (t2, l2) = claimed(make_worker_row, enqueue, 2)
    group = GroupCommit()
    # A result PostgreSQL refuses (jsonb cannot hold \u0000): that finish fails, and with it its
    # group's transaction; the other finish is then written alone and completes.
    broken = queue(group, t1, l1, {"text": "\u0000"})
    assert group.finish(t2.job_id, l2, None, [], []).outcome == "completed"
    assert broken.done.is_set() and broken.error is not None and broken.outcome is None
    assert (group.groups, group.grouped) == (0, 0)
    assert states() == ["completed", "running"]


def test_finish_many_answers_each_finish_in_the_order_given(make_worker_row, enqueue):
    (t1, l1), (t2, l2), (t3, l3) = claimed(make_worker_row, enqueue, 3)
    stale = repository.Lease(l2.task_id, uuid.uuid4(), l2.worker_uid, l2.session_id)
    child = repository.Child("noop", {"seconds": 0})
    outcomes = repository.finish_many(
        [(l1, {"n": 1}, [], []), (stale, None, [], []), (l3, None, [child], [])]
    )
    assert [o.outcome for o in outcomes] == ["completed", "rejected", "completed"]
    assert outcomes[1].reason
    assert sql("SELECT state FROM queue_tasks WHERE id = %s", [t2.id]) == [("running",)]
    assert sql("SELECT result ->> 'n' FROM queue_tasks WHERE id = %s", [t1.id]) == [("1",)]
    # The third finish published its child, as finish_task_v1 alone would.
    assert sql("SELECT count(*) FROM queue_tasks WHERE parent_task_id = %s", [t3.id]) == [(1,)]
