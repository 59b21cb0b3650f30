"""Each soak invariant query catches a deliberately corrupted state (and passes a clean one).

The states are built through the real repository (claims, finishes, recoveries), then corrupted
with one raw SQL statement each: what a bug in the scheduler would have left behind.
"""

import uuid

import pytest
from django.db import IntegrityError, connection, transaction

from scheduler import repository
from tests.kit.db import claim, expire_lease, lease_of, make_available, one, sql
from tests.kit.waiting import wait_for
from tools.soak import invariants

pytestmark = pytest.mark.django_db


def _check(func, *args, **kwargs):
    with connection.cursor() as cursor:
        return func(cursor, *args, **kwargs)


def _audit(task_id, operation, accepted, token, *, reason="", attempt=1, uid="w", session=None):
    sql(
        """INSERT INTO queue_fence_audit (at, task_id, job_id, operation, accepted, reason, lease_token, worker_uid,
                                          session_id, attempt, execution_id)
           SELECT now(), id, job_id, %s, %s, %s, %s, %s, %s, %s, execution_id FROM queue_tasks WHERE id = %s""",
        [operation, accepted, reason, token, uid, session, attempt, task_id],
    )


@pytest.fixture(scope="session")
def server_up_for_a_while(django_db_setup, django_db_blocker):
    """PostgreSQL has been up for more than 20 s. The checks count a lease or a silence that ran out
    while the server was down from the server's start, so what they must catch (a lease an hour
    old) only shows on a server older than their thresholds. Session-scoped, so it runs before the
    test's transaction begins and that transaction's now() is late enough; it waits (at most 20 s,
    once, and only when this run started a fresh server) rather than skip the test."""
    with django_db_blocker.unblock():
        wait_for(
            lambda: one("SELECT now() - pg_postmaster_start_time() > interval '20 seconds'"),
            30,
            "the server to have been up for 20 s",
            interval=0.5,
        )


@pytest.fixture
def finished_family(worker, enqueue):
    """A noop job asking for 2 children: the parent completed with them, both children completed."""
    job = enqueue("noop", {"seconds": 0, "children": 2})
    parent = claim(worker)
    children = [repository.Child("noop", {"seconds": 0, "children": 0}) for _ in range(2)]
    assert repository.finish(lease_of(parent, worker), {"ok": 1}, children).outcome == "completed"
    kids = [claim(worker), claim(worker)]
    for kid in kids:
        assert repository.finish(lease_of(kid, worker)).outcome == "completed"
    assert one("SELECT status FROM jobs WHERE id = %s", [job]) == "completed"
    return job, parent, kids


@pytest.fixture
def recovered_then_completed(worker, enqueue):
    """A task whose first lease expired and was recovered, then completed under a second claim."""
    enqueue("noop", {"seconds": 0})
    first = claim(worker)
    expire_lease(first.id)
    assert repository.recover_expired() == [(first.id, "retry_wait")]
    make_available(first.id)
    second = claim(worker)
    assert repository.finish(lease_of(second, worker)).outcome == "completed"
    return first, second


def _failed(result):
    assert not result.passed, result.line()
    assert result.violations >= 1
    return result


def test_a_clean_run_passes_every_invariant(finished_family, recovered_then_completed, worker, enqueue):
    # plus a failed job that holds a sibling, and a stale write that was rejected
    job = enqueue("noop", {"seconds": 0, "children": 2}, max_attempts=1)
    parent = claim(worker)
    repository.finish(lease_of(parent, worker), children=[repository.Child("noop", {"children": 0})] * 2)
    kid = claim(worker)
    assert repository.fail(lease_of(kid, worker), "boom").outcome == "failed"
    assert one("SELECT status FROM jobs WHERE id = %s", [job]) == "failed"
    first, _ = recovered_then_completed
    assert repository.finish(lease_of(first, worker)).outcome == "rejected"
    jobs = [r[0] for r in sql("SELECT id FROM jobs")]
    with connection.cursor() as cursor:
        results = invariants.check_all(cursor, expected_job_ids=jobs, recovery_interval=0.5, slack=5)
    assert [r.line() for r in results if not r.passed] == []
    assert {r.name for r in results} >= {
        "jobs_not_lost",
        "no_task_lost",
        "jobs_terminal",
        "job_status_matches_tasks",
        "nothing_running_past_lease",
        "attempts_within_limits",
        "one_conclusion_per_attempt",
        "failures_exhaust_attempts",
        "one_accepted_finish_per_task",
        "finish_under_current_token",
        "exact_children",
        "children_only_from_completed_parents",
        "no_stale_write_accepted",
        "outputs_published_once",
    }


