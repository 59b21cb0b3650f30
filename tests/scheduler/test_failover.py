"""Failover rules in SQL (docs/scheduler.md, "Failover"): drained, evacuated and lost workers release
their pinned jobs; only jobs with local work wait for a lost worker, and only for the reassignment
delay. Real worker processes under real signals: tests/worker/test_failover.py."""

import threading
import time

import psycopg
import pytest

from scheduler import queries, repository
from tests.kit.db import (
    claim,
    database_url,
    expire_lease,
    job_status,
    lease_of,
    make_available,
    one,
    silence_worker,
    sql,
    task_state,
)

pytestmark = pytest.mark.django_db

LOST = 30.0  # the lease: a worker silent that long has lost every lease it held
DELAY = 120.0  # JETENCODE_REASSIGN_AFTER_SECONDS' default


def schedule(job):
    return sql(
        "SELECT execution_id, assigned_worker_uid, lost_workers FROM job_schedule WHERE job_id = %s", [job]
    )[0]


def job_log(job):
    return one("SELECT log FROM jobs WHERE id = %s", [job])


def moved():
    return queries.reassignments()


def dispatched_with_child(worker, **enqueue_kwargs):
    """A job whose dispatch completed on `worker` and left one pending child there."""
    task = claim(worker)
    assert task is not None
    finished = repository.finish(lease_of(task, worker), children=[repository.Child("noop", {"i": 1})])
    assert finished.outcome == "completed"
    return task


def with_local_work(worker, enqueue):
    """Dispatch and one child completed on `worker`, a second child pending there."""
    job = enqueue()
    task = claim(worker)
    repository.finish(
        lease_of(task, worker),
        children=[repository.Child("noop", {"i": 1}), repository.Child("noop", {"i": 2})],
    )
    first = claim(worker)
    assert first.placement == "job"
    assert repository.finish(lease_of(first, worker)).outcome == "completed"
    return job


def test_draining_a_worker_moves_its_idle_jobs_at_once(make_worker_row, enqueue):
    w3 = make_worker_row("w3")
    job = enqueue()
    dispatched_with_child(w3)
    assert repository.drain_worker("w3") == "draining"
    assert schedule(job)[:2] == (2, None)
    assert "worker w3 drained: new execution 2" in job_log(job)
    assert moved()["drained"] == 1
    other = make_worker_row("w4")
    fresh = claim(other)
    assert (fresh.job_id, fresh.execution_id, fresh.placement) == (job, 2, "dispatch")


def test_a_draining_worker_keeps_a_running_stage_then_lets_the_job_go(make_worker_row, enqueue):
    w3 = make_worker_row("w3")
    make_worker_row("w4")  # somewhere to move to
    job = enqueue()
    dispatch = claim(w3)
    repository.drain_worker("w3")
    assert schedule(job)[:2] == (1, "w3")  # the running dispatch finishes where it is
    assert repository.release_jobs(LOST, DELAY) == []
    repository.finish(lease_of(dispatch, w3), children=[repository.Child("noop", {"i": 1})])
    assert claim(w3) is None  # draining: claims nothing new
    (release,) = repository.release_jobs(LOST, DELAY)
    assert (release.job_id, release.execution_id, release.cause, release.worker_uid) == (
        job,
        2,
        "drained",
        "w3",
    )


def test_a_session_that_says_offline_releases_its_jobs_in_the_same_transaction(make_worker_row, enqueue):
    uid, session = make_worker_row("leaving")
    make_worker_row("staying")
    job = enqueue()
    dispatched_with_child((uid, session))
    assert repository.set_session_lifecycle(uid, session, "offline") == 1
    assert schedule(job)[:2] == (2, None)
    assert repository.set_session_lifecycle(uid, "00000000-0000-0000-0000-000000000000", "offline") is None


