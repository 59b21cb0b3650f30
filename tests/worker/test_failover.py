"""Failover with real worker processes and real signals (docs/scheduler.md, "Failover").

The reassignment delay keeps its default (120 s) except in the test about the delay, so every other
scenario here proves that a job moves without waiting for it. test_faults.py covers a SIGKILL in
the dispatch stage; tests/scheduler/test_failover.py checks each rule in SQL."""

import signal
import time

import pytest

from scheduler import queries, repository
from tests.kit.db import job_status, one, sql
from tests.kit.waiting import wait_for
from tests.kit.workers import LEASE

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(120)]

RETRY_BACKOFF = 15  # retry_delay_v1 after a first attempt (a tenth of it under `fast_retries`)
SLACK = 8  # worker start-up, recovery intervals, the job's own short stages


def running_on(job):
    return one(
        "SELECT claimed_by FROM queue_tasks WHERE job_id = %s AND state = 'running' ORDER BY id LIMIT 1",
        [job],
    )


def execution(job):
    return one("SELECT execution_id FROM job_schedule WHERE job_id = %s", [job])


def outputs(job):
    """(execution, name) of every published output, in order: each must appear once."""
    return sql(
        "SELECT execution_id, name FROM job_outputs WHERE job_id = %s ORDER BY execution_id, name", [job]
    )


def tasks(job, execution_id):
    return sql(
        "SELECT task_type, state, attempt, claimed_by FROM queue_tasks "
        "WHERE job_id = %s AND execution_id = %s AND placement <> 'cluster' ORDER BY id",
        [job, execution_id],
    )


def leaf_running(job, uid, index):
    return one(
        "SELECT count(*) FROM queue_tasks WHERE job_id = %s AND task_type = 'test.leaf' AND state = 'running' "
        "AND claimed_by = %s AND (payload ->> 'index')::int = %s",
        [job, uid, index],
    )


def two_workers(start_worker, enqueue, prefix, params, env=None):
    """Two idle workers and a test.fanout job; returns (job, the worker that took its dispatch,
    the other one). The job's later stages are pinned to the first."""
    workers = {
        uid: start_worker(uid, "--concurrency", "1", env=env) for uid in (f"{prefix}-a", f"{prefix}-b")
    }
    job = enqueue("test.fanout", params)
    taker = wait_for(
        lambda: running_on(job), 10, "a worker to take the dispatch", workers=list(workers.values())
    )
    holder = workers.pop(taker)
    ((_, other),) = workers.items()
    return job, holder, other


def test_a_drained_worker_hands_its_pending_stages_to_another_worker_within_seconds(start_worker, enqueue):
    job, a, b = two_workers(start_worker, enqueue, "drain", {"children": 3, "leaf_seconds": [2]})
    wait_for(lambda: leaf_running(job, a.uid, 0), 15, "the first stage to run", workers=[a])

    a.signal(signal.SIGTERM)
    signalled = time.monotonic()
    assert a.wait(15) == 0
    wait_for(lambda: job_status(job) == "completed", 20, "the other worker to finish the job", workers=[a, b])
    elapsed = time.monotonic() - signalled
    print(f"\nSIGTERM drain -> job completed on the other worker in {elapsed:.1f}s (reassignment delay 120s)")

    # The stage running at SIGTERM finished inside the grace; the two left pending moved with the
    # job when the drained worker went offline: a new execution, all of it on the other worker.
    first = tasks(job, 1)
    assert first[:2] == [("test.fanout", "completed", 1, a.uid), ("test.leaf", "completed", 1, a.uid)], first
    assert [state for _, state, _, _ in first[2:]] == ["cancelled", "cancelled"], first
    second = tasks(job, 2)
    assert len(second) == 4 and {(t, st, who) for t, st, _, who in second} == {
        ("test.fanout", "completed", b.uid),
        ("test.leaf", "completed", b.uid),
    }, second
    assert outputs(job) == [(1, "leaf-0.txt"), (2, "leaf-0.txt"), (2, "leaf-1.txt"), (2, "leaf-2.txt")]
    assert f"worker {a.uid} drained: new execution 2" in one("SELECT log FROM jobs WHERE id = %s", [job])
    assert queries.reassignments()["drained"] == 1


def test_a_job_with_local_work_waits_for_the_delay_then_moves_with_outputs_once(start_worker, enqueue):
    delay = {"JETENCODE_REASSIGN_AFTER_SECONDS": "8"}
    job, a, b = two_workers(
        start_worker, enqueue, "local", {"children": 2, "leaf_seconds": [0.5, 60]}, env=delay
    )
    wait_for(lambda: leaf_running(job, a.uid, 1), 15, "the second stage to run", workers=[a])
    a.signal(signal.SIGKILL)
    a.wait(5)

    # The lease runs out and the stage waits in retry_wait, pinned: leaf-0 is in the lost workspace.
    wait_for(
        lambda: one("SELECT count(*) FROM queue_tasks WHERE job_id = %s AND state = 'retry_wait'", [job]),
        LEASE + 4,
        "the lost stage to be recovered",
        workers=[b],
    )
    assert execution(job) == 1
    (entry,) = queries.queue_list(job_id=job)
    assert f"for worker {a.uid} (has local work)" in entry.waiting_reason, entry.waiting_reason

    wait_for(
        lambda: job_status(job) == "completed", 30, "the other worker to run a new execution", workers=[b]
    )
    assert execution(job) == 2
    assert "longer than the reassignment delay of 8s): new execution 2" in one(
        "SELECT log FROM jobs WHERE id = %s", [job]
    )
    assert outputs(job) == [(1, "leaf-0.txt"), (2, "leaf-0.txt"), (2, "leaf-1.txt")]
    assert {who for _, _, _, who in tasks(job, 2)} == {b.uid}
    # The lost attempt of execution 1 never completed; nothing of it was published after the loss.
    assert (
        one(
            "SELECT count(*) FROM queue_fence_audit a JOIN queue_tasks t ON t.id = a.task_id "
            "WHERE t.job_id = %s AND t.execution_id = 1 AND a.operation = 'finish' AND a.accepted",
            [job],
        )
        == 2
    )
    assert queries.reassignments()["lost_after_delay"] == 1


