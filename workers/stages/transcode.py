"""transcode: JetEncode's adaptive-streaming pipeline.

    transcode (dispatch, cpu)         stage the input, probe, choose encoder/resources, plan the ladder
      ├─ transcode.rendition × N      one H.264/AAC MP4 per rung (media pool; GPU category if a
      │                               hardware encoder is used), keyframes on segment boundaries
      ├─ transcode.thumbnail          one JPEG (cpu)
      └─ transcode.package            waits for its siblings; HLS per rendition + master playlist
           └─ transcode.upload        (background pool) publishes everything to output storage

Renditions run in parallel on the worker's media slots; packaging and upload use the background
slot so they never hold media capacity. All stages after dispatch run on the dispatching worker,
in the job's workspace.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from media import commands
from media.hls import ladder_for, master_playlist, variant_from_probe
from media.jobtypes import ResourceChoice
from media.params import TranscodeParams
from media.probe import probe
from workers.stages.base import ChildSpec, PermanentFailure, StageContext, stage
from workers.stages.common import (
    child,
    choose_resource,
    encoder_of,
    fresh_dir,
    partial_path,
    probe_media,
    publish,
    resolve_source,
    run_ffmpeg,
    stage_input,
    stage_params,
    throttle_for,
    workspace_rel,
    ws,
)

RENDITIONS_DIR = "renditions"
HLS_DIR = "hls"
THUMBNAIL = "thumbnail.jpg"


def _rendition_child(
    params: TranscodeParams,
    rung: dict,
    size: tuple[int, int],
    staged_rel: str,
    choice: ResourceChoice,
    duration: float,
) -> ChildSpec:
    width, height = size
    return child(
        "transcode.rendition",
        {
            "input": staged_rel,
            "name": rung["name"],
            "width": width,
            "height": height,
            "video_bitrate_kbps": rung["video_bitrate_kbps"],
            "segment_seconds": params.segment_seconds,
            "encoder": choice.encoder,
            "preset": params.preset,
            "crf": params.crf,
            "audio_bitrate_kbps": params.audio_bitrate_kbps,
            "duration": duration,
        },
        resource=choice,
        duration=duration,
    )


def _thumbnail_child(params: TranscodeParams, staged_rel: str, duration: float) -> ChildSpec:
    """One JPEG at `thumbnail_at`, by default a quarter of the way in (never past the last frame)."""
    at = params.thumbnail_at if params.thumbnail_at is not None else duration * 0.25
    return child(
        "transcode.thumbnail",
        {
            "input": staged_rel,
            "timestamp": min(at, max(0.0, duration - 0.1)),
            "width": params.thumbnail_width,
        },
        duration=duration,
    )


def _package_child(params: TranscodeParams, ladder: list[dict], duration: float) -> ChildSpec:
    """HLS packaging once every rendition is done, on the background pool."""
    return child(
        "transcode.package",
        {
            "renditions": [
                {"name": r["name"], "video_bitrate_kbps": r["video_bitrate_kbps"]} for r in ladder
            ],
            "segment_seconds": params.segment_seconds,
            "audio_bitrate_kbps": params.audio_bitrate_kbps,
            "duration": duration,
        },
        pool="background",
        duration=duration,
        wait_for_siblings=True,
    )


@stage("transcode")
def transcode(ctx: StageContext) -> dict:
    params = stage_params(ctx, "transcode")
    source = resolve_source(params)
    ctx.check_cancelled()
    staged = stage_input(ctx, source.path)
    ctx.progress(40.0)
    info = probe_media(staged)
    ctx.log(
        f"source: {info.width}x{info.height} {info.fps} fps {info.video_codec}/{info.audio_codec or '-'} "
        f"{info.duration_seconds:.2f}s"
    )
    choice = choose_resource(ctx)
    requested = [r.model_dump() for r in params.ladder] if params.ladder else None
    ladder = ladder_for(min(info.width, info.height), requested)
    staged_rel = workspace_rel(ctx, staged)
    duration = info.duration_seconds
    for rung in ladder:
        size = commands.fit_short_side(info.width, info.height, rung["height"])
        rung["resolution"] = f"{size[0]}x{size[1]}"
        ctx.spawn_child(_rendition_child(params, rung, size, staged_rel, choice, duration))
    ctx.spawn_child(_thumbnail_child(params, staged_rel, duration))
    ctx.spawn_child(_package_child(params, ladder, duration))
    ctx.progress(100.0)
    ctx.log(
        "ladder: " + ", ".join(f"{r['name']} {r['resolution']} {r['video_bitrate_kbps']}k" for r in ladder)
    )
    return {
        "source": {k: v for k, v in info.to_dict().items() if k != "path"},
        "ladder": ladder,
        "resource": choice.as_dict(),
    }


@stage("transcode.rendition")
def transcode_rendition(ctx: StageContext) -> dict:
    p = ctx.payload
    src = ws(ctx, p["input"])
    name = str(p["name"])
    if not name.endswith("p") or not name[:-1].isdigit():
        raise PermanentFailure(f"bad rendition name {name!r}")
    final = Path(ctx.workspace) / RENDITIONS_DIR / f"{name}.mp4"
    final.parent.mkdir(parents=True, exist_ok=True)
    partial = partial_path(final)
    argv = commands.rendition(
        src,
        partial,
        width=int(p["width"]),
        height=int(p["height"]),
        video_bitrate_kbps=int(p["video_bitrate_kbps"]),
        segment_seconds=float(p["segment_seconds"]),
        encoder=encoder_of(p),
        preset=p.get("preset", "veryfast"),
        crf=int(p.get("crf", 23)),
        audio_kbps=int(p.get("audio_bitrate_kbps", 128)),
    )
    run_ffmpeg(ctx, argv, duration=float(p["duration"]), throttle=throttle_for(ctx), what=f"rendition {name}")
    os.replace(partial, final)
    info = probe(final)
    ctx.log(
        f"rendition {name}: {info.width}x{info.height}, {info.bitrate} bit/s, {final.stat().st_size} bytes"
    )
    return {
        "name": name,
        "width": info.width,
        "height": info.height,
        "bitrate": info.bitrate,
        "file": workspace_rel(ctx, final),
    }


@stage("transcode.thumbnail")
def transcode_thumbnail(ctx: StageContext) -> dict:
    p = ctx.payload
    src = ws(ctx, p["input"])
    final = Path(ctx.workspace) / THUMBNAIL
    partial = partial_path(final)
    argv = commands.thumbnail(src, partial, timestamp=float(p["timestamp"]), width=int(p["width"]))
    run_ffmpeg(ctx, argv, duration=None, throttle=None, what="thumbnail")
    if not partial.exists():
        raise PermanentFailure(f"no frame at {p['timestamp']}s")
    os.replace(partial, final)
    ctx.progress(100.0)
    return {"file": THUMBNAIL}


@stage("transcode.package")
def transcode_package(ctx: StageContext) -> dict:
    """HLS for every rendition, then the master playlist. Builds into `hls.partial/` and renames it
    to `hls/` at the end, so a retry starts clean and upload never sees half a package."""
    p = ctx.payload
    workspace = Path(ctx.workspace)
    building = fresh_dir(workspace / f"{HLS_DIR}.partial")
    renditions = p["renditions"]
    throttle = throttle_for(ctx)
    variants = []
    for i, rendition in enumerate(renditions):
        ctx.check_cancelled()
        name = str(rendition["name"])
        src = ws(ctx, f"{RENDITIONS_DIR}/{name}.mp4")
        if not src.exists():
            # The scheduler holds this stage until its siblings completed; a missing rendition means
            # the workspace was lost (e.g. cleaned) and only a new execution can help.
            raise PermanentFailure(f"rendition {name} is missing from the workspace")
        out_dir = building / name
        out_dir.mkdir()
        argv = commands.hls_package(src, out_dir, segment_seconds=float(p["segment_seconds"]))
        span = throttle.span(100.0 * i / len(renditions), 100.0 * (i + 1) / len(renditions))
        run_ffmpeg(
            ctx, argv, duration=float(p.get("duration") or 0) or None, throttle=span, what=f"hls {name}"
        )
        variants.append(
            variant_from_probe(
                f"{name}/index.m3u8",
                probe(src),
                rendition.get("video_bitrate_kbps"),
                int(p.get("audio_bitrate_kbps", 128)),
            )
        )
    (building / "master.m3u8").write_text(master_playlist(variants))
    final = workspace / HLS_DIR
    if final.exists():
        shutil.rmtree(final)
    os.replace(building, final)
    ctx.spawn_child(
        child(
            "transcode.upload",
            {"renditions": [str(r["name"]) for r in renditions]},
            pool="background",
            duration=p.get("duration"),
        )
    )
    ctx.progress(100.0)
    ctx.log(f"packaged {len(variants)} renditions; master playlist {HLS_DIR}/master.m3u8")
    return {
        "variants": [
            {"uri": v.uri, "bandwidth": v.bandwidth, "resolution": f"{v.width}x{v.height}"} for v in variants
        ]
    }


@stage("transcode.upload")
def transcode_upload(ctx: StageContext) -> dict:
    """Publish renditions, HLS and thumbnail. The runtime moves them to output storage (local
    directory or S3) when this stage finishes, all or nothing."""
    workspace = Path(ctx.workspace)
    names = [str(n) for n in ctx.payload["renditions"]]
    files: list[tuple[Path, str]] = []
    for name in names:
        files.append((ws(ctx, f"{RENDITIONS_DIR}/{name}.mp4"), f"{RENDITIONS_DIR}/{name}.mp4"))
    hls_root = ws(ctx, HLS_DIR)
    for path in sorted(hls_root.rglob("*")):
        if path.is_file():
            files.append((path, f"{HLS_DIR}/{path.relative_to(hls_root).as_posix()}"))
    thumb = workspace / THUMBNAIL
    if thumb.exists():
        files.append((thumb, THUMBNAIL))
    missing = [name for path, name in files if not path.exists()]
    if missing:
        raise PermanentFailure(f"missing from the workspace: {', '.join(missing)}")
    throttle = throttle_for(ctx)
    for i, (path, name) in enumerate(files, start=1):
        ctx.check_cancelled()
        # Segments are many and uniform: their metadata is their size. MP4s and the JPEG are probed.
        publish(ctx, path, name, probe_it=path.suffix in (".mp4", ".jpg"))
        throttle.update(100.0 * i / len(files))
    ctx.progress(100.0)
    ctx.log(f"publishing {len(files)} files")
    return {"files": len(files), "master_playlist": f"{HLS_DIR}/master.m3u8"}