def test_a_handed_back_dispatch_is_retried_unassigned_in_the_same_execution(make_worker_row, enqueue):
    uid, session = make_worker_row("leaving")
    other = make_worker_row("other")
    job = enqueue()
    task = claim((uid, session))
    assert repository.release(lease_of(task, (uid, session)), "shutdown").outcome == "pending"
    assert repository.set_session_lifecycle(uid, session, "offline") == 1
    assert schedule(job)[:2] == (1, None)
    assert "its dispatch is retried by any worker" in job_log(job)
    again = claim(other)
    assert (again.id, again.execution_id) == (task.id, 1)


def test_with_no_other_worker_a_drained_job_waits_and_resumes_from_its_completed_stages(
    make_worker_row, enqueue
):
    # ./scripts/run's one worker, stopped with Ctrl-C between two stages of a job and started again.
    uid, session = make_worker_row("alone")
    job = with_local_work((uid, session), enqueue)
    progress = one("SELECT progress FROM jobs WHERE id = %s", [job])
    assert repository.set_session_lifecycle(uid, session, "draining") == 0
    assert repository.set_session_lifecycle(uid, session, "offline") == 0
    assert repository.release_jobs(LOST, DELAY) == []  # nowhere to move it: it stays
    assert schedule(job)[:2] == (1, "alone")
    reason = queries.queue_entry(job).waiting_reason
    assert (
        reason
        == "worker alone has stopped and no other worker is active: the job resumes when alone or another worker starts"
    )
    restarted = make_worker_row("alone")  # the same uid, a new session
    second = claim(restarted)
    assert (second.job_id, second.execution_id, second.placement) == (job, 1, "job")  # not a new execution
    assert one("SELECT progress FROM jobs WHERE id = %s", [job]) == progress
    assert moved().get("drained", 0) == 0


def test_a_drained_job_that_waited_moves_once_another_worker_is_active(make_worker_row, enqueue):
    uid, session = make_worker_row("gone")
    job = with_local_work((uid, session), enqueue)
    assert repository.set_session_lifecycle(uid, session, "offline") == 0
    make_worker_row("newcomer")
    (release,) = repository.release_jobs(LOST, DELAY)
    assert (release.job_id, release.cause, release.execution_id) == (job, "drained", 2)


def test_a_job_lost_in_its_dispatch_is_retried_by_any_worker_once_the_lease_ran_out(make_worker_row, enqueue):
    lost = make_worker_row("lost")
    job = enqueue()
    task = claim(lost)
    expire_lease(task.id)
    assert repository.recover_expired() == [(task.id, "retry_wait")]
    silence_worker("lost", LOST - 5)
    assert repository.release_jobs(LOST, DELAY) == []  # not lost yet: it may be a slow beat
    silence_worker("lost", LOST + 1)
    (release,) = repository.release_jobs(LOST, DELAY)
    assert (release.cause, release.execution_id) == ("lost_in_dispatch", 1)
    assert schedule(job) == (1, None, 0)  # the dispatch's attempts already bound the retries
    make_available(task.id)
    survivor = make_worker_row("survivor")
    again = claim(survivor)
    assert (again.id, again.attempt) == (task.id, 2)
    assert moved()["lost_in_dispatch"] == 1


def test_a_job_without_local_work_moves_as_soon_as_its_worker_is_lost(make_worker_row, enqueue):
    lost = make_worker_row("lost")
    job = enqueue()
    dispatched_with_child(lost)  # only the dispatch ran: the staged input is cheap to redo
    silence_worker("lost", LOST + 1)
    (release,) = repository.release_jobs(LOST, DELAY)
    assert (release.cause, release.execution_id) == ("lost_in_dispatch", 2)
    assert schedule(job) == (2, None, 1)
    assert "worker lost lost (no heartbeat for 31s, no local work): new execution 2" in job_log(job)


