"""Fixtures for the media tests: tiny generated clips, private media/output/workspace roots, and a
worker in this process for the handler tests.

Clips are generated once per session (tests/kit/media.py), plus one stored 320x180 with a 90°
display matrix (displayed portrait).
"""

from __future__ import annotations

import subprocess

import pytest

from media.ffmpeg import ffmpeg_path
from tests.kit.media import CLIPS, Clips, MediaRoots, generate_clips
from tests.kit.workers import InProcessWorker


@pytest.fixture(scope="session")
def ffmpeg() -> str:
    return ffmpeg_path()


@pytest.fixture(scope="session")
def clips(tmp_path_factory, ffmpeg) -> Clips:
    """landscape, portrait, silent, scenes (three distinct scenes, a loud middle) and rotated."""
    out = tmp_path_factory.mktemp("clips")
    generate_clips(out, CLIPS, timeout=60)
    subprocess.run(
        [
            ffmpeg,
            "-nostdin",
            "-hide_banner",
            "-loglevel",
            "error",
            "-y",
            "-display_rotation",
            "90",
            "-i",
            str(out / "landscape.mp4"),
            "-c",
            "copy",
            str(out / "rotated.mp4"),
        ],
        check=True,
        timeout=60,
    )
    return Clips(out)


@pytest.fixture
def roots(tmp_path, settings) -> MediaRoots:
    """Private roots for one test, set in Django settings (what the media code reads)."""
    roots = MediaRoots.under(tmp_path)
    settings.MEDIA_ROOT_DIR = roots.media
    settings.OUTPUT_ROOT_DIR = roots.outputs
    settings.WORKSPACE_ROOT_DIR = roots.workspace
    settings.S3_BUCKET = ""
    settings.JETENCODE = {**settings.JETENCODE, "STALL_SECONDS": 30.0, "WEBHOOK_ALLOW_PRIVATE": False}
    return roots


@pytest.fixture
def local_worker(db, roots) -> InProcessWorker:
    """A worker in this process (tests/kit/workers.py): stages claimed from the test database and run
    through the runtime's own RunContext, subprocess runner and fenced conclusion."""
    return InProcessWorker(workspace_root=roots.workspace)
