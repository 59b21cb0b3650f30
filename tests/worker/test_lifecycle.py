"""One real worker through a normal life: wake-up latency, outputs, failures, cancellation, and a
SIGTERM drain with a stage that outlives the grace period. One process serves every step (the
transactional test database is flushed between tests, which would orphan a shared worker)."""

import signal
import statistics
import time

import pytest

from scheduler import repository
from tests.kit.db import one, sql
from tests.kit.waiting import wait_for
from tests.kit.workers import GRACE, HEARTBEAT, pid_alive

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(120)]


def task_of(job):
    return sql(
        "SELECT id, state, attempt, claimed_by, last_failure FROM queue_tasks WHERE job_id = %s "
        "AND placement = 'dispatch' ORDER BY id DESC LIMIT 1",
        [job],
    )[0]


def state_of(job):
    return task_of(job)[1]


def test_a_worker_runs_cancels_fails_publishes_and_drains(start_worker, enqueue, tmp_path, settings):
    worker = start_worker("life", "--concurrency", "2")
    session = worker.session()
    assert one("SELECT lifecycle FROM queue_workers WHERE uid = 'life'") == "active"
    wait_for(
        lambda: one(
            "SELECT system_sample ?& array['cpu_percent', 'memory', 'disk'] FROM queue_workers "
            "WHERE uid = 'life'"
        ),
        5,
        "a psutil sample in the worker row",
        workers=[worker],
    )
    names = {
        row[0]
        for row in sql(
            "SELECT application_name FROM pg_stat_activity WHERE application_name LIKE "
            "'jetencode-worker life %%'"
        )
    }
    # Three connections whatever the slot count (workers/db.py).
    assert names == {
        "jetencode-worker life heartbeat",
        "jetencode-worker life listen",
        "jetencode-worker life work",
    }, names

    # --- idle wake-up latency: enqueue -> claim (handler start), slots idle on LISTEN --------------
    latencies = []
    for _ in range(6):
        time.sleep(0.3)  # let every slot go back to waiting
        job = enqueue("noop", {"seconds": 0})
        wait_for(lambda job=job: state_of(job) == "completed", 10, "a noop to complete", workers=[worker])
        latencies.append(
            one(
                "SELECT extract(epoch FROM started_at - created_at) FROM queue_tasks WHERE job_id = %s", [job]
            )
        )
    latencies = [float(x) for x in latencies]
    print(
        f"\nidle wake-up latency (enqueue -> claim), LISTEN on: min {min(latencies) * 1000:.1f} ms, "
        f"median {statistics.median(latencies) * 1000:.1f} ms, max {max(latencies) * 1000:.1f} ms "
        f"(poll interval 500 ms)"
    )
    assert max(latencies) < 5.0  # a sanity bound only; polling alone would stay under 0.5 s

    # --- a published file appears under OUTPUT_ROOT/<job>/ with its row, once -------------------
    job = enqueue("test.publish")
    wait_for(lambda: state_of(job) == "completed", 10, "test.publish to complete", workers=[worker])
    out = tmp_path / "outputs" / str(job) / "hello.txt"
    assert out.read_text().startswith("hello from task")
    assert sql("SELECT name, kind, size_bytes FROM job_outputs WHERE job_id = %s", [job]) == [
        ("hello.txt", "data", out.stat().st_size)
    ]
    assert not [p for p in out.parent.iterdir() if p.name != "hello.txt"]  # no temporary left behind
    assert "wrote hello.txt" in " ".join(
        r[0]
        for r in sql(
            "SELECT message FROM queue_task_logs l JOIN queue_tasks t ON t.id = l.task_id WHERE t.job_id = %s",
            [job],
        )
    )

    # --- handler exceptions become failures with their traceback; the worker carries on ---------
    crash = enqueue("test.crash", max_attempts=3)
    permanent = enqueue("test.crash", {"permanent": True}, max_attempts=3)
    wait_for(
        lambda: state_of(crash) == "retry_wait" and state_of(permanent) == "failed",
        10,
        "the crashes to be recorded",
        workers=[worker],
    )
    failure = task_of(crash)[4]
    assert failure.startswith("RuntimeError: boom") and "Traceback (most recent call last)" in failure
    assert task_of(permanent)[2] == 1 and task_of(permanent)[4].startswith("PermanentFailure: bad input")

    # --- cancel a running noop: it ends cancelled within two heartbeat intervals ------------------
    job = enqueue("noop", {"seconds": 30, "children": 2})
    wait_for(lambda: state_of(job) == "running", 10, "the noop to run", workers=[worker])
    time.sleep(0.5)
    started = time.monotonic()
    repository.cancel(job)
    wait_for(lambda: state_of(job) == "cancelled", 2 * HEARTBEAT + 3, "the cancel", workers=[worker])
    elapsed = time.monotonic() - started
    print(f"cancel of a running noop took {elapsed:.2f}s (heartbeat {HEARTBEAT:g}s)")
    assert elapsed <= 2 * HEARTBEAT + 0.5
    assert one("SELECT status FROM jobs WHERE id = %s", [job]) == "cancelled"
    assert one("SELECT count(*) FROM queue_tasks WHERE job_id = %s", [job]) == 1  # no children

    # --- cancel a stage running a subprocess group: the whole group is killed -------------------
    pidfile = tmp_path / "cancel.pids"
    job = enqueue("test.subprocess", {"seconds": 60, "pidfile": str(pidfile)})
    wait_for(
        lambda: pidfile.exists() and pidfile.read_text(), 10, "the subprocess to start", workers=[worker]
    )
    pids = [int(p) for p in pidfile.read_text().split()]
    assert all(pid_alive(p) for p in pids)
    started = time.monotonic()
    repository.cancel(job)
    wait_for(
        lambda: not any(pid_alive(p) for p in pids),
        2 * HEARTBEAT + 3,
        "the process group to die",
        workers=[worker],
    )
    wait_for(lambda: state_of(job) == "cancelled", 5, "the cancel", workers=[worker])
    print(f"cancel killed the process group and ended the task in {time.monotonic() - started:.2f}s")
    assert time.monotonic() - started <= 2 * HEARTBEAT + 1.0

    # --- SIGTERM: drain. The short stage finishes, the long one is handed back after the grace ----
    short = enqueue("noop", {"seconds": 1.5})
    long_pids = tmp_path / "long.pids"
    long = enqueue("test.subprocess", {"seconds": 120, "pidfile": str(long_pids)})
    wait_for(
        lambda: (
            state_of(short) == "running"
            and state_of(long) == "running"
            and long_pids.exists()
            and long_pids.read_text()
        ),
        10,
        "both stages to run",
        workers=[worker],
    )
    pids = [int(p) for p in long_pids.read_text().split()]
    worker.signal(signal.SIGTERM)
    sigterm_at = time.monotonic()
    wait_for(
        lambda: one("SELECT lifecycle FROM queue_workers WHERE uid = 'life'") == "draining",
        3,
        "the session to say draining",
        workers=[worker],
    )
    late = enqueue("noop", {"seconds": 0})  # must not be claimed by a draining worker
    wait_for(
        lambda: state_of(short) == "completed",
        5,
        "the short stage to finish while draining",
        workers=[worker],
    )
    assert state_of(long) == "running"  # heartbeats keep its lease during the grace period
    assert worker.wait(GRACE + 10) == 0
    took = time.monotonic() - sigterm_at
    assert GRACE - 0.5 <= took <= GRACE + 6, took
    long_task = task_of(long)
    assert long_task[1] == "pending" and long_task[2] == 0, long_task  # handed back, no attempt used
    assert sql(
        "SELECT accepted FROM queue_fence_audit WHERE task_id = %s AND operation = 'release'", [long_task[0]]
    ) == [(True,)]
    assert state_of(late) == "pending"
    assert not any(pid_alive(p) for p in pids), "the long stage's processes outlived the worker"
    assert one("SELECT lifecycle FROM queue_workers WHERE uid = 'life'") == "offline"
    assert (
        one("SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'jetencode-worker life %%'")
        == 0
    )
    # Nothing this session wrote was ever rejected.
    assert (
        one("SELECT count(*) FROM queue_fence_audit WHERE session_id = %s AND NOT accepted", [session]) == 0
    )
    assert "uid taken over" not in worker.output()


