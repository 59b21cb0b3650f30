"""Scene cuts near the planned chunk boundaries.

How: FFmpeg's scene-change score (the `select` filter's `scene`: the mean absolute difference of a
frame from its predecessor, less the previous difference, 0..1) on a decode downscaled to
SCENE_WIDTH pixels wide, only in a window around each nominal boundary: input seek to the keyframe
before the window, decode to its last frame, score. A boundary moves to the strongest cut in its
window when that cut scores above SCENE_THRESHOLD.

What it costs: only the windows are decoded: per boundary, 2 x window plus the run-up from the
keyframe before it. Measured on this project's shared 2-core machine (FFmpeg 7.0.2), on a 1080p
25 fps H.264 source at ~15 Mbit/s with a keyframe every 4 s: 2.3 CPU-s per boundary with the default
+/-2 s window, so ~4.6 CPU-s per minute of source at 30 s chunks (two boundaries a minute), against
22.7 CPU-s per minute for a full decode (the decode is the cost; the 64-pixel scene score is
noise). The demux pass that reads the timeline costs 0.06 CPU-s per minute of that source.
"""

from __future__ import annotations

import re
import subprocess
from fractions import Fraction
from pathlib import Path

from media.commands import _num, _path
from media.ffmpeg import ffmpeg_path, input_args
from media.paths import descriptors_named
from media.split.timeline import Timeline

SCENE_WIDTH = 64
SCENE_THRESHOLD = 0.3
_LINE = re.compile(r"pts_time:(-?[0-9.]+)\s*\n?lavfi\.scene_score=([0-9.]+)")


def window_argv(
    source: Path, *, seek: float, start: float, end: float, ffmpeg: str | None = None
) -> list[str]:
    """Scene scores of the frames shown in [start, end) seconds of the source's own clock, decoding
    from the keyframe at or before `seek` seconds after the file's start. Prints `pts_time:` and
    `lavfi.scene_score=` lines on stdout."""
    chain = (
        f"trim=start={_num(start)}:end={_num(end)},scale={SCENE_WIDTH}:-2,"
        "select='gte(scene\\,0)',metadata=mode=print:key=lavfi.scene_score:file=/dev/stdout"
    )
    return [
        ffmpeg or ffmpeg_path(),
        "-nostdin",
        "-hide_banner",
        "-loglevel",
        "error",
        "-copyts",  # keep the source's timestamps, so pts_time maps back to frame numbers
        "-noaccurate_seek",
        "-threads",  # one decoding thread: windows run side by side (plan._snap)
        "1",
        "-ss",
        _num(max(0.0, seek)),
        *input_args(),
        "-i",
        _path(source),
        "-map",
        "0:v:0",
        "-an",
        "-sn",
        "-dn",
        "-vf",
        chain,
        "-f",
        "null",
        "-",
    ]


def parse_scores(text: str) -> list[tuple[float, float]]:
    """(pts_time, scene score) of every frame the window printed."""
    return [(float(t), float(score)) for t, score in _LINE.findall(text)]


def strongest_cut(
    source: Path,
    timeline: Timeline,
    frames: tuple[int, int],
    *,
    threshold: float = SCENE_THRESHOLD,
    ffmpeg: str | None = None,
) -> int | None:
    """The frame in [frames[0], frames[1]] that starts a new shot most clearly (its score against
    the frame before it is the highest, above `threshold`), or None. Decoding starts at the
    keyframe before frames[0] - 1, so the window's first frame is scored against its predecessor."""
    first, last = frames
    origin, fps = timeline.origin, timeline.fps
    _, seek_time = timeline.keyframe_at_or_before(max(0, first - 1))
    # Half a frame either side: the trim keeps whole frames whatever the timestamps' rounding.
    start = origin + (Fraction(first - 1) - Fraction(1, 2)) / fps
    end = origin + (Fraction(last) + Fraction(1, 2)) / fps
    argv = window_argv(
        source,
        seek=float(seek_time - timeline.container_start),
        start=float(start),
        end=float(end),
        ffmpeg=ffmpeg,
    )
    # A source opened by descriptor (`/proc/self/fd/N`, workers/stages/split_encode.media_source)
    # is read through that descriptor: the child inherits it under the same number.
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
        pass_fds=descriptors_named(source),
    )
    if proc.returncode != 0:
        raise RuntimeError(f"scene detection failed: {proc.stderr.strip()[-500:]}")
    best = None
    for pts_time, score in parse_scores(proc.stdout):
        frame = round((Fraction(pts_time) - origin) * fps)
        if first <= frame <= last and score > threshold and (best is None or score > best[1]):
            best = (frame, score)
    return best[0] if best else None
