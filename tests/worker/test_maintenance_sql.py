"""Maintenance run by every worker at once: the loops' SQL must not do the same work twice."""

import threading
import time

import psycopg
import pytest

from scheduler import repository
from tests.kit.db import one, sql

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def test_two_workers_releasing_the_same_lost_job_move_it_once(make_worker_row, enqueue, database_url):
    lost = make_worker_row("lost")
    job = enqueue("noop", {})
    task = repository.claim(*lost, "media", 30)
    assert task.job_id == job
    sql("UPDATE queue_tasks SET lease_expires_at = now() - interval '1 second' WHERE id = %s", [task.id])
    assert [row[0] for row in repository.recover_expired()] == [task.id]
    sql("UPDATE queue_workers SET last_heartbeat_at = now() - interval '1 hour' WHERE uid = 'lost'")

    first, second = psycopg.connect(database_url), psycopg.connect(database_url)
    try:
        mine = first.execute("SELECT * FROM release_jobs_v2(30, 60, 50)").fetchall()  # not committed yet
        assert [row[0] for row in mine] == [job]
        theirs = {}

        def other_worker():
            theirs["rows"] = second.execute("SELECT * FROM release_jobs_v2(30, 60, 50)").fetchall()
            second.commit()

        thread = threading.Thread(target=other_worker)
        thread.start()
        time.sleep(0.5)
        assert thread.is_alive()  # waiting for the scheduler lock
        first.commit()
        thread.join(10)
        assert theirs["rows"] == []
    finally:
        first.close()
        second.close()
    # Lost in its dispatch: the dispatch is retried by any worker, in the same execution, once.
    assert sql("SELECT execution_id, assigned_worker_uid FROM job_schedule WHERE job_id = %s", [job]) == [
        (1, None)
    ]
    assert repository.release_jobs(30, 60) == []
    assert one("SELECT reassignments ->> 'lost_in_dispatch' FROM queue_scheduler_state") == "1"
