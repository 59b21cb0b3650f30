"""Seed a fresh install with generated clips and jobs, once, so the dashboard has something to show.

The clips come from `media.demo` (FFmpeg lavfi sources, nothing downloaded). All six enter the
media library with distinct titles; a `scan` job validates those of `videos/`, a `validate` job
each of the others (`inbox/`, `public/`), and each gets its thumbnail through the library's own
"Generate thumbnail" action (a `thumbnail_generate` job naming the asset, whose last stage stores
the thumbnail on it). A few more jobs exercise the queue and the media pipeline. Run again:
nothing happens (a marker under var/ remembers).
"""

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from media import submission
from media.demo import DEMO_TITLES, seed_demo_clips
from media.models import MediaAsset

DEMO_JOBS = [
    {"type": "scan", "params": {"directory": "videos"}},
    {"type": "reencode_streaming", "params": {"input": "videos/demo-landscape.mp4"}},
    {"type": "transcode", "params": {"input": "videos/demo-landscape.mp4"}},
    {"type": "noop", "params": {"seconds": 5, "children": 2}},
    {"type": "noop", "params": {"seconds": 2, "fail_attempts": 1}, "priority": -1},
]


def library_assets() -> list[MediaAsset]:
    """The demo clips of the library, with their titles (the scan validates them)."""
    assets = []
    for path, title in DEMO_TITLES.items():
        file = settings.MEDIA_ROOT_DIR / path
        asset, _ = MediaAsset.objects.get_or_create(
            path=path,
            defaults={
                "title": title,
                "directory": Path(path).parent.as_posix(),
                "size_bytes": file.stat().st_size,
            },
        )
        assets.append(asset)
    return assets


def validate_job(asset: MediaAsset) -> dict:
    """What the library's "Validate" action creates for one asset."""
    return {"type": "validate", "params": {"video_id": str(asset.id)}}


def thumbnail_job(asset: MediaAsset) -> dict:
    """What the library's "Generate thumbnail" action creates for one asset."""
    return {"type": "thumbnail_generate", "params": {"video_id": str(asset.id)}}


class Command(BaseCommand):
    help = "Generate demo clips under JETENCODE_MEDIA_ROOT and queue demo jobs (first run only)."

    def handle(self, *args, **options):
        marker = settings.VAR_DIR / ".demo-seeded"
        if marker.exists():
            return
        written = seed_demo_clips()
        assets = library_assets()
        outside_scan = [asset for asset in assets if asset.directory != DEMO_JOBS[0]["params"]["directory"]]
        jobs = (
            DEMO_JOBS[:1]
            + [validate_job(asset) for asset in outside_scan]
            + [thumbnail_job(asset) for asset in assets]
            + DEMO_JOBS[1:]
        )
        for payload in jobs:
            submission.create_job(None, payload)
        marker.touch()
        self.stdout.write(
            f"Seeded {len(written)} demo clips under {settings.MEDIA_ROOT_DIR} and {len(jobs)} demo jobs."
        )
