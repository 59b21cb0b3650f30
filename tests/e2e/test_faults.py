"""Faults around a real transcode on real worker processes: an operator cancels it while a rendition
runs, and a worker is SIGKILLed while a rendition runs. Each test starts its own workers (the
database is flushed after each test, worker registrations included)."""

from __future__ import annotations

import signal
import time
import uuid

import psutil
import pytest

from media.probe import probe
from media.submission import create_job
from scheduler import repository
from scheduler.models import JobOutput
from tests.kit.db import job_status, one, sql
from tests.kit.waiting import wait_for
from tests.kit.workers import HEARTBEAT, processes_mentioning

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]


def submit(params: dict) -> uuid.UUID:
    return create_job(None, {"type": "transcode", "params": params}).id


def running_renditions(job) -> list[tuple]:
    return sql(
        "SELECT id, claimed_by, execution_id FROM queue_tasks "
        "WHERE job_id = %s AND task_type = 'transcode.rendition' AND state = 'running' ORDER BY id",
        [job],
    )


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except psutil.NoSuchProcess:
            pass
    return out


def test_cancelling_a_running_transcode_kills_ffmpeg_and_publishes_nothing(start_worker, roots, long_clip):
    worker = start_worker("e2e-cancel", "--concurrency", "2")
    roots.add(long_clip, "src/long.mp4")
    # veryslow on 20 s of 640x360 takes about a minute here: the rendition is surely still running.
    job = submit({"input": "src/long.mp4", "ladder": [{"height": 360}], "preset": "veryslow"})
    workspace, outputs = roots.job_workspace(job), roots.job_outputs(job)

    def encoding():
        return running_renditions(job) and one(
            "SELECT max(progress) FROM queue_tasks WHERE job_id = %s AND task_type = 'transcode.rendition'",
            [job],
        )

    wait_for(encoding, 60, "the rendition to report progress", workers=[worker])
    procs = processes_mentioning(workspace)
    assert procs, "no FFmpeg process found for the running rendition"
    assert all("ffmpeg" in proc.name() for proc in procs), [p.cmdline() for p in procs]

    repository.cancel(job)
    cancelled_at = time.monotonic()
    wait_for(lambda: job_status(job) == "cancelled", 30, "the job to be cancelled", workers=[worker])
    wait_for(
        lambda: not alive(procs) and not processes_mentioning(workspace, outputs), 10, "FFmpeg to be gone"
    )
    took = time.monotonic() - cancelled_at
    print(f"\ncancel -> job cancelled and FFmpeg gone in {took:.2f}s (heartbeat {HEARTBEAT:g}s)")

    tasks = dict(
        sql(
            "SELECT task_type, state FROM queue_tasks WHERE job_id = %s AND task_type <> 'transcode.thumbnail'",
            [job],
        )
    )
    assert tasks == {
        "transcode": "completed",
        "transcode.rendition": "cancelled",
        "transcode.quality": "cancelled",  # the measuring stage waits for the rendition
    }
    rendition_id = sql(
        "SELECT id FROM queue_tasks WHERE job_id = %s AND task_type = 'transcode.rendition'", [job]
    )[0][0]
    assert sql(
        "SELECT reason FROM queue_fence_audit WHERE task_id = %s AND operation = 'finish' AND accepted",
        [rendition_id],
    ) == [("cancelled: no children published",)]
    assert not one(
        "SELECT count(*) FROM queue_tasks WHERE job_id = %s AND state IN ('pending', 'running', 'retry_wait', 'blocked')",
        [job],
    )
    assert JobOutput.objects.filter(job_id=job).count() == 0
    assert not outputs.exists() or not any(outputs.rglob("*")), sorted(outputs.rglob("*"))
    # The worker carries on and drains cleanly.
    assert worker.popen.poll() is None
    assert worker.drain() == 0


