"""reencode_streaming and thumbnail_generate.

reencode_streaming (dispatch, cpu)   stage input, probe, choose encoder/resources
  └─ reencode_streaming.encode       H.264 + AAC, +faststart (GPU category with a hardware encoder)
       └─ reencode_streaming.quality VMAF/PSNR/SSIM against the source, min_vmaf gate; publishes the
            │                        file and quality.json (skipped with quality_metrics: [])
            └─ library.register      add the encoded file to the media library, exactly once

thumbnail_generate (dispatch, cpu)   one JPEG; with a video_id, library.update sets the asset's thumbnail
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from media import commands, quality
from media.probe import MediaInfo
from workers.stages import split, split_encode, split_reencode
from workers.stages.base import PermanentFailure, StageContext, stage
from workers.stages.common import (
    child,
    choose_resource,
    encoder_of,
    partial_path,
    probe_media,
    publish,
    publish_register_thumbnail,
    resolve_source,
    run_ffmpeg,
    stage_input,
    stage_params,
    throttle_for,
    workspace_rel,
    ws,
)
from workers.stages.quality import is_software, plan_reference_sample, run_encode

THUMBNAIL = "thumbnail.jpg"


def safe_stem(name: str, fallback: str = "video") -> str:
    """A file stem that is safe as an output name: letters, digits, dot, dash, underscore; no
    leading dot or dash."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(name).stem).lstrip(".-_")[:100].rstrip("_")
    return stem or fallback


def _register(params, source, stem: str, job_id: str) -> dict:
    """library.register's payload, less its source file, and the output's name."""
    return {
        "output_name": f"{stem}.mp4",
        "path": f"{params.library_directory}/{stem}-{str(job_id)[:8]}.mp4",
        "directory": params.library_directory,
        "title": Path(source.rel_path).stem,
    }


@stage("reencode_streaming")
def reencode_streaming(ctx: StageContext) -> dict:
    params = stage_params(ctx, "reencode_streaming")
    source = resolve_source(params, ctx)
    # In place (a split job never stages its input on this worker), by descriptor: the probe and
    # the planning read the file the check approved, whatever its name means by then.
    with split_encode.media_source(source.rel_path, what="input") as opened:
        info = probe_media(source.path, fd=opened.fd)
        choice = choose_resource(ctx)
        size = None
        short = min(info.width, info.height)
        if params.max_height and short > params.max_height:
            size = commands.fit_short_side(info.width, info.height, params.max_height)
        stem = safe_stem(source.path.name)
        plan, record, note = split.try_plan(ctx, params, opened.path, info)
    if plan is not None:
        split_reencode.spawn(
            ctx, params, source, info, plan, choice, size, _register(params, source, stem, ctx.job_id)
        )
    else:
        _spawn_encode(ctx, params, source, info, choice, size, stem)
    ctx.progress(100.0)
    return {
        "source": {k: v for k, v in info.to_dict().items() if k != "path"},
        "resource": choice.as_dict(),
        "split": record,
        **({"job_log": note} if note else {}),
    }


def _spawn_encode(ctx: StageContext, params, source, info, choice, size, stem: str) -> None:
    """The unsplit path: stage the input here and encode it on this worker."""
    staged = stage_input(ctx, source)
    measuring = None
    if params.quality_metrics:
        frames = quality.frame_count(info.duration_seconds, info.fps)
        n_subsample = quality.n_subsample_for(frames, info.fps, params.vmaf_subsample)
        # A software encode also writes the frames to score, so measuring need not decode the
        # source again (workers/stages/quality.py, "the reference sample").
        sample = plan_reference_sample(info, n_subsample) if is_software(choice.encoder) else None
        measuring = {
            "reference": workspace_rel(ctx, staged),
            "reference_sample": sample,
            "source_width": info.width,
            "source_height": info.height,
            "metrics": list(params.quality_metrics),
            "min_vmaf": params.min_vmaf,
            "n_subsample": n_subsample,
        }
    register = _register(params, source, stem, ctx.job_id)
    payload = {
        "quality": measuring,
        "input": workspace_rel(ctx, staged),
        "encoder": choice.encoder,
        "preset": params.preset,
        "crf": params.crf,
        "target_bitrate_kbps": params.target_bitrate_kbps,
        "audio_bitrate_kbps": params.audio_bitrate_kbps,
        "size": list(size) if size else None,
        "duration": info.duration_seconds,
        "output_name": register["output_name"],
        "library_path": register["path"],
        "library_directory": params.library_directory,
        "title": register["title"],
        "source_video_id": source.video_id,
    }
    ctx.spawn_child(
        child("reencode_streaming.encode", payload, resource=choice, duration=info.duration_seconds)
    )


