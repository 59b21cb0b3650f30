"""Manual ordering checked against a model list, forced rebalances included."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler import repository
from tests.kit.db import claim, one, sql

pytestmark = pytest.mark.django_db


def _group_order(job_ids):
    rows = sql(
        "SELECT job_id FROM job_schedule WHERE job_id = ANY(%s) ORDER BY position, job_id", [list(job_ids)]
    )
    return [r[0] for r in rows]


def _apply(model, index, direction):
    job = model[index]
    model.remove(job)
    target = {"up": max(index - 1, 0), "down": min(index + 1, len(model)), "top": 0, "bottom": len(model)}[
        direction
    ]
    model.insert(target, job)


operations = st.lists(
    st.tuples(st.integers(min_value=0, max_value=5), st.sampled_from(["up", "down", "top", "bottom"])),
    min_size=1,
    max_size=25,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations, squeeze=st.booleans())
def test_moves_reorder_the_queue_like_moves_on_a_plain_list(enqueue, ops, squeeze):
    sql("DELETE FROM queue_tasks; DELETE FROM job_schedule; DELETE FROM jobs")
    jobs = [enqueue() for _ in range(6)]
    if squeeze:
        # Adjacent positions: no integer gap is left, so the first up/down must rebalance the group.
        sql("UPDATE job_schedule SET position = 5000 + array_position(%s::uuid[], job_id)", [jobs])
    model = list(jobs)
    for index, direction in ops:
        job = model[index]
        _apply(model, index, direction)
        repository.move(job, direction)
        assert _group_order(jobs) == model, (index, direction)


def test_a_forced_rebalance_keeps_the_order(enqueue):
    jobs = [enqueue() for _ in range(4)]
    sql("UPDATE job_schedule SET position = 100 + array_position(%s::uuid[], job_id)", [jobs])
    before = one("SELECT rebalances FROM queue_scheduler_state")
    repository.move(jobs[3], "up")
    assert _group_order(jobs) == [jobs[0], jobs[1], jobs[3], jobs[2]]
    assert one("SELECT rebalances FROM queue_scheduler_state") == before + 1
    positions = [r[0] for r in sql("SELECT position FROM job_schedule ORDER BY position")]
    assert all(b - a >= 2 for a, b in zip(positions, positions[1:], strict=False))


def test_top_of_a_worker_queue_beats_the_pending_group_but_not_higher_priority(make_worker_row, enqueue):
    worker = make_worker_row("w", concurrency=1)
    pending = [enqueue() for _ in range(3)]
    targeted = enqueue(required_worker_uid="w")
    urgent = enqueue(priority=5)
    repository.run_next(targeted)
    assert claim(worker).job_id == urgent
    sql("UPDATE queue_tasks SET state = 'completed' WHERE state = 'running'")
    sql("SELECT refresh_job_v1(job_id) FROM job_schedule")
    assert claim(worker).job_id == targeted
    assert pending  # untouched, still queued behind


def test_moves_on_finished_jobs_are_refused(make_worker_row, enqueue):
    worker = make_worker_row()
    job = enqueue()
    repository.finish(repository.Lease.of(claim(worker), *worker))
    for action in (
        lambda: repository.move(job, "up"),
        lambda: repository.pause(job),
        lambda: repository.set_priority(job, 3),
        lambda: repository.cancel(job),
    ):
        with pytest.raises(repository.ActionNotAllowed, match="completed"):
            action()


def test_an_unknown_job_is_not_found(enqueue):
    import uuid

    with pytest.raises(repository.JobNotFound):
        repository.move(uuid.uuid4(), "top")


def test_priority_is_bounded(enqueue):
    job = enqueue()
    with pytest.raises(repository.InvalidArgument) as error:
        repository.set_priority(job, 5000)
    assert error.value.field == "priority"