# ---- nothing lost -------------------------------------------------------------------------------


def test_it_reports_a_job_that_was_enqueued_but_is_missing_as_lost(finished_family):
    job, _, _ = finished_family
    assert _check(invariants.jobs_not_lost, [job]).passed
    result = _failed(_check(invariants.jobs_not_lost, [job, uuid.uuid4()]))
    assert result.examples[0][1] == "missing job"


def test_it_reports_a_job_without_tasks_as_lost(finished_family):
    job, _, _ = finished_family
    sql("DELETE FROM queue_tasks WHERE job_id = %s", [job])
    _failed(_check(invariants.jobs_not_lost, [job]))


def test_it_reports_a_task_left_pending_after_the_drain_as_lost(finished_family):
    _, _, kids = finished_family
    assert _check(invariants.no_task_lost).passed
    sql("UPDATE queue_tasks SET state = 'pending', attempt = 0 WHERE id = %s", [kids[0].id])
    _failed(_check(invariants.no_task_lost))


def test_it_reports_a_job_left_unfinished_after_the_drain(worker, enqueue):
    enqueue("noop", {})
    _failed(_check(invariants.jobs_terminal))


def test_it_reports_a_job_status_that_disagrees_with_its_tasks(finished_family):
    job, _, kids = finished_family
    assert _check(invariants.job_status_matches_tasks).passed
    sql("UPDATE queue_tasks SET state = 'failed' WHERE id = %s", [kids[1].id])  # but the job says completed
    _failed(_check(invariants.job_status_matches_tasks))


# ---- nothing stuck, attempts --------------------------------------------------------------------


def test_it_reports_a_task_running_long_past_its_lease_as_stuck(server_up_for_a_while, worker, enqueue):
    enqueue("noop", {})
    task = claim(worker)
    assert _check(invariants.nothing_running_past_lease, 0.5, 5).passed
    sql("UPDATE queue_tasks SET lease_expires_at = now() - interval '1 hour' WHERE id = %s", [task.id])
    _failed(_check(invariants.nothing_running_past_lease, 0.5, 5))
    assert _check(invariants.stuck_running, 5.5)[0][0] == task.id


def test_the_database_refuses_an_attempt_beyond_the_limit_and_the_audit_check_catches_one(finished_family):
    _, parent, _ = finished_family
    with pytest.raises(IntegrityError), transaction.atomic():
        sql("UPDATE queue_tasks SET attempt = max_attempts + 1 WHERE id = %s", [parent.id])
    assert _check(invariants.attempts_within_limits).passed
    _audit(parent.id, "fail", True, uuid.uuid4(), attempt=99)
    _failed(_check(invariants.attempts_within_limits))


def test_it_reports_a_lease_recovered_twice_as_two_conclusions_of_one_attempt(recovered_then_completed):
    first, _ = recovered_then_completed
    assert _check(invariants.one_conclusion_per_attempt).passed
    _audit(first.id, "recover", True, first.lease_token, reason="retry_wait: lease expired")
    result = _failed(_check(invariants.one_conclusion_per_attempt))
    assert result.examples[0][2] == "recover,recover"


def test_it_reports_a_noop_stage_that_gave_up_before_its_last_attempt(worker, enqueue):
    enqueue("noop", {}, max_attempts=3)
    task = claim(worker)
    assert repository.fail(lease_of(task, worker), "boom").outcome == "retry_wait"
    assert _check(invariants.failures_exhaust_attempts).passed
    sql("UPDATE queue_tasks SET state = 'failed', finished_at = now() WHERE id = %s", [task.id])
    _failed(_check(invariants.failures_exhaust_attempts))


# ---- completions ----------------------------------------------------------------------------------


def test_it_reports_two_accepted_finishes_of_one_task(finished_family):
    _, parent, _ = finished_family
    assert _check(invariants.one_accepted_finish_per_task).passed
    _audit(parent.id, "finish", True, uuid.uuid4())
    _failed(_check(invariants.one_accepted_finish_per_task))


