"""Measuring a split transcode: per chunk in parallel, pooled from the per-frame scores.

`measure_chunk` scores every rung's chunk file against the source's same frame range (input seek,
then exactly the chunk's frame count) and writes the per-frame scores to scratch. A cpu chunk runs
it itself right after its encode (workers/stages/split.py), so measuring overlaps the other chunks'
encodes instead of trailing the stitch; the rest are measured after the stitch:

transcode.chunk_quality (cluster, cpu)       a stitched chunk that did not measure itself (a GPU
                                             chunk: libvmaf would hold its GPU slot; or one whose
                                             frame count was wrong there), from the stitched files
transcode.split_quality (cluster, waits)     pools per rung the measurements of exactly the chunk
                                             attempts the stitch joined (media.split.pooling: mean, vmaf_p1,
                                             vmaf_p5, and the frames around each seam apart), applies
                                             the min_vmaf gate, writes quality.json, spawns packaging

The pooled figures come from the per-frame scores, never from libvmaf's own pooled numbers
(DECISIONS, "VMAF pitfall").
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from media import quality
from media.ffmpeg import ffmpeg_version
from workers import scratch
from workers.stages.base import ChildSpec, PermanentFailure, StageContext, stage
from workers.stages.common import child, run_ffmpeg
from workers.stages.quality import QUALITY_JSON
from workers.stages.split import grouped
from workers.stages.split_encode import OpenSource, local_plan, media_source
from workers.stages.split_results import latest_results


def quality_children(p: dict, after: dict, artifacts: dict, results: dict[int, dict]) -> list[ChildSpec]:
    """The pooling stage, and before it a measuring stage per stitched chunk that its chunk stage
    did not measure itself (a GPU chunk, or one whose frame count was wrong there): the pooling
    waits for those. `results`: the accepted chunk results the stitch used."""
    measured = {i: r["quality"] for i, r in results.items() if r.get("quality")}
    specs = [
        _measure_spec(p, after, chunk, results[int(chunk["index"])]["files"])
        for chunk in p["plan"]["chunks"]
        if int(chunk["index"]) not in measured
    ]
    pooling = {
        **{
            k: after.get(k)
            for k in ("metrics", "min_vmaf", "target_vmaf", "n_subsample", "package", "publish")
        },
        "renditions": p["renditions"],
        "chunks": p["plan"]["chunks"],
        "artifacts": artifacts,
        "chunk_crf": {str(i): r.get("crf") for i, r in results.items()},
        "chunk_search": {str(i): r.get("search") for i, r in results.items() if r.get("search")},
        # Where each chunk's scores come from: its chunk stage's own measurement of the very files
        # the stitch joined, or the measuring stage scoring those files (matched by name).
        "chunk_measured": {
            str(i): {k: m[k] for k in ("scores", "libvmaf_version")} for i, m in measured.items()
        },
        "chunk_files": {str(i): r["files"] for i, r in results.items() if i not in measured},
        "duration": (after.get("package") or after.get("publish"))["duration"],
    }
    groups = after.get("progress") or {}
    specs = [grouped(spec, groups) for spec in specs]
    pooled = replace(
        child("transcode.split_quality", pooling, duration=pooling["duration"]), wait_for_siblings=bool(specs)
    )
    specs.append(grouped(pooled, groups))
    return specs


def _measure_spec(p: dict, after: dict, chunk: dict, files: dict[str, str]) -> ChildSpec:
    index = int(chunk["index"])
    seconds = float(chunk["end_seconds"]) - float(chunk["start_seconds"])
    payload = {
        "source": after["source"],
        "chunk": chunk,
        "prev_chunk": p["plan"]["chunks"][index - 1] if index > 0 else None,
        "fps": p["plan"]["fps"],
        "frame_count": p["plan"]["frame_count"],
        "files": dict(files),
        "metrics": after["metrics"],
        "n_subsample": after["n_subsample"],
        "source_width": after["source_width"],
        "source_height": after["source_height"],
        "duration": seconds,
    }
    return child("transcode.chunk_quality", payload, duration=seconds)


def chunk_scores(log: Path, local, n_subsample: int) -> dict[str, list[float]]:
    """The chunk's own per-frame scores of one libvmaf log (the context frames measuring adds on
    each side dropped, media.split.pooling.chunk_frame_scores): vmaf, and psnr_y / float_ssim when
    measured (the same frames kept)."""
    from media.split.pooling import chunk_frame_scores

    chunk, plan = local
    frames = [f.get("metrics", {}) for f in json.loads(log.read_text()).get("frames", [])]
    out = (
        {"vmaf": chunk_frame_scores(log, chunk, plan, n_subsample)}
        if any("vmaf" in m for m in frames)
        else {}
    )
    lead = 1 if chunk.first_frame > 0 else 0
    n = max(1, int(n_subsample))
    kept = [m for i, m in enumerate(frames) if lead <= i * n < lead + chunk.frames]
    for key in ("psnr_y", "float_ssim"):
        values = [float(m[key]) for m in kept if key in m and math.isfinite(float(m[key]))]
        if values:
            out[key] = values
    return out


def measure_chunk(
    ctx: StageContext, p: dict, files: dict[str, Path], out_dir: Path, source: OpenSource
) -> dict:
    """Score every rung's chunk file of `files` ({rung name: path}) against the source's frames of
    chunk `p["chunk"]` (`p["metrics"]`, `p["n_subsample"]`); the per-frame scores go to
    `out_dir/scores.json`. Returns {"scores" (its scratch name), "libvmaf_version", "vmaf" (each
    rung's chunk mean), "seconds"}."""
    from media.split.pooling import chunk_measure_argv

    chunk = p["chunk"]
    names = sorted(files)
    scored = [(files[n], out_dir / f"{n}.vmaf.json") for n in names]
    local = local_plan(p)
    n = int(p["n_subsample"])
    size = {"width": int(p["source_width"]), "height": int(p["source_height"])}
    metrics = list(p["metrics"])
    started = time.monotonic()
    # `source` is open by descriptor: FFmpeg reads /proc/self/fd/N, the file the stage's check approved.
    argv = chunk_measure_argv(source.path, *local, scored, **size, n_subsample=n, metrics=metrics)
    what, fds = f"quality chunk {chunk['index']}", source.pass_fds
    run_ffmpeg(ctx, argv, duration=float(p["duration"]), throttle=None, what=what, pass_fds=fds)
    scores = {name: chunk_scores(log, local, n) for name, (_path, log) in zip(names, scored, strict=True)}
    path = out_dir / "scores.json"
    path.write_text(json.dumps(scores))
    version = json.loads(scored[0][1].read_text()).get("version") or "unknown"
    return {
        "scores": scratch.rel(ctx, path),
        "libvmaf_version": str(version),
        "vmaf": {n: round(sum(s["vmaf"]) / len(s["vmaf"]), 3) for n, s in scores.items() if s.get("vmaf")},
        "seconds": round(time.monotonic() - started, 2),
    }


@stage("transcode.chunk_quality")
def transcode_chunk_quality(ctx: StageContext) -> dict:
    """A chunk the chunk stage did not measure itself (a GPU chunk, or one whose frame count was
    wrong there), scored after the stitch from the files the stitch used."""
    p = ctx.payload
    out_dir = scratch.attempt_dir(ctx, f"quality/{int(p['chunk']['index']):05d}")
    files = {name: scratch.resolve(ctx, rel) for name, rel in p["files"].items()}
    with media_source(p["source"]) as source:
        measured = measure_chunk(ctx, p, files, out_dir, source)
    ctx.progress(100.0)
    return {
        "index": int(p["chunk"]["index"]),
        "files": dict(p["files"]),
        **measured,
        "worker": ctx.worker_uid,
    }


def _mean_of(chunks: list[dict[str, list[float]]], key: str) -> float | None:
    values = [v for scores in chunks for v in scores.get(key, [])]
    return sum(values) / len(values) if values else None


def rendition_entry(ctx: StageContext, p: dict, rung: dict, chunks: list[dict[str, list[float]]]) -> dict:
    """The quality.json entry of one rung, pooled over its chunks' per-frame scores."""
    name = rung["name"]
    path = scratch.resolve(ctx, p["artifacts"]["renditions"][name])
    entry: dict[str, Any] = {
        "name": name,
        "width": int(rung["width"]),
        "height": int(rung["height"]),
        "codec": rung["codec"],
        "encoder": rung["encoder"],
        "bitrate_kbps": quality.video_bitrate_kbps(path),
        "frames_scored": sum(
            len(c.get("vmaf") or c.get("psnr_y") or c.get("float_ssim") or []) for c in chunks
        ),
    }
    if "vmaf" in p["metrics"]:
        from media.split.pooling import pool

        pooled = pool([c["vmaf"] for c in chunks])
        entry.update({key: pooled[key] for key in ("vmaf", "vmaf_p1", "vmaf_p5", "seams")})
    if "psnr" in p["metrics"]:
        entry["psnr_db"] = round(_mean_of(chunks, "psnr_y"), 3)
    if "ssim" in p["metrics"]:
        entry["ssim"] = round(_mean_of(chunks, "float_ssim"), 5)
    entry["chunks"] = _chunk_rows(p, name, chunks)
    return entry


def _chunk_rows(p: dict, name: str, chunks: list[dict[str, list[float]]]) -> list[dict]:
    """Each chunk's CRF and VMAF for this rung (per-shot quality)."""
    rows = []
    for chunk, scores in zip(p["chunks"], chunks, strict=True):
        crf = (p["chunk_crf"].get(str(chunk["index"])) or {}).get(name)
        vmaf = scores.get("vmaf")
        row = {"index": int(chunk["index"]), "crf": crf}
        if vmaf:
            row["vmaf"] = round(sum(vmaf) / len(vmaf), 3)
        rows.append(row)
    return rows


def load_chunk_scores(ctx: StageContext, p: dict) -> tuple[list[dict], str]:
    """Each chunk's per-frame scores ({rung: {metric: [...]}}), in plan order; the libvmaf version.
    Only measurements of the chunk files the stitch joined count: a chunk's own (named by the
    stitch from the chunk result it used), else the measuring stage's that scored those files."""
    found = {int(i): m for i, m in (p.get("chunk_measured") or {}).items()}
    files = p.get("chunk_files")  # None: a payload from before chunks measured themselves
    for r in reversed(latest_results(ctx.job_id, ctx.execution_id, "transcode.chunk_quality")):
        index = int(r["index"])
        if index not in found and (files is None or r.get("files") == files.get(str(index), False)):
            found[index] = r
    missing = [int(c["index"]) for c in p["chunks"] if int(c["index"]) not in found]
    if missing:
        raise PermanentFailure(f"chunks without a measurement of their stitched files: {missing}")
    ordered = [found[int(c["index"])] for c in p["chunks"]]
    scores = [json.loads(scratch.resolve(ctx, r["scores"]).read_text()) for r in ordered]
    return scores, ordered[0].get("libvmaf_version") or "unknown"


@stage("transcode.split_quality")
def transcode_split_quality(ctx: StageContext) -> dict:
    p = ctx.payload
    started = time.monotonic()
    scores, version = load_chunk_scores(ctx, p)
    entries = [rendition_entry(ctx, p, rung, [s[rung["name"]] for s in scores]) for rung in p["renditions"]]
    document = {
        "renditions": entries,
        "settings": {
            **quality.settings_record(
                p["metrics"], int(p["n_subsample"]), version, ffmpeg_version(), "source"
            ),
            "pooling": "each chunk scored on its own frame range, pooled from the per-frame scores: vmaf "
            "mean, vmaf_p1/vmaf_p5 percentiles; seams: the scored frames each side of every chunk "
            "boundary (media.split.pooling)",
            "split": True,
        },
        "target_vmaf": p.get("target_vmaf"),
        "min_vmaf": p.get("min_vmaf"),
        "measure_seconds": round(time.monotonic() - started, 2),
    }
    if p.get("chunk_search"):
        document["per_shot"] = per_shot_summary(p, entries)
    failures = [f for f in (quality.gate_failure(e, p.get("min_vmaf")) for e in entries) if f]
    if failures:
        raise PermanentFailure("; ".join(failures))
    out = scratch.attempt_dir(ctx, "quality-doc") / QUALITY_JSON
    out.write_text(json.dumps(document, indent=2, sort_keys=True))
    artifacts = {**p["artifacts"], "quality": scratch.rel(ctx, out)}
    scratch.ScratchView(ctx).spawn_child(next_stage(p, artifacts))
    ctx.progress(100.0)
    return {"quality": document}


def next_stage(after: dict, artifacts: dict) -> ChildSpec:
    """What follows the stitch (or the pooling): transcode.package, or reencode_streaming.publish."""
    if after.get("publish"):
        publish = {**after["publish"], "artifacts": artifacts}
        return child("reencode_streaming.publish", publish, duration=publish.get("duration"))
    package = {**after["package"], "artifacts": artifacts}
    return child("transcode.package", package, pool="background", duration=package.get("duration"))


def per_shot_summary(p: dict, entries: list[dict]) -> dict:
    """Per-shot quality: each chunk's CRF search per rung, and the bits it saved against one CRF for
    the whole title at equal pooled VMAF (workers/stages/split_target.py `bits_saved`)."""
    from workers.stages.split_target import bits_saved

    order = [str(c["index"]) for c in p["chunks"]]
    frames = [int(c["last_frame"]) - int(c["first_frame"]) + 1 for c in p["chunks"]]
    saved = {}
    for entry in entries:
        searches = [(p["chunk_search"].get(i) or {}).get(entry["name"]) for i in order]
        saved[entry["name"]] = bits_saved(searches, frames) if all(searches) else None
    return {"searches": p["chunk_search"], "bits_saved": saved}
