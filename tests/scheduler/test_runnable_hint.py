"""repository.runnable_hint, the idle poll's lock-free read: which pools have work for this worker
that has been runnable for at least the grace period."""

import pytest

from scheduler import repository
from tests.kit.db import claim, sql

pytestmark = pytest.mark.django_db

OLD_ENOUGH = 0.0  # any runnable work counts
TOO_YOUNG = 3600.0  # nothing enqueued in this test is that old


def test_the_hint_names_each_pool_with_work_for_this_worker_old_enough(make_worker_row, enqueue):
    me, other = make_worker_row("me"), make_worker_row("other")
    assert repository.runnable_hint("me", OLD_ENOUGH) == set()

    enqueue()  # a job any worker may take
    assert repository.runnable_hint("me", OLD_ENOUGH) == {"media"}
    assert repository.runnable_hint("me", TOO_YOUNG) == set()  # announced to whoever should take it

    claim(me)  # running now: nothing left to claim
    assert repository.runnable_hint("me", OLD_ENOUGH) == set()

    enqueue(required_worker_uid="other")  # targeted: for "other" only
    assert repository.runnable_hint("me", OLD_ENOUGH) == set()
    assert repository.runnable_hint("other", OLD_ENOUGH) == {"media"}
    claim(other)

    job = enqueue()  # test setup: its stage moved to the background pool
    sql("UPDATE queue_tasks SET pool = 'background' WHERE job_id = %s", [job])
    sql("UPDATE job_schedule SET media_runnable_at = NULL WHERE job_id = %s", [job])
    assert repository.runnable_hint("me", OLD_ENOUGH) == {"background"}
    assert repository.runnable_hint("me", TOO_YOUNG) == set()
