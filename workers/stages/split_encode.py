"""Encoding one chunk of a split transcode: every rung of its frame range in one FFmpeg run.

The FFmpeg command lines are media.split's (exact frame range, closed GOP with a keyframe on the
first frame, constant-quality rate control with the rung's cap); this module runs them on the
scratch and, with `target_vmaf`, searches each chunk's own CRF first (media.split.target).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

from django.conf import settings

from media import commands
from media.paths import UnsafePathError, resolve_media_path
from workers.stages.base import PermanentFailure, StageContext
from workers.stages.common import partial_path, run_ffmpeg, throttle_for


@dataclass(frozen=True)
class Encoded:
    files: dict[str, Path]  # rung name -> the chunk's file
    crf: dict[str, int]  # rung name -> CRF used
    search: dict[str, Any] | None  # per-chunk CRF search records, by rung (target_vmaf)


def media_source(relative: str) -> Path:
    """The source, read in place from the shared media root (checked again here)."""
    try:
        return resolve_media_path(relative, must_exist=True, kind="file", what="source")
    except UnsafePathError as exc:
        raise PermanentFailure(str(exc)) from None


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
            float(rung["segment_seconds"]),
        )
    except ValueError as exc:
        raise PermanentFailure(str(exc)) from None


def chunk_of(state: dict):
    """A payload's chunk (`Chunk.to_state()`) as media.split's Chunk."""
    from media.split.plan import Chunk

    return Chunk.from_state(state)


def fps_of(value) -> Fraction:
    return Fraction(str(value))


def _searched(ctx: StageContext, p: dict, source: Path, chunk, encodings: list) -> tuple[list, dict]:
    """Each rung's CRF searched on this chunk itself (per-shot quality)."""
    from workers.stages.split_target import search_chunk_crf

    records = {}
    chosen = []
    for rung, encoding in zip(p["renditions"], encodings, strict=True):
        record = search_chunk_crf(
            ctx, source, chunk, fps_of(p["fps"]), rung, encoding, float(p["target_vmaf"])
        )
        records[rung["name"]] = record
        chosen.append(replace(encoding, crf=int(record["chosen_crf"])))
    return chosen, records


def encode_chunk(ctx: StageContext, p: dict, out_dir: Path) -> Encoded:
    """Encode chunk `p["chunk"]` for every rung of `p["renditions"]` into `out_dir`."""
    source = media_source(p["source"])
    chunk = chunk_of(p["chunk"])
    rungs = p["renditions"]
    encodings = [rung_encoding(rung) for rung in rungs]
    search = None
    if p.get("target_vmaf") is not None:
        encodings, search = _searched(ctx, p, source, chunk, encodings)
    finals = [out_dir / f"{rung['name']}.mp4" for rung in rungs]
    partials = [partial_path(path) for path in finals]
    from media.split.encode import Rung, chunk_argv

    specs = [Rung(e, int(r["width"]), int(r["height"])) for e, r in zip(encodings, rungs, strict=True)]
    argv = chunk_argv(source, chunk, fps_of(p["fps"]), specs, partials, threads=ffmpeg_threads())
    seconds = chunk.end_seconds - chunk.start_seconds
    run_ffmpeg(ctx, argv, duration=seconds, throttle=throttle_for(ctx), what=f"chunk {chunk.index}")
    for partial, final in zip(partials, finals, strict=True):
        os.replace(partial, final)
    return Encoded(
        files={r["name"]: f for r, f in zip(rungs, finals, strict=True)},
        crf={r["name"]: e.crf for r, e in zip(rungs, encodings, strict=True)},
        search=search,
    )
