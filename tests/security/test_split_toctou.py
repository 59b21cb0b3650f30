"""A split job reads its source in place from the media root, by descriptor (issue 33 follow-up).

The attacker can write the media root and wins the race every time: right after a stage's
containment check, just before the reader (FFmpeg, the probe child) opens the source, the source is
renamed away and a symlink to a file outside the root takes its name. What must be read is the file
the check approved (the descriptor), never the outside one. The outside file is short, square,
green and silent, so reading it shows: a wrong plan (the dispatch), missing frames (a chunk, its
measuring, its CRF search), no audio (the audio stage), a green square thumbnail.

Runs every stage in-process (tests.kit.workers.InProcessWorker: the runtime's classes, real FFmpeg
processes, real PostgreSQL); the race is won by swapping the name where the stage starts its reader.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import av
import pytest

from media import ffmpeg as ff
from media import probe as probe_module
from tests.kit.db import job_status
from tests.kit.media import MediaRoots
from tests.kit.workers import InProcessWorker
from workers.context import RunContext
from workers.stages.base import PermanentFailure

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(300)]

SECONDS, FPS = 4, 25
SOURCE_STAGES = {"transcode", "transcode.chunk", "transcode.audio", "transcode.thumbnail"}


def _make(path: Path, graph: str, *extra: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    argv = [ff.ffmpeg_path(), "-nostdin", "-v", "error", "-y", "-filter_complex", graph, *extra]
    argv += ["-c:v", "libx264", "-preset", "ultrafast", "-g", "25", "-pix_fmt", "yuv420p", str(path)]
    subprocess.run(argv, check=True, timeout=60)
    return path


class Race:
    """Swaps media/src/clip.mp4 for a symlink to the outside file (the real file renamed aside, so
    a descriptor opened before keeps reading it) and puts it back between stages."""

    def __init__(self, source: Path, outside: Path):
        self.source, self.outside = source, outside
        self.aside = source.with_name(".aside.mp4")
        self.stage = ""
        self.won_in: set[str] = set()
        self.armed = True  # swap where a reader starts

    def race(self) -> None:
        if self.armed:
            self.won_in.add(self.stage)
            self.swap()

    def swap(self) -> None:
        if not self.source.is_symlink():
            os.rename(self.source, self.aside)
            os.symlink(self.outside, self.source)

    def restore(self) -> None:
        if self.source.is_symlink():
            self.source.unlink()
            os.rename(self.aside, self.source)


@pytest.fixture
def race(tmp_path, monkeypatch):
    roots = MediaRoots.under(tmp_path)
    source = _make(
        roots.media / "src" / "clip.mp4",
        f"testsrc2=size=256x144:rate={FPS}:duration={SECONDS}[v];sine=duration={SECONDS}[a]",
        *("-map", "[v]", "-map", "[a]", "-c:a", "aac"),
    )
    outside = _make(tmp_path / "outside" / "secret.mp4", f"color=c=green:size=64x64:rate={FPS}:duration=1")
    race = Race(source, outside)
    run, run_child = RunContext.run, probe_module._run_child

    def racing_run(self, argv, **kwargs):  # every stage process (FFmpeg) starts here
        race.race()
        return run(self, argv, **kwargs)

    def racing_probe(mode, *args, **kwargs):  # the probe child: the dispatch measures the source
        if mode == "probe":  # (not the params' reference check, which reads its own descriptors)
            race.race()
        return run_child(mode, *args, **kwargs)

    monkeypatch.setattr(RunContext, "run", racing_run)
    monkeypatch.setattr(probe_module, "_run_child", racing_probe)
    with roots.settings():
        race.roots = roots
        yield race
    race.restore()


def _run_racing(worker: InProcessWorker, race: Race, params: dict) -> tuple[str, list]:
    job_id = worker.submit("transcode", params)
    stages = []
    while (stage := worker.next_stage()) is not None:
        assert len(stages) < 100, "runaway stage graph"
        race.stage = stage.task_type
        try:
            stage.execute()
        finally:
            race.restore()
        stages.append(stage)
    return job_id, stages


def _video(path: Path) -> tuple[int, int, int, tuple[int, int, int]]:
    """(frames, width, height, the first frame's centre pixel as RGB)."""
    with av.open(str(path)) as container:
        frames = [f.reformat(format="rgb24") for f in container.decode(video=0)]
    plane = frames[0].planes[0]
    offset = (frames[0].height // 2) * plane.line_size + (frames[0].width // 2) * 3
    return len(frames), frames[0].width, frames[0].height, tuple(bytes(plane)[offset : offset + 3])


def _not_green(pixel) -> bool:
    return not (pixel[1] > 100 and pixel[0] < 60 and pixel[2] < 60)


@pytest.mark.parametrize(
    "extra",
    [
        pytest.param({"quality_metrics": ["vmaf"]}, id="chunks-and-measuring"),
        pytest.param({"quality_metrics": ["vmaf"], "target_vmaf": 80}, id="per-chunk-crf-search"),
    ],
)
def test_a_symlink_swapped_in_after_the_check_is_never_read(race, extra):
    worker = InProcessWorker(workspace_root=race.roots.workspace)
    params = {"input": "src/clip.mp4", "ladder": [{"height": 144}], "split": "chunks", "chunk_seconds": 2}
    job_id, stages = _run_racing(worker, race, {**params, **extra})
    assert job_status(job_id) == "completed"
    # Each chunk measures itself after its encode (issue 33's overlap): the swap made at the
    # encode's FFmpeg is still in place when measuring starts, and the one descriptor reads on.
    assert SOURCE_STAGES <= race.won_in, race.won_in
    chunks = [s for s in stages if s.task_type == "transcode.chunk"]
    assert len(chunks) == 2
    outputs = race.roots.job_outputs(job_id)
    frames, width, height, _pixel = _video(outputs / "renditions" / "144p.mp4")
    assert (frames, width, height) == (SECONDS * FPS, 256, 144)
    _frames, width, height, pixel = _video(outputs / "thumbnail.jpg")
    assert width * 9 == height * 16 and _not_green(pixel), (width, height, pixel)
    # FFmpeg was never given a name in the media root: only the descriptor the stage opened.
    media = str(race.roots.media)
    for stage in stages:
        for group in stage.groups:
            inputs = [group.argv[i + 1] for i, arg in enumerate(group.argv) if arg == "-i"]
            assert not [path for path in inputs if path.startswith(media)], (stage.task_type, group.argv)


def test_a_symlink_swapped_in_before_a_chunk_stage_fails_it_cleanly(race):
    """Swapped in for good between the dispatch and the chunks: the chunk's own check refuses it."""
    race.armed = False
    worker = InProcessWorker(workspace_root=race.roots.workspace)
    params = {"input": "src/clip.mp4", "ladder": [{"height": 144}], "split": "chunks", "chunk_seconds": 2}
    dispatch = worker.stage_of("transcode", params)
    dispatch.execute()
    race.swap()
    stage = worker.next_stage()
    assert stage is not None and stage.task_type != "transcode"
    with pytest.raises(PermanentFailure, match="outside the media root"):
        stage.execute()
    assert not stage.groups  # no FFmpeg was started
    assert job_status(dispatch.job_id) == "failed"
