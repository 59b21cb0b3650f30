"""Containment that does not depend on FFmpeg's readers (issue 37, item 1).

FFmpeg's image2 reader (and PyAV's) reads `pics/shot%d.png` as the sequence shot0.png, shot1.png...
and follows a symlink `shot0.png` anywhere. The attacker here can write the media root: a real file
named `shot%d.png` passes every name check, and `shot0.png` links to a picture outside the root.
Every type that reads an input refuses the name at submission (422 naming the field) and fails
cleanly in the worker; what FFmpeg reads is the workspace copy of the descriptor the worker opened,
never the user's name; published and registered files are copies, never hard links.
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import av
import pytest

from media import ffmpeg as ff
from media.models import MediaAsset
from media.paths import UnsafePathError, open_beneath, open_media_file, resolve_media_path
from tests.kit.db import job_status
from tests.kit.matrix import counts
from tests.kit.media import MediaRoots
from tests.kit.workers import InProcessWorker
from workers.stages.base import PermanentFailure

pytestmark = pytest.mark.django_db

# Every job type that reads one input file, with the smallest params that submit.
SINGLE_INPUT_TYPES = {
    "transcode": {},
    "thumbnail_generate": {},
    "reencode_streaming": {},
    "compile_gif": {"duration": 1},
    "scene_extract": {},
    "clip_generate": {},
    "highlight_generate": {},
    "digest_generate": {},
    "tag_generation": {},
    "validate": {},
    "move_to_library": {},
}
MULTI_INPUT_TYPES = ("compile_quad", "compile_mega")
RED, GREEN = (255, 0, 0), (0, 255, 0)


def _png(path: Path, color: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [ff.ffmpeg_path(), "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i"]
        + [f"color=c={color}:size=64x64:duration=1", "-frames:v", "1", str(path)],
        check=True,
        timeout=60,
    )
    return path


def _clip(path: Path, color: str) -> Path:
    """A 2-second clip of one colour (stills have no duration, which thumbnails need)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [ff.ffmpeg_path(), "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i"]
        + [
            f"color=c={color}:size=64x64:rate=10:duration=2",
            "-c:v",
            "libx264",
            "-pix_fmt",
            "yuv420p",
            str(path),
        ],
        check=True,
        timeout=60,
    )
    return path


@pytest.fixture
def trap(tmp_path, settings) -> MediaRoots:
    """A media root holding the trick: a real red `pics/shot%d.png`, and `pics/shot0.png` a
    symlink to a green 'secret' picture outside the root. Also an honest red `pics/red.png` and a
    red clip `pics/red.mp4`."""
    roots = MediaRoots.under(tmp_path)
    settings.MEDIA_ROOT_DIR = roots.media
    settings.OUTPUT_ROOT_DIR = roots.outputs
    settings.WORKSPACE_ROOT_DIR = roots.workspace
    settings.S3_BUCKET = ""
    secret = _png(tmp_path / "outside" / "secret.png", "green")
    _png(roots.media / "pics" / "shot%d.png", "red")
    _png(roots.media / "pics" / "red.png", "red")
    _clip(roots.media / "pics" / "red.mp4", "red")
    os.symlink(secret, roots.media / "pics" / "shot0.png")
    return roots


@pytest.fixture
def worker(db, trap) -> InProcessWorker:
    return InProcessWorker(workspace_root=trap.workspace)


