"""Seed a fresh install with generated clips and jobs, once, so the dashboard has something to show.

The clips come from `media.demo` (FFmpeg lavfi sources, nothing downloaded). A `scan` job
adds them to the media library (validating each), and a few more jobs exercise the queue and the
media pipeline. Run again: nothing happens (a marker under var/ remembers).
"""

from django.conf import settings
from django.core.management.base import BaseCommand

from media import submission
from media.demo import seed_demo_clips

DEMO_JOBS = [
    {"type": "scan", "params": {"directory": "videos"}},
    {"type": "reencode_streaming", "params": {"input": "videos/demo-landscape.mp4"}},
    {"type": "thumbnail_generate", "params": {"input": "videos/demo-portrait.mp4"}},
    {"type": "transcode", "params": {"input": "videos/demo-landscape.mp4"}},
    {"type": "noop", "params": {"seconds": 5, "children": 2}},
    {"type": "noop", "params": {"seconds": 2, "fail_attempts": 1}, "priority": -1},
]


class Command(BaseCommand):
    help = "Generate demo clips under JETENCODE_MEDIA_ROOT and queue demo jobs (first run only)."

    def handle(self, *args, **options):
        marker = settings.VAR_DIR / ".demo-seeded"
        if marker.exists():
            return
        written = seed_demo_clips()
        for payload in DEMO_JOBS:
            submission.create_job(None, payload)
        marker.touch()
        self.stdout.write(
            f"Seeded {len(written)} demo clips under {settings.MEDIA_ROOT_DIR} and {len(DEMO_JOBS)} demo jobs."
        )
