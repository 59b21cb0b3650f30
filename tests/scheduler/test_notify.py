"""notify_pool_v1: a transaction's new jobs are offered to the farm's free slots one notification
each, spread over the workers, and announced to every worker once the offers run out; each targeted
notification reaches its worker as one of its own (PostgreSQL folds identical notifications of one
transaction into one)."""

from collections import Counter

import psycopg
import pytest
from django.db import transaction

from scheduler import repository
from tests.kit.db import database_url

pytestmark = pytest.mark.django_db(transaction=True)


def notifications_of(enqueue, jobs: int, expected: int) -> list[str]:
    """The payloads of one transaction that enqueues `jobs` jobs."""
    with psycopg.connect(database_url(), autocommit=True) as listener:
        listener.execute("LISTEN jetencode_queue_tasks")
        with transaction.atomic():
            for _ in range(jobs):
                enqueue("noop", {"seconds": 0})
        return [n.payload for n in listener.notifies(timeout=2.0, stop_after=expected)]


def test_four_jobs_enqueued_in_one_transaction_reach_their_worker_as_four_notifications(
    make_worker_row, enqueue
):
    uid, _ = make_worker_row(concurrency=4)
    assert notifications_of(enqueue, 4, 4) == [f"media:{uid}#{n}" for n in (1, 2, 3, 4)]


def test_a_burst_is_spread_over_the_free_slots_and_the_rest_announced_to_every_worker(
    make_worker_row, enqueue
):
    """Nine jobs onto two idle 4-slot workers: four offers each, taking turns (each claimer starts
    at once), and the ninth job to every worker, as the farm is full."""
    a, _ = make_worker_row(concurrency=4)
    b, _ = make_worker_row(concurrency=4)
    payloads = notifications_of(enqueue, 9, 9)
    targets = [p.partition(":")[2].partition("#")[0] for p in payloads]
    assert Counter(targets) == {a: 4, b: 4, "": 1}
    assert payloads[-1] == "media"
    assert targets[0] != targets[1]  # taking turns, not one worker's slots first


def test_only_free_slots_are_offered(make_worker_row, enqueue):
    busy, busy_session = make_worker_row(concurrency=2)
    enqueue("noop", {"seconds": 0})
    assert repository.claim(busy, busy_session, "media", 60) is not None  # one of its two slots
    # one offer for its free slot; the other two jobs announced to everyone (folded into one)
    assert notifications_of(enqueue, 3, 2) == [f"media:{busy}#1", "media"]
