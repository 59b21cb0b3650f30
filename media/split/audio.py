"""The audio of a split transcode: encoded once for the whole source, never per chunk.

Per-chunk audio would leave a gap or a click at every seam (each AAC encode starts with 1024
samples of encoder priming). The audio is cut nowhere: like a single-worker rendition
(media.commands.encode_video maps `0:a:0` without `-shortest`), all of the source's first audio
stream is kept, so audio longer than the video stays longer, and audio starting before or after the
video keeps its offset from the file's start.
"""

from __future__ import annotations

from pathlib import Path

from media.commands import _path, audio_args, base_args


def audio_argv(source: Path, out: Path, *, kbps: int = 128, ffmpeg: str | None = None) -> list[str]:
    """The source's first audio stream as AAC (the renditions' settings: stereo, 48 kHz) in an
    audio-only MP4 (.m4a), which the stitch muxes by copying."""
    return base_args(ffmpeg) + [
        "-i",
        _path(source),
        "-map",
        "0:a:0",
        "-vn",
        "-sn",
        "-dn",
        *audio_args(kbps),
        "-f",
        "mp4",
        _path(out),
    ]