def test_it_reports_an_accepted_finish_under_a_stale_token(recovered_then_completed):
    first, second = recovered_then_completed
    assert _check(invariants.finish_under_current_token).passed
    # What a broken fence would leave: the first (recovered) attempt's finish accepted as well.
    _audit(first.id, "finish", True, first.lease_token, attempt=first.attempt)
    result = _failed(_check(invariants.finish_under_current_token))
    assert "not the final one" in str(result.examples)


def test_it_reports_a_completed_task_without_its_finish(finished_family):
    _, parent, _ = finished_family
    sql("DELETE FROM queue_fence_audit WHERE task_id = %s AND operation = 'finish'", [parent.id])
    _failed(_check(invariants.finish_under_current_token))


def test_it_reports_an_accepted_finish_of_a_task_that_did_not_complete(worker, enqueue):
    enqueue("noop", {}, max_attempts=1)
    task = claim(worker)
    repository.fail(lease_of(task, worker), "boom")
    _audit(task.id, "finish", True, task.lease_token)
    result = _failed(_check(invariants.finish_under_current_token))
    assert "the task is failed" in str(result.examples)


# ---- children ----------------------------------------------------------------------------------------


def test_it_reports_a_missing_child(finished_family):
    _, parent, kids = finished_family
    assert _check(invariants.exact_children).passed
    sql("DELETE FROM queue_fence_audit WHERE task_id = %s", [kids[1].id])
    sql("DELETE FROM queue_tasks WHERE id = %s", [kids[1].id])
    result = _failed(_check(invariants.exact_children))
    assert result.examples[0][0] == parent.id


def _copy_child(kid_id, payload_sql):
    sql(
        f"""INSERT INTO queue_tasks (job_id, execution_id, task_type, payload, parent_task_id, dedupe_key,
                 wait_for_siblings, placement, pool, resource_category, vram_mb, state, available_at, attempt,
                 max_attempts, timeout_seconds, progress, progress_detail, created_at)
           SELECT job_id, execution_id, task_type, {payload_sql}, parent_task_id, md5(random()::text), false,
                  placement, pool, resource_category, vram_mb, 'completed', now(), 1, max_attempts,
                  timeout_seconds, 100, '{{}}', now()
             FROM queue_tasks WHERE id = %s""",
        [kid_id],
    )


def test_it_reports_a_duplicate_child(finished_family):
    _, _, kids = finished_family
    _copy_child(kids[0].id, "payload || '{\"retried\": true}'")  # same index, another dedupe key
    _failed(_check(invariants.exact_children))
    _failed(_check(invariants.children_only_from_completed_parents))


def test_it_reports_a_child_beyond_the_requested_indexes(finished_family):
    _, _, kids = finished_family
    _copy_child(kids[0].id, "jsonb_set(payload, '{index}', '5')")
    _failed(_check(invariants.exact_children))


def test_it_reports_a_child_of_a_failed_attempt(worker, enqueue):
    enqueue("noop", {"seconds": 0, "children": 1}, max_attempts=1)
    parent = claim(worker)
    assert repository.fail(lease_of(parent, worker), "boom").outcome == "failed"
    assert _check(invariants.children_only_from_completed_parents).passed
    sql(
        """INSERT INTO queue_tasks (job_id, execution_id, task_type, payload, parent_task_id, dedupe_key,
                 wait_for_siblings, placement, pool, resource_category, vram_mb, state, available_at, attempt,
                 max_attempts, timeout_seconds, progress, progress_detail, created_at)
           SELECT job_id, execution_id, 'noop', jsonb_build_object('parent_task_id', id, 'index', 0), id, 'x',
                  false, 'job', 'media', 'cpu', 0, 'pending', now(), 0, 1, 60, 0, '{}', now()
             FROM queue_tasks WHERE id = %s""",
        [parent.id],
    )
    result = _failed(_check(invariants.children_only_from_completed_parents))
    assert "parent is failed" in str(result.examples)


# ---- fencing ---------------------------------------------------------------------------------------------


def test_it_reports_an_accepted_write_after_its_lease_was_recovered(recovered_then_completed):
    first, _ = recovered_then_completed
    assert _check(invariants.no_stale_write_accepted).passed
    _audit(first.id, "fail", True, first.lease_token, reason="retry_wait")
    result = _failed(_check(invariants.no_stale_write_accepted))
    assert result.examples[0][3] == "after recover"


