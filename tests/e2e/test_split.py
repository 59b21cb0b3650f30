"""Split-and-stitch transcodes (issue 33) on real worker processes and real FFmpeg: a split job
completes with exact outputs, its stages run anywhere (placement cluster, on the shared scratch), a
SIGKILLed worker costs only its chunk, a tampered chunk is redone by the stitch, and a cancelled job
leaves no scratch behind."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid
from pathlib import Path

import av
import pytest

from media import commands
from media.ffmpeg import ffmpeg_path
from media.split_job import chunk_grid, progress_note
from media.submission import create_job
from scheduler import queries, repository
from scheduler.models import JobOutput
from tests.kit.db import job_status, one, sql
from tests.kit.waiting import wait_for
from tests.kit.workers import processes_mentioning

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

CLIP_SECONDS = 8.0
FPS = 25
FRAMES = int(CLIP_SECONDS * FPS)
LADDER = [{"height": 180}, {"height": 144}]
SCRATCH_ENV = {"JETENCODE_SCRATCH_SWEEP_SECONDS": "1", "JETENCODE_SCRATCH_GRACE_SECONDS": "0"}


@pytest.fixture(scope="module")
def split_clip(tmp_path_factory) -> Path:
    """8 s of 320x180 at 25 fps with audio: four chunks of 2 s."""
    out = tmp_path_factory.mktemp("split-clip") / "split.mp4"
    argv = commands.synthetic_clip(out, width=320, height=180, seconds=CLIP_SECONDS, fps=FPS, audio=True)
    subprocess.run(argv, check=True, capture_output=True, timeout=120)
    return out


def submit(rel: str, **params) -> uuid.UUID:
    body = {"input": rel, "ladder": LADDER, "split": "chunks", "chunk_seconds": 2, "quality_metrics": []}
    return create_job(None, {"type": "transcode", "params": {**body, **params}}).id


def metric_samples() -> dict[tuple[str, str], float]:
    """/metrics' split series: {(name, its one label's value): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    from api.metrics import render

    out = {}
    for family in text_string_to_metric_families(render()[0].decode()):
        for sample in family.samples:
            if sample.name.startswith("jetencode_split_"):
                out[(sample.name, next(iter(sample.labels.values())))] = sample.value
    return out


def tasks_of(job, task_type: str) -> list[tuple]:
    return sql(
        "SELECT id, state, attempt, claimed_by, placement, (payload -> 'chunk' ->> 'index')::int "
        "FROM queue_tasks WHERE job_id = %s AND task_type = %s ORDER BY id",
        [job, task_type],
    )


def as_json(value):
    return json.loads(value) if isinstance(value, str) else value


