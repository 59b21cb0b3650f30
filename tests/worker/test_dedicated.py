"""Dedicated execution end to end with real worker processes, the real provisioner command and
real signals (docs/scheduler.md, "Dedicated execution"; the SQL rules: tests/scheduler/
test_reservations.py). Timings are the test workers' (lease 4 s, heartbeat 1 s, stale 3 s)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from django.db import transaction

from scheduler import queries, repository
from tests.kit import ROOT
from tests.kit.db import claim, job_status, lease_of, one, sql
from tests.kit.media import SIGNED_LOCAL_WEBHOOKS
from tests.kit.waiting import wait_for
from tests.kit.web import Receiver
from tests.kit.workers import LEASE, pid_alive

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.timeout(180)]

LOCAL_PROVISIONER = f"{sys.executable} {ROOT / 'deploy' / 'provisioners' / 'local.py'}"


def dedicated_job(enqueue, job_type="test.fanout", params=None, **kwargs):
    """A job enqueued and dedicated in one transaction, so no idle worker can claim it in between."""
    with transaction.atomic():
        job = enqueue(job_type, params or {"children": 2}, **kwargs)
        return job, repository.reserve_job(job)


def reservation(rid) -> dict:
    return one("SELECT row_to_json(r) FROM queue_reservations r WHERE id = %s", [rid])


def claimed_by(job) -> set[str | None]:
    return {row[0] for row in sql("SELECT claimed_by FROM queue_tasks WHERE job_id = %s", [job])}


def provision(env: dict, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "provision", "--once", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def provisioned(tmp_path):
    """The local provisioner's state directory; the workers it started are killed afterwards."""
    state = tmp_path / "provisioners"
    yield state
    for pidfile in state.glob("*.pid"):
        try:
            os.kill(int(pidfile.read_text()), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def test_the_local_provisioner_brings_up_a_worker_that_runs_only_the_job_and_leaves(
    start_worker, enqueue, worker_env, provisioned, make_worker_row
):
    with Receiver() as receiver:
        ordinary = [start_worker(uid, "--concurrency", "1", env=SIGNED_LOCAL_WEBHOOKS) for uid in ("a", "b")]
        job, rid = dedicated_job(enqueue, webhook_url=f"{receiver.url}/dedicated")

        # Two idle ordinary workers poll for seconds and never claim it; the queue says why.
        time.sleep(3)
        assert claimed_by(job) == {None} and job_status(job) == "pending"
        reason = queries.queue_entry(job).waiting_reason
        assert reason.startswith(
            f"waiting for a dedicated worker (reservation {str(rid)[:8]}…, requested "
        ), reason
        for worker in ordinary:
            assert worker.drain() == 0

        # Shared work the dedicated worker could see: a pending job and another job's pending webhook.
        shared = enqueue("noop")
        elsewhere = make_worker_row("elsewhere")
        hooked = enqueue("noop", webhook_url=f"{receiver.url}/shared", priority=10)
        repository.finish(lease_of(claim(elsewhere), elsewhere))
        assert job_status(hooked) == "completed"

        env = {
            **worker_env,
            **SIGNED_LOCAL_WEBHOOKS,
            "JETENCODE_PROVISIONER": LOCAL_PROVISIONER,
            "JETENCODE_PROVISIONER_STATE_DIR": str(provisioned),
        }
        done = provision(env)
        assert done.returncode == 0, done.stderr
        assert reservation(rid)["provision_attempts"] == 1 and reservation(rid)["last_error"] == ""
        pid = int((provisioned / f"{rid}.pid").read_text())
        log = provisioned / f"{rid}.log"

        def output():
            return log.read_text(errors="replace") if log.exists() else ""

        wait_for(lambda: job_status(job) == "completed", 60, f"the dedicated job to complete\n{output()}")
        wait_for(lambda: not pid_alive(pid), 30, f"the dedicated worker to exit\n{output()}")
        assert "released: its job has ended" in output() and "(exit 0)" in output(), output()
        # Idempotent by reservation id: provisioning again starts nothing (it is no longer requested).
        assert provision(env).returncode == 0 and int((provisioned / f"{rid}.pid").read_text()) == pid

    row = reservation(rid)
    uid = sql("SELECT uid FROM queue_workers WHERE pid = %s", [pid])[0][0]
    assert (row["state"], row["generation"], row["worker_uid"]) == ("released", 1, uid)
    tasks = sql("SELECT task_type, state, claimed_by FROM queue_tasks WHERE job_id = %s ORDER BY id", [job])
    assert sorted(t[0] for t in tasks) == ["test.fanout", "test.leaf", "test.leaf", "webhook"], tasks
    assert all(state == "completed" and by == uid for _, state, by in tasks), tasks
    assert [path for path, _, _ in receiver.requests] == ["/dedicated"]
    # The shared job and the other job's webhook were left alone the whole time.
    assert claimed_by(shared) == {None} and job_status(shared) == "pending"
    assert sql(
        "SELECT state, claimed_by FROM queue_tasks WHERE job_id = %s AND task_type = 'webhook'", [hooked]
    ) == [("pending", None)]
    assert one("SELECT lifecycle FROM queue_workers WHERE uid = %s", [uid]) == "offline"


def test_a_killed_dedicated_worker_is_replaced_by_a_new_generation(start_worker, enqueue, fast_retries):
    keeper = start_worker("keeper", "--concurrency", "1")  # runs the maintenance sweep; claims nothing of it
    job, rid = dedicated_job(enqueue, params={"children": 2, "dispatch_seconds": 60})
    first = start_worker("dedicated-1", "--reservation", str(rid))
    wait_for(
        lambda: claimed_by(job) == {"dedicated-1"}, 30, "the dispatch to run on dedicated-1", workers=[first]
    )

    # A second process for a reservation whose worker is alive is refused.
    second = start_worker("dedicated-2", "--reservation", str(rid), ready=False)
    assert second.wait(60) == 4
    assert "bound to worker dedicated-1, which is alive" in second.output(), second.output()

    first.signal(signal.SIGKILL)
    first.wait(5)
    back = wait_for(
        lambda: (r := reservation(rid))["state"] == "requested" and r,
        LEASE + 15,
        "the reservation to go back to requested",
        workers=[keeper],
    )
    assert "worker dedicated-1 lost its reservation" in back["last_error"] and back["generation"] == 1
    third = start_worker("dedicated-3", "--reservation", str(rid))
    wait_for(
        lambda: job_status(job) == "completed", 60, "the job to complete on dedicated-3", workers=[third]
    )
    assert third.wait(30) == 0
    assert reservation(rid)["generation"] == 2 and reservation(rid)["state"] == "released"
    finished = sql(
        "SELECT DISTINCT claimed_by FROM queue_tasks WHERE job_id = %s AND state = 'completed'", [job]
    )
    assert finished == [("dedicated-3",)]
    assert "lost its reservation" in one("SELECT log FROM jobs WHERE id = %s", [job])
    assert keeper.alive() and claimed_by(job) <= {"dedicated-1", "dedicated-3"}


def test_a_frozen_dedicated_worker_is_fenced_once_another_binds(start_worker, enqueue, fast_retries):
    keeper = start_worker("keeper", "--concurrency", "1")
    job, rid = dedicated_job(enqueue, params={"children": 1, "dispatch_seconds": 60})
    frozen = start_worker("frozen", "--reservation", str(rid))
    task_id, token, session = wait_for(
        lambda: sql(
            "SELECT id, lease_token, claimed_worker_session_id FROM queue_tasks "
            "WHERE job_id = %s AND state = 'running' AND progress > 0",
            [job],
        ),
        30,
        "the dispatch to run on the first worker",
        workers=[frozen],
    )[0]
    frozen.signal(signal.SIGSTOP)
    wait_for(lambda: reservation(rid)["state"] == "requested", LEASE + 15, "the sweep", workers=[keeper])
    thawed_later = start_worker("successor", "--reservation", str(rid))
    wait_for(lambda: job_status(job) == "completed", 60, "the successor to finish", workers=[thawed_later])
    assert reservation(rid)["generation"] == 2

    frozen.signal(signal.SIGCONT)
    assert frozen.wait(30) == 0  # it sees its reservation gone and leaves
    writes = sql(
        "SELECT operation, accepted, reason FROM queue_fence_audit "
        "WHERE task_id = %s AND session_id = %s AND operation <> 'recover' ORDER BY id",
        [task_id, session],
    )
    assert writes and not any(accepted for _, accepted, _ in writes), writes
    assert one(
        "SELECT count(*) FROM queue_fence_audit WHERE task_id = %s AND lease_token = %s AND NOT accepted",
        [task_id, token],
    )
    assert "this worker no longer holds it; draining and exiting" in frozen.output(), frozen.output()[-3000:]
    completed = sql(
        "SELECT DISTINCT claimed_by FROM queue_tasks WHERE job_id = %s AND state = 'completed'", [job]
    )
    assert completed == [("successor",)]
    assert thawed_later.wait(30) == 0


def test_an_unbound_reservation_times_out_back_to_shared_execution(start_worker, enqueue):
    job, rid = dedicated_job(enqueue, "noop", {})
    worker = start_worker(
        "ordinary", "--concurrency", "1", env={"JETENCODE_RESERVATION_TIMEOUT_SECONDS": "3"}
    )
    wait_for(
        lambda: job_status(job) == "completed", 30, "the job to run on the ordinary worker", workers=[worker]
    )
    row = reservation(rid)
    assert row["state"] == "failed" and "no worker bound it within 3s" in row["last_error"]
    assert claimed_by(job) == {"ordinary"}
    assert "the job returns to shared execution and keeps its place (nothing is lost)" in one(
        "SELECT log FROM jobs WHERE id = %s", [job]
    )


def test_a_failing_or_hanging_provisioner_is_recorded_retried_and_killed(enqueue, worker_env, tmp_path):
    _, rid = dedicated_job(enqueue, "noop", {})
    failing = f"{sys.executable} -c \"import sys; print('looking', file=sys.stderr); print('no capacity in zone b', file=sys.stderr); sys.exit(3)\""
    done = provision({**worker_env, "JETENCODE_PROVISIONER": failing}, "--backoff", "30")
    assert done.returncode == 0, done.stderr
    row = reservation(rid)
    assert (row["last_error"], row["provision_attempts"]) == (
        "provisioner exited 3: no capacity in zone b",
        1,
    )
    # Retried after the backoff (doubling), not before.
    assert 20 < one("SELECT extract(epoch FROM next_provision_at - now()) FROM queue_reservations") <= 30
    provision({**worker_env, "JETENCODE_PROVISIONER": failing}, "--backoff", "30")
    assert reservation(rid)["provision_attempts"] == 1
    sql("UPDATE queue_reservations SET next_provision_at = now() WHERE id = %s", [rid])
    provision({**worker_env, "JETENCODE_PROVISIONER": failing}, "--backoff", "30")
    assert reservation(rid)["provision_attempts"] == 2
    assert 50 < one("SELECT extract(epoch FROM next_provision_at - now()) FROM queue_reservations") <= 60

    # A provisioner that hangs is killed, with what it started, after the deadline.
    pidfile = tmp_path / "hang.pid"
    hanging = (
        f'{sys.executable} -c "import os, subprocess, sys, time; '
        f"child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
        f"open('{pidfile}', 'w').write(f'{{os.getpid()}} {{child.pid}}'); time.sleep(120)\""
    )
    sql("UPDATE queue_reservations SET next_provision_at = now() WHERE id = %s", [rid])
    started = time.monotonic()
    done = provision(
        {**worker_env, "JETENCODE_PROVISIONER": hanging, "JETENCODE_PROVISIONER_TIMEOUT_SECONDS": "2"}
    )
    assert done.returncode == 0 and time.monotonic() - started < 30
    assert reservation(rid)["last_error"] == "provisioner timed out after 2s (killed)"
    pids = [int(p) for p in pidfile.read_text().split()]
    wait_for(lambda: not any(pid_alive(p) for p in pids), 5, "the hung provisioner and its child to die")

    unset = provision({**worker_env, "JETENCODE_PROVISIONER": ""})
    assert unset.returncode == 2 and "JETENCODE_PROVISIONER is not set" in unset.stderr


def test_runworker_refuses_an_unknown_or_malformed_reservation(start_worker):
    unknown = start_worker("nobody", "--reservation", "00000000-0000-0000-0000-000000000001", ready=False)
    assert unknown.wait(60) == 4
    assert "reservation 00000000-0000-0000-0000-000000000001 not found" in unknown.output()
    bad = start_worker("bad", "--reservation", "nope", ready=False)
    assert bad.wait(60) == 2 and "is not a reservation id" in bad.output()


def test_the_provision_loop_picks_up_new_reservations_and_stops_on_sigterm(enqueue, worker_env):
    failing = f"{sys.executable} -c \"import sys; sys.exit('no machines left')\""
    loop = subprocess.Popen(
        [sys.executable, "manage.py", "provision", "--interval", "0.2"],
        cwd=ROOT,
        env={**worker_env, "JETENCODE_PROVISIONER": failing},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for(
            lambda: loop.poll() is None and "provisioning with" in (loop.stdout.readline() or ""),
            30,
            "the loop",
        )
        _, rid = dedicated_job(enqueue, "noop", {})  # requested after the loop started
        wait_for(lambda: reservation(rid)["last_error"], 20, "the loop to run the provisioner")
        assert reservation(rid)["last_error"] == "provisioner exited 1: no machines left"
        loop.send_signal(signal.SIGTERM)
        assert loop.wait(15) == 0
    finally:
        if loop.poll() is None:
            loop.kill()
