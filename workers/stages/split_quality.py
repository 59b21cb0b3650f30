"""Measuring a split transcode: per chunk in parallel, pooled from the per-frame scores.

transcode.chunk_quality × K (cluster, cpu)   scores every rung's chunk file against the source's
                                             same frame range (input seek, then exactly the chunk's
                                             frame count); writes the per-frame scores to scratch
transcode.split_quality (cluster, waits)     pools them per rung (media.split.pooling: mean, vmaf_p1,
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
from workers.stages.split_encode import chunk_of, fps_of, media_source
from workers.stages.split_results import latest_results

SEAM_FRAMES = 12  # frames each side of a seam reported apart (pooling's seam window)


def quality_children(p: dict, after: dict, artifacts: dict, results: dict[int, dict]) -> list[ChildSpec]:
    """The per-chunk measurements and the pooling stage that waits for them."""
    specs = []
    for chunk in p["plan"]["chunks"]:
        index = int(chunk["index"])
        seconds = float(chunk["end_seconds"]) - float(chunk["start_seconds"])
        payload = {
            "source": after["source"],
            "chunk": chunk,
            "fps": p["plan"]["fps"],
            "files": dict(results[index]["files"]),
            "metrics": after["metrics"],
            "n_subsample": after["n_subsample"],
            "source_width": after["source_width"],
            "source_height": after["source_height"],
            "duration": seconds,
        }
        specs.append(child("transcode.chunk_quality", payload, duration=seconds))
    pooling = {
        **{k: after[k] for k in ("metrics", "min_vmaf", "target_vmaf", "n_subsample", "package")},
        "renditions": p["renditions"],
        "chunks": p["plan"]["chunks"],
        "artifacts": artifacts,
        "chunk_crf": {str(i): r.get("crf") for i, r in results.items()},
        "chunk_search": {str(i): r.get("search") for i, r in results.items() if r.get("search")},
        "duration": after["package"]["duration"],
    }
    specs.append(
        replace(
            child("transcode.split_quality", pooling, duration=pooling["duration"]), wait_for_siblings=True
        )
    )
    return specs


def chunk_measure_argv(source: Path, chunk: dict, fps: str, scored: list, p: dict) -> list[str]:
    """quality.measure_argv, with the reference cut to exactly the chunk's frames the way the chunk's
    encode found them (media.split.encode: seek to the keyframe before it, then trim and retime), so
    the reference and each chunk file line up frame for frame."""
    from media.split.encode import trim_chain

    argv = quality.measure_argv(
        source,
        scored,
        width=int(p["source_width"]),
        height=int(p["source_height"]),
        metrics=list(p["metrics"]),
        n_subsample=int(p["n_subsample"]),
    )
    cut = chunk_of(chunk)
    first_input = argv.index("-i")
    argv[first_input:first_input] = ["-noaccurate_seek", "-ss", f"{cut.seek_seconds:.6f}"]
    chain = trim_chain(cut, fps_of(fps))
    return [a.replace("[0:v:0]setpts=PTS-STARTPTS,", f"[0:v:0]{chain},setpts=PTS-STARTPTS,") for a in argv]


def frame_scores(log: Path) -> dict[str, list[float]]:
    """Per-frame vmaf / psnr_y / float_ssim of one libvmaf JSON log."""
    frames = [f.get("metrics", {}) for f in json.loads(log.read_text()).get("frames", [])]
    if not frames:
        raise RuntimeError(f"libvmaf scored no frames ({log.name})")
    out: dict[str, list[float]] = {}
    for key in ("vmaf", "psnr_y", "float_ssim"):
        values = [float(f[key]) for f in frames if key in f and math.isfinite(float(f[key]))]
        if values:
            out[key] = values
    return out


@stage("transcode.chunk_quality")
def transcode_chunk_quality(ctx: StageContext) -> dict:
    p = ctx.payload
    chunk = p["chunk"]
    out_dir = scratch.attempt_dir(ctx, f"quality/{int(chunk['index']):05d}")
    names = sorted(p["files"])
    scored = [(scratch.resolve(ctx, p["files"][n]), out_dir / f"{n}.vmaf.json") for n in names]
    argv = chunk_measure_argv(media_source(p["source"]), chunk, p["fps"], scored, p)
    started = time.monotonic()
    run_ffmpeg(
        ctx, argv, duration=float(p["duration"]), throttle=None, what=f"quality chunk {chunk['index']}"
    )
    scores = {name: frame_scores(log) for name, (_path, log) in zip(names, scored, strict=True)}
    path = out_dir / "scores.json"
    path.write_text(json.dumps(scores))
    ctx.progress(100.0)
    version = json.loads(scored[0][1].read_text()).get("version") or "unknown"
    return {
        "index": int(chunk["index"]),
        "scores": scratch.rel(ctx, path),
        "libvmaf_version": str(version),
        "vmaf": {n: round(sum(s["vmaf"]) / len(s["vmaf"]), 3) for n, s in scores.items() if s.get("vmaf")},
        "worker": ctx.worker_uid,
        "seconds": round(time.monotonic() - started, 2),
    }


def _pooled_value(pooled: Any, key: str):
    return pooled.get(key) if isinstance(pooled, dict) else getattr(pooled, key, None)


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

        pooled = pool([c["vmaf"] for c in chunks], seam_frames=SEAM_FRAMES)
        for key in ("vmaf", "vmaf_p1", "vmaf_p5"):
            entry[key] = round(float(_pooled_value(pooled, key)), 3)
        entry["seams"] = [_seam(s) for s in _pooled_value(pooled, "seams") or []]
    if "psnr" in p["metrics"]:
        entry["psnr_db"] = round(_mean_of(chunks, "psnr_y"), 3)
    if "ssim" in p["metrics"]:
        entry["ssim"] = round(_mean_of(chunks, "float_ssim"), 5)
    entry["chunks"] = _chunk_rows(p, name, chunks)
    return entry


def _seam(seam: Any) -> dict:
    if isinstance(seam, dict):
        return {k: (round(v, 3) if isinstance(v, float) else v) for k, v in seam.items()}
    return {
        "index": int(seam.index),
        "vmaf_min": round(float(seam.vmaf_min), 3),
        "vmaf_mean": round(float(seam.vmaf_mean), 3),
    }


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
    """Each chunk's per-frame scores ({rung: {metric: [...]}}), in plan order; the libvmaf version."""
    results = {
        int(r["index"]): r for r in latest_results(ctx.job_id, ctx.execution_id, "transcode.chunk_quality")
    }
    missing = [int(c["index"]) for c in p["chunks"] if int(c["index"]) not in results]
    if missing:
        raise PermanentFailure(f"chunks without a completed measurement: {missing}")
    ordered = [results[int(c["index"])] for c in p["chunks"]]
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
            "pooling": "per chunk, from the per-frame scores: vmaf mean, vmaf_p1/vmaf_p5 percentiles; "
            f"seams: the {SEAM_FRAMES} scored frames each side of every chunk boundary",
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
    package = {**p["package"], "artifacts": artifacts}
    scratch.ScratchView(ctx).spawn_child(
        child("transcode.package", package, pool="background", duration=package.get("duration"))
    )
    ctx.progress(100.0)
    return {"quality": document}


def per_shot_summary(p: dict, entries: list[dict]) -> dict:
    """Per-shot quality: the CRF each chunk chose, and what the chunks' own searches cost in bits
    against one CRF for the whole title (media.split.target's comparison, per rung)."""
    from media.split.target import bits_saved

    return {
        "searches": p["chunk_search"],
        "bits_saved": {e["name"]: bits_saved(p["chunk_search"], e["name"]) for e in entries},
    }
