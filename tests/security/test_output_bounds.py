"""What one job may produce is bounded, and FFmpeg runs under a memory limit.

Per-field bounds are not output bounds: a 2x2 grid of 7680-wide cells is 15360 wide. Grids must
fit 7680x4320 (a 422 naming the cell field), a source may repeat at most MAX_SOURCE_REPEATS times,
a compilation's length is bounded once its sources are probed, GIFs take two passes (the palette
first, so frames are not buffered), and every stage process has an address-space limit.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from media import commands
from media import params as p
from media.ffmpeg import ffmpeg_path
from media.probe import probe
from tests.kit.matrix import counts
from workers import processes
from workers.stages.base import PermanentFailure
from workers.stages.compile import _check_output_length

pytestmark = pytest.mark.django_db


@pytest.fixture
def sixteen(hostile_media) -> list[str]:
    names = []
    for index in range(16):
        rel = f"videos/v{index:02d}.mp4"
        (hostile_media / rel).write_bytes(b"\x00" * 64)
        names.append(rel)
    return names


def _refused(operator_api, job_type, params, field):
    before = counts()
    response = operator_api.request("post", "/v2/jobs", {"type": job_type, "params": params})
    assert response.status_code == 422, response.content[:400]
    body = response.json()
    assert field in [e["field"] for e in body["errors"]], body
    assert field.split(".")[-1] in body["detail"]
    assert counts() == before
    return body


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"cell_width": 7680}, "params.cell_width"),
        ({"cell_width": 3842}, "params.cell_width"),
        ({"cell_height": 4320}, "params.cell_height"),
    ],
)
def test_a_quad_grid_larger_than_8k_is_422_naming_the_cell(operator_api, sixteen, extra, field):
    body = _refused(operator_api, "compile_quad", {"inputs": sixteen[:4], **extra}, field)
    assert "at most" in body["errors"][0]["message"]


def test_a_quad_of_4k_cells_fits(operator_api, sixteen):
    params = {"inputs": sixteen[:4], "cell_width": 3840, "cell_height": 2160}
    assert (
        operator_api.request("post", "/v2/jobs", {"type": "compile_quad", "params": params}).status_code
        == 201
    )


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"cell_width": 1922}, "params.cell_width"),  # 16 sources: 4 columns x 1922 > 7680
        ({"cell_height": 1200}, "params.cell_height"),  # 4 rows x 1200 > 4320
        ({"columns": 8, "cell_width": 1000}, "params.cell_width"),
        ({"columns": 1, "cell_height": 300}, "params.cell_height"),  # 16 rows
    ],
)
def test_a_mega_grid_larger_than_8k_is_422_naming_the_cell(operator_api, sixteen, extra, field):
    _refused(operator_api, "compile_mega", {"inputs": sixteen, **extra}, field)


def test_a_mega_grid_of_exactly_8k_fits(operator_api, sixteen):
    params = {"inputs": sixteen, "cell_width": 1920, "cell_height": 1080}
    assert (
        operator_api.request("post", "/v2/jobs", {"type": "compile_mega", "params": params}).status_code
        == 201
    )


def test_a_mega_concat_ignores_the_cell_size(operator_api, sixteen):
    params = {"inputs": sixteen, "layout": "concat", "cell_width": 7680, "cell_height": 4320}
    assert (
        operator_api.request("post", "/v2/jobs", {"type": "compile_mega", "params": params}).status_code
        == 201
    )


def test_one_video_id_repeated_more_than_the_limit_is_422(operator_api, sixteen):
    asset = str(uuid.uuid4())
    body = _refused(
        operator_api, "compile_mega", {"video_ids": [asset] * (p.MAX_SOURCE_REPEATS + 1)}, "params.video_ids"
    )
    assert f"at most {p.MAX_SOURCE_REPEATS}" in body["errors"][0]["message"]
    _refused(operator_api, "compile_mega", {"video_ids": [asset] * 64}, "params.video_ids")


def test_one_input_repeated_more_than_the_limit_is_422(operator_api, sixteen):
    _refused(operator_api, "compile_mega", {"inputs": [sixteen[0]] * 5 + sixteen[1:3]}, "params.inputs")
    # Up to the limit is fine (compile_quad of one clip four times).
    params = {"inputs": [sixteen[0]] * p.MAX_SOURCE_REPEATS}
    assert (
        operator_api.request("post", "/v2/jobs", {"type": "compile_quad", "params": params}).status_code
        == 201
    )


def test_a_compilation_longer_than_the_limit_fails_its_dispatch():
    params = p.CompileRandomParams(count=50, fps=30)
    _check_output_length("compile_random", params, 3600.0)  # an hour is fine
    with pytest.raises(PermanentFailure, match="count or max_duration"):
        _check_output_length("compile_random", params, 50 * 3600.0)
    fast = p.CompileRandomParams(fps=120)
    with pytest.raises(PermanentFailure, match="frames"):
        _check_output_length("compile_random", fast, 3 * 3600.0)


# ---- FFmpeg's memory ------------------------------------------------------------------------------


def test_stage_processes_run_under_the_address_space_limit(settings, tmp_path):
    settings.JETENCODE = {**settings.JETENCODE, "FFMPEG_MEMORY_MB": 300}
    group = processes.start(["sleep", "5"], cwd=tmp_path)
    try:
        limits = Path(f"/proc/{group.pgid}/limits").read_text()
        line = next(row for row in limits.splitlines() if row.startswith("Max address space"))
        assert line.split()[3:5] == [str(300 * 1024 * 1024)] * 2, line
    finally:
        group.stop(1.0)


@pytest.fixture
def source_360p(tmp_path) -> Path:
    path = tmp_path / "src.mp4"
    subprocess.run(
        [ffmpeg_path(), "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i"]
        + ["testsrc2=size=640x360:rate=25:duration=3", "-c:v", "libx264", "-preset", "ultrafast"]
        + ["-pix_fmt", "yuv420p", str(path)],
        check=True,
        timeout=60,
    )
    return path


def _run(argv, cwd) -> int:
    group = processes.start(argv, cwd=cwd)
    _out, err = group.popen.communicate(timeout=300)
    processes.forget_if_finished(group)
    return group.popen.returncode


def test_a_large_gif_runs_in_two_passes_within_a_memory_limit(settings, tmp_path, source_360p):
    """1920 wide at 50 fps: the one-pass graph buffers every frame (about 3 MB each) until the
    palette is known and runs out of a 1 GiB address space; two passes stream."""
    settings.JETENCODE = {**settings.JETENCODE, "FFMPEG_MEMORY_MB": 1024}
    shape = {"start": 0.0, "duration": 3.0, "width": 1920, "fps": 50}
    chain = "fps=50,scale=1920:-1:flags=lanczos"
    one_pass = commands.base_args() + ["-i", str(source_360p), "-filter_complex"]
    one_pass += [f"[0:v]{chain},split[a][b];[a]palettegen[p];[b][p]paletteuse=dither=none[v]"]
    one_pass += ["-map", "[v]", "-f", "gif", str(tmp_path / "one.gif")]
    assert _run(one_pass, tmp_path) != 0  # what the old builder did: out of memory

    palette, gif = tmp_path / "palette.png", tmp_path / "clip.gif"
    assert _run(commands.gif_palette(source_360p, palette, **shape), tmp_path) == 0
    assert _run(commands.gif(source_360p, gif, palette=palette, dither="none", **shape), tmp_path) == 0
    info = probe(gif)
    assert (info.video_codec, info.width, info.height) == ("gif", 1920, 1080)


def test_a_gif_of_a_very_tall_video_stays_within_the_height_bound(tmp_path):
    tall = tmp_path / "tall.mp4"
    subprocess.run(
        [ffmpeg_path(), "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i"]
        + ["testsrc2=size=32x1024:rate=5:duration=1", "-c:v", "libx264", "-pix_fmt", "yuv420p", str(tall)],
        check=True,
        timeout=60,
    )
    shape = {"start": 0.0, "duration": 1.0, "width": 640, "fps": 5}
    palette, gif = tmp_path / "palette.png", tmp_path / "clip.gif"
    assert _run(commands.gif_palette(tall, palette, **shape), tmp_path) == 0
    assert _run(commands.gif(tall, gif, palette=palette, **shape), tmp_path) == 0
    assert probe(gif).height <= commands.GIF_MAX_HEIGHT


def test_a_thumbnail_of_a_very_tall_video_stays_within_the_height_bound(tmp_path):
    tall = tmp_path / "tall.mp4"
    subprocess.run(
        [ffmpeg_path(), "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i"]
        + ["testsrc2=size=16x1024:rate=5:duration=1", "-c:v", "libx264", "-pix_fmt", "yuv420p", str(tall)],
        check=True,
        timeout=60,
    )
    out = tmp_path / "thumb.jpg"
    # Scaled to 7680 wide at its aspect it would be 491,520 lines high.
    assert _run(commands.thumbnail(tall, out, timestamp=0.2, width=7680), tmp_path) == 0
    info = probe(out)
    assert info.height <= commands.IMAGE_MAX_HEIGHT and info.width * info.height <= p.MAX_OUTPUT_PIXELS


def test_a_hardware_encoder_runs_without_the_address_space_limit(settings, tmp_path):
    """CUDA reserves address space far beyond its use; NVENC under RLIMIT_AS would fail to start."""
    settings.JETENCODE = {**settings.JETENCODE, "FFMPEG_MEMORY_MB": 300}
    group = processes.start(["sh", "-c", "sleep 5", "-c:v", "h264_nvenc"], cwd=tmp_path)
    try:
        limits = Path(f"/proc/{group.pgid}/limits").read_text()
        line = next(row for row in limits.splitlines() if row.startswith("Max address space"))
        assert line.split()[3:5] == ["unlimited", "unlimited"], line
    finally:
        group.stop(1.0)


def test_clip_ranges_adding_up_to_more_than_the_output_limit_are_422(operator_api, sixteen):
    hour = [{"start": i * 3600.0, "end": (i + 1) * 3600.0} for i in range(5)]
    _refused(operator_api, "clip_generate", {"input": sixteen[0], "ranges": hour}, "params.ranges")
    params = {"input": sixteen[0], "ranges": hour[:4]}
    assert (
        operator_api.request("post", "/v2/jobs", {"type": "clip_generate", "params": params}).status_code
        == 201
    )
