"""Atomic publication of children, dedupe, the retry curve and manual retry."""

import pytest
from django.db import IntegrityError, transaction

from scheduler import repository
from tests.kit.db import claim, expire_lease, job_status, lease_of, make_available, one, sql, task_state

pytestmark = pytest.mark.django_db


def test_identical_siblings_stay_distinct_and_a_stale_parent_adds_none(make_worker_row, enqueue):
    worker = make_worker_row(concurrency=4)
    enqueue()
    first = claim(worker)
    expire_lease(first.id)
    repository.recover_expired()
    make_available(first.id)
    second = claim(worker)
    same = [repository.Child("noop", {"seconds": 0}), repository.Child("noop", {"seconds": 0})]
    assert repository.finish(lease_of(second, worker), children=same).outcome == "completed"
    assert repository.finish(lease_of(first, worker), children=same).outcome == "rejected"
    payloads = sql(
        "SELECT payload->>'index' FROM queue_tasks WHERE parent_task_id = %s ORDER BY 1", [first.id]
    )
    assert [p[0] for p in payloads] == ["0", "1"]


def test_the_database_refuses_a_duplicate_dedupe_key(make_worker_row, enqueue):
    worker = make_worker_row()
    enqueue()
    task = claim(worker)
    repository.finish(lease_of(task, worker), children=[repository.Child("noop")])
    with pytest.raises(IntegrityError), transaction.atomic():
        sql(
            """INSERT INTO queue_tasks (job_id, execution_id, task_type, payload, dedupe_key, wait_for_siblings,
                 placement, pool, resource_category, vram_mb, state, available_at, attempt, max_attempts,
                 timeout_seconds, progress, progress_detail, created_at)
               SELECT job_id, execution_id, task_type, payload, dedupe_key, false, placement, pool,
                 resource_category, vram_mb, 'pending', now(), 0, 4, 60, 0, '{}', now()
                 FROM queue_tasks WHERE parent_task_id = %s""",
            [task.id],
        )


@pytest.mark.parametrize(
    ("attempt", "seconds"), [(1, 15), (2, 16), (3, 31), (4, 96), (8, 2416), (9, 3600), (50, 3600)]
)
def test_the_retry_delay_grows_with_the_fourth_power_of_the_attempt_up_to_an_hour(attempt, seconds):
    assert one("SELECT extract(epoch FROM retry_delay_v1(%s))", [attempt]) == seconds


def test_a_failure_is_retried_with_backoff_then_fails_for_good(make_worker_row, enqueue):
    worker = make_worker_row()
    job = enqueue(max_attempts=2, webhook_url="https://example.com/hook")
    task = claim(worker)
    assert repository.fail(lease_of(task, worker), "first").outcome == "retry_wait"
    assert job_status(job) == "retry_wait"
    delay = one(
        "SELECT extract(epoch FROM available_at - finished_at) FROM queue_tasks WHERE id = %s", [task.id]
    )
    assert delay is None  # retry_wait keeps no finish time
    assert (
        14
        <= one("SELECT extract(epoch FROM available_at - now()) FROM queue_tasks WHERE id = %s", [task.id])
        <= 15
    )
    assert claim(worker) is None  # backoff
    make_available(task.id)
    again = claim(worker)
    assert again.attempt == 2
    assert repository.fail(lease_of(again, worker), "second").outcome == "failed"
    assert job_status(job) == "failed"
    assert one("SELECT count(*) FROM queue_tasks WHERE job_id = %s AND task_type = 'webhook'", [job]) == 1


def test_a_permanent_failure_skips_the_remaining_attempts(make_worker_row, enqueue):
    worker = make_worker_row()
    job = enqueue(max_attempts=5)
    task = claim(worker)
    assert repository.fail(lease_of(task, worker), "bad input", retryable=False).outcome == "failed"
    assert job_status(job) == "failed"


def test_manual_retry_resets_failed_stages_and_notifies_again(make_worker_row, enqueue):
    worker = make_worker_row(concurrency=4)
    job = enqueue(max_attempts=1, webhook_url="https://example.com/hook")
    dispatch = claim(worker)
    repository.finish(
        lease_of(dispatch, worker), children=[repository.Child("noop", {"i": i}) for i in range(2)]
    )
    a, b = claim(worker), claim(worker)
    repository.finish(lease_of(a, worker))
    repository.fail(lease_of(b, worker), "boom")
    assert job_status(job) == "failed"
    position = one("SELECT position FROM job_schedule WHERE job_id = %s", [job])
    with pytest.raises(repository.ActionNotAllowed):
        repository.pause(job)
    repository.retry(job)
    assert job_status(job) == "pending"
    assert task_state(a.id) == "completed"  # completed siblings are not replayed
    assert one("SELECT position FROM job_schedule WHERE job_id = %s", [job]) == position
    again = claim(worker)
    assert again.id == b.id and again.attempt == 1
    repository.finish(lease_of(again, worker))
    assert job_status(job) == "completed"
    events = sql(
        "SELECT payload->>'event', payload->>'manual_retry' FROM queue_tasks WHERE job_id = %s AND task_type = 'webhook' ORDER BY id",
        [job],
    )
    assert events == [("job.failed", "0"), ("job.completed", "1")]
    with pytest.raises(repository.ActionNotAllowed):
        repository.retry(job)


def test_a_stage_waiting_for_its_siblings_runs_after_all_of_them(make_worker_row, enqueue):
    worker = make_worker_row(concurrency=4)
    enqueue()
    dispatch = claim(worker)
    children = [
        repository.Child("noop", {"i": 0}),
        repository.Child("noop", {"i": 1}),
        repository.Child("noop", {"join": True}, wait_for_siblings=True),
    ]
    repository.finish(lease_of(dispatch, worker), children=children)
    first, second = claim(worker), claim(worker)
    assert claim(worker) is None  # the join waits
    repository.finish(lease_of(first, worker))
    assert claim(worker) is None
    repository.finish(lease_of(second, worker))
    join = claim(worker)
    assert join.payload["join"] is True
