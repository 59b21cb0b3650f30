"""Measured quality: the stages that score outputs against their source, and the per-title CRF search.

transcode.quality (media pool, cpu)   waits for the renditions; scores each one (VMAF, PSNR, SSIM
                                      as asked), applies the min_vmaf gate, writes quality.json,
                                      then spawns transcode.package
reencode_streaming.quality (cpu)      the same for the one re-encoded file; then publishes it and
                                      spawns library.register

A gate that fails raises PermanentFailure naming the rendition, its VMAF and the gate: the job fails
and, because publication happens only after this stage (transcode.upload, or this stage's own
accepted finish for reencode_streaming), nothing of it is published.

`crf_search` (called by transcode.rendition when target_vmaf is set) encodes short samples of the
source at a few CRFs and keeps the highest CRF whose sample VMAF reaches the target.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from media import commands, quality
from media.ffmpeg import ffmpeg_version
from media.progress import ProgressThrottle
from workers.stages.base import PermanentFailure, StageContext, stage
from workers.stages.common import (
    child,
    partial_path,
    probe_media,
    publish,
    publish_register_thumbnail,
    run_ffmpeg,
    throttle_for,
    ws,
)

QUALITY_DIR = "quality"
QUALITY_JSON = "quality.json"


def measure(
    ctx: StageContext,
    reference: Path,
    distorted: list[Path],
    *,
    size: tuple[int, int],
    metrics: list[str],
    n_subsample: int,
    duration: float | None,
    throttle: ProgressThrottle | None,
    what: str,
    reference_is_sample: bool = False,
) -> list[quality.Scores]:
    """One libvmaf pass over every file of `distorted` through ctx.run (progress, cancellation,
    stall watchdog); the scores of each, pooled here, in order. `reference_is_sample`: `reference`
    is a reference sample (quality.reference_sample_output), not the source."""
    log_dir = Path(ctx.workspace) / QUALITY_DIR
    log_dir.mkdir(parents=True, exist_ok=True)
    logs = [log_dir / f"{path.stem}.vmaf.json" for path in distorted]
    for log in logs:
        log.unlink(missing_ok=True)
    argv = quality.measure_argv(
        reference,
        list(zip(distorted, logs, strict=True)),
        width=size[0],
        height=size[1],
        metrics=metrics,
        n_subsample=n_subsample,
        reference_is_sample=reference_is_sample,
    )
    run_ffmpeg(ctx, argv, duration=duration, throttle=throttle, what=what)
    try:
        return [quality.parse_log(log) for log in logs]
    except (OSError, ValueError, KeyError) as exc:
        raise RuntimeError(f"{what}: unreadable libvmaf log: {exc}") from exc


# --- the reference sample ----------------------------------------------------------------------


def plan_reference_sample(info, n_subsample: int) -> dict | None:
    """The reference sample a dispatch asks one software-encoded rendition to write (payload of that
    rendition and of the quality stage), or None: then measuring decodes the source. None when every
    or every other frame is scored (n_subsample < 3: the sample would be the whole source) or when
    its raw size would pass quality.REFERENCE_SAMPLE_MAX_BYTES."""
    frames = quality.frame_count(info.duration_seconds, info.fps)
    raw = quality.reference_sample_bytes(frames, n_subsample, info.width, info.height)
    if int(n_subsample) < 3 or raw > quality.REFERENCE_SAMPLE_MAX_BYTES:
        return None
    return {
        "file": quality.REFERENCE_SAMPLE,
        "n_subsample": int(n_subsample),
        "frames": quality.kept_frames(frames, n_subsample),
        "width": int(info.width),
        "height": int(info.height),
    }


def is_software(encoder: str | None) -> bool:
    """A CPU encoder, whose FFmpeg run may write the reference sample. Never a hardware one: its
    run is placed and sized for the device (GPU category) and its chain may end there (VAAPI
    hwupload); the sample is CPU work on CPU-decoded frames."""
    return (encoder or "libx264") in commands.SOFTWARE_ENCODERS


def sample_output(ctx: StageContext, sample: dict | None) -> tuple[list[str], Path | None]:
    """(extra FFmpeg output arguments, partial file) that make an encode of the source also write
    the reference sample, to its partial name; ([], None) when this encode writes none."""
    if not sample:
        return [], None
    final = ws(ctx, sample["file"])
    final.parent.mkdir(parents=True, exist_ok=True)
    partial = partial_path(final)
    partial.unlink(missing_ok=True)
    size = {"width": int(sample["width"]), "height": int(sample["height"])}
    return quality.reference_sample_output(partial, n_subsample=int(sample["n_subsample"]), **size), partial


def run_encode(ctx: StageContext, argv: list[str], sample: dict | None, **run: Any) -> None:
    """Run an encode of the source (run_ffmpeg's keywords in `run`); with `sample`, the same run
    also writes the reference sample, renamed to its final name once the run succeeded."""
    extra, partial = sample_output(ctx, sample)
    run_ffmpeg(ctx, argv + extra, **run)
    if sample and partial is not None:
        final = ws(ctx, sample["file"])
        os.replace(partial, final)
        ctx.log(f"reference sample: {sample['frames']} frames, {final.stat().st_size} bytes")


def choose_reference(ctx: StageContext, p: dict) -> tuple[Path, bool]:
    """(reference, is_sample): the reference sample a rendition encode wrote when the payload names
    one and it is in the workspace, else the source, decoded again. Says which in the stage log."""
    sample = p.get("reference_sample")
    if sample:
        path = ws(ctx, sample["file"])
        if path.exists():
            ctx.log(f"reference: sample of {int(sample['frames'])} frames ({sample['file']})")
            return path, True
        ctx.log(f"reference: {sample['file']} is missing; decoding the source instead")
    ctx.log("reference: source (decoded)")
    return ws(ctx, p["reference"]), False


def _entry(p: dict, rendition: dict, path: Path, scores: quality.Scores) -> dict[str, Any]:
    """The quality.json entry of one scored rendition."""
    name = str(rendition["name"])
    info = probe_media(path)
    metrics = list(p["metrics"])
    entry: dict[str, Any] = {
        "name": name,
        "width": info.width,
        "height": info.height,
        "codec": rendition.get("codec") or commands.codec_of_encoder(rendition.get("encoder") or "libx264"),
        "encoder": rendition.get("encoder") or "libx264",
        "bitrate_kbps": quality.video_bitrate_kbps(path),
        **scores.as_dict(metrics),
    }
    search_file = path.with_name(f"{name}.search.json")
    if search_file.exists():
        search = json.loads(search_file.read_text())
        entry["crf"] = search.get("chosen_crf")
        entry["search"] = search
        target = p.get("target_vmaf")
        if target is not None and scores.vmaf is not None:
            entry["target_met"] = scores.vmaf >= float(target) - quality.TARGET_TOLERANCE
    elif rendition.get("crf") is not None:
        entry["crf"] = rendition["crf"]
    return entry


def _log_entry(ctx: StageContext, entry: dict, score: quality.Scores) -> None:
    ctx.log(
        f"quality {entry['name']}: "
        + ", ".join(
            f"{k} {entry[k]}" for k in ("vmaf", "vmaf_p5", "psnr_db", "ssim", "bitrate_kbps") if k in entry
        )
        + f" ({score.frames} frames scored, encoder {entry['encoder']})"
    )


def _write_document(ctx: StageContext, document: dict) -> None:
    out = Path(ctx.workspace) / QUALITY_DIR / QUALITY_JSON
    partial = partial_path(out)
    partial.write_text(json.dumps(document, indent=2, sort_keys=True))
    os.replace(partial, out)


def measure_all(ctx: StageContext, p: dict) -> dict[str, Any]:
    """Score every rendition of payload `p` in one pass; apply the gate; write quality/quality.json.
    Returns the quality document."""
    renditions = p["renditions"]
    paths = []
    for rendition in renditions:
        path = ws(ctx, rendition["file"])
        if not path.exists():
            raise PermanentFailure(f"rendition {rendition['name']} is missing from the workspace")
        paths.append(path)
    started = time.monotonic()
    ctx.check_cancelled()
    reference, is_sample = choose_reference(ctx, p)
    scores = measure(
        ctx,
        reference,
        paths,
        size=(int(p["source_width"]), int(p["source_height"])),
        metrics=list(p["metrics"]),
        n_subsample=int(p["n_subsample"]),
        duration=float(p.get("duration") or 0) or None,
        throttle=throttle_for(ctx),
        what="quality " + ", ".join(str(r["name"]) for r in renditions),
        reference_is_sample=is_sample,
    )
    entries = []
    for rendition, path, score in zip(renditions, paths, scores, strict=True):
        entries.append(_entry(p, rendition, path, score))
        _log_entry(ctx, entries[-1], score)
    version = scores[0].libvmaf_version
    reference_kind = "sample" if is_sample else "source"
    document = {
        "renditions": entries,
        "settings": quality.settings_record(
            p["metrics"], int(p["n_subsample"]), version, ffmpeg_version(), reference_kind
        ),
        "target_vmaf": p.get("target_vmaf"),
        "min_vmaf": p.get("min_vmaf"),
        "measure_seconds": round(time.monotonic() - started, 2),
    }
    failures = [f for f in (quality.gate_failure(e, p.get("min_vmaf")) for e in entries) if f]
    if failures:
        raise PermanentFailure("; ".join(failures))
    flagged = [e["name"] for e in entries if e.get("target_met") is False]
    if flagged:
        ctx.log(
            f"target_vmaf {p['target_vmaf']} not reached by: {', '.join(flagged)} (flagged in quality.json)"
        )
    _write_document(ctx, document)
    return document


@stage("transcode.quality")
def transcode_quality(ctx: StageContext) -> dict:
    p = ctx.payload
    document = measure_all(ctx, p)
    ctx.spawn_child(
        child("transcode.package", dict(p["package"]), pool="background", duration=p.get("duration"))
    )
    ctx.progress(100.0)
    return {"quality": document}


@stage("reencode_streaming.quality")
def reencode_streaming_quality(ctx: StageContext) -> dict:
    """Score the re-encoded file; only then publish it (with quality.json) and register it."""
    p = ctx.payload
    document = measure_all(ctx, p)
    final = ws(ctx, p["renditions"][0]["file"])
    publish(ctx, final, str(p["output_name"]))
    publish(ctx, Path(ctx.workspace) / QUALITY_DIR / QUALITY_JSON, QUALITY_JSON, kind="data")
    publish_register_thumbnail(ctx, p["register"])
    ctx.spawn_child(child("library.register", dict(p["register"])))
    ctx.progress(100.0)
    return {"quality": document}


# --- per-title CRF search ----------------------------------------------------------------------


def _search_reference(ctx: StageContext, src: Path, work: Path, windows: list, fps, name: str) -> Path:
    """The samples of `src` the probes encode, cut once per rung and kept for a retry."""
    reference = work / "reference.mp4"
    if not reference.exists():
        partial = partial_path(reference)
        run_ffmpeg(
            ctx,
            quality.sample_reference_argv(src, partial, windows, fps=fps),
            duration=sum(d for _, d in windows),
            throttle=None,
            what=f"search {name} samples",
        )
        os.replace(partial, reference)
    return reference


def _probe_crf(
    ctx: StageContext,
    reference: Path,
    work: Path,
    encoding,
    crf: int,
    sizes,
    seconds: float,
    n: int,
    name: str,
) -> tuple[dict[str, Any], float]:
    """Encode the samples at `crf` and score them: (the probe's record, its unrounded VMAF)."""
    from dataclasses import replace

    size, source_size = sizes
    started = time.monotonic()
    out = work / f"crf{crf}.mp4"
    argv = commands.encode_video(reference, out, encoding=replace(encoding, crf=crf), size=size)
    run_ffmpeg(ctx, argv, duration=seconds, throttle=None, what=f"search {name} crf {crf}")
    [scores] = measure(
        ctx,
        reference,
        [out],
        size=source_size,
        metrics=["vmaf"],
        n_subsample=n,
        duration=seconds,
        throttle=None,
        what=f"search {name} vmaf crf {crf}",
    )
    probe = {
        "crf": crf,
        "vmaf": round(float(scores.vmaf), 3),
        "bitrate_kbps": quality.video_bitrate_kbps(out),
        "seconds": round(time.monotonic() - started, 2),
    }
    out.unlink(missing_ok=True)
    return probe, float(scores.vmaf)


def crf_search(
    ctx: StageContext,
    src: Path,
    *,
    name: str,
    encoding: commands.VideoEncoding,
    size: tuple[int, int],
    source_size: tuple[int, int],
    duration: float,
    fps: float | None,
    target_vmaf: float,
    throttle: ProgressThrottle,
) -> dict[str, Any]:
    """Bisect the CRF on samples of `src` for the highest CRF whose sample VMAF >= target + margin
    (at most quality.MAX_PROBES probe encodes). Returns the search record."""
    started = time.monotonic()
    work = Path(ctx.workspace) / "search" / name
    work.mkdir(parents=True, exist_ok=True)
    windows = quality.sample_windows(duration)
    sample_seconds = sum(d for _, d in windows)
    reference = _search_reference(ctx, src, work, windows, fps, name)
    low, high = quality.CRF_RANGE[encoding.codec]
    # Samples that are the whole source predict the rendition exactly: no margin needed then.
    whole = len(windows) == 1 and windows[0][0] == 0
    aim = float(target_vmaf) + (0.0 if whole else quality.SEARCH_MARGIN)
    n_subsample = min(
        quality.SEARCH_SUBSAMPLE, quality.n_subsample_for(quality.frame_count(sample_seconds, fps), fps)
    )
    tried: dict[int, float] = {}
    probes = []
    crf = quality.next_crf(tried, aim, low, high)
    while crf is not None and len(probes) < quality.MAX_PROBES:
        ctx.check_cancelled()
        sizes = (size, source_size)
        probe, vmaf = _probe_crf(
            ctx, reference, work, encoding, crf, sizes, sample_seconds, n_subsample, name
        )
        probes.append(probe)
        tried[crf] = vmaf
        throttle.update(100.0 * len(probes) / quality.MAX_PROBES)
        crf = quality.next_crf(tried, aim, low, high)
    chosen, reachable = quality.chosen_crf(tried, aim, low)
    record = {
        "target_vmaf": float(target_vmaf),
        "aim_vmaf": aim,
        "crf_range": [low, high],
        "samples": [{"start": a, "seconds": d} for a, d in windows],
        "n_subsample": n_subsample,
        "probes": probes,
        "chosen_crf": chosen,
        "reachable_on_samples": reachable,
        "seconds": round(time.monotonic() - started, 2),
    }
    _log_search(ctx, name, record)
    return record


def _log_search(ctx: StageContext, name: str, record: dict) -> None:
    probes = record["probes"]
    ctx.log(
        f"search {name}: crf {record['chosen_crf']} for target VMAF {record['target_vmaf']:g} after "
        f"{len(probes)} probes in {record['seconds']}s: "
        + ", ".join(f"crf {t['crf']} -> {t['vmaf']}" for t in probes)
        + ("" if record["reachable_on_samples"] else " (target not reachable on the samples: best CRF tried)")
    )