def video_packets(path: Path) -> tuple[int, list[float]]:
    """(video frames, their presentation times in seconds), by demuxing."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        times = [float(p.pts * p.time_base) for p in container.demux(stream) if p.size and p.pts is not None]
    return len(times), sorted(times)


def clean_decode(path: Path) -> str:
    proc = subprocess.run(
        [ffmpeg_path(), "-nostdin", "-v", "error", "-i", str(path), "-f", "null", "-"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stderr.strip()


def assert_exact_outputs(roots, job) -> None:
    outputs = roots.job_outputs(job)
    for rung in ("180p", "144p"):
        path = outputs / "renditions" / f"{rung}.mp4"
        frames, times = video_packets(path)
        assert frames == FRAMES, (rung, frames)
        assert all(b > a for a, b in zip(times, times[1:], strict=False)), "timestamps strictly increasing"
        assert abs(times[-1] + 1 / FPS - CLIP_SECONDS) <= 1 / FPS + 1e-6
        assert clean_decode(path) == "", f"{rung} does not decode cleanly"
    segments = {
        rung: sorted(p.name for p in (outputs / "hls" / rung).iterdir() if p.suffix in (".ts", ".m4s"))
        for rung in ("180p", "144p")
    }
    assert len(segments["180p"]) == len(segments["144p"]) > 1, segments
    assert (outputs / "hls" / "master.m3u8").exists()


def test_a_split_transcode_runs_as_cluster_chunks_and_its_outputs_are_exact(start_worker, roots, split_clip):
    workers = [start_worker(uid, "--concurrency", "2", env=SCRATCH_ENV) for uid in ("split-a", "split-b")]
    rel = roots.add(split_clip, "src/split.mp4")
    job = submit(rel)
    wait_for(lambda: job_status(job) in ("completed", "failed"), 180, "the split job to end", workers=workers)
    assert job_status(job) == "completed", one("SELECT last_error FROM jobs WHERE id = %s", [job])

    chunks = tasks_of(job, "transcode.chunk")
    assert sorted(c[5] for c in chunks) == [0, 1, 2, 3]
    assert {c[4] for c in chunks} == {"cluster"}
    placements = dict(sql("SELECT task_type, placement FROM queue_tasks WHERE job_id = %s", [job]))
    assert placements.pop("transcode") == "dispatch"
    assert set(placements.values()) == {"cluster"}, placements
    assert "transcode.rendition" not in placements
    assert_exact_outputs(roots, job)
    names = sorted(JobOutput.objects.filter(job_id=job).values_list("name", flat=True))
    assert names.count("renditions/180p.mp4") == 1 and "thumbnail.jpg" in names
    # The split job kept nothing on a worker: no workspace files.
    assert not [p for p in roots.job_workspace(job).rglob("*") if p.is_file()]
    # The job detail's plan.
    detail = one(
        "SELECT result -> 'split' FROM queue_tasks WHERE job_id = %s AND task_type = 'transcode'", [job]
    )
    detail = json.loads(detail) if isinstance(detail, str) else detail
    assert detail["mode"] == "chunks" and len(detail["chunks"]) == 4
    assert detail["chunks"][0]["first_frame"] == 0 and detail["chunks"][-1]["last_frame"] == FRAMES - 1
    # And the scratch goes once the job has ended (sweep every second, no grace).
    wait_for(lambda: not any(roots.scratch.rglob("*")), 30, "the scratch to be swept", workers=workers)


# ---- faults ----------------------------------------------------------------------------------------

SLOW = {"preset": "slower", "chunk_seconds": 4}


@pytest.fixture(scope="module")
def slow_clip(tmp_path_factory) -> Path:
    """16 s of 640x360 at 25 fps with audio: four chunks of 4 s, each encoding for seconds."""
    out = tmp_path_factory.mktemp("split-slow") / "slow.mp4"
    argv = commands.synthetic_clip(out, width=640, height=360, seconds=16.0, fps=FPS, audio=True)
    subprocess.run(argv, check=True, capture_output=True, timeout=120)
    return out


def running_chunk(job, roots):
    """(task id, chunk index, worker uid) of a chunk whose FFmpeg is encoding and is less than half
    through, else None: a chunk near its end may finish before the test acts on it (a fast machine
    encodes a 4 s chunk in about a second)."""
    rows = sql(
        "SELECT id, (payload -> 'chunk' ->> 'index')::int, claimed_by FROM queue_tasks "
        "WHERE job_id = %s AND task_type = 'transcode.chunk' AND state = 'running' "
        "AND progress > 0 AND progress < 50 ORDER BY id",
        [job],
    )
    if rows and processes_mentioning(roots.scratch / str(job)):
        return rows[0]
    return None


def test_a_worker_killed_mid_chunk_costs_only_that_chunk(start_worker, roots, slow_clip, fast_retries):
    workers = {uid: start_worker(uid, "--concurrency", "1", env=SCRATCH_ENV) for uid in ("kill-a", "kill-b")}
    rel = roots.add(slow_clip, "src/slow.mp4")
    job = submit(rel, ladder=[{"height": 360}, {"height": 180}], **SLOW)
    task, index, victim_uid = wait_for(
        lambda: running_chunk(job, roots), 90, "a chunk to be encoding", workers=list(workers.values())
    )
    victim = workers.pop(victim_uid)
    victim.signal(signal.SIGKILL)
    victim.wait(5)
    (survivor,) = workers.values()
    wait_for(lambda: job_status(job) in ("completed", "failed"), 200, "the job to end", workers=[survivor])
    assert job_status(job) == "completed", one("SELECT last_error FROM jobs WHERE id = %s", [job])

    # The job never moved: split jobs have no local work, so nothing waits for the lost worker.
    assert one("SELECT execution_id FROM job_schedule WHERE job_id = %s", [job]) == 1
    chunks = tasks_of(job, "transcode.chunk")
    assert len(chunks) == 4, chunks
    attempts = {c[5]: c[2] for c in chunks}
    assert attempts[index] == 2, attempts  # the killed chunk ran twice...
    assert all(a == 1 for i, a in attempts.items() if i != index), attempts  # ...and no other did
    killed = next(c for c in chunks if c[0] == task)
    assert killed[3] != victim_uid  # redone elsewhere
    finishes = one(
        "SELECT count(*) FROM queue_fence_audit WHERE task_id = %s AND operation = 'finish' AND accepted",
        [task],
    )
    assert finishes == 1
    # Each output published once, by one upload.
    names = list(JobOutput.objects.filter(job_id=job).values_list("name", flat=True))
    assert len(names) == len(set(names)) and "renditions/360p.mp4" in names
    # The job detail says why progress went down: the killed chunk gave its frames back.
    assert f"chunk {index} restarted" in (progress_note(job) or ""), progress_note(job)
    uploads = tasks_of(job, "transcode.upload")
    assert [u[1] for u in uploads] == ["completed"] and uploads[0][2] == 1
    for rung in ("360p", "180p"):
        frames, _ = video_packets(roots.job_outputs(job) / "renditions" / f"{rung}.mp4")
        assert frames == 16 * FPS
        assert clean_decode(roots.job_outputs(job) / "renditions" / f"{rung}.mp4") == ""


def test_a_tampered_chunk_is_redone_and_never_stitched(start_worker, roots, split_clip, fast_retries):
    # This worker takes no background stage: the stitch waits until the test has tampered a chunk.
    media_only = start_worker("tamper-a", "--concurrency", "2", "--background-slots", "0", env=SCRATCH_ENV)
    rel = roots.add(split_clip, "src/split.mp4")
    job = submit(rel, quality_metrics=["vmaf"], vmaf_subsample=2)

    def all_encoded():
        states = [c[1] for c in tasks_of(job, "transcode.chunk")]
        stitch = [s[1] for s in tasks_of(job, "transcode.stitch")]
        return len(states) == 4 and set(states) == {"completed"} and stitch == ["pending"]

    wait_for(all_encoded, 90, "every chunk encoded and the stitch waiting", workers=[media_only])
    result = one(
        "SELECT result FROM queue_tasks WHERE job_id = %s AND task_type = 'transcode.chunk' "
        "AND (payload -> 'chunk' ->> 'index')::int = 2",
        [job],
    )
    result = json.loads(result) if isinstance(result, str) else result
    scratch_job = roots.scratch / str(job) / "1"
    tampered = scratch_job / result["files"]["180p"]
    shorter = tampered.with_name("short.mp4")
    # Chunk 2 loses its last frames (a copy of its first 30 packets): the wrong frame count.
    subprocess.run(
        [
            ffmpeg_path(),
            "-nostdin",
            "-v",
            "error",
            "-i",
            str(tampered),
            "-c",
            "copy",
            "-frames:v",
            "30",
            str(shorter),
        ],
        check=True,
        timeout=60,
    )
    shorter.replace(tampered)

    stitcher = start_worker("tamper-b", "--concurrency", "1", env=SCRATCH_ENV)
    workers = [media_only, stitcher]
    wait_for(lambda: job_status(job) in ("completed", "failed"), 150, "the job to end", workers=workers)
    assert job_status(job) == "completed", one("SELECT last_error FROM jobs WHERE id = %s", [job])
    chunks = tasks_of(job, "transcode.chunk")
    assert sorted(c[5] for c in chunks) == [0, 1, 2, 2, 3]  # chunk 2 ran again, as a new task
    stitches = sql(
        "SELECT result FROM queue_tasks WHERE job_id = %s AND task_type = 'transcode.stitch' ORDER BY id",
        [job],
    )
    first = json.loads(stitches[0][0]) if isinstance(stitches[0][0], str) else stitches[0][0]
    assert first["redo"] == [2] and "30 frames" in first["mismatches"]["2"][0]
    assert len(stitches) == 2
    assert_exact_outputs(roots, job)
    # Chunk 2 measured itself before it was tampered with; its redo measured its own new files, and
    # only that measurement was pooled (never the stale one of the attempt the stitch sent back).
    (stale, stale_result), (redo, redo_result) = [
        (task, as_json(result))
        for task, result in sql(
            "SELECT id, result FROM queue_tasks WHERE job_id = %s AND task_type = 'transcode.chunk' "
            "AND (payload -> 'chunk' ->> 'index')::int = 2 ORDER BY id",
            [job],
        )
    ]
    assert stale_result["quality"]["scores"].startswith(f"chunks/00002/t{stale}a")
    assert redo_result["quality"]["scores"].startswith(f"chunks/00002/t{redo}a")
    pooling = as_json(
        one(
            "SELECT payload FROM queue_tasks WHERE job_id = %s AND task_type = 'transcode.split_quality'",
            [job],
        )
    )
    assert pooling["chunk_measured"]["2"]["scores"] == redo_result["quality"]["scores"]
    for entry in job_quality_document(job)["renditions"]:
        assert entry["chunks"][2]["vmaf"] == redo_result["quality"]["vmaf"][entry["name"]]
    # /metrics counts the chunks and the stitch failure.
    samples = metric_samples()
    assert samples[("jetencode_split_stitch_failures_24h", "chunk_mismatch")] == 1
    assert samples[("jetencode_split_chunks_ended_24h", "completed")] == 5
    assert samples[("jetencode_split_chunks", "running")] == 0


def test_cancelling_a_split_job_leaves_no_scratch_files(start_worker, roots, slow_clip):
    workers = [start_worker(uid, "--concurrency", "1", env=SCRATCH_ENV) for uid in ("cancel-a", "cancel-b")]
    rel = roots.add(slow_clip, "src/slow.mp4")
    job = submit(rel, ladder=[{"height": 360}, {"height": 180}], **SLOW)
    wait_for(lambda: running_chunk(job, roots), 90, "a chunk to be encoding", workers=workers)
    assert [p for p in (roots.scratch / str(job) / "1" / "chunks").rglob("*") if p.is_dir()]
    repository.cancel(job)
    wait_for(lambda: job_status(job) == "cancelled", 30, "the job to be cancelled", workers=workers)
    wait_for(lambda: not processes_mentioning(roots.scratch / str(job)), 15, "the chunks' FFmpeg to be gone")
    # Chunks wrote to the scratch as they went; the sweep removes the whole job once it ended.
    wait_for(lambda: not (roots.scratch / str(job)).exists(), 30, "the scratch to be swept", workers=workers)
    assert not [p for p in roots.scratch.rglob("*") if p.is_file()]
    states = {s for (s,) in sql("SELECT DISTINCT state FROM queue_tasks WHERE job_id = %s", [job])}
    assert states <= {"completed", "cancelled"}, states
    assert JobOutput.objects.filter(job_id=job).count() == 0


# ---- measuring and per-shot quality ----------------------------------------------------------------


def job_quality_document(job) -> dict:
    from media.quality import job_quality

    return job_quality(job)


def test_a_split_jobs_quality_is_measured_per_chunk_and_pooled_with_seams(start_worker, roots, split_clip):
    workers = [start_worker(uid, "--concurrency", "2", env=SCRATCH_ENV) for uid in ("q-a", "q-b")]
    rel = roots.add(split_clip, "src/split.mp4")
    job = submit(rel, quality_metrics=["vmaf", "psnr"], vmaf_subsample=2)
    wait_for(lambda: job_status(job) in ("completed", "failed"), 180, "the job to end", workers=workers)
    assert job_status(job) == "completed", one("SELECT last_error FROM jobs WHERE id = %s", [job])
    # Every chunk measured its own files right after encoding them, before the stitch started (so
    # measuring overlaps the other chunks' encodes); no measuring stage ran after the stitch, and
    # the pooling read exactly the measurements of the chunk attempts the stitch joined.
    assert tasks_of(job, "transcode.chunk_quality") == []
    stitch_started = one(
        "SELECT started_at FROM queue_tasks WHERE job_id = %s AND task_type = 'transcode.stitch'", [job]
    )
    pooling = as_json(
        one(
            "SELECT payload FROM queue_tasks WHERE job_id = %s AND task_type = 'transcode.split_quality'",
            [job],
        )
    )
    assert pooling["chunk_files"] == {}
    chunks = {}
    for task, attempt, result, finished in sql(
        "SELECT id, attempt, result, finished_at FROM queue_tasks WHERE job_id = %s AND task_type = 'transcode.chunk'",
        [job],
    ):
        result = as_json(result)
        chunks[result["index"]] = result
        assert finished < stitch_started
        assert result["quality"]["scores"].startswith(f"chunks/{result['index']:05d}/t{task}a{attempt}/")
        assert pooling["chunk_measured"][str(result["index"])]["scores"] == result["quality"]["scores"]
    document = job_quality_document(job)
    published = json.loads((roots.job_outputs(job) / "quality.json").read_text())
    assert published["renditions"] == document["renditions"]
    for entry in document["renditions"]:
        assert 0 < entry["vmaf_p1"] <= entry["vmaf_p5"] <= entry["vmaf"] <= 100
        assert [s["index"] for s in entry["seams"]] == [1, 2, 3]
        assert all(0 < s["vmaf_min"] <= s["vmaf_mean"] <= 100 for s in entry["seams"])
        assert [c["index"] for c in entry["chunks"]] == [0, 1, 2, 3]
        assert all(c["crf"] == 23 and 0 < c["vmaf"] <= 100 for c in entry["chunks"])
        assert [c["vmaf"] for c in entry["chunks"]] == [
            chunks[i]["quality"]["vmaf"][entry["name"]] for i in range(4)
        ]
        assert entry["psnr_db"] > 20
    assert_exact_outputs(roots, job)


def test_target_vmaf_searches_each_chunks_own_crf(start_worker, roots, split_clip):
    workers = [start_worker(uid, "--concurrency", "2", env=SCRATCH_ENV) for uid in ("t-a", "t-b")]
    rel = roots.add(split_clip, "src/split.mp4")
    job = submit(rel, ladder=[{"height": 180}], quality_metrics=["vmaf"], target_vmaf=90)
    wait_for(lambda: job_status(job) in ("completed", "failed"), 220, "the job to end", workers=workers)
    assert job_status(job) == "completed", one("SELECT last_error FROM jobs WHERE id = %s", [job])
    document = job_quality_document(job)
    (entry,) = document["renditions"]
    crfs = [c["crf"] for c in entry["chunks"]]
    assert all(isinstance(c, int) for c in crfs), crfs
    searches = document["per_shot"]["searches"]
    assert sorted(searches) == ["0", "1", "2", "3"]
    for index, search in searches.items():
        assert search["180p"]["chosen_crf"] == crfs[int(index)]
        assert 1 <= len(search["180p"]["probes"]) <= 4
    saved = document["per_shot"]["bits_saved"]["180p"]
    assert saved is None or {"per_title_crf", "per_shot_bytes", "per_title_bytes", "saved_percent"} <= set(
        saved
    )
    frames, _ = video_packets(roots.job_outputs(job) / "renditions" / "180p.mp4")
    assert frames == FRAMES


# ---- operators ---------------------------------------------------------------------------------------


def test_operator_controls_apply_to_every_chunk_and_the_queue_shows_the_job_once(
    start_worker, roots, slow_clip, viewer_client
):
    workers = [start_worker(uid, "--concurrency", "1", env=SCRATCH_ENV) for uid in ("op-a", "op-b")]
    rel = roots.add(slow_clip, "src/slow.mp4")
    job = submit(rel, ladder=[{"height": 360}, {"height": 180}], **SLOW)

    def two_running():  # both early in their encode, so neither ends before the pause below
        early = one(
            "SELECT count(*) FROM queue_tasks WHERE job_id = %s AND task_type = 'transcode.chunk' "
            "AND state = 'running' AND progress < 50",
            [job],
        )
        entry = queries.queue_entry(job)
        return (
            entry
            if early == 2 and entry and entry.chunks and sum(entry.chunks["running"].values()) == 2
            else None
        )

    entry = wait_for(two_running, 90, "two chunks running on two workers", workers=workers)
    assert entry.chunks["total"] == 4 and entry.group is None  # the pending group: any worker
    assert set(entry.chunks["running"]) == {"op-a", "op-b"}
    assert [e.job_id for e in queries.queue_list()].count(job) == 1
    queue_page = viewer_client.get("/dashboard/queue").content.decode()
    assert "data-chunks" in queue_page and "/4 done" in queue_page

    # Pause: the chunks not yet claimed stay unclaimed, the running ones finish.
    repository.pause(job)
    wait_for(lambda: job_status(job) == "paused", 60, "the job to pause", workers=workers)
    time.sleep(2)  # two polls of each worker: nothing more is claimed
    chunks = tasks_of(job, "transcode.chunk")
    assert sorted(c[1] for c in chunks) == ["completed", "completed", "pending", "pending"], chunks
    # Priority and run-next act on the job, so on all of its chunks.
    repository.set_priority(job, 500)
    repository.run_next(job)
    assert one("SELECT priority FROM job_schedule WHERE job_id = %s", [job]) == 500
    repository.resume(job)
    wait_for(lambda: job_status(job) in ("completed", "failed"), 200, "the job to end", workers=workers)
    assert job_status(job) == "completed", one("SELECT last_error FROM jobs WHERE id = %s", [job])
    grid = chunk_grid(job)
    assert grid["renditions"] == ["360p", "180p"] and [r["index"] for r in grid["rows"]] == [0, 1, 2, 3]
    assert {c["worker"] for r in grid["rows"] for c in r["cells"]} <= {"op-a", "op-b"}
    assert all(
        c["state"] == "completed" and c["seconds"] is not None for r in grid["rows"] for c in r["cells"]
    )
    # The job page shows the chunk x rendition grid.
    page = viewer_client.get(f"/dashboard/jobs/{job}").content.decode()
    assert "data-split-grid" in page and page.count("<tr data-chunk=") == 4
    assert page.count('data-cell="') == 8 and "op-a" in page


def test_evacuating_a_worker_moves_its_chunk_at_once(start_worker, roots, slow_clip):
    workers = {uid: start_worker(uid, "--concurrency", "1", env=SCRATCH_ENV) for uid in ("evac-a", "evac-b")}
    rel = roots.add(slow_clip, "src/slow.mp4")
    job = submit(rel, ladder=[{"height": 360}, {"height": 180}], **SLOW)
    task, index, leaving = wait_for(
        lambda: running_chunk(job, roots), 90, "a chunk to be encoding", workers=list(workers.values())
    )
    repository.evacuate_worker(leaving)
    (staying,) = [uid for uid in workers if uid != leaving]

    def handed_back():
        state, worker = sql("SELECT state, claimed_by FROM queue_tasks WHERE id = %s", [task])[0]
        return state == "pending" or worker == staying

    # At once: the chunk is pending again (or already on the other worker) and its FFmpeg stops.
    wait_for(handed_back, 5, "the chunk to be handed back", workers=list(workers.values()))
    wait_for(
        lambda: not processes_mentioning(f"chunks/{index:05d}/t{task}a"),
        10,
        "the evacuated worker to stop the chunk's FFmpeg",
        workers=[workers[leaving]],
    )
    # The other worker takes it when a slot of its comes free (it may finish other chunks first).
    wait_for(
        lambda: job_status(job) in ("completed", "failed"), 200, "the job to end", workers=[workers[staying]]
    )
    assert job_status(job) == "completed", one("SELECT last_error FROM jobs WHERE id = %s", [job])
    assert sql("SELECT state, claimed_by FROM queue_tasks WHERE id = %s", [task]) == [("completed", staying)]
    reasons = sql(
        "SELECT reason FROM queue_fence_audit WHERE task_id = %s AND operation = 'release' AND accepted",
        [task],
    )
    assert reasons == [(f"worker {leaving} evacuated",)]
    assert one("SELECT execution_id FROM job_schedule WHERE job_id = %s", [job]) == 1
    for rung in ("360p", "180p"):
        frames, _ = video_packets(roots.job_outputs(job) / "renditions" / f"{rung}.mp4")
        assert frames == 16 * FPS


# ---- the S3 scratch --------------------------------------------------------------------------------


@pytest.fixture
def s3(monkeypatch, settings):
    """moto's S3 server, a bucket, and this process's settings pointed at it; the workers' env."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    creds = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}
    for name, value in creds.items():
        monkeypatch.setenv(name, value)
    bucket = f"jet-{uuid.uuid4().hex[:8]}"
    client = boto3.client("s3", endpoint_url=endpoint)
    client.create_bucket(Bucket=bucket)
    env = {**creds, "JETENCODE_S3_BUCKET": bucket, "JETENCODE_S3_ENDPOINT_URL": endpoint}
    yield client, bucket, env
    server.stop()


