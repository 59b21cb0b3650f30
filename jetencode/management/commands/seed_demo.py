"""Seed a fresh install with a few generated clips and jobs, once, so the dashboard has something to show.

The clips are made by FFmpeg's lavfi sources (testsrc2 + sine): landscape with audio, portrait with
audio, landscape without audio. A `scan` job adds them to the media library (and validates each);
a few `noop` jobs and one `reencode_streaming` job exercise the queue. Run again: nothing happens.
"""

import subprocess

from django.conf import settings
from django.core.management.base import BaseCommand

from jetencode import services
from jetencode.media.ffmpeg import ffmpeg_path

CLIPS = [
    ("demo-landscape.mp4", "640x360", True),
    ("demo-portrait.mp4", "360x640", True),
    ("demo-silent.mp4", "640x360", False),
]


def generate_clip(path, size: str, audio: bool, seconds: int = 4) -> None:
    argv = [
        ffmpeg_path(),
        "-nostdin",
        "-hide_banner",
        "-loglevel",
        "error",
        "-y",
        "-f",
        "lavfi",
        "-i",
        f"testsrc2=size={size}:rate=25:duration={seconds}",
    ]
    if audio:
        argv += ["-f", "lavfi", "-i", f"sine=frequency=440:duration={seconds}", "-c:a", "aac", "-b:a", "96k"]
    argv += ["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", "-shortest", str(path)]
    subprocess.run(argv, check=True, timeout=120)


class Command(BaseCommand):
    help = "Generate demo clips under JETENCODE_MEDIA_ROOT/videos/ and queue demo jobs (first run only)."

    def handle(self, *args, **options):
        marker = settings.VAR_DIR / ".demo-seeded"
        if marker.exists():
            return
        directory = settings.MEDIA_ROOT_DIR / "videos"
        directory.mkdir(parents=True, exist_ok=True)
        for name, size, audio in CLIPS:
            if not (directory / name).exists():
                generate_clip(directory / name, size, audio)
        jobs = [
            {"type": "scan", "params": {"directory": "videos"}},
            {"type": "reencode_streaming", "params": {"input": "videos/demo-landscape.mp4"}},
            {"type": "thumbnail_generate", "params": {"input": "videos/demo-portrait.mp4"}},
            {"type": "noop", "params": {"seconds": 5, "children": 2}},
            {"type": "noop", "params": {"seconds": 2, "fail_attempts": 1}, "priority": -1},
        ]
        for payload in jobs:
            services.create_job(None, payload)
        marker.touch()
        self.stdout.write(f"Seeded {len(CLIPS)} demo clips in {directory} and {len(jobs)} demo jobs.")
