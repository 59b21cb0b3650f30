"""Quality of a split rendition: each chunk scored on its own, pooled from the per-frame scores.

Each chunk's rendition is scored against exactly the same frame range of the source
(`chunk_measure_argv`: media.quality.measure_argv with the source's reference chain seeking and
trimming to the chunk's frames, as the chunk encode did), so chunks are measured in parallel on any
worker. libvmaf's pooled mean is never used (DECISIONS, "VMAF pitfall": with subsampling it pools
the wrong frames): `frame_scores` reads the per-frame log and `pool` takes the mean, the 1st and
5th percentiles over every scored frame of every chunk, and reports the frames around each seam
on their own (`seams`: the last `seam_frames` scored frames before it and the first after it), so
a seam that hurts shows even when the mean hides it.

With subsampling (n_subsample N >= 3), each chunk scores its frames 0, N, 2N... : the first frame
after every seam (the chunk's keyframe) is always scored.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from media.commands import _num
from media.quality import VMAF_THREADS, measure_argv, percentile
from media.split.encode import trim_chain
from media.split.plan import Chunk, SplitPlan

SEAM_FRAMES = 3  # scored frames on each side of a seam


def frame_scores(log_path: Path) -> list[float]:
    """libvmaf's per-frame VMAF scores from its JSON log, in frame order."""
    data = json.loads(Path(log_path).read_text())
    frames = sorted(data.get("frames", []), key=lambda f: f.get("frameNum", 0))
    scores = [float(f["metrics"]["vmaf"]) for f in frames if "vmaf" in f.get("metrics", {})]
    if not scores:
        raise ValueError(f"libvmaf scored no frames in {Path(log_path).name}")
    return scores


def _round(value: float) -> float:
    return round(float(value), 3)


def pool(chunks_frame_scores: list[list[float]], *, seam_frames: int = SEAM_FRAMES) -> dict:
    """{"vmaf", "vmaf_p1", "vmaf_p5", "seams": [{"index", "vmaf_min", "vmaf_mean"}]} from each
    chunk's per-frame scores (chunk order). Seam `index` is the chunk that starts at it (1..)."""
    if not chunks_frame_scores or not all(chunks_frame_scores):
        raise ValueError("every chunk needs at least one scored frame")
    every = [score for scores in chunks_frame_scores for score in scores]
    seams = []
    for index in range(1, len(chunks_frame_scores)):
        around = chunks_frame_scores[index - 1][-seam_frames:] + chunks_frame_scores[index][:seam_frames]
        seams.append(
            {"index": index, "vmaf_min": _round(min(around)), "vmaf_mean": _round(sum(around) / len(around))}
        )
    return {
        "vmaf": _round(sum(every) / len(every)),
        "vmaf_p1": _round(percentile(every, 1)),
        "vmaf_p5": _round(percentile(every, 5)),
        "seams": seams,
    }


_REFERENCE_INPUT = "[0:v:0]"
_PAD = "tpad=start={lead}:stop={tail}:start_mode=clone:stop_mode=clone,"


def _context(chunk: Chunk, plan: SplitPlan) -> tuple[int, int]:
    """(frames before, frames after) the chunk that measuring adds as context: VMAF's motion
    feature of a frame compares the reference with its neighbours, so without them a chunk's
    first and last frames would score as if the picture stood still there."""
    return (1 if chunk.first_frame > 0 else 0), (1 if chunk.last_frame < plan.frame_count - 1 else 0)


def chunk_measure_argv(
    source: Path,
    chunk: Chunk,
    plan: SplitPlan,
    scored: list[tuple[Path, Path]],
    *,
    width: int,
    height: int,
    n_subsample: int = 1,
    metrics: list[str] | tuple[str, ...] = ("vmaf",),
    threads: int = VMAF_THREADS,
    ffmpeg: str | None = None,
) -> list[str]:
    """media.quality.measure_argv for the chunk: every (rendition chunk file, log path) of
    `scored` against the source's frames first_frame..last_frame, found as the chunk encode found
    them (seek to a keyframe before, trim to the exact frames), with one frame of context on each
    side (the rendition's edge frames cloned against it; `chunk_frame_scores` drops their scores)."""
    lead, tail = _context(chunk, plan)
    seek = plan.chunks[chunk.index - 1].seek_seconds if lead else chunk.seek_seconds
    reference = replace(
        chunk, first_frame=chunk.first_frame - lead, last_frame=chunk.last_frame + tail, seek_seconds=seek
    )
    argv = measure_argv(
        source,
        scored,
        width=width,
        height=height,
        metrics=metrics,
        n_subsample=n_subsample,
        threads=threads,
        ffmpeg=ffmpeg,
    )
    # The reference is input 0: seek before it, and trim its chain first in every graph; each
    # rendition (input i + 1) gets its context frames first.
    first_input = argv.index("-i")
    argv[first_input:first_input] = ["-noaccurate_seek", "-ss", _num(seek)]
    trim = trim_chain(reference, plan.fps)
    pad = _PAD.format(lead=lead, tail=tail) if lead or tail else ""
    graphs = [i for i in range(1, len(argv)) if argv[i - 1] == "-filter_complex"]
    for number, position in enumerate(graphs):
        graph, rendition = argv[position], f"[{number + 1}:v:0]"
        if _REFERENCE_INPUT not in graph or rendition not in graph:
            raise ValueError("unexpected measuring graph")
        graph = graph.replace(_REFERENCE_INPUT, f"{_REFERENCE_INPUT}{trim},", 1)
        argv[position] = graph.replace(rendition, f"{rendition}{pad}", 1)
    return argv


def chunk_frame_scores(log_path: Path, chunk: Chunk, plan: SplitPlan, n_subsample: int = 1) -> list[float]:
    """The chunk's own per-frame VMAF from a `chunk_measure_argv` log: the context frames' scores
    dropped. Scored are the padded stream's frames 0, N, 2N... (N = n_subsample; measure_argv's
    select and libvmaf's own subsampling both keep those)."""
    lead, tail = _context(chunk, plan)
    padded = chunk.frames + lead + tail
    scored = list(range(0, padded, max(1, int(n_subsample))))
    scores = frame_scores(log_path)
    if len(scores) != len(scored):
        raise ValueError(f"libvmaf scored {len(scores)} frames where {len(scored)} were expected")
    own = [score for frame, score in zip(scored, scores, strict=True) if lead <= frame < lead + chunk.frames]
    if not own:
        raise ValueError("no frame of the chunk was scored: lower n_subsample")
    return own
