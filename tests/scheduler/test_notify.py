"""notify_pool_v1: each of a transaction's targeted notifications reaches its worker as one of its
own (PostgreSQL folds identical notifications of one transaction into one)."""

import psycopg
import pytest
from django.db import transaction

from tests.kit.db import database_url

pytestmark = pytest.mark.django_db(transaction=True)


def test_four_jobs_enqueued_in_one_transaction_reach_their_worker_as_four_notifications(
    make_worker_row, enqueue
):
    uid, _ = make_worker_row(concurrency=4)
    with psycopg.connect(database_url(), autocommit=True) as listener:
        listener.execute("LISTEN jetencode_queue_tasks")
        with transaction.atomic():
            for _ in range(4):
                enqueue("noop", {"seconds": 0})
        payloads = [n.payload for n in listener.notifies(timeout=2.0, stop_after=4)]
    assert payloads == [f"media:{uid}#{n}" for n in (1, 2, 3, 4)]
