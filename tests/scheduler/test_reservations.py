"""Dedicated execution: both sides of a reservation are enforced by the claim."""

import pytest

from scheduler import repository
from tests.kit.db import claim, lease_of

pytestmark = pytest.mark.django_db


def test_a_dedicated_job_runs_only_on_its_reserved_worker(make_worker_row, enqueue):
    shared = make_worker_row("shared")
    job = enqueue()
    reservation = repository.reserve_job(job)
    assert claim(shared) is None
    reserved = make_worker_row("reserved")
    repository.bind_reservation(reservation, "reserved")
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
    repository.bind_reservation(reservation, "reserved")
    assert claim(reserved).job_id == dedicated
    assert claim(reserved) is None
    assert claim(reserved, pool="background") is None


def test_an_old_reservation_generation_is_fenced(make_worker_row, enqueue):
    reserved = make_worker_row("reserved")
    job = enqueue()
    first = repository.reserve_job(job)
    repository.bind_reservation(first, "reserved")
    task = claim(reserved)
    # The worker is rebound to a new reservation generation: its old claim may no longer write.
    repository.bind_reservation(repository.reserve_job(enqueue()), "reserved")
    lease = lease_of(task, reserved)
    assert not repository.report_progress(lease, 10).accepted
    assert repository.finish(lease, children=[repository.Child("noop")]).outcome == "rejected"