@stage("reencode_streaming.encode")
def reencode_streaming_encode(ctx: StageContext) -> dict:
    p = ctx.payload
    src = ws(ctx, p["input"])
    name = str(p["output_name"])
    if name != safe_stem(name) + ".mp4":
        raise PermanentFailure(f"bad output name {name!r}")
    out_dir = Path(ctx.workspace) / "reencode"
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / name
    partial = partial_path(final)
    argv = commands.reencode_streaming(
        src,
        partial,
        encoder=encoder_of(p),
        preset=p["preset"],
        crf=int(p["crf"]),
        target_bitrate_kbps=int(p["target_bitrate_kbps"]),
        audio_kbps=int(p["audio_bitrate_kbps"]),
        size=tuple(p["size"]) if p.get("size") else None,
    )
    sample = (p.get("quality") or {}).get("reference_sample") if is_software(encoder_of(p)) else None
    run_encode(ctx, argv, sample, duration=float(p["duration"]), throttle=throttle_for(ctx), what="reencode")
    os.replace(partial, final)
    info = probe_media(final)
    register = _register_payload(ctx, final, info)
    if p.get("quality"):
        # Measured (and gated) before anything is published: the quality stage publishes.
        rendition = {
            "name": Path(name).stem,
            "file": workspace_rel(ctx, final),
            "encoder": encoder_of(p),
            "crf": int(p["crf"]),
        }
        payload = {
            **p["quality"],
            "reference_sample": sample,
            "renditions": [rendition],
            "duration": p["duration"],
        }
        payload.update({"output_name": name, "register": register})
        ctx.spawn_child(child("reencode_streaming.quality", payload, duration=p["duration"]))
    else:
        publish(ctx, final, name)
        publish_register_thumbnail(ctx, register)
        ctx.spawn_child(child("library.register", register))
    ctx.progress(100.0)
    return {
        "output": name,
        "width": info.width,
        "height": info.height,
        "bitrate": info.bitrate,
        "duration_seconds": info.duration_seconds,
        "library_path": p["library_path"],
    }


def _register_payload(ctx: StageContext, final: Path, info: MediaInfo) -> dict:
    """The library.register payload for the re-encoded file `final` (probed: `info`), with the
    copy it registers from and its thumbnail."""
    p = ctx.payload
    # A copy, not a second name for the same bytes: publication moves `final` out of the workspace,
    # and library.register (which runs only if this stage's finish is accepted) copies from this one.
    # A hard link would make the published output and the library file one inode, so whoever may
    # edit the media root would edit a published output too.
    library_copy = final.parent / "library.mp4"
    library_copy.unlink(missing_ok=True)
    shutil.copyfile(final, library_copy)
    return {
        "source": workspace_rel(ctx, library_copy),
        "path": p["library_path"],
        "directory": p["library_directory"],
        "title": p.get("title") or final.stem,
        "metadata": info.asset_fields(),
        **_library_thumbnail(ctx, final, info.duration_seconds),
    }


def _library_thumbnail(ctx: StageContext, video: Path, duration: float) -> dict:
    """A thumbnail of the re-encoded file for the library asset it becomes (a quarter of the way
    in, like thumbnail_generate's): {"thumbnail_file": workspace path, "thumbnail": the asset's
    value once published}, or {} when FFmpeg gives no frame (the asset then has none)."""
    final = Path(ctx.workspace) / "reencode" / THUMBNAIL
    partial = partial_path(final)
    partial.unlink(missing_ok=True)
    at = min(duration * 0.25, max(0.0, duration - 0.1))
    run_ffmpeg(
        ctx,
        commands.thumbnail(video, partial, timestamp=at, width=640),
        duration=None,
        throttle=None,
        what="thumbnail",
    )
    if not partial.exists():
        ctx.log(f"no thumbnail: no frame at {at:.3f}s")
        return {}
    os.replace(partial, final)
    return {"thumbnail_file": workspace_rel(ctx, final), "thumbnail": f"{ctx.job_id}/{THUMBNAIL}"}


@stage("thumbnail_generate")
def thumbnail_generate(ctx: StageContext) -> dict:
    """Cheap enough to do in the dispatch stage. FFmpeg reads the staged input (a link to the file
    opened by descriptor), never the user's name."""
    params = stage_params(ctx, "thumbnail_generate")
    source = resolve_source(params, ctx)
    staged = stage_input(ctx, source)
    info = probe_media(staged)
    at = params.timestamp if params.timestamp is not None else info.duration_seconds * 0.25
    at = min(at, max(0.0, info.duration_seconds - 0.1))
    final = Path(ctx.workspace) / "thumbnail" / "thumbnail.jpg"
    final.parent.mkdir(parents=True, exist_ok=True)
    partial = partial_path(final)
    partial.unlink(missing_ok=True)
    argv = commands.thumbnail(staged, partial, timestamp=at, width=params.width, quality=params.quality)
    run_ffmpeg(ctx, argv, duration=None, throttle=None, what="thumbnail")
    if not partial.exists():
        raise PermanentFailure(f"no frame at {at:.3f}s")
    os.replace(partial, final)
    publish(ctx, final, "thumbnail.jpg", extra={"timestamp": round(at, 3)})
    if source.video_id:
        ctx.spawn_child(
            child(
                "library.update",
                {"video_id": source.video_id, "fields": {"thumbnail": f"{ctx.job_id}/thumbnail.jpg"}},
            )
        )
    ctx.progress(100.0)
    return {"output": "thumbnail.jpg", "timestamp": round(at, 3)}