def _center(path: Path) -> tuple[int, int, int]:
    with av.open(str(path)) as container:
        frame = next(container.decode(video=0)).reformat(format="rgb24")
    plane = frame.planes[0]
    offset = (frame.height // 2) * plane.line_size + (frame.width // 2) * 3
    return tuple(bytes(plane)[offset : offset + 3])


def _near(pixel, color, tolerance=40) -> bool:
    return all(abs(a - b) <= tolerance for a, b in zip(pixel, color, strict=True))


# --- at submission ----------------------------------------------------------------------------------


@pytest.mark.parametrize("job_type", sorted(SINGLE_INPUT_TYPES))
def test_a_sequence_pattern_is_refused_at_submission_for_every_type(caller, trap, job_type):
    before = counts()
    params = {"input": "pics/shot%d.png", **SINGLE_INPUT_TYPES[job_type]}
    response = caller("operator").request("post", "/v2/jobs", {"type": job_type, "params": params})
    assert response.status_code == 422, response.content[:300]
    errors = response.json()["errors"]
    assert [e["field"] for e in errors] == ["params.input"], errors
    assert "'%'" in errors[0]["message"] and "sequence" in errors[0]["message"], errors
    assert counts() == before


@pytest.mark.parametrize("job_type", MULTI_INPUT_TYPES)
def test_a_sequence_pattern_among_several_inputs_is_refused(caller, trap, job_type):
    inputs = ["pics/red.png", "pics/shot%d.png"]
    response = caller("operator").request(
        "post", "/v2/jobs", {"type": job_type, "params": {"inputs": inputs}}
    )
    assert response.status_code == 422, response.content[:300]
    errors = response.json()["errors"]
    assert [e["field"] for e in errors] == ["params.inputs"], errors
    assert "'%'" in errors[0]["message"], errors


def test_a_symlink_loop_is_a_422_not_a_500(caller, trap):
    os.symlink("loop_b.mp4", trap.media / "loop_a.mp4")
    os.symlink("loop_a.mp4", trap.media / "loop_b.mp4")
    os.symlink("self", trap.media / "self")
    for rel in ("loop_a.mp4", "self/clip.mp4"):
        response = caller("operator").request(
            "post", "/v2/jobs", {"type": "thumbnail_generate", "params": {"input": rel}}
        )
        assert response.status_code == 422, (rel, response.content[:300])
        assert [e["field"] for e in response.json()["errors"]] == ["params.input"]
        assert "loop" in response.json()["errors"][0]["message"]


def test_an_unreadable_file_is_a_422_naming_the_field(caller, trap):
    if os.geteuid() == 0:
        pytest.skip("root reads every file")
    locked = _png(trap.media / "pics" / "locked.png", "red")
    locked.chmod(0)
    response = caller("operator").request(
        "post", "/v2/jobs", {"type": "thumbnail_generate", "params": {"input": "pics/locked.png"}}
    )
    assert response.status_code == 422, response.content[:300]
    assert "not readable" in response.json()["errors"][0]["message"]


# --- in the worker --------------------------------------------------------------------------------


@pytest.mark.parametrize("job_type", sorted(SINGLE_INPUT_TYPES))
def test_the_worker_fails_a_sequence_pattern_cleanly_for_every_type(worker, trap, job_type):
    """Submitted past the API (the worker checks again): a permanent failure, no output."""
    dispatch = worker.stage_of(job_type, {"input": "pics/shot%d.png", **SINGLE_INPUT_TYPES[job_type]})
    with pytest.raises(PermanentFailure, match="'%'"):
        dispatch.execute()
    assert job_status(dispatch.job_id) == "failed"
    assert trap.published_files(dispatch.job_id) == []


@pytest.mark.parametrize("job_type", MULTI_INPUT_TYPES)
def test_the_worker_fails_a_pattern_among_several_inputs(worker, trap, job_type):
    dispatch = worker.stage_of(job_type, {"inputs": ["pics/red.mp4", "pics/shot%d.png"]})
    with pytest.raises(PermanentFailure, match="'%'"):
        dispatch.execute()
    assert job_status(dispatch.job_id) == "failed"
    assert trap.published_files(dispatch.job_id) == []


def test_a_library_asset_named_with_a_pattern_fails_cleanly(worker, trap):
    asset = MediaAsset.objects.create(path="pics/shot%d.png", title="trap", directory="pics")
    for job_type in ("thumbnail_generate", "compile_gif"):
        dispatch = worker.stage_of(job_type, {"video_id": str(asset.id)})
        with pytest.raises(PermanentFailure, match="'%'"):
            dispatch.execute()
        assert trap.published_files(dispatch.job_id) == []


@pytest.mark.parametrize(
    "job_type, output", [("thumbnail_generate", "thumbnail.jpg"), ("compile_gif", "clip.gif")]
)
def test_ffmpeg_reads_only_the_workspace_copy_of_the_named_file(worker, trap, job_type, output):
    """An honest picture works, FFmpeg's argv names only the workspace, and the pixels are the
    named file's (red), never the secret's (green)."""
    params = {"input": "pics/red.mp4", **({"duration": 1} if job_type == "compile_gif" else {})}
    run = worker.run_job(job_type, params)
    assert output in run.outputs()
    assert _near(_center(run.output_dir / output), RED)
    workspace = str(trap.workspace)
    for stage in run.stages:
        for group in stage.groups:
            inputs = [group.argv[i + 1] for i, arg in enumerate(group.argv) if arg == "-i"]
            assert inputs and all(path.startswith(workspace) for path in inputs), group.argv


def test_a_symlink_planted_after_the_check_is_not_followed(trap, tmp_path):
    """open_beneath opens every component with O_NOFOLLOW: a directory swapped for a symlink
    between the name check and the open makes the open fail, even one pointing inside the root."""
    (trap.media / "real").mkdir()
    _png(trap.media / "real" / "a.png", "red")
    os.symlink(trap.media / "real", trap.media / "linked")
    with pytest.raises(OSError) as info:
        open_beneath(trap.media, ("linked", "a.png"))
    assert info.value.errno in (errno.ELOOP, errno.ENOTDIR)
    with pytest.raises(OSError) as info:
        open_beneath(trap.media, ("pics", "shot0.png"))
    assert info.value.errno == errno.ELOOP
    # By name, a symlinked directory inside the root is fine: the resolved path is opened.
    with open_media_file("linked/a.png") as (fd, path):
        assert path == (trap.media / "real" / "a.png").resolve()
        assert os.fstat(fd).st_size == (trap.media / "real" / "a.png").stat().st_size
    with pytest.raises(UnsafePathError, match="outside the media root"):
        with open_media_file("pics/shot0.png"):
            pass


def test_a_fifo_or_a_directory_is_not_opened_as_an_input(trap):
    os.mkfifo(trap.media / "pics" / "pipe.png")
    with pytest.raises(UnsafePathError, match="regular file"):
        with open_media_file("pics/pipe.png"):
            pass
    with pytest.raises(UnsafePathError, match="regular file"):
        resolve_media_path("pics", kind="file", must_exist=True)


def test_a_scan_skips_loops_and_patterns(worker, trap, clips_dir):
    (trap.media / "lib").mkdir()
    os.link(clips_dir / "landscape.mp4", trap.media / "lib" / "good.mp4")
    os.link(clips_dir / "landscape.mp4", trap.media / "lib" / "100%d.mp4")
    os.symlink("loop2.mp4", trap.media / "lib" / "loop1.mp4")
    os.symlink("loop1.mp4", trap.media / "lib" / "loop2.mp4")
    os.symlink("..", trap.media / "lib" / "up")
    run = worker.run_job("scan", {"directory": "lib", "recursive": True})
    assert run.stages[0].result["files_found"] == 1
    assert list(MediaAsset.objects.values_list("path", flat=True)) == ["lib/good.mp4"]


def test_reencode_output_and_library_file_are_copies_not_links(worker, trap, clips_dir):
    os.link(clips_dir / "landscape.mp4", trap.media / "in.mp4")
    run = worker.run_job(
        "reencode_streaming",
        {"input": "in.mp4", "target_bitrate_kbps": 300, "max_height": 144, "preset": "ultrafast"},
    )
    [asset] = MediaAsset.objects.exclude(path="in.mp4")
    library = trap.media / asset.path
    published = next(p for p in (trap.outputs / run.job_id).iterdir() if p.suffix == ".mp4")
    assert library.stat().st_nlink == 1
    assert not os.path.samefile(library, published)
    # (the published file's other name, if any, is the job's workspace file, removed with it)
    shared = [p for p in trap.media.rglob("*") if p.is_file() and os.path.samefile(p, published)]
    assert shared == []


@pytest.fixture
def clips_dir(clips) -> Path:
    return clips.dir


@pytest.fixture(scope="session")
def clips(tmp_path_factory):
    from tests.kit.media import CLIPS, Clips, generate_clips

    out = tmp_path_factory.mktemp("clips")
    generate_clips(out, {"landscape.mp4": CLIPS["landscape.mp4"]}, timeout=60)
    return Clips(out)


def test_an_unreadable_file_is_refused_in_words_for_an_unprivileged_worker(tmp_path):
    """Root reads every file, so the worker's view is taken by a child that drops to `nobody`."""
    if os.geteuid() != 0:
        pytest.skip("needs root to drop to nobody (the 422 test above covers an unprivileged run)")
    import shutil
    import sys
    import tempfile

    base = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        base.chmod(0o755)
        (base / "media" / "pics").mkdir(parents=True)
        (base / "media").chmod(0o755)
        (base / "media" / "pics").chmod(0o755)
        secret = base / "media" / "pics" / "locked.mp4"
        secret.write_bytes(b"x" * 64)
        secret.chmod(0o600)
        code = (
            "import os, sys\n"
            "from media.paths import open_beneath, _os_problem\n"  # imported while still root
            "os.setgid(65534); os.setuid(65534)\n"
            "try:\n"
            "    open_beneath(sys.argv[1], ('pics', 'locked.mp4'))\n"
            "except OSError as exc:\n"
            "    print(_os_problem(exc))\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", code, str(base / "media")],
            cwd=Path(__file__).resolve().parents[2],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.stdout.strip() == "is not readable by the worker (permission denied)", result.stderr[
            -500:
        ]
    finally:
        shutil.rmtree(base, ignore_errors=True)