def test_it_reports_an_accepted_write_after_the_same_token_was_rejected(recovered_then_completed, worker):
    first, _ = recovered_then_completed
    assert repository.release(lease_of(first, worker), "late").outcome == "rejected"
    assert _check(invariants.no_stale_write_accepted).passed
    _audit(first.id, "progress", True, first.lease_token)
    _failed(_check(invariants.no_stale_write_accepted))


def test_a_lease_expired_rejection_alone_does_not_kill_the_token(worker, enqueue):
    """A heartbeat that began before the expiry may still renew the lease after a write saw it
    expired (both compare with their statement's now()); only recovery ends the attempt."""
    enqueue("noop", {})
    task = claim(worker)
    _audit(task.id, "progress", False, task.lease_token, reason="lease expired")
    assert repository.finish(lease_of(task, worker)).outcome == "completed"
    assert _check(invariants.no_stale_write_accepted).passed


def test_it_reports_a_publication_without_its_finish(finished_family):
    _, parent, _ = finished_family
    sql(
        "UPDATE queue_fence_audit SET lease_token = gen_random_uuid() WHERE task_id = %s AND operation = 'publish'",
        [parent.id],
    )
    _failed(_check(invariants.no_stale_write_accepted))


def test_stale_write_probes_that_were_accepted_fail_the_check(finished_family):
    result = _check(
        invariants.no_stale_write_accepted, 1, [(1, "token", "finish", "accepted while completed")]
    )
    _failed(result)


# ---- outputs ------------------------------------------------------------------------------------------------


def _output(task_id, name="out.mp4"):
    sql(
        """INSERT INTO job_outputs (job_id, execution_id, task_id, name, kind, storage_url, size_bytes, metadata,
                                    created_at)
           SELECT job_id, execution_id, id, %s, 'video', '', 1, '{}', now() FROM queue_tasks WHERE id = %s""",
        [name, task_id],
    )


def test_outputs_are_published_once_by_their_completed_task(worker, enqueue):
    enqueue("noop", {})
    task = claim(worker)
    out = repository.Output("out.mp4", kind="video", size_bytes=1)
    assert repository.finish(lease_of(task, worker), outputs=[out]).outcome == "completed"
    assert _check(invariants.outputs_published_once).passed
    with pytest.raises(IntegrityError), transaction.atomic():  # the unique constraint holds
        _output(task.id)


def test_it_reports_an_output_of_a_task_that_did_not_complete(worker, enqueue):
    enqueue("noop", {}, max_attempts=1)
    task = claim(worker)
    repository.fail(lease_of(task, worker), "boom")
    _output(task.id)
    result = _failed(_check(invariants.outputs_published_once))
    assert "is failed" in str(result.examples)


# ---- failover: superseded executions, pinned jobs ------------------------------------------------------------


@pytest.fixture
def evacuated(make_worker_row, enqueue):
    """A noop job whose dispatch completed on worker A with one child, the child running on A when an
    operator evacuated A: the child is cancelled, execution 2 dispatched on B and completed there."""
    a, b = make_worker_row("w-inv-a"), make_worker_row("w-inv-b")
    job = enqueue("noop", {"seconds": 0, "children": 1})
    parent = claim(a)
    child = [repository.Child("noop", {"seconds": 0, "children": 0})]
    assert repository.finish(lease_of(parent, a), children=child).outcome == "completed"
    kid = claim(a)
    assert repository.evacuate_worker(a[0]) == 1
    assert one("SELECT execution_id FROM job_schedule WHERE job_id = %s", [job]) == 2
    assert repository.finish(lease_of(kid, a)).outcome == "rejected"  # fenced out
    second = claim(b)
    assert second.execution_id == 2
    assert repository.finish(lease_of(second, b), children=child).outcome == "completed"
    assert repository.finish(lease_of(claim(b), b)).outcome == "completed"
    assert one("SELECT status FROM jobs WHERE id = %s", [job]) == "completed"
    return job, parent, kid


def test_an_evacuated_job_passes_every_invariant(evacuated):
    job, _, _ = evacuated
    with connection.cursor() as cursor:
        results = invariants.check_all(cursor, expected_job_ids=[job], recovery_interval=0.5, slack=5)
    assert [r.line() for r in results if not r.passed] == []
    superseded = next(r for r in results if r.name == "no_write_to_superseded_execution")
    assert superseded.checked == 2  # the old dispatch (completed) and its child (cancelled)