def test_a_job_with_local_work_waits_for_its_worker_up_to_the_delay(make_worker_row, enqueue):
    w3 = make_worker_row("w3")
    job = with_local_work(w3, enqueue)
    silence_worker("w3", 60)
    assert repository.release_jobs(LOST, DELAY) == []
    (entry,) = queries.queue_list(job_id=job)
    assert entry.waiting_reason.startswith("waiting up to 1m0") and entry.waiting_reason.endswith(
        "for worker w3 (has local work)"
    ), entry.waiting_reason
    silence_worker("w3", DELAY + 1)
    (release,) = repository.release_jobs(LOST, DELAY)
    assert (release.cause, release.execution_id) == ("lost_after_delay", 2)
    assert "longer than the reassignment delay of 2m00s" in job_log(job)
    # Nothing of the old execution stays runnable; its completed stages keep their state.
    assert sql(
        "SELECT placement, state FROM queue_tasks WHERE job_id = %s AND execution_id = 1 ORDER BY id", [job]
    ) == [("dispatch", "completed"), ("job", "completed"), ("job", "cancelled")]


def test_a_same_uid_restart_inside_the_window_resumes_in_place(make_worker_row, enqueue):
    w3 = make_worker_row("w3")
    job = with_local_work(w3, enqueue)
    second = claim(w3)
    silence_worker("w3", 60)
    assert job_status(job) == "running"
    restarted = make_worker_row("w3")  # a new session: the old one's leases are expired at once
    assert repository.recover_expired() == [(second.id, "retry_wait")]
    assert repository.release_jobs(LOST, DELAY) == []
    make_available(second.id)
    again = claim(restarted)
    assert (again.id, again.execution_id, again.attempt) == (second.id, 1, 2)
    assert repository.finish(lease_of(second, w3)).outcome == "rejected"  # the old session is fenced


def test_evacuating_moves_running_jobs_and_fences_their_stages(make_worker_row, enqueue):
    w3 = make_worker_row("w3")
    running_job, idle_job = enqueue(), enqueue()
    running = claim(w3)
    dispatched_with_child(w3)
    assert repository.evacuate_worker("w3") == 2
    assert one("SELECT lifecycle FROM queue_workers WHERE uid = 'w3'") == "draining"
    assert schedule(running_job)[:2] == (2, None) and schedule(idle_job)[:2] == (2, None)
    assert task_state(running.id) == "cancelled"
    assert repository.finish(lease_of(running, w3)).reason == "task is cancelled"
    assert "worker w3 evacuated: new execution 2" in job_log(running_job)
    assert moved()["evacuated"] == 2
    with pytest.raises(repository.JobNotFound):
        repository.evacuate_worker("nobody")
    sql("UPDATE queue_workers SET lifecycle = 'offline' WHERE uid = 'w3'")
    with pytest.raises(repository.ActionNotAllowed, match="offline and holds no jobs"):
        repository.evacuate_worker("w3")


@pytest.mark.django_db(transaction=True)
def test_evacuating_hands_back_a_split_stage_whose_row_was_locked_at_that_instant(make_worker_row, enqueue):
    """The worker's own heartbeat locks its running tasks' rows and then waits for the worker row,
    which the evacuation locks first: the hand-back skips such a row rather than deadlock, and
    hands the stage back once the heartbeat has gone through (CI caught a chunk that ran to its end
    on an evacuated worker)."""
    busy = make_worker_row("busy")
    enqueue()
    dispatch = claim(busy)
    chunk_spec = repository.Child("noop", {"chunk": 0}, placement="cluster")
    assert repository.finish(lease_of(dispatch, busy), children=[chunk_spec]).outcome == "completed"
    chunk = claim(busy)
    assert chunk.placement == "cluster"

    with psycopg.connect(database_url()) as heartbeat:  # holds the chunk's row for 0.3 s
        heartbeat.execute("SELECT 1 FROM queue_tasks WHERE id = %s FOR UPDATE", [chunk.id])
        threading.Timer(0.3, heartbeat.commit).start()
        started = time.monotonic()
        assert repository.evacuate_worker("busy") == 1
        assert time.monotonic() - started >= 0.3  # handed back only once the row was free
    assert task_state(chunk.id) == "pending"
    assert repository.finish(lease_of(chunk, busy)).outcome == "rejected"
    reasons = sql(
        "SELECT reason FROM queue_fence_audit WHERE task_id = %s AND operation = 'release'", [chunk.id]
    )
    assert reasons == [("worker busy evacuated",)]


