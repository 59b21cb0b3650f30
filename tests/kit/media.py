"""Media for tests: tiny generated clips and private media/output/workspace roots.

Clips are generated with lavfi (`testsrc2` + `sine`), every FFmpeg run in parallel; 2-3 seconds at
320x180 keeps every job type under a second or two of FFmpeg on two cores.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings as django_settings
from django.test import override_settings

from media import commands
from media.ffmpeg import ffmpeg_path

WEBHOOK_SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # base64 of 24 bytes; test-only
# A worker that signs its webhooks with WEBHOOK_SECRET and may send them to a local receiver.
SIGNED_LOCAL_WEBHOOKS = {
    "JETENCODE_WEBHOOK_ALLOW_PRIVATE": "true",
    "JETENCODE_WEBHOOK_SECRET": WEBHOOK_SECRET,
}

CLIPS = {
    # name: synthetic_clip kwargs
    "landscape.mp4": {"width": 320, "height": 180, "seconds": 3.0, "audio": True},
    "portrait.mp4": {"width": 180, "height": 320, "seconds": 2.0, "audio": True},
    "silent.mp4": {"width": 320, "height": 180, "seconds": 2.0, "audio": False},
    "scenes.mp4": {"width": 320, "height": 180, "seconds": 3.0, "audio": True, "scenes": True},
}
# For the fault tests: long and large enough that a rendition is still running when the test acts.
LONG_CLIP = {"width": 640, "height": 360, "seconds": 20.0, "audio": True}


def generate_clips(out: Path, specs: dict[str, dict], timeout: float = 120) -> None:
    """Generate `specs` (name: synthetic_clip kwargs) into `out`, all FFmpeg runs in parallel."""
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
        _, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, err.decode(errors="replace")


@dataclass(frozen=True)
class Clips:
    """The generated clips by name: `clips.landscape` is `<dir>/landscape.mp4`."""

    dir: Path

    def __getattr__(self, name: str) -> Path:
        path = self.dir / f"{name}.mp4"
        if not path.exists():
            raise AttributeError(name)
        return path


@dataclass(frozen=True)
class MediaRoots:
    """A private media root, output root, workspace root and scratch (JETENCODE_MEDIA_ROOT,
    _OUTPUT_ROOT, _WORKSPACE_ROOT, _SCRATCH_ROOT for a worker; MEDIA_ROOT_DIR, OUTPUT_ROOT_DIR,
    WORKSPACE_ROOT_DIR, SCRATCH_ROOT_DIR here)."""

    media: Path
    outputs: Path
    workspace: Path
    scratch: Path  # the shared scratch of split jobs (JETENCODE_SCRATCH_ROOT)

    @classmethod
    def under(cls, base: Path) -> MediaRoots:
        roots = cls(*((base / name).resolve() for name in ("media", "outputs", "workspace", "scratch")))
        for path in (roots.media, roots.outputs, roots.workspace, roots.scratch):
            path.mkdir(parents=True, exist_ok=True)
        return roots

    def add(self, clip: Path, rel: str) -> str:
        """Put a clip into the media root at `rel` (a hard link: instant, independent names)."""
        dest = self.media / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(clip, dest)
        except OSError:
            shutil.copyfile(clip, dest)
        return rel

    def job_outputs(self, job_id) -> Path:
        return self.outputs / str(job_id)

    def job_workspace(self, job_id) -> Path:
        return self.workspace / str(job_id)

    def published_files(self, job_id) -> list[str]:
        """Every file under OUTPUT_ROOT/<job id>/, temporary names included, relative and sorted."""
        root = self.job_outputs(job_id)
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())

    def environment(self) -> dict[str, str]:
        """These roots for a worker process."""
        return {
            "JETENCODE_MEDIA_ROOT": str(self.media),
            "JETENCODE_OUTPUT_ROOT": str(self.outputs),
            "JETENCODE_WORKSPACE_ROOT": str(self.workspace),
            "JETENCODE_SCRATCH_ROOT": str(self.scratch),
        }

    def settings(self, **jetencode):
        """These roots in this process's Django settings (create_job checks inputs against them),
        no S3, and `jetencode` added to settings.JETENCODE."""
        return override_settings(
            MEDIA_ROOT_DIR=self.media,
            OUTPUT_ROOT_DIR=self.outputs,
            WORKSPACE_ROOT_DIR=self.workspace,
            SCRATCH_ROOT_DIR=self.scratch,
            S3_BUCKET="",
            JETENCODE={**django_settings.JETENCODE, **jetencode},
        )