def test_it_reports_a_write_accepted_in_a_superseded_execution_after_the_next_began(evacuated):
    _, _, kid = evacuated
    _audit(kid.id, "progress", True, kid.lease_token)  # what a fence blind to the execution would let in
    result = _failed(_check(invariants.no_write_to_superseded_execution))
    assert "progress accepted in execution 1 after execution 2 began" in str(result.examples)


def test_it_reports_a_task_of_a_superseded_execution_that_runs_again(evacuated):
    _, _, kid = evacuated
    sql("UPDATE queue_tasks SET state = 'pending' WHERE id = %s", [kid.id])
    result = _failed(_check(invariants.no_write_to_superseded_execution))
    assert "superseded execution 1 (now 2) is pending" in str(result.examples)


def test_stages_failed_because_their_job_lost_its_worker_too_often_are_not_early_failures(worker, enqueue):
    enqueue("noop", {}, max_attempts=2)
    task = claim(worker)
    repository.release(lease_of(task, worker), "handed back")
    sql(
        "UPDATE queue_tasks SET state = 'failed', finished_at = now(), last_failure = "
        "'worker w lost (no heartbeat for 4s, no local work): the job has lost its worker 2 times' WHERE id = %s",
        [task.id],
    )
    assert _check(invariants.failures_exhaust_attempts).passed
    sql("UPDATE queue_tasks SET last_failure = 'boom' WHERE id = %s", [task.id])
    _failed(_check(invariants.failures_exhaust_attempts))


def _pinned_idle_job(worker, enqueue, children=1, completed_children=0):
    """A job whose dispatch completed on `worker` with children waiting: pinned to it, idle. With
    `completed_children`, some of them completed there first (local work)."""
    job = enqueue("noop", {"seconds": 0, "children": children})
    parent = claim(worker)
    kids = [repository.Child("noop", {"seconds": 0, "children": 0})] * children
    assert repository.finish(lease_of(parent, worker), children=kids).outcome == "completed"
    for _ in range(completed_children):
        assert repository.finish(lease_of(claim(worker), worker)).outcome == "completed"
    assert one("SELECT assigned_worker_uid FROM job_schedule WHERE job_id = %s", [job]) == worker[0]
    assert one("SELECT status FROM jobs WHERE id = %s", [job]) == "pending"
    return job


def _pinned(*args):
    return [(r[0], r[1], r[3]) for r in _check(invariants.pinned_to_departed_workers, *args)]


def test_an_idle_job_left_pinned_to_a_draining_worker_is_reported(make_worker_row, enqueue):
    a, b = make_worker_row("w-inv-a"), make_worker_row("w-inv-b")
    on_a, on_b = _pinned_idle_job(a, enqueue), _pinned_idle_job(b, enqueue)
    assert _pinned(3, 10, 5) == []
    repository.drain_worker(a[0])  # moves its idle job at once
    assert one("SELECT assigned_worker_uid FROM job_schedule WHERE job_id = %s", [on_a]) is None
    assert _pinned(3, 10, 5) == []
    # What a drain that forgot to release would leave: a draining worker with an idle pinned job.
    sql("UPDATE queue_workers SET lifecycle = 'draining' WHERE uid = %s", [b[0]])
    assert _pinned(3, 10, 5) == []  # no worker is active: nowhere to move it, so it rightly waits
    make_worker_row("w-inv-c")
    assert _pinned(3, 10, 5) == [(on_b, b[0], "draining")]


def test_an_idle_job_left_pinned_to_a_silent_worker_is_reported(
    server_up_for_a_while, make_worker_row, enqueue
):
    a, b = make_worker_row("w-inv-a"), make_worker_row("w-inv-b")
    dispatched = _pinned_idle_job(a, enqueue)  # only its dispatch completed: no local work
    local = _pinned_idle_job(b, enqueue, children=2, completed_children=1)
    silent = "UPDATE queue_workers SET last_heartbeat_at = now() - make_interval(secs => %s)"
    sql(silent, [2])
    assert _pinned(3, 10, 1) == []
    # Silent for 8 s: past the lease (3 s) + grace (1 s) without local work, within 10 s + 1 s with it.
    sql(silent, [8])
    assert _pinned(3, 10, 1) == [(dispatched, a[0], "silent")]
    sql(silent, [12])
    assert sorted(_pinned(3, 10, 1)) == sorted([(dispatched, a[0], "silent"), (local, b[0], "silent")])
