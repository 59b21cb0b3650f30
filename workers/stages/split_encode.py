"""Encoding one chunk of a split transcode: every rung of its frame range in one FFmpeg run.

The FFmpeg command lines are media.split's (exact frame range, closed GOP with a keyframe on the
first frame, constant-quality rate control with the rung's cap); this module runs them on the
scratch and, with `target_vmaf`, searches each chunk's own CRF first (media.split.target).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

from django.conf import settings

from media import commands
from media.paths import UnsafePathError, descriptor_path, open_media_file
from workers.stages.base import PermanentFailure, StageContext
from workers.stages.common import partial_path, run_ffmpeg, throttle_for


@dataclass(frozen=True)
class Encoded:
    files: dict[str, Path]  # rung name -> the chunk's file
    crf: dict[str, int]  # rung name -> CRF used
    search: dict[str, Any] | None  # per-chunk CRF search records, by rung (target_vmaf)


@dataclass(frozen=True)
class OpenSource:
    """The source opened by descriptor: `path` (`/proc/self/fd/N`) is what FFmpeg and PyAV open,
    and a child process gets the descriptor under the same number (`pass_fds`)."""

    fd: int
    path: Path

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return (self.fd,)


@contextlib.contextmanager
def media_source(relative: str, *, what: str = "source") -> Iterator[OpenSource]:
    """The source, read in place from the shared media root without a copy (DECISIONS 19): checked
    again here and opened by descriptor (media.paths.open_media_file: O_NOFOLLOW below the resolved
    root). Readers get `/proc/self/fd/N`, never the name, so a symlink swapped in after the check
    cannot lead outside the root: they read the file the check approved. Open while it is used."""
    with contextlib.ExitStack() as stack:
        try:
            fd, _path = stack.enter_context(open_media_file(relative, what=what))
        except UnsafePathError as exc:
            raise PermanentFailure(str(exc)) from None
        yield OpenSource(fd, descriptor_path(fd))


def ffmpeg_threads() -> int | None:
    """JETENCODE_FFMPEG_THREADS: threads per chunk encode (None: FFmpeg's own choice)."""
    value = int(getattr(settings, "FFMPEG_THREADS", 0) or 0)
    return value or None


def rung_encoding(rung: dict) -> commands.VideoEncoding:
    kbps = int(rung["video_bitrate_kbps"])
    try:
        return commands.VideoEncoding(
            rung.get("encoder") or "libx264",
            rung.get("preset", "veryfast"),
            int(rung.get("crf", 23)),
            kbps,
            2 * kbps,
            float(rung["segment_seconds"]) if rung.get("segment_seconds") else None,
        )
    except ValueError as exc:
        raise PermanentFailure(str(exc)) from None


def chunk_of(state: dict):
    """A payload's chunk (`Chunk.to_state()`) as media.split's Chunk."""
    from media.split.plan import Chunk

    return Chunk.from_state(state)


def fps_of(value) -> Fraction:
    return Fraction(str(value))


def stitchable(argv: list[str]) -> list[str]:
    """argv with x264's `stitchable=1` on every libx264 output: its headers (PPS pic_init_qp) no
    longer follow the CRF, so chunks encoded at different CRFs (per-shot quality) share parameter
    sets and join by copying. (Belongs in media.split.encode; added here until it is.)"""
    out: list[str] = []
    codec = None
    for i, arg in enumerate(argv):
        if arg == "-c:v" and i + 1 < len(argv):
            codec = argv[i + 1]
        if arg == "-f" and codec == "libx264" and "-x264-params" not in argv:
            out += ["-x264-params", "stitchable=1"]
            codec = None
        out.append(arg)
    return out


def local_plan(p: dict):
    """(chunk, plan) for media.split's per-chunk functions without the whole plan in every payload:
    the chunk and the one before it (measuring reads one frame of it as context), renumbered 0/1."""
    from media.split.plan import SplitPlan

    chunks = [replace(chunk_of(p["prev_chunk"]), index=0)] if p.get("prev_chunk") else []
    chunk = replace(chunk_of(p["chunk"]), index=len(chunks))
    plan = SplitPlan("chunks", "", chunks + [chunk], fps_of(p["fps"]), int(p["frame_count"]))
    return chunk, plan


def _rungs(p: dict, encodings: list) -> list:
    from media.split.encode import Rung

    return [
        Rung(e, int(r["width"]), int(r["height"])) for e, r in zip(encodings, p["renditions"], strict=True)
    ]


def _searched(ctx: StageContext, p: dict, source: OpenSource, out_dir: Path) -> Encoded:
    """Per-shot quality: each rung's CRF searched on this chunk; the chosen probes are the files."""
    from workers.stages.split_target import search_chunk_crf

    local = local_plan(p)
    size = (int(p["source_width"]), int(p["source_height"]))
    files, crf, records = {}, {}, {}
    for rung, spec in zip(
        p["renditions"], _rungs(p, [rung_encoding(r) for r in p["renditions"]]), strict=True
    ):
        record = search_chunk_crf(ctx, source, local, spec, float(p["target_vmaf"]), out_dir, size)
        final = out_dir / f"{rung['name']}.mp4"
        os.replace(record.pop("file"), final)
        files[rung["name"]], crf[rung["name"]], records[rung["name"]] = final, record["chosen_crf"], record
    return Encoded(files=files, crf=crf, search=records)


def encode_chunk(ctx: StageContext, p: dict, out_dir: Path, source: OpenSource) -> Encoded:
    """Encode chunk `p["chunk"]` for every rung of `p["renditions"]` into `out_dir`: one FFmpeg run
    (one decode of the chunk) for all rungs, or with `target_vmaf` each rung's own CRF search."""
    from media.split.encode import chunk_argv

    if p.get("target_vmaf") is not None:
        return _searched(ctx, p, source, out_dir)
    chunk, _plan = local_plan(p)
    rungs = p["renditions"]
    encodings = [rung_encoding(rung) for rung in rungs]
    finals = [out_dir / f"{rung['name']}.mp4" for rung in rungs]
    partials = [partial_path(path) for path in finals]
    argv = chunk_argv(
        source.path, chunk, fps_of(p["fps"]), _rungs(p, encodings), partials, threads=ffmpeg_threads()
    )
    seconds = chunk.end_seconds - chunk.start_seconds
    what = f"chunk {p['chunk']['index']}"
    run_ffmpeg(ctx, argv, duration=seconds, throttle=throttle_for(ctx), what=what, pass_fds=source.pass_fds)
    for partial, final in zip(partials, finals, strict=True):
        os.replace(partial, final)
    return Encoded(
        files={r["name"]: f for r, f in zip(rungs, finals, strict=True)},
        crf={r["name"]: e.crf for r, e in zip(rungs, encodings, strict=True)},
        search=None,
    )