def keys(client, bucket: str, prefix: str) -> list[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(item["Key"] for page in pages for item in page.get("Contents", []))


def test_with_s3_the_scratch_is_a_bucket_prefix(start_worker, roots, split_clip, s3):
    client, bucket, env = s3
    workers = [
        start_worker(uid, "--concurrency", "2", env={**SCRATCH_ENV, **env}) for uid in ("s3-a", "s3-b")
    ]
    rel = roots.add(split_clip, "src/split.mp4")
    job = submit(rel, quality_metrics=["vmaf"], vmaf_subsample=2)
    seen: set[str] = set()

    def ended():
        seen.update(keys(client, bucket, f"scratch/{job}/"))
        return job_status(job) in ("completed", "failed")

    wait_for(ended, 180, "the job to end", workers=workers)
    assert job_status(job) == "completed", one("SELECT last_error FROM jobs WHERE id = %s", [job])
    # Chunks, audio and stitched renditions went through the bucket, under their attempt's name.
    assert [k for k in seen if "/chunks/" in k and k.endswith("/180p.mp4")], sorted(seen)[:20]
    assert [k for k in seen if "/stitch/" in k] and [k for k in seen if "/audio/" in k]
    assert not any(p.is_file() for p in roots.scratch.rglob("*")), "nothing in the shared directory"
    outputs = keys(client, bucket, f"outputs/{job}/")
    assert f"outputs/{job}/renditions/180p.mp4" in outputs and f"outputs/{job}/quality.json" in outputs
    local = roots.outputs / "check.mp4"
    client.download_file(bucket, f"outputs/{job}/renditions/180p.mp4", str(local))
    frames, _ = video_packets(local)
    assert frames == FRAMES and clean_decode(local) == ""
    # The sweep removes the job's scratch keys once it has ended.
    wait_for(
        lambda: not keys(client, bucket, f"scratch/{job}/"), 30, "the S3 scratch to be swept", workers=workers
    )


# ---- reencode_streaming --------------------------------------------------------------------------


def test_a_split_reencode_is_published_once_and_registered_in_the_library(start_worker, roots, split_clip):
    from media.models import MediaAsset

    workers = [start_worker(uid, "--concurrency", "2", env=SCRATCH_ENV) for uid in ("re-a", "re-b")]
    rel = roots.add(split_clip, "src/split.mp4")
    params = {
        "input": rel,
        "split": "chunks",
        "chunk_seconds": 2,
        "quality_metrics": ["vmaf"],
        "max_height": 144,
    }
    job = create_job(None, {"type": "reencode_streaming", "params": params}).id
    wait_for(lambda: job_status(job) in ("completed", "failed"), 180, "the job to end", workers=workers)
    assert job_status(job) == "completed", one("SELECT last_error FROM jobs WHERE id = %s", [job])
    assert len(tasks_of(job, "transcode.chunk")) == 4
    placements = dict(sql("SELECT task_type, placement FROM queue_tasks WHERE job_id = %s", [job]))
    assert placements.pop("reencode_streaming") == "dispatch" and set(placements.values()) == {"cluster"}
    assert "reencode_streaming.encode" not in placements
    names = sorted(JobOutput.objects.filter(job_id=job).values_list("name", flat=True))
    assert names == ["quality.json", "split.mp4"]
    out = roots.job_outputs(job) / "split.mp4"
    frames, _ = video_packets(out)
    assert frames == FRAMES and clean_decode(out) == ""
    asset = MediaAsset.objects.get(source_job_id=job)
    assert (roots.media / asset.path).stat().st_size == out.stat().st_size
    (entry,) = job_quality_document(job)["renditions"]
    assert entry["name"] == "split" and [s["index"] for s in entry["seams"]] == [1, 2, 3]
    assert one("SELECT progress FROM jobs WHERE id = %s", [job]) == 100


def test_a_variable_frame_rate_source_falls_back_to_the_unsplit_path(start_worker, roots, tmp_path):
    vfr = tmp_path / "vfr.mp4"
    argv = [ffmpeg_path(), "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i"]
    argv += ["testsrc2=size=320x180:rate=25:duration=4", "-vf", "select='lt(n\\,20)+not(mod(n\\,3))'"]
    argv += ["-fps_mode", "vfr", "-c:v", "libx264", "-preset", "ultrafast", str(vfr)]
    subprocess.run(argv, check=True, timeout=120)
    worker = start_worker("vfr-a", "--concurrency", "2", env=SCRATCH_ENV)
    job = submit(roots.add(vfr, "src/vfr.mp4"), ladder=[{"height": 144}])
    wait_for(lambda: job_status(job) in ("completed", "failed"), 120, "the job to end", workers=[worker])
    assert job_status(job) == "completed", one("SELECT last_error FROM jobs WHERE id = %s", [job])
    log = one("SELECT log FROM jobs WHERE id = %s", [job])
    stage_log = " ".join(
        m
        for (m,) in sql(
            "SELECT l.message FROM queue_task_logs l JOIN queue_tasks t ON t.id = l.task_id WHERE t.job_id = %s",
            [job],
        )
    )
    assert "split: not possible (variable frame rate" in stage_log and "unsplit path" in stage_log, log
    # ... and in the job's own log (the job detail's `log`), not only the dispatch's stage log.
    assert "transcode completed on vfr-a" in log and "split: not possible (variable frame rate" in log, log
    assert not tasks_of(job, "transcode.chunk") and tasks_of(job, "transcode.rendition")
    assert one(
        "SELECT result -> 'split' FROM queue_tasks WHERE job_id = %s AND task_type = 'transcode'", [job]
    ) in (None, "null")
