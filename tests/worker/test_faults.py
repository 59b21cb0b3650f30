"""Real worker processes under real faults: SIGKILL, a second process with the same uid, SIGSTOP
past the lease, killed database connections, stalls and deadlines. Assertions are made in SQL on
queue_tasks, queue_fence_audit and jobs (RELIABILITY.md's invariants)."""

import signal
import time

import pytest

from scheduler import repository
from tests.kit.db import job_status, one, sql
from tests.kit.waiting import wait_for
from tests.kit.workers import HEARTBEAT, LEASE, pid_alive

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(120)]


def dispatch_tasks(job):
    return sql(
        "SELECT id, execution_id, state, attempt, claimed_by, last_failure, lease_token FROM queue_tasks "
        "WHERE job_id = %s AND placement = 'dispatch' ORDER BY id",
        [job],
    )


def running_on(job, uid):
    return one(
        "SELECT count(*) FROM queue_tasks WHERE job_id = %s AND state = 'running' AND claimed_by = %s",
        [job, uid],
    )


def test_sigkill_mid_task_another_worker_finishes_the_job_once(start_worker, enqueue, fast_retries):
    workers = {uid: start_worker(uid, "--concurrency", "2") for uid in ("crash-a", "crash-b")}
    job = enqueue("noop", {"seconds": 2, "children": 2})
    victim_uid = wait_for(
        lambda: one("SELECT claimed_by FROM queue_tasks WHERE job_id = %s AND state = 'running'", [job]),
        10,
        "a worker to take the job",
        workers=list(workers.values()),
    )
    victim = workers.pop(victim_uid)
    ((survivor_uid, survivor),) = workers.items()
    time.sleep(0.5)
    victim.signal(signal.SIGKILL)
    victim.wait(5)

    # The victim's lease expires and the survivor's recovery loop counts the attempt. Lost in its
    # dispatch, the job holds nothing of value on the victim, so its release pass clears the
    # assignment and the survivor retries the same dispatch (same execution) when the backoff ends.
    wait_for(
        lambda: job_status(job) == "completed", 40, "the job to complete on the survivor", workers=[survivor]
    )
    tasks = dispatch_tasks(job)
    assert [(t[1], t[2]) for t in tasks] == [(1, "completed")], tasks
    (dispatch,) = tasks
    assert dispatch[3] == 2 and dispatch[4] == survivor_uid  # the lost attempt was counted
    assert f"lease expired on {victim_uid}" in dispatch[5]
    assert sql(
        "SELECT accepted, attempt FROM queue_fence_audit WHERE task_id = %s AND operation = 'recover'",
        [dispatch[0]],
    ) == [(True, 1)]
    # Exactly one accepted completion for the job's dispatch, and children only from it.
    assert (
        one(
            "SELECT count(*) FROM queue_fence_audit a JOIN queue_tasks t ON t.id = a.task_id "
            "WHERE t.job_id = %s AND t.placement = 'dispatch' AND a.operation = 'finish' AND a.accepted",
            [job],
        )
        == 1
    )
    children = sql(
        "SELECT parent_task_id, state, claimed_by FROM queue_tasks WHERE job_id = %s AND placement = 'job'",
        [job],
    )
    assert sorted(children) == [(dispatch[0], "completed", survivor_uid)] * 2, children
    assert (
        one(
            "SELECT count(*) FROM queue_fence_audit WHERE accepted AND operation = 'finish' "
            "AND task_id IN (SELECT id FROM queue_tasks WHERE job_id = %s)",
            [job],
        )
        == 3
    )

    # The dead worker is reported offline and refused for targeted dispatch; a live one is accepted.
    assert one("SELECT lifecycle FROM queue_workers WHERE uid = %s", [victim_uid]) == "offline"
    with pytest.raises(repository.InvalidArgument) as refused:
        repository.enqueue_job(repository.NewJob("noop", {}, required_worker_uid=victim_uid), stale_seconds=3)
    assert refused.value.field == "required_worker_uid" and "offline" in refused.value.message
    repository.enqueue_job(repository.NewJob("noop", {}, required_worker_uid=survivor_uid), stale_seconds=3)

    # A second process with the same uid takes it over: the first exits "uid taken over".
    old_session = survivor.session()
    successor = start_worker(survivor_uid, "--concurrency", "1")
    assert survivor.wait(15) == 3
    assert "uid taken over" in survivor.output()
    assert successor.session() != old_session
    successor.signal(signal.SIGTERM)
    assert successor.wait(15) == 0