def test_a_killed_workers_transcode_is_redone_elsewhere_and_published_once(start_worker, roots, long_clip):
    timing = {"JETENCODE_REASSIGN_AFTER_SECONDS": "6", "JETENCODE_STALE_WORKER_SECONDS": "3"}
    workers = {uid: start_worker(uid, "--concurrency", "2", env=timing) for uid in ("e2e-a", "e2e-b")}
    roots.add(long_clip, "src/long.mp4")
    job = submit(
        {"input": "src/long.mp4", "ladder": [{"height": 360}, {"height": 180}], "segment_seconds": 2}
    )
    first_workspace = roots.job_workspace(job) / "1"

    # Whichever worker dispatched the job runs its renditions (they are pinned to it): kill it then.
    def rendition_encoding():
        running, procs = running_renditions(job), processes_mentioning(first_workspace)
        return (running[0][1], procs) if running and procs else None

    victim_uid, victim_ffmpeg = wait_for(
        rendition_encoding, 60, "a rendition's FFmpeg", workers=list(workers.values())
    )
    victim = workers.pop(victim_uid)
    ((survivor_uid, survivor),) = workers.items()
    victim.signal(signal.SIGKILL)
    victim.wait(5)
    # Its FFmpeg dies with it (PR_SET_PDEATHSIG), rather than encoding on for nobody.
    wait_for(lambda: not alive(victim_ffmpeg), 5, "the killed worker's FFmpeg to die")

    wait_for(
        lambda: job_status(job) == "completed", 150, "the survivor to finish the job", workers=[survivor]
    )
    final = one("SELECT execution_id FROM job_schedule WHERE job_id = %s", [job])
    assert final == 2, "a new execution on the survivor"
    tasks = sql(
        "SELECT t.id, t.execution_id, t.task_type, t.state, t.claimed_by, "
        "  (SELECT count(*) FROM queue_fence_audit a "
        "    WHERE a.task_id = t.id AND a.operation = 'finish' AND a.accepted) "
        "FROM queue_tasks t WHERE t.job_id = %s ORDER BY t.id",
        [job],
    )
    old = [t for t in tasks if t[1] == 1]
    new = [t for t in tasks if t[1] == final]
    assert len(old) + len(new) == len(tasks)
    # The first execution ran on the victim and never got as far as packaging or publishing.
    assert {t[4] for t in old if t[4]} == {victim_uid}
    assert not [
        t
        for t in old
        if t[2] in ("transcode.quality", "transcode.package", "transcode.upload") and t[3] == "completed"
    ]
    assert {t[3] for t in old} <= {"completed", "cancelled"}, old
    # The final execution: the whole stage graph, each stage finished exactly once, on the survivor.
    assert sorted(t[2] for t in new) == sorted(
        [
            "transcode",
            "transcode.rendition",
            "transcode.rendition",
            "transcode.thumbnail",
            "transcode.quality",
            "transcode.package",
            "transcode.upload",
        ]
    ), new
    assert all(t[3] == "completed" and t[4] == survivor_uid and t[5] == 1 for t in new), new

    # Outputs: rows only for the final execution, each file present once, nothing else on disk.
    rows = list(JobOutput.objects.filter(job_id=job).values_list("execution_id", "name", "size_bytes"))
    assert rows and {r[0] for r in rows} == {final}, rows
    names = [r[1] for r in rows]
    assert len(names) == len(set(names))
    assert roots.published_files(job) == sorted(names)
    for _, name, size in rows:
        assert (roots.job_outputs(job) / name).stat().st_size == size
    for name, size in (("360p", (640, 360)), ("180p", (320, 180))):
        info = probe(roots.job_outputs(job) / f"renditions/{name}.mp4")
        assert (info.video_codec, info.width, info.height, info.audio_codec) == ("h264", *size, "aac"), info
        assert abs(info.duration_seconds - 20.0) < 0.3, info
    assert not processes_mentioning(roots.workspace, roots.outputs)
    assert survivor.drain() == 0
