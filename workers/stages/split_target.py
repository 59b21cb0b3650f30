"""Per-shot quality: each chunk of a split transcode searches its own CRF for `target_vmaf`.

The search is media.split.target's (Av1an's manner: at most PROBES encodes of the chunk at the
rung's settings, each scored on every PROBE_SUBSAMPLE-th frame and pooled on the PROBE_PERCENTILE-th
percentile; the next CRF interpolated between the probes either side of the target), run here
through the stage context (`run_ffmpeg`: cancellation, stall watchdog, process group) rather than
media.split.target.search_chunk_crf's own subprocess calls. The chosen probe's encode is the
chunk's final file for that rung: no encode is repeated. Each probe's size is kept, so the pooling
stage can say what one CRF for the whole title would have cost (`bits_saved`).
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from media.quality import chosen_crf, percentile
from media.split.encode import Rung, rendition_argv
from media.split.pooling import chunk_frame_scores, chunk_measure_argv
from media.split.target import PROBE_PERCENTILE, PROBE_SUBSAMPLE, PROBES, crf_bounds, next_probe
from workers.stages.base import StageContext
from workers.stages.common import run_ffmpeg
from workers.stages.split_encode import OpenSource, ffmpeg_threads, stitchable


def _probe(ctx: StageContext, source: OpenSource, local, rung: Rung, crf: int, work: Path, size) -> dict:
    chunk, plan = local
    encode = work / f"{rung.width}x{rung.height}_crf{crf}.mp4"
    log = work / f"{rung.width}x{rung.height}_crf{crf}.json"
    probe_rung = replace(rung, encoding=replace(rung.encoding, crf=crf))
    what = f"chunk {chunk.index} probe crf {crf}"
    fds = source.pass_fds  # the source by descriptor (split_encode.media_source), never by name
    argv = stitchable(
        rendition_argv(source.path, chunk, plan.fps, probe_rung, encode, threads=ffmpeg_threads())
    )
    run_ffmpeg(ctx, argv, duration=None, throttle=None, what=what, pass_fds=fds)
    argv = chunk_measure_argv(
        source.path, chunk, plan, [(encode, log)], width=size[0], height=size[1], n_subsample=PROBE_SUBSAMPLE
    )
    run_ffmpeg(ctx, argv, duration=None, throttle=None, what=f"{what} vmaf", pass_fds=fds)
    score = percentile(chunk_frame_scores(log, chunk, plan, PROBE_SUBSAMPLE), PROBE_PERCENTILE)
    return {"crf": crf, "vmaf": round(score, 3), "bytes": encode.stat().st_size, "file": encode}


def search_chunk_crf(
    ctx: StageContext, source: OpenSource, local, rung: Rung, target: float, work: Path, source_size
) -> dict[str, Any]:
    """The chunk's CRF for `target` on this rung: {"chosen_crf", "vmaf", "reached", "probes", "file"}."""
    low, high = crf_bounds(rung)
    tried: dict[int, float] = {}
    probes: list[dict] = []
    crf: int | None = min(high, max(low, int(rung.encoding.crf)))
    while crf is not None and len(tried) < PROBES:
        ctx.check_cancelled()
        probe = _probe(ctx, source, local, rung, crf, work, source_size)
        probes.append(probe)
        tried[crf] = probe["vmaf"]
        crf = next_probe(tried, target, low, high)
    best, reached = chosen_crf(tried, target, low)
    chosen = next(p for p in probes if p["crf"] == best)
    for probe in probes:
        if probe is not chosen:
            probe["file"].unlink(missing_ok=True)
    ctx.log(
        f"chunk {local[0].index} {rung.width}x{rung.height}: crf {best} for VMAF p{PROBE_PERCENTILE:g} {target:g} "
        f"after {len(probes)} probes: " + ", ".join(f"crf {p['crf']} -> {p['vmaf']}" for p in probes)
    )
    return {
        "chosen_crf": best,
        "vmaf": chosen["vmaf"],
        "reached": reached,
        "probes": [{k: v for k, v in p.items() if k != "file"} for p in probes],
        "file": chosen["file"],
    }


# --- what one CRF for the whole title would have cost ---------------------------------------------


def _at(probes: list[dict], crf: float, key: str, log: bool = False) -> float:
    """`key` at `crf`, linear between the nearest probes (log-linear for sizes), clamped outside."""
    points = sorted((p["crf"], math.log(p[key]) if log else p[key]) for p in probes)
    if crf <= points[0][0]:
        value = points[0][1]
    elif crf >= points[-1][0]:
        value = points[-1][1]
    else:
        (c0, v0), (c1, v1) = next(
            (a, b) for a, b in zip(points, points[1:], strict=False) if a[0] <= crf <= b[0]
        )
        value = v0 if c1 == c0 else v0 + (v1 - v0) * (crf - c0) / (c1 - c0)
    return math.exp(value) if log else value


def bits_saved(searches: list[dict], frames: list[int]) -> dict[str, Any] | None:
    """Per-shot against per-title at equal pooled VMAF, estimated from the chunks' probes: the one
    CRF whose frame-weighted chunk scores pool to what the per-chunk CRFs reach, and what the
    chunks would weigh at it. None when the probes cannot say (a chunk probed once)."""
    if not searches or any(len(s["probes"]) < 2 for s in searches):
        return None
    total = sum(frames)
    split_vmaf = sum(s["vmaf"] * f for s, f in zip(searches, frames, strict=True)) / total
    split_bytes = sum(next(p["bytes"] for p in s["probes"] if p["crf"] == s["chosen_crf"]) for s in searches)
    low = min(p["crf"] for s in searches for p in s["probes"])
    high = max(p["crf"] for s in searches for p in s["probes"])
    best = None
    steps = int((high - low) * 10)
    for step in range(steps + 1):  # the highest CRF (tenths) whose pooled score still reaches it
        crf = low + step / 10
        pooled = sum(_at(s["probes"], crf, "vmaf") * f for s, f in zip(searches, frames, strict=True)) / total
        if pooled >= split_vmaf - 1e-9:
            best = crf
    if best is None:
        return None
    title_bytes = sum(_at(s["probes"], best, "bytes", log=True) for s in searches)
    return {
        "per_title_crf": round(best, 1),
        "pooled_vmaf": round(split_vmaf, 3),
        "per_shot_bytes": int(split_bytes),
        "per_title_bytes": int(title_bytes),
        "saved_percent": round(100.0 * (1 - split_bytes / title_bytes), 1) if title_bytes else None,
        "method": "estimated from the chunks' probes (interpolated in CRF; sizes log-linear)",
    }
