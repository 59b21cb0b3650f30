"""Generated demo clips, so a fresh install has media for every job type without downloading any.

`seed_demo_clips()` writes a few short lavfi clips (testsrc2 + sine) under the media root if they
are missing: landscape, portrait, silent, one with distinct scenes and a loud middle (for scene,
clip, highlight and tag jobs), one in `inbox/` (move_to_library) and one in `public/` (public_scan).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from media import commands
from media.paths import media_root as configured_media_root

DEMO_CLIPS: dict[str, dict] = {
    "videos/demo-landscape.mp4": {"width": 640, "height": 360, "seconds": 5.0},
    "videos/demo-portrait.mp4": {"width": 360, "height": 640, "seconds": 4.0},
    "videos/demo-silent.mp4": {"width": 640, "height": 360, "seconds": 3.0, "audio": False},
    "videos/demo-scenes.mp4": {"width": 640, "height": 360, "seconds": 6.0, "scenes": True},
    "inbox/demo-inbox.mp4": {"width": 480, "height": 270, "seconds": 3.0},
    "public/demo-public.mp4": {"width": 480, "height": 270, "seconds": 3.0},
}
# The library titles of the demo clips, every one of them (the inbox and public clips too, so the
# library shows all six): each says what the clip is, so no two read alike (a re-encoded copy is
# titled after its file, e.g. "demo-landscape").
DEMO_TITLES: dict[str, str] = {
    "videos/demo-landscape.mp4": "Demo · landscape 640×360, 5 s",
    "videos/demo-portrait.mp4": "Demo · portrait 360×640, 4 s",
    "videos/demo-silent.mp4": "Demo · silent landscape, 3 s",
    "videos/demo-scenes.mp4": "Demo · four scenes with a loud middle, 6 s",
    "inbox/demo-inbox.mp4": "Demo · inbox clip 480×270, 3 s",
    "public/demo-public.mp4": "Demo · public clip 480×270, 3 s",
}


def seed_demo_clips(
    media_root: Path | None = None, *, overwrite: bool = False, timeout: float = 120
) -> list[str]:
    """Create the missing demo clips (in parallel); returns the media-root-relative paths written."""
    root = Path(media_root) if media_root is not None else configured_media_root()
    running = []
    for rel, kwargs in DEMO_CLIPS.items():
        dest = root / rel
        if dest.exists() and not overwrite:
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        # Written under a temporary name and renamed: a scan never sees half a clip.
        partial = dest.with_name(f".{dest.stem}.partial{dest.suffix}")
        proc = subprocess.Popen(
            commands.synthetic_clip(partial.resolve(), **kwargs),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        running.append((rel, dest, partial, proc))
    written = []
    for rel, dest, partial, proc in running:
        _, err = proc.communicate(timeout=timeout)
        if proc.returncode != 0:
            partial.unlink(missing_ok=True)
            raise RuntimeError(f"generating {rel} failed: {err.decode(errors='replace')[-500:]}")
        os.replace(partial, dest)
        written.append(rel)
    for directory in ("videos", "inbox", "public", "playback"):
        (root / directory).mkdir(parents=True, exist_ok=True)
    return written