def test_a_stopped_worker_is_fenced_out_and_its_processes_killed(start_worker, enqueue, tmp_path):
    z = start_worker("zombie", "--concurrency", "2")

    # Warm-up on the same process: the stall watchdog and the stage deadline kill their groups.
    stall_pids, late_pids = tmp_path / "stall.pids", tmp_path / "late.pids"
    stalled = enqueue(
        "test.subprocess", {"seconds": 60, "silent": True, "stall_seconds": 1, "pidfile": str(stall_pids)}
    )
    late = enqueue("test.subprocess", {"seconds": 60, "pidfile": str(late_pids)}, timeout_seconds=2)
    wait_for(
        lambda: dispatch_tasks(stalled)[0][2] == "retry_wait" and dispatch_tasks(late)[0][2] == "retry_wait",
        15,
        "the stalled and the late stage to fail",
        workers=[z],
    )
    assert "StageTimeout" in dispatch_tasks(stalled)[0][5] and "stalled" in dispatch_tasks(stalled)[0][5]
    assert "StageTimeout" in dispatch_tasks(late)[0][5] and "deadline" in dispatch_tasks(late)[0][5]
    for pidfile in (stall_pids, late_pids):
        assert not any(pid_alive(int(p)) for p in pidfile.read_text().split()), pidfile

    # SIGSTOP past the lease; the lease is recovered; SIGCONT: every write is rejected.
    pidfile = tmp_path / "zombie.pids"
    job = enqueue("test.subprocess", {"seconds": 60, "pidfile": str(pidfile)})
    wait_for(lambda: pidfile.exists() and pidfile.read_text(), 10, "the stage's subprocess", workers=[z])
    pids = [int(p) for p in pidfile.read_text().split()]
    task_id, _, _, _, _, _, token = dispatch_tasks(job)[0]
    session = z.session()
    z.signal(signal.SIGSTOP)
    stopped_at = time.monotonic()
    wait_for(
        lambda: one("SELECT lease_expires_at < now() FROM queue_tasks WHERE id = %s", [task_id]),
        LEASE + 3,
        "the lease to expire",
    )
    assert [row[0] for row in repository.recover_expired()] == [task_id]  # another worker's recovery loop
    assert dispatch_tasks(job)[0][2] == "retry_wait"
    assert all(pid_alive(p) for p in pids)  # the zombie's FFmpeg would still be running here
    print(f"\nworker stopped for {time.monotonic() - stopped_at:.1f}s (lease {LEASE:g}s)")
    z.signal(signal.SIGCONT)
    resumed = time.monotonic()
    wait_for(
        lambda: not any(pid_alive(p) for p in pids),
        2 * HEARTBEAT + 2,
        "the zombie's processes to die",
        workers=[z],
    )
    print(f"the zombie's process group was killed {time.monotonic() - resumed:.2f}s after SIGCONT")
    wait_for(
        lambda: one(
            "SELECT count(*) FROM queue_fence_audit WHERE task_id = %s AND lease_token = %s AND NOT accepted",
            [task_id, token],
        ),
        5,
        "a rejected write to be audited",
        workers=[z],
    )
    time.sleep(HEARTBEAT * 1.5)
    writes = sql(
        "SELECT operation, accepted, reason FROM queue_fence_audit WHERE task_id = %s AND session_id = %s "
        "AND operation <> 'recover' ORDER BY id",
        [task_id, session],
    )
    assert writes and not any(accepted for _, accepted, _ in writes), writes
    assert dispatch_tasks(job)[0][2] == "retry_wait"  # the zombie completed nothing
    # The worker itself lives on (its session is still the current one) and is active again.
    assert z.popen.poll() is None
    wait_for(
        lambda: one("SELECT lifecycle FROM queue_workers WHERE uid = 'zombie'") == "active", 5, "active again"
    )
    z.signal(signal.SIGTERM)
    assert z.wait(15) == 0


def test_it_reconnects_after_its_connections_are_killed_mid_task_and_a_second_sigterm_aborts(
    start_worker, enqueue
):
    w = start_worker("conn", "--concurrency", "1")
    job = enqueue("noop", {"seconds": 4})
    wait_for(lambda: running_on(job, "conn"), 10, "the stage to run", workers=[w])
    time.sleep(0.5)
    victims = sql(
        "SELECT application_name, pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE application_name LIKE 'jetencode-worker conn %%' AND datname = current_database()"
    )
    roles = {name.rsplit(" ", 1)[1] for name, _ in victims}
    assert roles == {"listen", "heartbeat", "work"}, victims

    wait_for(
        lambda: job_status(job) == "completed", 20, "the stage to complete after reconnecting", workers=[w]
    )
    tasks = dispatch_tasks(job)
    assert len(tasks) == 1 and tasks[0][3] == 1, tasks  # ran once, no second attempt
    assert (
        one(
            "SELECT count(*) FROM queue_fence_audit WHERE task_id = %s AND operation = 'finish' AND accepted",
            [tasks[0][0]],
        )
        == 1
    )
    assert (
        one("SELECT count(*) FROM queue_fence_audit WHERE task_id = %s AND NOT accepted", [tasks[0][0]]) == 0
    )
    assert w.popen.poll() is None

    # LISTEN came back: an idle slot is woken well before the next poll would have found the job.
    wait_for(lambda: w.connections("listen"), 10, "the LISTEN connection to come back", workers=[w])
    time.sleep(0.3)
    quick = enqueue("noop", {"seconds": 0})
    wait_for(lambda: job_status(quick) == "completed", 10, "a job after the reconnect", workers=[w])
    latency = one(
        "SELECT extract(epoch FROM started_at - created_at) FROM queue_tasks WHERE job_id = %s", [quick]
    )
    print(f"\nwake-up latency after the LISTEN connection was re-established: {float(latency) * 1000:.1f} ms")

    # A second SIGTERM aborts the drain at once: the running stage is handed back, no attempt used.
    long = enqueue("noop", {"seconds": 60})
    wait_for(lambda: running_on(long, "conn"), 10, "the long stage to run", workers=[w])
    w.signal(signal.SIGTERM)
    wait_for(
        lambda: one("SELECT lifecycle FROM queue_workers WHERE uid = 'conn'") == "draining",
        5,
        "draining",
        workers=[w],
    )
    w.signal(signal.SIGTERM)
    aborted_at = time.monotonic()
    assert w.wait(10) == 128 + signal.SIGTERM
    assert time.monotonic() - aborted_at < 3
    assert dispatch_tasks(long)[0][2:4] == ("pending", 0)
    assert one("SELECT lifecycle FROM queue_workers WHERE uid = 'conn'") == "offline"
