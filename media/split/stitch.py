"""Joining a rendition's chunks without re-encoding, and checking them first.

`verify_chunks` demuxes every chunk (no decoding): its video packet count must be the plan's frame
count, its first packet a keyframe, and its codec, profile, size and pixel format those of the
first chunk. The parameter sets themselves may differ (chunks of one rendition at different CRFs,
media/split/target.py: x264 writes the CRF into its PPS): the concat demuxer converts H.264 to
Annex B with each chunk's own SPS/PPS before its keyframe, so they travel in-band; x265's differ
only in an informational SEI, and libaom's not at all (tests/media/test_split_target.py checks that
such a join decodes to exactly the chunks' own frames).

`stitch_argv` joins them with FFmpeg's concat demuxer and `-c copy`. The concat demuxer places each
file at the previous file's start plus its duration, in microseconds; a file's own duration is
rounded to the microsecond, and the roundings add up: 240 chunks of 899 frames at 29.97 fps drift by
80 us, 2.4 ticks of the 1/30000 time base, so late seams would land off the unsplit encode's ticks.
So the list gives every file's duration from the plan's frame counts, each the difference of the
exact running sum rounded to the microsecond: every chunk lands on the tick the unsplit encode gives
its first frame. Chunks encoded with the same settings have the same reordering delay, so decode
timestamps run on across the seams too (tests/media/test_split_stitch.py checks both). The result is a +faststart MP4, as renditions are.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av

from media.commands import _num, _path, base_args
from media.split.plan import SplitPlan

# What the stitch reads: the concat list and the chunks' MP4s (the input whitelist otherwise
# refuses concat lists, media.ffmpeg.INPUT_FORMATS; media.ffmpeg.guard_inputs keeps this one).
CONCAT_INPUT = ["-protocol_whitelist", "file", "-format_whitelist", "concat,mov,mp4,m4a,3gp,3g2,mj2"]


@dataclass(frozen=True)
class ChunkMismatch:
    """A chunk that must be redone: `got` packets where the plan expects `expected` (-1: the file is
    missing or unreadable); `reason` says what is wrong."""

    index: int
    expected: int
    got: int
    reason: str = "frame count"


@dataclass(frozen=True)
class _ChunkFacts:
    packets: int
    first_is_key: bool
    parameters: tuple


def _facts(path: Path) -> _ChunkFacts:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        ctx = stream.codec_context
        parameters = (ctx.name, stream.profile, ctx.width, ctx.height, ctx.pix_fmt)
        packets, first_is_key = 0, False
        for packet in container.demux(stream):
            if packet.size == 0:
                continue
            if packets == 0:
                first_is_key = bool(packet.is_keyframe)
            packets += 1
    return _ChunkFacts(packets, first_is_key, parameters)


def packet_count(path: Path) -> int:
    """Video packets in `path` (one per frame for H.264, HEVC and AV1 in MP4), counted by
    demuxing, without decoding."""
    return _facts(Path(path)).packets


def verify_chunks(files: list[Path], plan: SplitPlan) -> list[ChunkMismatch]:
    """The chunks that cannot be stitched (an empty list: all can). `files[i]` is chunk i."""
    if len(files) != len(plan.chunks):
        raise ValueError(f"{len(files)} files for {len(plan.chunks)} chunks")
    bad: list[ChunkMismatch] = []
    reference = None
    for chunk, path in zip(plan.chunks, files, strict=True):
        try:
            facts = _facts(Path(path))
        except (av.error.FFmpegError, OSError, IndexError) as exc:
            bad.append(ChunkMismatch(chunk.index, chunk.frames, -1, f"unreadable: {exc}"))
            continue
        reference = reference or facts.parameters
        if facts.packets != chunk.frames:
            bad.append(ChunkMismatch(chunk.index, chunk.frames, facts.packets))
        elif not facts.first_is_key:
            bad.append(
                ChunkMismatch(chunk.index, chunk.frames, facts.packets, "does not start on a keyframe")
            )
        elif facts.parameters != reference:
            bad.append(
                ChunkMismatch(
                    chunk.index, chunk.frames, facts.packets, "codec parameters differ from chunk 0"
                )
            )
    return bad


def _quoted(path: Path) -> str:
    return "'" + _path(path).replace("'", "'\\''") + "'"


def concat_list(chunk_files: list[Path], frames: list[int] | None, fps: Fraction | None) -> str:
    """The concat demuxer's list: every file, with its duration when frame counts are known
    (microseconds, from the exact running sum: see the module docstring)."""
    lines = ["ffconcat version 1.0"]
    elapsed = Fraction(0)
    for i, path in enumerate(chunk_files):
        lines.append(f"file {_quoted(path)}")
        if frames is not None and fps:
            start_us = round(elapsed * 10**6)
            elapsed += Fraction(frames[i]) / Fraction(fps)
            lines.append(f"duration {round(elapsed * 10**6) - start_us}us")
    return "\n".join(lines) + "\n"


def stitch_argv(
    chunk_files: list[Path],
    audio: Path | None,
    out: Path,
    *,
    list_file: Path,
    plan: SplitPlan | None = None,
    ffmpeg: str | None = None,
) -> list[str]:
    """Writes the concat list to `list_file` and returns the FFmpeg run that joins the chunks by
    copying, muxes `audio` (copied) when given, and writes a +faststart MP4 to `out`. Give `plan`
    (the chunks' frame counts and rate, and where the video starts after the file's start): without
    it the concat demuxer uses the files' own durations and the video starts at 0."""
    if not chunk_files:
        raise ValueError("nothing to stitch")
    if plan is not None and len(plan.chunks) != len(chunk_files):
        raise ValueError(f"{len(chunk_files)} files for {len(plan.chunks)} chunks")
    frames = [c.frames for c in plan.chunks] if plan is not None else None
    Path(list_file).write_text(concat_list(chunk_files, frames, plan.fps if plan else None))
    argv = base_args(ffmpeg)
    offset = plan.chunks[0].video_offset if plan is not None else 0.0
    if offset > 0:
        # The source's video starts this long after its audio: keep that, as the audio keeps its.
        argv += ["-itsoffset", _num(offset)]
    argv += ["-f", "concat", "-safe", "0", *CONCAT_INPUT, "-i", _path(list_file)]
    maps = ["-map", "0:v:0"]
    if audio is not None:
        argv += ["-i", _path(audio)]
        maps += ["-map", "1:a:0"]
    return argv + maps + ["-c", "copy", "-movflags", "+faststart", "-f", "mp4", _path(out)]