def test_a_targeted_job_waits_for_its_worker(make_worker_row, enqueue):
    make_worker_row("target")
    job = enqueue(required_worker_uid="target")
    dispatched_with_child(
        ("target", one("SELECT current_session_id FROM queue_workers WHERE uid = 'target'"))
    )
    silence_worker("target", DELAY + 1)
    assert repository.release_jobs(LOST, DELAY) == []
    assert repository.drain_worker("target") == "draining"
    assert schedule(job)[:2] == (1, "target")


def test_a_job_that_keeps_losing_its_worker_fails_instead_of_looping(make_worker_row, enqueue):
    job = enqueue(max_attempts=1)
    for n, uid in enumerate(("first", "second"), start=1):
        dispatched_with_child(make_worker_row(uid))
        silence_worker(uid, LOST + 1)
        released = repository.release_jobs(LOST, DELAY)
        if n == 1:
            assert [(r.cause, r.execution_id) for r in released] == [("lost_in_dispatch", 2)]
    assert released == []
    assert job_status(job) == "failed"
    assert one("SELECT last_error FROM jobs WHERE id = %s", [job]).startswith("lost its worker 2 times")
    repository.retry(job)  # the operator has looked at it: the count starts again
    assert schedule(job)[2] == 0
    (again,) = repository.release_jobs(LOST, DELAY)
    assert again.execution_id == 3


def test_a_worker_that_came_back_keeps_its_jobs(make_worker_row, enqueue):
    w3 = make_worker_row("w3")
    job = enqueue()
    dispatched_with_child(w3)
    silence_worker("w3", LOST + 1)
    # Another worker's pass decided to move it, but w3 beat in the meantime: the locked re-check wins.
    repository.worker_heartbeat(*w3, None)
    assert one("SELECT release_job_v2(%s, 'w3', 'lost_in_dispatch', false, %s)", [job, LOST]) is None
    assert schedule(job)[:2] == (1, "w3")


def test_manual_redispatch_is_counted_and_keeps_the_dispatch_timeout(make_worker_row, enqueue):
    job = enqueue(timeout_seconds=77)
    assert repository.redispatch(job, "redispatched by a test") == 2
    assert "redispatched by a test: new execution 2" in job_log(job)
    assert one("SELECT timeout_seconds FROM queue_tasks WHERE job_id = %s AND execution_id = 2", [job]) == 77
    assert moved()["manual"] == 1


def test_a_job_left_behind_by_a_worker_that_went_offline_on_purpose_moves_as_drained(
    make_worker_row, enqueue
):
    uid, session = make_worker_row("leaver")
    job = with_local_work((uid, session), enqueue)
    stage = claim((uid, session))
    make_worker_row("another")  # somewhere to move to
    # The session says offline while the stage still runs (its hand-back failed): the job cannot move yet.
    assert repository.set_session_lifecycle(uid, session, "offline") == 0
    expire_lease(stage.id)
    repository.recover_expired()
    # The worker left on purpose: it is not coming back for its local work, and its heartbeat is
    # fresh (it said offline just now), so neither lost rule applies; the job moves as drained.
    (release,) = repository.release_jobs(LOST, DELAY)
    assert (release.job_id, release.cause, release.execution_id) == (job, "drained", 2)
    # A restart of the same uid is a new registration: from then on the worker is judged afresh.
    make_worker_row("leaver")
    assert one("SELECT left_at FROM queue_workers WHERE uid = 'leaver'") is None
