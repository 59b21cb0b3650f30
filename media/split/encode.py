"""Encoding one chunk: exact frames in, one MP4 per rendition out, ready to be joined by copying.

How a chunk's frames are found: input seek to the keyframe at or before the chunk's first frame
(`Chunk.seek_seconds`: decoding from there yields every later frame intact, open GOPs included),
then `trim` keeps exactly the frames whose timestamps lie within half a frame of the chunk's frame
times, and `settb`/`setpts` put them on the exact 1/fps grid from 0. So the output has exactly
`chunk.frames` frames, whatever the source's keyframe spacing.

How the chunks join exactly (media/split/stitch.py): every chunk of a rendition is encoded with the
same encoder settings (the CRF aside, with a per-chunk target), so each has the same reordering
delay and its decode timestamps continue the previous chunk's; each starts with a keyframe of a closed GOP (x264:
`-flags +cgop`; x265: `open-gop=0`; AV1 key frames are closed); the rung's keyframe spacing
(`keyframe_seconds`, for HLS segments) is kept on the source's own grid (a keyframe at the first
frame at or after every multiple of it, as the unsplit encode places them), plus one on the chunk's
first frame. Rate control is the rung's constant quality (CRF/CQ, with its maxrate/bufsize cap), so
quality does not pump at the seams. Video only; audio is encoded once for the whole source
(media/split/audio.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from media.commands import VideoEncoding, _even, _num, _path, base_args
from media.split.plan import Chunk


@dataclass(frozen=True)
class Rung:
    """One rendition of a chunk: how to encode it, and its size (None keeps the source's)."""

    encoding: VideoEncoding
    width: int | None = None
    height: int | None = None


def _rung(spec: Rung | VideoEncoding) -> Rung:
    return spec if isinstance(spec, Rung) else Rung(spec)


def _rate(fps: Fraction) -> str:
    fps = Fraction(fps)
    return f"{fps.numerator}/{fps.denominator}"


def keyframe_frames(chunk: Chunk, fps: Fraction, keyframe_seconds: float | None) -> list[int]:
    """Frame numbers within the chunk (0 = its first frame) that must be keyframes: its first
    frame and, with `keyframe_seconds`, the first source frame at or after every multiple of it
    (what the unsplit encode's `gte(t, n_forced*K)` forces)."""
    wanted = [0]
    if keyframe_seconds:
        spacing = Fraction(keyframe_seconds).limit_denominator(1000)
        step = spacing * Fraction(fps)
        m = math.ceil(Fraction(chunk.first_frame) / step)
        while (frame := math.ceil(m * step)) <= chunk.last_frame:
            if frame > chunk.first_frame:
                wanted.append(frame - chunk.first_frame)
            m += 1
    return wanted


def _exact(seconds: float) -> Fraction:
    """A plan's seconds (rounded to microseconds, as FFmpeg reads them) as a fraction."""
    return Fraction(round(float(seconds) * 10**6), 10**6)


def trim_chain(chunk: Chunk, fps: Fraction) -> str:
    """The filters that keep exactly the chunk's frames and retime them to n / fps from 0.
    Times are after the seek point (FFmpeg shifts timestamps by -seek without -copyts)."""
    fps = Fraction(fps)
    half = Fraction(1, 2)
    offset = _exact(chunk.video_offset) - _exact(chunk.seek_seconds)
    start = offset + (chunk.first_frame - half) / fps
    end = offset + (chunk.last_frame + half) / fps
    return (
        f"trim=start={_num(float(start))}:end={_num(float(end))},"
        f"settb={fps.denominator}/{fps.numerator},setpts=N"
    )


def _replace_option(args: list[str], name: str, value: str) -> list[str]:
    """args with `name`'s value replaced, or the option appended when absent."""
    if name in args:
        position = args.index(name)
        return args[: position + 1] + [value] + args[position + 2 :]
    return args + [name, value]


def _x265_params(args: list[str], extra: str) -> list[str]:
    """args with `extra` (k=v:k=v) merged into -x265-params."""
    current = args[args.index("-x265-params") + 1] if "-x265-params" in args else ""
    merged = ":".join(part for part in (current, extra) if part)
    return _replace_option(args, "-x265-params", merged)


def encoder_args(encoding: VideoEncoding, keyframes: list[int], threads: int | None) -> list[str]:
    """The rung's own encoder arguments with a closed GOP, the chunk's keyframes and, with
    `threads`, the encoder held to that many threads."""
    args = encoding.output_args()
    forced = "+".join(f"eq(n,{int(k)})" for k in keyframes)
    args = _replace_option(args, "-force_key_frames", f"expr:{forced}")
    args += ["-flags", "+cgop"]
    if encoding.encoder == "libx265":
        extra = "open-gop=0"
        if threads:
            extra += f":pools={int(threads)}:frame-threads={min(int(threads), 2)}"
        args = _x265_params(args, extra)
    if encoding.encoder in ("libx264", "libx265") and "-forced-idr" not in args:
        args += ["-forced-idr", "1"]
    if threads:
        args += ["-threads", str(int(threads))]
    return args


def _thread_args(threads: int | None) -> tuple[list[str], list[str]]:
    """(global/input arguments, filter arguments) that hold decoding and filtering to `threads`."""
    if not threads:
        return [], []
    n = str(int(threads))
    return ["-filter_complex_threads", n, "-threads", n], ["-filter_threads", n]


def chunk_argv(
    source: Path,
    chunk: Chunk,
    plan_fps: Fraction,
    encodings: list[Rung | VideoEncoding],
    outputs: list[Path],
    *,
    threads: int | None = None,
    ffmpeg: str | None = None,
) -> list[str]:
    """One FFmpeg run: decode the chunk's frames once and write every rendition (split filter) to
    its output, an MP4 with video only and exactly `chunk.frames` frames."""
    rungs = [_rung(spec) for spec in encodings]
    if not rungs or len(rungs) != len(outputs):
        raise ValueError("one output per rendition, at least one")
    fps = Fraction(plan_fps)
    pre, _ = _thread_args(threads)
    argv = base_args(ffmpeg) + pre + ["-noaccurate_seek", "-ss", _num(chunk.seek_seconds)]
    # Device options are global: the first rung's (the rungs of a job share one encoder family).
    argv += rungs[0].encoding.pre_input_args() + ["-i", _path(source)]
    graph = [f"[0:v:0]{trim_chain(chunk, fps)}" + ("[src]" if len(rungs) > 1 else "[s0]")]
    if len(rungs) > 1:
        graph[0] += f";[src]split={len(rungs)}" + "".join(f"[s{i}]" for i in range(len(rungs)))
    for i, rung in enumerate(rungs):
        size = f"scale={_even(rung.width)}:{_even(rung.height)}," if rung.width and rung.height else ""
        graph.append(f"[s{i}]{size}{rung.encoding.filter_tail()}[v{i}]")
    argv += ["-filter_complex", ";".join(graph)]
    for i, (rung, out) in enumerate(zip(rungs, outputs, strict=True)):
        keyframes = keyframe_frames(chunk, fps, rung.encoding.keyframe_seconds)
        argv += ["-map", f"[v{i}]", "-an", "-sn", "-dn", "-r", _rate(fps)]
        argv += encoder_args(rung.encoding, keyframes, threads)
        argv += ["-f", "mp4", _path(out)]
    return argv


def rendition_argv(
    source: Path,
    chunk: Chunk,
    plan_fps: Fraction,
    encoding: Rung | VideoEncoding,
    output: Path,
    *,
    threads: int | None = None,
    ffmpeg: str | None = None,
) -> list[str]:
    """The per-rendition layout: one FFmpeg run per chunk x rendition (decodes the chunk again for
    every rendition, but each run is a unit any free slot can take)."""
    return chunk_argv(source, chunk, plan_fps, [encoding], [output], threads=threads, ffmpeg=ffmpeg)
