"""Two worker machines, one PostgreSQL, and a link that breaks.

Each worker is a real `manage.py runworker` process that reaches PostgreSQL over TCP through a proxy
the test controls (tests/kit/tcpproxy.py), as a worker on another host would. A job runs a real
FFmpeg for about 20 s (`farm_encode`, tests/kit/stages.py). Whichever worker claims it is
then cut off for longer than its lease:

- `cut`: the link fails loudly (connections reset, reconnects refused);
- `stall`: the link fails silently (nothing is delivered, nothing errors) and everything sent during
  the partition reaches PostgreSQL when the link returns.

Either way the cut-off worker must stop its FFmpeg before its lease can be given away, the other
worker's recovery loop takes the job over (lost in its dispatch, so the dispatch is retried by any
worker once the backoff ends, a tenth of the usual under `fast_retries`: same execution, attempt
2), runs it and publishes its file and child exactly once; when the link returns, every write the
cut-off worker still makes for the old lease is rejected (queue_fence_audit accepted=false), its
handler stops, and the worker goes back to work.
"""

from __future__ import annotations

import json
import time
import uuid

import psutil
import pytest

from scheduler import repository
from tests.kit.db import sql
from tests.kit.tcpproxy import via_proxy
from tests.kit.waiting import wait_for
from tests.kit.workers import LEASE, STALE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

# The workers' environment beyond the short timings of tests/kit/workers.py (lease LEASE, worker
# silent after STALE).
ENV = {
    "JETENCODE_LOG_JSON": "true",
    # As docs/operations.md configures PostgreSQL: with JIT on, the background claim's plan gets
    # compiled on every call (about a second, holding the scheduler lock), which starves heartbeats.
    "PGOPTIONS": "-c jit=off",
}
ENCODE_SECONDS = 12  # outlasts the cut (about 2 s in) plus LEASE, when the lost worker kills it


def db_now():
    return sql("SELECT now()")[0][0]


def fresh_active(uid: str) -> bool:
    return bool(
        sql(
            "SELECT 1 FROM queue_workers WHERE uid = %s AND lifecycle = 'active' "
            "AND last_heartbeat_at > now() - make_interval(secs => %s)",
            [uid, STALE],
        )
    )


