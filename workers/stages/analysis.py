"""Analysis job types: scene_extract, clip_generate, highlight_generate, digest_generate, tag_generation.

The media document files these under gpu_ai; JetEncode implements them with FFmpeg measurements
(scene-change scores, EBU R128 loudness), not learned models, so the measuring stages are `cpu`
(DECISIONS 8). Stages that *encode* video (clip cuts, highlight/digest renders) use a hardware
encoder when the worker has one and then take the type's GPU category.

    scene_extract → scene_extract.detect → (library.update)
    clip_generate → [clip_generate.detect →] clip_generate.cut × N
    highlight_generate / digest_generate → .analyze → .render
    tag_generation → tag_generation.analyze → (library.update)
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from media import commands, signals
from media.jobtypes import ResourceChoice
from workers.stages.base import StageContext, stage
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

ANALYSIS_FPS = 10.0  # scene scores on a 10 fps, 160 px wide picture: cheap, and enough to rank seconds


def _dispatch(ctx: StageContext, job_type: str) -> tuple:
    """Common dispatch: validate, stage the input, probe. Returns (params, source, staged path, info)."""
    params = stage_params(ctx, job_type)
    source = resolve_source(params, ctx)
    staged = stage_input(ctx, source)
    info = probe_media(staged)
    ctx.progress(90.0)
    return params, source, staged, info


def _replace_dir(building: Path, final: Path) -> None:
    if final.exists():
        shutil.rmtree(final)
    os.replace(building, final)


def _measure(
    ctx: StageContext,
    src: Path,
    workdir: Path,
    *,
    duration: float,
    has_audio: bool,
    fps: float | None,
    threshold: float,
    throttle,
) -> signals.Signals:
    fresh_dir(workdir)
    argv = commands.analyze_signals(src, has_audio=has_audio, fps=min(fps or ANALYSIS_FPS, ANALYSIS_FPS))
    run_ffmpeg(ctx, argv, duration=duration, throttle=throttle, what="measure signals", cwd=workdir)
    scores = signals.parse_metadata_print(workdir / commands.SCORES_FILE, "lavfi.scene_score")
    loudness = (
        signals.parse_metadata_print(workdir / commands.LOUDNESS_FILE, "lavfi.r128.M") if has_audio else []
    )
    measured = signals.build_signals(duration, scores, loudness, threshold=threshold, has_audio=has_audio)
    ctx.log("measured: " + json.dumps(measured.summary))
    return measured


# --- scene_extract ---------------------------------------------------------------------------------


@stage("scene_extract")
def scene_extract(ctx: StageContext) -> dict:
    params, source, staged, info = _dispatch(ctx, "scene_extract")
    ctx.spawn_child(
        child(
            "scene_extract.detect",
            {
                "input": workspace_rel(ctx, staged),
                "threshold": params.threshold,
                "min_scene_seconds": params.min_scene_seconds,
                "max_scenes": params.max_scenes,
                "thumbnail_width": params.thumbnail_width,
                "duration": info.duration_seconds,
                "video_id": source.video_id,
            },
            duration=info.duration_seconds,
        )
    )
    ctx.progress(100.0)
    return {"duration_seconds": info.duration_seconds}


@stage("scene_extract.detect")
def scene_extract_detect(ctx: StageContext) -> dict:
    p = ctx.payload
    src = ws(ctx, p["input"])
    duration = float(p["duration"])
    workspace = Path(ctx.workspace)
    building = fresh_dir(workspace / "scenes.partial")
    argv = commands.scene_detect(
        src,
        threshold=float(p["threshold"]),
        min_scene_seconds=float(p["min_scene_seconds"]),
        max_scenes=int(p["max_scenes"]),
        thumb_width=int(p["thumbnail_width"]),
    )
    run_ffmpeg(ctx, argv, duration=duration, throttle=throttle_for(ctx), what="scene detection", cwd=building)
    samples = signals.parse_metadata_print(building / commands.SCENE_METADATA_FILE, "lavfi.scene_score")
    scenes = signals.scenes_from_detection(samples, duration)[: int(p["max_scenes"])]
    images = sorted(building.glob("scene_*.jpg"))
    for scene, image in zip(scenes, images, strict=False):
        scene["image"] = f"scenes/{image.name}"
    (building / "scenes.json").write_text(
        json.dumps({"threshold": p["threshold"], "scenes": scenes}, indent=2)
    )
    final = workspace / "scenes"
    _replace_dir(building, final)
    publish(ctx, final / "scenes.json", "scenes.json", kind="data")
    for image in sorted(final.glob("scene_*.jpg")):
        publish(ctx, image, f"scenes/{image.name}", probe_it=False)
    if p.get("video_id"):
        stored = [{k: s[k] for k in ("index", "start", "end", "score")} for s in scenes]
        ctx.spawn_child(child("library.update", {"video_id": p["video_id"], "fields": {"scenes": stored}}))
    ctx.log(f"{len(scenes)} scenes")
    return {"scenes": len(scenes)}


# --- clip_generate -----------------------------------------------------------------------------------


def _spawn_cuts(
    ctx: StageContext, p: dict, ranges: list[tuple[float, float]], choice: ResourceChoice
) -> list[dict]:
    duration = float(p["duration"])
    clips = []
    for start, end in ranges:
        end = min(end, duration)
        if start >= duration or end - start < 0.05:
            continue
        clips.append((round(start, 3), round(end - start, 3)))
    clips = clips[: int(p["max_clips"])]
    for index, (start, length) in enumerate(clips, start=1):
        ctx.spawn_child(
            child(
                "clip_generate.cut",
                {
                    "input": p["input"],
                    "clip": index,
                    "start": start,
                    "duration": length,
                    "encoder": choice.encoder,
                    "preset": p["preset"],
                    "crf": p["crf"],
                    "audio_bitrate_kbps": p["audio_bitrate_kbps"],
                },
                resource=choice,
                duration=length,
            )
        )
    ctx.log(f"{len(clips)} clips: " + ", ".join(f"{s:.2f}+{d:.2f}s" for s, d in clips))
    return [{"index": i, "start": s, "duration": d} for i, (s, d) in enumerate(clips, start=1)]


@stage("clip_generate")
def clip_generate(ctx: StageContext) -> dict:
    params, source, staged, info = _dispatch(ctx, "clip_generate")
    choice = choose_resource(ctx)
    p = {
        "input": workspace_rel(ctx, staged),
        "duration": info.duration_seconds,
        "max_clips": params.max_clips,
        "preset": params.preset,
        "crf": params.crf,
        "audio_bitrate_kbps": params.audio_bitrate_kbps,
    }
    ranges: list[tuple[float, float]] | None = None
    origin = "ranges"
    if params.ranges:
        ranges = [(r.start, r.end) for r in params.ranges]
    elif source.video_id:
        from media.models import MediaAsset

        stored = MediaAsset.objects.filter(id=source.video_id).values_list("scenes", flat=True).first() or []
        ranges = [
            (float(s["start"]), float(s["end"]))
            for s in stored
            if isinstance(s, dict)
            and "start" in s
            and "end" in s
            and float(s["end"]) - float(s["start"]) >= params.min_clip_seconds
        ]
        origin = "the asset's scene list"
    if ranges:
        clips = _spawn_cuts(ctx, p, ranges, choice)
    else:
        origin = "scene detection"
        ctx.spawn_child(
            child(
                "clip_generate.detect",
                {
                    **p,
                    "threshold": params.threshold,
                    "min_clip_seconds": params.min_clip_seconds,
                    "encoder": choice.encoder,
                },
                duration=info.duration_seconds,
            )
        )
        clips = []
    ctx.progress(100.0)
    return {"clips_from": origin, "clips": clips}


@stage("clip_generate.detect")
def clip_generate_detect(ctx: StageContext) -> dict:
    p = ctx.payload
    src = ws(ctx, p["input"])
    duration = float(p["duration"])
    workdir = fresh_dir(Path(ctx.workspace) / "clip_detect")
    argv = commands.scene_detect(
        src,
        threshold=float(p["threshold"]),
        min_scene_seconds=float(p["min_clip_seconds"]),
        max_scenes=1000,
        thumb_width=16,
        with_images=False,
    )
    run_ffmpeg(ctx, argv, duration=duration, throttle=throttle_for(ctx), what="scene detection", cwd=workdir)
    scenes = signals.scenes_from_detection(
        signals.parse_metadata_print(workdir / commands.SCENE_METADATA_FILE, "lavfi.scene_score"), duration
    )
    ranges = [(s["start"], s["end"]) for s in scenes if s["duration"] >= float(p["min_clip_seconds"])]
    choice = choose_resource(ctx)
    clips = _spawn_cuts(ctx, p, ranges, choice)
    ctx.progress(100.0)
    return {"scenes": len(scenes), "clips": clips}


@stage("clip_generate.cut")
def clip_generate_cut(ctx: StageContext) -> dict:
    p = ctx.payload
    src = ws(ctx, p["input"])
    index = int(p["clip"])  # not "index": the scheduler sets that key to the child's 0-based ordinal
    final = Path(ctx.workspace) / "clips" / f"clip_{index:03d}.mp4"
    final.parent.mkdir(parents=True, exist_ok=True)
    partial = partial_path(final)
    encoding = commands.VideoEncoding(encoder_of(p), p["preset"], int(p["crf"]))
    argv = commands.encode_video(
        src,
        partial,
        encoding=encoding,
        audio_kbps=int(p["audio_bitrate_kbps"]),
        start=float(p["start"]),
        duration=float(p["duration"]),
    )
    run_ffmpeg(ctx, argv, duration=float(p["duration"]), throttle=throttle_for(ctx), what=f"clip {index}")
    os.replace(partial, final)
    publish(ctx, final, f"clips/{final.name}", extra={"start": p["start"], "clip_duration": p["duration"]})
    ctx.progress(100.0)
    return {"output": f"clips/{final.name}", "start": p["start"], "duration": p["duration"]}


# --- highlight_generate / digest_generate -----------------------------------------------------------


def _summary_dispatch(ctx: StageContext, job_type: str) -> dict:
    params, source, staged, info = _dispatch(ctx, job_type)
    ctx.spawn_child(
        child(
            f"{job_type}.analyze",
            {
                "input": workspace_rel(ctx, staged),
                "duration": info.duration_seconds,
                "has_audio": info.has_audio,
                "fps": info.fps,
                "target_seconds": params.target_seconds,
                "segment_seconds": params.segment_seconds,
                "threshold": params.threshold,
                "weights": params.weights.model_dump(),
                "preset": params.preset,
                "crf": params.crf,
                "audio_bitrate_kbps": params.audio_bitrate_kbps,
                "width": info.width,
                "height": info.height,
            },
            duration=info.duration_seconds,
        )
    )
    ctx.progress(100.0)
    return {"duration_seconds": info.duration_seconds, "has_audio": info.has_audio}


def _summary_analyze(ctx: StageContext, job_type: str) -> dict:
    p = ctx.payload
    src = ws(ctx, p["input"])
    duration = float(p["duration"])
    measured = _measure(
        ctx,
        src,
        Path(ctx.workspace) / f"{job_type}_signals",
        duration=duration,
        has_audio=bool(p["has_audio"]),
        fps=p.get("fps"),
        threshold=float(p["threshold"]),
        throttle=throttle_for(ctx),
    )
    weights = p["weights"]
    per_second = signals.per_second_score(
        measured,
        scene=float(weights["scene"]),
        motion=float(weights["motion"]),
        loudness=float(weights["loudness"]),
    )
    pick = signals.pick_highlights if job_type == "highlight_generate" else signals.pick_digest
    segments = pick(per_second, duration, float(p["segment_seconds"]), float(p["target_seconds"]))
    choice = choose_resource(ctx)
    ctx.spawn_child(
        child(
            f"{job_type}.render",
            {
                "input": p["input"],
                "has_audio": p["has_audio"],
                "segments": [[s, d] for s, d in segments],
                "encoder": choice.encoder,
                "preset": p["preset"],
                "crf": p["crf"],
                "audio_bitrate_kbps": p["audio_bitrate_kbps"],
                "width": p["width"],
                "height": p["height"],
                "fps": p.get("fps"),
                "measurements": measured.summary,
                "scores": [
                    round(per_second[int(s)], 4) if int(s) < len(per_second) else 0.0 for s, _ in segments
                ],
            },
            resource=choice,
            duration=sum(d for _, d in segments),
        )
    )
    ctx.progress(100.0)
    ctx.log("segments: " + ", ".join(f"{s:.1f}+{d:.1f}s" for s, d in segments))
    return {"segments": len(segments), "measurements": measured.summary}


def _summary_render(ctx: StageContext, job_type: str) -> dict:
    p = ctx.payload
    src = ws(ctx, p["input"])
    name = "highlight.mp4" if job_type == "highlight_generate" else "digest.mp4"
    out_dir = Path(ctx.workspace) / job_type
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / name
    partial = partial_path(final)
    segments = [commands.Segment(src, float(d), float(s), bool(p["has_audio"])) for s, d in p["segments"]]
    fps = int(round(float(p.get("fps") or 30))) or 30
    encoding = commands.VideoEncoding(encoder_of(p), p["preset"], int(p["crf"]))
    total = sum(seg.duration for seg in segments)
    argv = commands.concat(
        segments,
        partial,
        width=int(p["width"]) // 2 * 2,
        height=int(p["height"]) // 2 * 2,
        fps=min(fps, 120),
        encoding=encoding,
        audio_kbps=int(p["audio_bitrate_kbps"]),
    )
    run_ffmpeg(ctx, argv, duration=total, throttle=throttle_for(ctx), what=name)
    os.replace(partial, final)
    publish(ctx, final, name)
    report = out_dir / "segments.json"
    report.write_text(
        json.dumps(
            {
                "method": "measured signals: scene-change scores, motion and EBU R128 loudness (no learned model)",
                "segments": [
                    {"start": s, "duration": d, "score": sc}
                    for (s, d), sc in zip(p["segments"], p["scores"], strict=False)
                ],
                "measurements": p.get("measurements", {}),
            },
            indent=2,
        )
    )
    publish(ctx, report, "segments.json", kind="data")
    ctx.progress(100.0)
    return {"output": name, "segments": len(segments), "duration_seconds": round(total, 3)}


@stage("highlight_generate")
def highlight_generate(ctx: StageContext) -> dict:
    return _summary_dispatch(ctx, "highlight_generate")


@stage("highlight_generate.analyze")
def highlight_generate_analyze(ctx: StageContext) -> dict:
    return _summary_analyze(ctx, "highlight_generate")


@stage("highlight_generate.render")
def highlight_generate_render(ctx: StageContext) -> dict:
    return _summary_render(ctx, "highlight_generate")


@stage("digest_generate")
def digest_generate(ctx: StageContext) -> dict:
    return _summary_dispatch(ctx, "digest_generate")


@stage("digest_generate.analyze")
def digest_generate_analyze(ctx: StageContext) -> dict:
    return _summary_analyze(ctx, "digest_generate")


@stage("digest_generate.render")
def digest_generate_render(ctx: StageContext) -> dict:
    return _summary_render(ctx, "digest_generate")


# --- tag_generation ------------------------------------------------------------------------------------


@stage("tag_generation")
def tag_generation(ctx: StageContext) -> dict:
    params, source, staged, info = _dispatch(ctx, "tag_generation")
    ctx.spawn_child(
        child(
            "tag_generation.analyze",
            {
                "input": workspace_rel(ctx, staged),
                "threshold": params.threshold,
                "video_id": source.video_id,
            },
            duration=info.duration_seconds,
        )
    )
    ctx.progress(100.0)
    return {"duration_seconds": info.duration_seconds}


@stage("tag_generation.analyze")
def tag_generation_analyze(ctx: StageContext) -> dict:
    p = ctx.payload
    src = ws(ctx, p["input"])
    info = probe_media(src)
    measured = _measure(
        ctx,
        src,
        Path(ctx.workspace) / "tag_signals",
        duration=info.duration_seconds,
        has_audio=info.has_audio,
        fps=info.fps,
        threshold=float(p["threshold"]),
        throttle=throttle_for(ctx),
    )
    tags, measurements = signals.measured_tags(info, measured)
    report = Path(ctx.workspace) / "tags.json"
    report.write_text(
        json.dumps(
            {
                "tags": tags,
                "method": "measured from the file (FFmpeg/PyAV); not a learned model",
                "measurements": measurements,
            },
            indent=2,
        )
    )
    publish(ctx, report, "tags.json", kind="data")
    if p.get("video_id"):
        ctx.spawn_child(child("library.update", {"video_id": p["video_id"], "fields": {"tags": tags}}))
    ctx.progress(100.0)
    ctx.log("tags: " + ", ".join(tags))
    return {"tags": tags}
