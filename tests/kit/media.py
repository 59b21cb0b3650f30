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


def split_source(
    dst: Path,
    *,
    fps: str = "25",
    seconds: float = 3.0,
    audio_seconds: float | None = None,
    size: str = "160x90",
    cut_at: float | None = None,
    ffmpeg: str | None = None,
) -> list[str]:
    """A source made to be hard to split (the split tests, tests/media/test_split_*.py): H.264 with
    B-frames and open GOPs whose keyframes (every 40 frames) fall anywhere in a chunk, at `fps`
    ("25", "30000/1001"); `cut_at` seconds into it a hard cut from testsrc2 to smptebars;
    `audio_seconds` of 48 kHz AAC (longer than the video when above `seconds`), or no audio."""
    argv = [ffmpeg or ffmpeg_path(), "-nostdin", "-hide_banner", "-loglevel", "error", "-y"]
    if cut_at is None:
        graph = f"testsrc2=size={size}:rate={fps}:duration={seconds}[v]"
    else:
        graph = (
            f"testsrc2=size={size}:rate={fps}:duration={cut_at}[a];"
            f"smptebars=size={size}:rate={fps}:duration={seconds - cut_at}[b];[a][b]concat=n=2:v=1:a=0[v]"
        )
    maps = ["-map", "[v]"]
    if audio_seconds:
        graph += f";sine=frequency=440:sample_rate=48000:duration={audio_seconds}[s]"
        maps += ["-map", "[s]"]
    argv += ["-filter_complex", graph, *maps, "-c:v", "libx264", "-preset", "veryfast", "-bf", "3"]
    argv += ["-x264-params", "keyint=40:min-keyint=40:scenecut=0:open-gop=1", "-pix_fmt", "yuv420p"]
    argv += ["-c:a", "aac", "-b:a", "64k"] if audio_seconds else ["-an"]
    return argv + [str(dst)]


def run_all(argvs: list[list[str]], timeout: float = 120) -> None:
    """Run FFmpeg argvs in parallel; each must succeed."""
    procs = [
        subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for argv in argvs
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, err.decode(errors="replace")


def frame_hashes(path: Path, ffmpeg: str | None = None) -> list[str]:
    """The MD5 of every decoded video frame's visible pixels (FFmpeg's framemd5), in order."""
    out = subprocess.run(
        [
            ffmpeg or ffmpeg_path(),
            "-nostdin",
            "-v",
            "error",
            "-i",
            str(path),
            "-map",
            "0:v:0",
            "-f",
            "framemd5",
            "-",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return [line.rsplit(",", 1)[-1].strip() for line in out.splitlines() if line and not line.startswith("#")]
