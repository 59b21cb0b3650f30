"""The claim: eligibility, ordering, capacity, resource admission and placement."""

import pytest
from django.db import transaction

from scheduler import repository
from tests.kit.db import claim, job_status, lease_of, one, sql

pytestmark = pytest.mark.django_db


def test_it_claims_the_dispatch_and_assigns_the_worker(make_worker_row, enqueue):
    worker = make_worker_row("alpha")
    job = enqueue("noop", {"seconds": 0})
    task = claim(worker)
    assert task.job_id == job and task.placement == "dispatch" and task.attempt == 1
    assert task.lease_expires_at > task.deadline_at.replace(year=2000)  # both set
    assert one("SELECT assigned_worker_uid FROM job_schedule WHERE job_id = %s", [job]) == "alpha"
    assert job_status(job) == "running"
    assert claim(worker) is None


def test_it_orders_by_priority_then_position(make_worker_row, enqueue):
    worker = make_worker_row(concurrency=10)
    low = enqueue(priority=-5)
    first = enqueue()
    second = enqueue()
    high = enqueue(priority=10)
    repository.run_next(second)  # ahead of `first` within priority 0, never ahead of `high`
    order = [claim(worker).job_id for _ in range(4)]
    assert order == [high, second, first, low]


def test_paused_jobs_wait_until_resumed(make_worker_row, enqueue):
    worker = make_worker_row()
    job = enqueue()
    repository.pause(job)
    assert job_status(job) == "paused"
    assert claim(worker) is None
    repository.resume(job)
    assert claim(worker).job_id == job


def test_the_capacity_guard_counts_the_sessions_running_tasks(make_worker_row, enqueue):
    worker = make_worker_row(concurrency=2)
    for _ in range(3):
        enqueue()
    assert claim(worker) and claim(worker)
    assert claim(worker) is None
    other = make_worker_row(concurrency=1)
    assert claim(other) is not None


def _gpu_children(worker, count, vram):
    """Finish a dispatch that publishes `count` gpu_encode stages needing `vram` MB each."""
    task = claim(worker)
    children = [
        repository.Child("noop", {"n": i}, resource_category="gpu_encode", vram_mb=vram) for i in range(count)
    ]
    assert repository.finish(lease_of(task, worker), children=children).outcome == "completed"
    return task.job_id


def test_category_slots_and_vram_budget_are_enforced(make_worker_row, enqueue):
    worker = make_worker_row(concurrency=8, limits={"cpu": 8, "gpu_encode": 3}, vram=6000)
    enqueue()
    _gpu_children(worker, 3, 2500)
    assert claim(worker) is not None  # 2,500 MB
    assert claim(worker) is not None  # 5,000 MB
    assert claim(worker) is None  # a third would need 7,500 MB of 6,000
    assert one("SELECT sum(vram_mb) FROM queue_tasks WHERE state = 'running'") == 5000


def test_a_category_without_slots_is_not_claimed(make_worker_row, enqueue):
    worker = make_worker_row(concurrency=4, limits={"cpu": 4, "gpu_encode": 1}, vram=16000)
    enqueue()
    _gpu_children(worker, 2, 100)
    assert claim(worker).resource_category == "gpu_encode"
    assert claim(worker) is None  # the second gpu_encode stage waits for the only slot


def test_targeted_dispatch_goes_only_to_its_worker(make_worker_row, enqueue):
    other = make_worker_row("other")
    target = make_worker_row("target")
    job = enqueue(required_worker_uid="target")
    assert claim(other) is None
    assert claim(target).job_id == job


def test_job_stages_stay_on_the_assigned_worker(make_worker_row, enqueue):
    first = make_worker_row("first", concurrency=4)
    second = make_worker_row("second", concurrency=4)
    enqueue()
    task = claim(first)
    repository.finish(lease_of(task, first), children=[repository.Child("noop", {"i": 1})])
    assert claim(second) is None
    assert claim(first).placement == "job"


def test_a_gpu_dispatch_waits_for_a_worker_with_that_category(make_worker_row, enqueue):
    cpu_only = make_worker_row("cpu-only", limits={"cpu": 4})
    job = enqueue(required_category="gpu_encode", required_vram_mb=4000)
    assert claim(cpu_only) is None
    small_gpu = make_worker_row("small-gpu", limits={"cpu": 4, "gpu_encode": 1}, vram=2000)
    assert claim(small_gpu) is None
    big_gpu = make_worker_row("big-gpu", limits={"cpu": 4, "gpu_encode": 1}, vram=8000)
    assert claim(big_gpu).job_id == job


def test_a_draining_worker_claims_nothing(make_worker_row, enqueue):
    worker = make_worker_row("drainer")
    enqueue()
    repository.drain_worker("drainer")
    assert claim(worker) is None


def test_a_replaced_session_cannot_claim(make_worker_row, enqueue):
    old = make_worker_row("same")
    make_worker_row("same")
    enqueue()
    with pytest.raises(repository.SessionSuperseded), transaction.atomic():
        claim(old)


def test_the_claim_refuses_to_run_without_the_singleton(make_worker_row, enqueue):
    worker = make_worker_row()
    enqueue()
    sql("DELETE FROM queue_scheduler_state")
    with pytest.raises(Exception, match="singleton"), transaction.atomic():
        claim(worker)


def test_webhooks_run_in_the_background_pool_of_any_worker(make_worker_row, enqueue):
    worker = make_worker_row("media-box")
    job = enqueue(webhook_url="https://example.com/hook")
    task = claim(worker)
    repository.finish(lease_of(task, worker))
    other = make_worker_row("anyone")
    assert claim(other) is None  # media pool: nothing
    webhook = claim(other, pool="background")
    assert webhook.task_type == "webhook" and webhook.job_id == job
    assert webhook.payload["event"] == "job.completed"
