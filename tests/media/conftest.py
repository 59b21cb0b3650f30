"""Fixtures for the media tests: tiny generated clips and a private media/output/workspace root.

Clips are generated once per session with lavfi (`testsrc2` + `sine`), all FFmpeg runs in
parallel, 2-3 seconds at 320x180 so the whole folder stays fast on two cores.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from media import commands
from media.ffmpeg import ffmpeg_path

CLIPS = {
    # name: synthetic_clip kwargs
    "landscape.mp4": {"width": 320, "height": 180, "seconds": 3.0, "audio": True},
    "portrait.mp4": {"width": 180, "height": 320, "seconds": 2.0, "audio": True},
    "silent.mp4": {"width": 320, "height": 180, "seconds": 2.0, "audio": False},
    "scenes.mp4": {"width": 320, "height": 180, "seconds": 3.0, "audio": True, "scenes": True},
}


@dataclass(frozen=True)
class Clips:
    dir: Path
    landscape: Path
    portrait: Path
    silent: Path
    scenes: Path
    rotated: Path  # stored 320x180 with a 90° display matrix: displayed portrait


@pytest.fixture(scope="session")
def ffmpeg() -> str:
    return ffmpeg_path()


@pytest.fixture(scope="session")
def clips(tmp_path_factory, ffmpeg) -> Clips:
    out = tmp_path_factory.mktemp("clips")
    procs = [
        subprocess.Popen(
            commands.synthetic_clip(out / name, ffmpeg=ffmpeg, **kwargs),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for name, kwargs in CLIPS.items()
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err.decode(errors="replace")
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
    return Clips(
        out,
        out / "landscape.mp4",
        out / "portrait.mp4",
        out / "silent.mp4",
        out / "scenes.mp4",
        out / "rotated.mp4",
    )


@dataclass(frozen=True)
class MediaEnv:
    media_root: Path
    output_root: Path
    workspace_root: Path
    clips: Clips

    def add(self, clip: Path, rel: str) -> str:
        """Put a clip into the media root at `rel` (a hard link: instant, and independent names)."""
        dest = self.media_root / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(clip, dest)
        except OSError:
            shutil.copyfile(clip, dest)
        return rel

    def workspace(self, name: str = "ws") -> Path:
        path = self.workspace_root / name
        path.mkdir(parents=True, exist_ok=True)
        return path


@pytest.fixture
def media_env(tmp_path, settings, clips) -> MediaEnv:
    """Private roots for one test, set in Django settings (what the media code reads)."""
    env = MediaEnv(tmp_path / "media", tmp_path / "outputs", tmp_path / "workspace", clips)
    for root in (env.media_root, env.output_root, env.workspace_root):
        root.mkdir()
    settings.MEDIA_ROOT_DIR = env.media_root.resolve()
    settings.OUTPUT_ROOT_DIR = env.output_root.resolve()
    settings.WORKSPACE_ROOT_DIR = env.workspace_root.resolve()
    settings.S3_BUCKET = ""
    settings.JETENCODE = {**settings.JETENCODE, "STALL_SECONDS": 30.0, "WEBHOOK_ALLOW_PRIVATE": False}
    return env
