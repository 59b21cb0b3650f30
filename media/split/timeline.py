"""The video timeline of a source: every frame's timestamp and where decoding may start.

Read by demuxing (no decoding) with PyAV: one pass over the file's packets. A split needs frame
numbers and times to be the same thing (frame k is shown at origin + k / fps), so a source whose
timestamps are missing, repeated or off a constant grid cannot be planned exactly: `SplitImpossible`
says which frame broke the grid and how.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av

from media.ffmpeg import input_options

# A frame may sit this far (in frames) from its place on the constant grid: containers round
# timestamps (Matroska keeps milliseconds: 29.97 fps frames land up to 0.015 frame off), but a
# variable-rate source drifts by whole frames.
GRID_TOLERANCE_FRAMES = Fraction(1, 4)


class SplitImpossible(Exception):
    """The source cannot be cut into exact frame ranges; the message says why (safe to show)."""


@dataclass(frozen=True)
class Timeline:
    """Frame k (presentation order, from 0) is shown at `origin + k / fps` seconds of the source's
    own clock; `keyframes` are the frame numbers decoding may start from (sorted)."""

    fps: Fraction
    frame_count: int
    origin: Fraction  # the first frame's timestamp, seconds
    container_start: Fraction  # the file's start time (earliest stream), seconds
    keyframes: tuple[int, ...]
    keyframe_times: tuple[Fraction, ...]  # each keyframe's own timestamp, seconds (same order)

    @property
    def video_offset(self) -> Fraction:
        """Where the first frame lies after the file's start (0 for most files)."""
        return self.origin - self.container_start

    def keyframe_at_or_before(self, frame: int) -> tuple[int, Fraction]:
        """(frame number, timestamp) of the last keyframe at or before `frame`: decoding from
        there yields `frame` intact, open GOPs included (the frames that follow a keyframe in
        presentation order never reference frames before it)."""
        position = max(0, bisect.bisect_right(self.keyframes, frame) - 1)
        return self.keyframes[position], self.keyframe_times[position]


def _packets(source: Path) -> tuple[list[int], set[int], Fraction, list[Fraction]]:
    """(pts of every video packet, the keyframes' pts, time base, candidate frame rates)."""
    try:
        container = av.open(str(source), metadata_errors="ignore", container_options=input_options())
    except (av.error.FFmpegError, OSError) as exc:
        raise SplitImpossible(f"cannot read the source ({exc})") from exc
    with container:
        if not container.streams.video:
            raise SplitImpossible("the source has no video stream")
        stream = container.streams.video[0]
        time_base = Fraction(stream.time_base)
        rates = [Fraction(r) for r in (stream.average_rate, stream.guessed_rate, stream.base_rate) if r]
        start = container.start_time
        pts: list[int] = []
        keys: set[int] = set()
        for packet in container.demux(stream):
            if packet.size == 0 or packet.is_discard:
                continue  # the demuxer's flush packet; frames an edit list cuts away
            if packet.pts is None:
                raise SplitImpossible("video packets without timestamps: frame times are unknown")
            pts.append(packet.pts)
            if packet.is_keyframe:
                keys.add(packet.pts)
    container_start = Fraction(start, av.time_base) if start is not None else Fraction(0)
    return pts, keys, time_base, rates + [container_start]


def _grid_rate(times: list[Fraction], rates: list[Fraction]) -> Fraction:
    """The first candidate rate that puts every frame on its grid place, else SplitImpossible
    naming the first frame off the grid of the stream's declared rate."""
    if len(set(times)) != len(times):
        raise SplitImpossible("repeated video timestamps: frames cannot be told apart by time")
    candidates = [r for r in rates if r > 0]
    if len(times) > 1:
        # The rate the timestamps themselves give, as a last resort (rounded to 1/1001 steps).
        measured = Fraction(len(times) - 1) / (times[-1] - times[0])
        candidates.append(Fraction(round(measured * 1001), 1001))
    if not candidates:
        raise SplitImpossible("the source declares no frame rate")
    worst = None
    for rate in candidates:
        off = _first_off_grid(times, rate)
        if off is None:
            return rate
        worst = worst or (rate, off)
    rate, frame = worst
    raise SplitImpossible(
        f"variable frame rate: frame {frame} is shown at {float(times[frame] - times[0]):.4f} s, "
        f"off the constant {float(rate):.3f} fps grid ({float(frame / rate):.4f} s)"
    )


def _first_off_grid(times: list[Fraction], rate: Fraction) -> int | None:
    origin = times[0]
    for k, t in enumerate(times):
        if abs((t - origin) * rate - k) > GRID_TOLERANCE_FRAMES:
            return k
    return None


def read_timeline(source: Path) -> Timeline:
    """Demux `source` once and check that its frames lie on a constant-rate grid."""
    pts, keys, time_base, rates = _packets(source)
    container_start = rates.pop()
    if not pts:
        raise SplitImpossible("the video stream has no frames")
    pts.sort()
    times = [p * time_base for p in pts]
    fps = _grid_rate(times, rates)
    # Frame 0 always counts: the first chunk decodes from the file's start, as an unsplit encode does.
    keyframes = tuple(sorted({0} | {k for k, p in enumerate(pts) if p in keys}))
    return Timeline(
        fps=fps,
        frame_count=len(pts),
        origin=times[0],
        container_start=container_start,
        keyframes=keyframes,
        keyframe_times=tuple(times[k] for k in keyframes),
    )
