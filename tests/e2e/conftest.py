"""Fixtures for the end-to-end media tests: clips generated once per session, private
media/output/workspace roots per test, and a launcher for real worker processes (tests.e2e.e2ekit)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from media import commands
from media.ffmpeg import ffmpeg_path
from tests.e2e.e2ekit import CLIPS, LONG_CLIP, Clips, Launcher, Roots


def generate(out: Path, specs: dict[str, dict]) -> None:
    """Generate clips with lavfi testsrc2 + sine, all FFmpeg runs in parallel."""
    ffmpeg = ffmpeg_path()
    procs = [
        subprocess.Popen(
            commands.synthetic_clip(out / name, ffmpeg=ffmpeg, **kwargs),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for name, kwargs in specs.items()
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode(errors="replace")


@pytest.fixture(scope="session")
def clips(tmp_path_factory) -> Clips:
    out = tmp_path_factory.mktemp("e2e-clips")
    generate(out, CLIPS)
    return Clips(out)


@pytest.fixture(scope="session")
def long_clip(tmp_path_factory) -> Path:
    """20 s at 640x360: a rendition of it runs for seconds (longer with a slow preset)."""
    out = tmp_path_factory.mktemp("e2e-long")
    generate(out, {"long.mp4": LONG_CLIP})
    return out / "long.mp4"


@pytest.fixture
def roots(tmp_path) -> Roots:
    """Private media/output/workspace roots for one test, also set in this process's settings."""
    roots = Roots.under(tmp_path)
    with roots.settings():
        yield roots


@pytest.fixture
def launcher(roots, tmp_path):
    launcher = Launcher(roots, tmp_path / "logs")
    yield launcher
    launcher.stop_all()