def test_a_same_uid_restart_inside_the_window_resumes_the_job_in_place(start_worker, enqueue, fast_retries):
    a = start_worker("resume-a", "--concurrency", "1")
    job = enqueue("test.fanout", {"children": 2, "leaf_seconds": [0.5, 60]})
    wait_for(lambda: leaf_running(job, "resume-a", 1), 15, "resume-a to reach its second stage", workers=[a])
    old_session = a.session()
    a.signal(signal.SIGKILL)
    a.wait(5)

    again = start_worker("resume-a", "--concurrency", "1")
    assert again.session() != old_session
    wait_for(
        lambda: job_status(job) == "completed", RETRY_BACKOFF + SLACK, "the restarted worker", workers=[again]
    )
    assert execution(job) == 1  # affinity kept: same execution, same workspace
    assert tasks(job, 1) == [
        ("test.fanout", "completed", 1, "resume-a"),
        ("test.leaf", "completed", 1, "resume-a"),
        ("test.leaf", "completed", 2, "resume-a"),
    ]
    assert outputs(job) == [(1, "leaf-0.txt"), (1, "leaf-1.txt")]
    # The old session's attempt was fenced: its lease was expired when the new session registered.
    assert one(
        "SELECT count(*) FROM queue_fence_audit WHERE job_id = %s AND operation = 'recover' AND session_id = %s",
        [job, old_session],
    )


def test_a_frozen_worker_that_resumes_is_fenced_and_does_not_take_the_job_back(
    start_worker, enqueue, fast_retries
):
    job, victim, survivor = two_workers(
        start_worker, enqueue, "frozen", {"children": 1, "dispatch_seconds": 60}
    )
    session = victim.session()
    victim.signal(signal.SIGSTOP)
    stopped = time.monotonic()

    # Lost in its dispatch: released once the lease ran out, retried by the survivor after the backoff.
    wait_for(
        lambda: running_on(job) == survivor.uid or job_status(job) == "completed",
        LEASE + RETRY_BACKOFF + SLACK,
        "the survivor to retry the dispatch",
        workers=[survivor],
    )
    print(f"\nSIGSTOP -> dispatch running on the survivor after {time.monotonic() - stopped:.1f}s")
    victim.signal(signal.SIGCONT)
    wait_for(lambda: job_status(job) == "completed", 20, "the job to complete", workers=[survivor, victim])
    wait_for(
        lambda: one(
            "SELECT count(*) FROM queue_fence_audit WHERE job_id = %s AND session_id = %s AND NOT accepted",
            [job, session],
        ),
        10,
        "the zombie's write to be rejected",
        workers=[victim],
    )
    assert execution(job) == 1
    assert tasks(job, 1) == [
        ("test.fanout", "completed", 2, survivor.uid),
        ("test.leaf", "completed", 1, survivor.uid),
    ]
    # The zombie's attempt never completed anything; it is alive again and still the same session.
    assert not one(
        "SELECT count(*) FROM queue_fence_audit WHERE job_id = %s AND session_id = %s AND accepted "
        "AND operation IN ('finish', 'publish')",
        [job, session],
    )
    assert victim.popen.poll() is None and victim.session() == session
    assert queries.reassignments()["lost_in_dispatch"] == 1


def test_evacuating_a_busy_worker_moves_its_job_and_stops_its_stage(start_worker, enqueue):
    job, a, b = two_workers(start_worker, enqueue, "evac", {"children": 2, "leaf_seconds": [60]})
    wait_for(lambda: leaf_running(job, a.uid, 0), 15, "a stage to run", workers=[a])

    assert repository.evacuate_worker(a.uid) == 1
    wait_for(
        lambda: job_status(job) == "completed",
        15,
        "the other worker to run the new execution",
        workers=[a, b],
    )
    wait_for(
        lambda: (
            not one("SELECT count(*) FROM queue_tasks WHERE state = 'running' AND claimed_by = %s", [a.uid])
        ),
        10,
        "the evacuated worker to stop its fenced stage",
        workers=[a],
    )
    assert execution(job) == 2 and {who for _, _, _, who in tasks(job, 2)} == {b.uid}
    assert outputs(job) == [(2, "leaf-0.txt"), (2, "leaf-1.txt")]
    assert one("SELECT lifecycle FROM queue_workers WHERE uid = %s", [a.uid]) == "draining"
    assert one(
        "SELECT count(*) FROM queue_fence_audit WHERE worker_uid = %s AND NOT accepted AND reason = 'task is cancelled'",
        [a.uid],
    )