def ffmpeg_of(worker, marker: str) -> list[psutil.Process]:
    """This worker's FFmpeg processes for the job (found by the marker in argv, owned by parent pid)."""
    found = []
    for proc in psutil.process_iter(["ppid", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["ppid"] == worker.popen.pid and any(marker in arg for arg in cmdline):
            try:
                if proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
            except psutil.NoSuchProcess:
                pass
    return found


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("failure", ["cut", "stall"])
def test_a_cut_off_worker_is_fenced_and_its_stage_recovered_elsewhere(
    failure, make_proxy, start_worker, database_url, tmp_path, fast_retries
):
    proxies = {uid: make_proxy() for uid in ("host-a", "host-b")}
    workers = {
        uid: start_worker(
            uid,
            "--concurrency",
            "1",
            "--workspace",
            str(tmp_path / uid / "workspace"),  # a machine of its own
            database_url=via_proxy(database_url, proxy),
            env=ENV,
            ready=False,  # both start at once; their registration is awaited below
        )
        for uid, proxy in proxies.items()
    }
    wait_for(lambda: all(fresh_active(uid) for uid in workers), 60, "both workers registered")
    # Every connection says whose it is in pg_stat_activity: worker uid and thread.
    roles = ("work", "heartbeat", "listen")  # three whatever the slot count
    expected = {f"jetencode-worker {uid} {role}" for uid in workers for role in roles}
    wait_for(
        lambda: (
            expected
            <= {
                name
                for (name,) in sql(
                    "SELECT application_name FROM pg_stat_activity WHERE datname = current_database()"
                )
            }
        ),
        45,
        f"connections named {sorted(expected)}",
    )

    marker = f"farm-{uuid.uuid4().hex}"
    job_id = repository.enqueue_job(
        repository.NewJob("farm_encode", {"seconds": ENCODE_SECONDS, "marker": marker}, max_attempts=3),
        stale_seconds=STALE,
    )
    task_id, lost_uid, token = wait_for(
        lambda: (
            sql(
                "SELECT id, claimed_by, lease_token FROM queue_tasks WHERE job_id = %s AND state = 'running'",
                [job_id],
            )
            or [None]
        )[0],
        30,
        "the stage claimed",
    )
    lost, survivor = workers[lost_uid], next(w for uid, w in workers.items() if uid != lost_uid)
    wait_for(lambda: ffmpeg_of(lost, marker), 10, f"FFmpeg running on {lost_uid}")
    time.sleep(1.5)

    # --- the link of the worker running the stage breaks -------------------------------------
    proxy = proxies[lost_uid]
    if failure == "cut":
        proxy.cut()
    else:
        proxy.stall()
    cut_at = time.monotonic()

    # It stops its own FFmpeg before its lease can expire in the database and be given away.
    wait_for(lambda: not ffmpeg_of(lost, marker), LEASE + 2, f"{lost_uid} to kill its FFmpeg")
    wait_for(
        lambda: sql("SELECT 1 FROM queue_tasks WHERE id = %s AND state <> 'running'", [task_id]),
        20,
        "the recovery loop to take the expired lease",
    )
    assert not ffmpeg_of(lost, marker)

    # Lost in its dispatch: the survivor's release pass clears the assignment (nothing of value is on
    # the lost worker) and the survivor retries the same task once the backoff ends.
    wait_for(
        lambda: sql(
            "SELECT 1 FROM queue_tasks WHERE id = %s AND attempt = 2 AND state = 'running' AND claimed_by = %s",
            [task_id, survivor.uid],
        ),
        30,
        f"{survivor.uid} to run the job's new execution",
    )
    wait_for(lambda: ffmpeg_of(survivor, marker), 10, f"FFmpeg running on {survivor.uid}")
    assert not ffmpeg_of(lost, marker)
    assert time.monotonic() - cut_at > LEASE  # cut off for longer than its lease

    # --- the link returns ---------------------------------------------------------------------
    restored_at = db_now()
    proxy.restore()
    wait_for(lambda: fresh_active(lost_uid), 20, f"{lost_uid} heartbeating again")

    # The worker that came back takes new work (its slot is free: the old handler has stopped).
    probe = repository.enqueue_job(
        repository.NewJob("noop", {"seconds": 0}, required_worker_uid=lost_uid), stale_seconds=STALE
    )
    wait_for(
        lambda: sql("SELECT 1 FROM jobs WHERE id = %s AND status = 'completed'", [probe]),
        30,
        f"{lost_uid} to run a job after the partition",
    )

    wait_for(
        lambda: sql("SELECT 1 FROM jobs WHERE id = %s AND status IN ('completed', 'failed')", [job_id]),
        ENCODE_SECONDS + 40,
        "the job to finish on the survivor",
    )
    assert sql("SELECT status FROM jobs WHERE id = %s", [job_id]) == [("completed",)]
    assert lost.alive() and survivor.alive()

    # --- exactly one accepted finish, nothing published twice ---------------------------------
    tasks = sql(
        "SELECT id, execution_id, task_type, state, parent_task_id FROM queue_tasks "
        "WHERE job_id = %s AND placement <> 'cluster' ORDER BY id",
        [job_id],
    )
    encodes = [t for t in tasks if t[2] == "farm_encode" and t[3] == "completed"]
    assert len(encodes) == 1 and encodes[0][:2] == (task_id, 1), tasks  # the same task, retried
    done = encodes[0][0]
    children = [t for t in tasks if t[4] is not None]
    assert [(t[2], t[3], t[4]) for t in children] == [("noop", "completed", done)], tasks

    finishes = sql(
        "SELECT task_id FROM queue_fence_audit WHERE job_id = %s AND operation = 'finish' AND accepted",
        [job_id],
    )
    assert sorted(finishes) == sorted([(done,), (children[0][0],)])
    assert sql("SELECT name, task_id FROM job_outputs WHERE job_id = %s", [job_id]) == [("farm.mp4", done)]
    output_dir = tmp_path / "outputs" / str(job_id)
    assert sorted(p.name for p in output_dir.iterdir()) == ["farm.mp4"]  # no stray temporary copy

    # --- the cut-off worker's late writes under the old lease were all rejected ----------------
    stale = sql(
        "SELECT operation, accepted, reason, at FROM queue_fence_audit "
        "WHERE task_id = %s AND lease_token = %s AND operation <> 'recover' ORDER BY id",
        [task_id, token],
    )
    assert not [s for s in stale if s[1]], f"a stale write was accepted: {stale}"
    assert sql(
        "SELECT count(*) FROM queue_fence_audit WHERE task_id = %s AND operation = 'recover' AND accepted",
        [task_id],
    ) == [(1,)]
    if failure == "stall":
        # Statements held by the silent link arrived late and were refused.
        late = [s for s in stale if s[3] >= restored_at]
        assert late, f"expected the held writes of {lost_uid} to arrive and be rejected: {stale}"
    # ... and then the handler stopped: nothing more arrives for the old lease.
    assert not [s for s in stale if (s[3] - restored_at).total_seconds() > 3], stale

    # The worker logged it as JSON lines carrying the job, task and worker ids.
    records = [json.loads(line) for line in lost.output().splitlines() if line.startswith("{")]
    about_task = [r for r in records if r.get("task_id") == str(task_id)]
    assert about_task and all(
        r.get("job_id") == str(job_id) and r.get("worker_uid") == lost_uid for r in about_task
    )
