"""Split-and-stitch transcodes (issue 33) on real worker processes and real FFmpeg: a split job
completes with exact outputs, its stages run anywhere (placement cluster, on the shared scratch), a
SIGKILLed worker costs only its chunk, a tampered chunk is redone by the stitch, and a cancelled job
leaves no scratch behind."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import av
import pytest

from media import commands
from media.ffmpeg import ffmpeg_path
from media.submission import create_job
from scheduler.models import JobOutput
from tests.kit.db import job_status, one, sql
from tests.kit.waiting import wait_for

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


def tasks_of(job, task_type: str) -> list[tuple]:
    return sql(
        "SELECT id, state, attempt, claimed_by, placement, (payload -> 'chunk' ->> 'index')::int "
        "FROM queue_tasks WHERE job_id = %s AND task_type = %s ORDER BY id",
        [job, task_type],
    )


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