def test_a_polling_only_worker_finds_work_and_a_second_ctrl_c_aborts_its_drain(start_worker, enqueue):
    worker = start_worker("poller", "--concurrency", "1", env={"JETENCODE_NOTIFY": "false"}, ready=False)
    worker.wait_ready(listening=False)
    assert not worker.connections("listen")
    latencies = []
    for _ in range(4):
        time.sleep(0.3)
        job = enqueue("noop", {"seconds": 0})
        wait_for(lambda job=job: state_of(job) == "completed", 10, "a noop to complete", workers=[worker])
        latencies.append(
            float(
                one(
                    "SELECT extract(epoch FROM started_at - created_at) FROM queue_tasks WHERE job_id = %s",
                    [job],
                )
            )
        )
    print(
        f"\nidle wake-up latency, polling only (JETENCODE_NOTIFY=false, poll 500 ms): "
        f"median {statistics.median(latencies) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms"
    )
    assert max(latencies) < 5.0

    # Ctrl-C drains like SIGTERM; a second Ctrl-C aborts at once: the running stage is handed
    # back and the session goes offline.
    job = enqueue("noop", {"seconds": 60})
    wait_for(lambda: state_of(job) == "running", 10, "the stage to run", workers=[worker])
    worker.signal(signal.SIGINT)
    wait_for(
        lambda: one("SELECT lifecycle FROM queue_workers WHERE uid = 'poller'") == "draining",
        5,
        "draining",
        workers=[worker],
    )
    assert state_of(job) == "running"
    worker.signal(signal.SIGINT)
    assert worker.wait(10) == 128 + signal.SIGINT
    assert task_of(job)[1:3] == ("pending", 0)
    assert one("SELECT lifecycle FROM queue_workers WHERE uid = 'poller'") == "offline"
