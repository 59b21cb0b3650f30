"""The split plan: a source cut into exact frame ranges, the same for every rendition.

Chunks are planned in frames, never in seconds: frame k of the source (presentation order, from
0) is shown at k / fps after the first frame, which `timeline.read_timeline` checks for every frame
(a variable-frame-rate source raises `SplitImpossible`). The ranges cover every frame exactly once.

Nominal boundaries spread the frames evenly over ceil(frames / chunk frames) chunks, so no chunk is
longer than `chunk_seconds` and none is a short straggler at the end. Each inner boundary then moves
to the strongest scene cut within +/- the scene window, if there is one (`scenes.strongest_cut`:
FFmpeg's scene score on a 64-pixel-wide decode of the window only; its measured cost is in
the `scenes` docstring). The window is at most a quarter of a chunk, so chunks never collapse.
The windows are scanned in parallel, one single-thread FFmpeg each, as many at once as the
worker's FFmpeg may use threads (JETENCODE_FFMPEG_THREADS, else the cores it may run on): the
planning is the one serial step of a split job before every worker can start.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from media.split.scenes import strongest_cut
from media.split.timeline import SplitImpossible, Timeline, read_timeline

__all__ = ["Chunk", "SplitImpossible", "SplitPlan", "plan_split", "DEFAULT_SCENE_WINDOW_SECONDS"]

DEFAULT_SCENE_WINDOW_SECONDS = 2.0


def _seconds(value: Fraction | float) -> float:
    return round(float(value), 6)


@dataclass(frozen=True)
class Chunk:
    """Frames first_frame..last_frame (inclusive) of the source; start/end seconds after the
    source's first frame. `seek_seconds`: where decoding starts (a keyframe at or before the first
    frame), seconds after the file's start; `video_offset`: the first frame's time after the file's
    start. Those two are what an encode needs to find the frames; `to_dict` leaves them out."""

    index: int
    first_frame: int
    last_frame: int
    start_seconds: float
    end_seconds: float
    seek_seconds: float = 0.0
    video_offset: float = 0.0

    @property
    def frames(self) -> int:
        return self.last_frame - self.first_frame + 1

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "first_frame": self.first_frame,
            "last_frame": self.last_frame,
            "start_seconds": self.start_seconds,
            "end_seconds": self.end_seconds,
        }

    def to_state(self) -> dict:
        """Everything, for storing and rebuilding with `from_state`."""
        return {**self.to_dict(), "seek_seconds": self.seek_seconds, "video_offset": self.video_offset}

    @classmethod
    def from_state(cls, data: dict) -> Chunk:
        return cls(
            index=int(data["index"]),
            first_frame=int(data["first_frame"]),
            last_frame=int(data["last_frame"]),
            start_seconds=float(data["start_seconds"]),
            end_seconds=float(data["end_seconds"]),
            seek_seconds=float(data.get("seek_seconds", 0.0)),
            video_offset=float(data.get("video_offset", 0.0)),
        )


@dataclass(frozen=True)
class SplitPlan:
    mode: str
    reason: str
    chunks: list[Chunk]
    fps: Fraction
    frame_count: int
    scene_cuts: list[int] = field(default_factory=list)  # boundaries (first frames) on a scene cut

    @property
    def duration_seconds(self) -> float:
        return float(self.frame_count / self.fps)

    def to_dict(self) -> dict:
        """What the job detail shows as `split`."""
        return {"mode": self.mode, "reason": self.reason, "chunks": [c.to_dict() for c in self.chunks]}

    def to_state(self) -> dict:
        """JSON-safe and complete: `SplitPlan.from_state(plan.to_state()) == plan`."""
        return {
            "mode": self.mode,
            "reason": self.reason,
            "chunks": [c.to_state() for c in self.chunks],
            "fps": f"{self.fps.numerator}/{self.fps.denominator}",
            "frame_count": self.frame_count,
            "scene_cuts": list(self.scene_cuts),
        }

    @classmethod
    def from_state(cls, data: dict) -> SplitPlan:
        return cls(
            mode=data["mode"],
            reason=data["reason"],
            chunks=[Chunk.from_state(c) for c in data["chunks"]],
            fps=Fraction(data["fps"]),
            frame_count=int(data["frame_count"]),
            scene_cuts=[int(f) for f in data.get("scene_cuts", [])],
        )


def nominal_boundaries(frame_count: int, chunk_frames: int) -> list[int]:
    """First frames of evenly spread chunks of at most `chunk_frames`, then frame_count."""
    count = max(1, math.ceil(frame_count / max(1, chunk_frames)))
    return [round(i * frame_count / count) for i in range(count)] + [frame_count]


def on_keyframe_grid(bounds: list[int], fps: Fraction, keyframe_seconds: float) -> list[int]:
    """Each inner boundary moved to the nearest frame the rungs make a keyframe anyway (the first
    frame at or after a multiple of `keyframe_seconds`, as media.split.encode.keyframe_frames and
    the unsplit encode place them), so chunk starts add no keyframe; duplicates dropped."""
    step = Fraction(keyframe_seconds).limit_denominator(1000) * Fraction(fps)
    inner = []
    for b in bounds[1:-1]:
        m = round(b / step)
        grid = [math.ceil(k * step) for k in (m - 1, m, m + 1) if k > 0]
        nearest = min(grid, key=lambda g: (abs(g - b), g))
        if bounds[0] < nearest < bounds[-1] and (not inner or nearest > inner[-1]):
            inner.append(nearest)
    return [bounds[0], *inner, bounds[-1]]


def scan_parallelism() -> int:
    """How many scene windows to scan at once: JETENCODE_FFMPEG_THREADS when it is set (the
    thread budget a worker's FFmpeg runs are held to), else the cores this process may run on."""
    from django.conf import settings

    threads = int(getattr(settings, "FFMPEG_THREADS", 0) or 0)
    return max(1, threads or len(os.sched_getaffinity(0)))


def _snap(
    source: Path, timeline: Timeline, nominal: list[int], window: int, ffmpeg
) -> tuple[list[int], list[int]]:
    """(boundaries, the ones on a cut): each inner boundary moved to the strongest cut within
    +/- `window` frames, kept strictly after the previous boundary. Each window depends only on
    its nominal boundary, so they are scanned at once; the choice stays in boundary order."""
    inner = nominal[1:-1]
    cuts: list[int | None] = [None] * len(inner)
    if window > 0 and inner:
        with ThreadPoolExecutor(max_workers=min(scan_parallelism(), len(inner))) as pool:
            cuts = list(
                pool.map(
                    lambda b: strongest_cut(source, timeline, (b - window, b + window), ffmpeg=ffmpeg), inner
                )
            )
    bounds, on_cut = [nominal[0]], []
    for b, cut in zip(inner, cuts, strict=True):
        if cut is not None and cut > bounds[-1] and cut < nominal[-1]:
            bounds.append(cut)
            on_cut.append(cut)
        else:
            bounds.append(b)
    return bounds + [nominal[-1]], on_cut


def _chunks(timeline: Timeline, bounds: list[int]) -> list[Chunk]:
    fps, offset = timeline.fps, timeline.video_offset
    chunks = []
    for index, (first, end) in enumerate(zip(bounds, bounds[1:], strict=False)):
        _, key_time = timeline.keyframe_at_or_before(first)
        chunks.append(
            Chunk(
                index=index,
                first_frame=first,
                last_frame=end - 1,
                start_seconds=_seconds(first / fps),
                end_seconds=_seconds(end / fps),
                seek_seconds=_seconds(key_time - timeline.container_start),
                video_offset=_seconds(offset),
            )
        )
    return chunks


def plan_split(
    source: Path,
    *,
    chunk_seconds: float,
    scene_window_seconds: float = DEFAULT_SCENE_WINDOW_SECONDS,
    keyframe_seconds: float | None = None,
    ffmpeg: str | None = None,
) -> SplitPlan:
    """Plan `source` in chunks of about `chunk_seconds` (at most, before the keyframe grid and scene
    snapping move a boundary). `keyframe_seconds`: the job's keyframe spacing (its HLS segment
    length); boundaries then sit on that grid unless a scene cut is near, so a split encode has
    the unsplit encode's keyframes plus one per cut. Raises SplitImpossible when frames cannot be
    found exactly."""
    if not chunk_seconds > 0:
        raise ValueError("chunk_seconds must be positive")
    timeline = read_timeline(Path(source))
    fps, n = timeline.fps, timeline.frame_count
    chunk_frames = max(1, round(chunk_seconds * fps))
    nominal = nominal_boundaries(n, chunk_frames)
    if keyframe_seconds:
        nominal = on_keyframe_grid(nominal, fps, keyframe_seconds)
    window_seconds = min(max(0.0, scene_window_seconds), chunk_seconds / 4)
    window = math.floor(window_seconds * fps)
    bounds, on_cut = _snap(Path(source), timeline, nominal, window, ffmpeg)
    chunks = _chunks(timeline, bounds)
    reason = (
        f"{n} frames at {float(fps):.3f} fps in {len(chunks)} chunk(s) of at most {chunk_seconds:g} s; "
        f"{len(on_cut)} boundary(ies) on a scene cut found within {window_seconds:g} s"
    )
    return SplitPlan(mode="chunks", reason=reason, chunks=chunks, fps=fps, frame_count=n, scene_cuts=on_cut)
