"""Compilations: compile_random, compile_quad, compile_mega (dispatch + render) and compile_gif.

compile_<kind> (dispatch, cpu)   pick/resolve the sources, stage them, probe them
  └─ compile_<kind>.render       concat or xstack grid, H.264 + AAC (GPU category with a hardware encoder)

compile_gif (dispatch, cpu)      two passes: palettegen into a PNG, then paletteuse (a one-pass graph
                                 would buffer every frame until the palette is known)
"""

from __future__ import annotations

import json
import os
import random
import uuid
from pathlib import Path

from media import commands
from media.params import check_output_duration
from workers.stages.base import PermanentFailure, StageContext, stage
from workers.stages.common import (
    DOWNLOAD_SHARE,
    Source,
    asset_source,
    child,
    choose_resource,
    encoder_of,
    partial_path,
    probe_media,
    publish,
    resolve_source,
    resolve_sources,
    run_ffmpeg,
    stage_input,
    stage_params,
    throttle_for,
    workspace_rel,
    ws,
)

DEFAULT_SIZE = {"portrait": (720, 1280), "square": (720, 720)}


def _stage_sources(ctx: StageContext, sources: list[Source], start: float = 0.0) -> list[dict]:
    """Copy each source into the workspace and probe it, from `start` (what fetching input_urls
    took) up to 90 % of the stage's progress."""
    staged = []
    for i, source in enumerate(sources):
        ctx.check_cancelled()
        path = stage_input(ctx, source, name=f"src_{i:02d}")
        info = probe_media(path)
        staged.append(
            {
                "input": workspace_rel(ctx, path),
                "duration": info.duration_seconds,
                "has_audio": info.has_audio,
                "source": source.rel_path,
                "video_id": source.video_id,
                "width": info.width,
                "height": info.height,
            }
        )
        ctx.progress(start + (90.0 - start) * (i + 1) / len(sources))
    return staged


def _fetched_share(params) -> float:
    """The progress the fetches of input_urls took (resolve_sources), where staging starts."""
    return DOWNLOAD_SHARE if params.input_urls is not None else 0.0


def _check_output_length(kind: str, params, duration: float) -> None:
    """The compilation's length is known once its sources are probed: bound it (media.params)."""
    problem = check_output_duration(duration, params.fps, f"the {kind} output")
    if problem:
        hint = "count or max_duration" if kind == "compile_random" else "the sources or duration"
        raise PermanentFailure(f"{problem}: lower {hint}")


def _render_child(ctx: StageContext, kind: str, params, staged: list[dict], extra: dict) -> dict:
    _check_output_length(kind, params, float(extra["duration"]))
    choice = choose_resource(ctx)
    payload = {
        "items": staged,
        "encoder": choice.encoder,
        "preset": params.preset,
        "crf": params.crf,
        "audio_bitrate_kbps": params.audio_bitrate_kbps,
        "fps": params.fps,
        **extra,
    }
    ctx.spawn_child(child(f"{kind}.render", payload, resource=choice, duration=extra["duration"]))
    ctx.progress(100.0)
    return {"sources": [s["source"] for s in staged], "resource": choice.as_dict(), **extra}


def choose_random(assets: list, count: int, seed: int) -> list:
    """A repeatable sample: the same job (and seed) picks the same videos on every attempt."""
    ordered = sorted(assets, key=lambda a: a.path)
    return random.Random(seed).sample(ordered, min(count, len(ordered)))


@stage("compile_random")
def compile_random(ctx: StageContext) -> dict:
    from media.models import MediaAsset

    params = stage_params(ctx, "compile_random")
    query = MediaAsset.objects.filter(
        valid=True,
        duration_seconds__gte=max(params.min_duration, 0.1),
        duration_seconds__lte=params.max_duration,
    )
    if params.orientation != "any":
        query = query.filter(orientation=params.orientation)
    if params.directory:
        query = query.filter(directory=params.directory)
    seed = params.seed if params.seed is not None else uuid.UUID(str(ctx.job_id)).int % 2**31
    chosen = choose_random(list(query.only("id", "path")), params.count, seed)
    if not chosen:
        raise PermanentFailure("no valid library videos match the orientation and duration range")
    if len(chosen) < params.count:
        ctx.log(f"only {len(chosen)} matching videos; using all of them")
    staged = _stage_sources(ctx, [asset_source(asset.id) for asset in chosen])
    width, height = DEFAULT_SIZE.get(params.orientation, (1280, 720))
    width, height = params.width or width, params.height or height
    return _render_child(
        ctx,
        "compile_random",
        params,
        staged,
        {
            "layout": "concat",
            "width": width // 2 * 2,
            "height": height // 2 * 2,
            "seed": seed,
            "duration": round(sum(s["duration"] for s in staged), 3),
            "output_name": "compilation.mp4",
        },
    )


@stage("compile_quad")
def compile_quad(ctx: StageContext) -> dict:
    params = stage_params(ctx, "compile_quad")
    staged = _stage_sources(ctx, resolve_sources(params, ctx), _fetched_share(params))
    durations = [s["duration"] for s in staged]
    return _render_child(
        ctx,
        "compile_quad",
        params,
        staged,
        {
            "layout": "grid",
            "columns": 2,
            "cell_width": params.cell_width // 2 * 2,
            "cell_height": params.cell_height // 2 * 2,
            "duration_mode": params.duration,
            "audio": params.audio,
            "duration": min(durations) if params.duration == "shortest" else max(durations),
            "output_name": "quad.mp4",
        },
    )


@stage("compile_mega")
def compile_mega(ctx: StageContext) -> dict:
    params = stage_params(ctx, "compile_mega")
    staged = _stage_sources(ctx, resolve_sources(params, ctx), _fetched_share(params))
    durations = [s["duration"] for s in staged]
    if params.layout == "concat":
        extra = {
            "layout": "concat",
            "width": params.width // 2 * 2,
            "height": params.height // 2 * 2,
            "duration": round(sum(durations), 3),
        }
    else:
        columns = params.columns or max(1, int(len(staged) ** 0.5 + 0.999))
        extra = {
            "layout": "grid",
            "columns": columns,
            "cell_width": params.cell_width // 2 * 2,
            "cell_height": params.cell_height // 2 * 2,
            "duration_mode": params.duration,
            "audio": params.audio,
            "duration": min(durations) if params.duration == "shortest" else max(durations),
        }
    return _render_child(ctx, "compile_mega", params, staged, {**extra, "output_name": "mega.mp4"})


def _render_argv(ctx: StageContext, p: dict, dst: Path, encoding: commands.VideoEncoding) -> list[str]:
    """The FFmpeg command of a render: the items concatenated, or tiled in a grid."""
    items = p["items"]
    if p["layout"] == "concat":
        segments = [
            commands.Segment(ws(ctx, it["input"]), float(it["duration"]), 0.0, bool(it["has_audio"]))
            for it in items
        ]
        return commands.concat(
            segments,
            dst,
            width=int(p["width"]),
            height=int(p["height"]),
            fps=int(p["fps"]),
            encoding=encoding,
            audio_kbps=int(p["audio_bitrate_kbps"]),
        )
    inputs = [
        commands.GridInput(ws(ctx, it["input"]), float(it["duration"]), bool(it["has_audio"])) for it in items
    ]
    return commands.grid(
        inputs,
        dst,
        columns=int(p["columns"]),
        cell_width=int(p["cell_width"]),
        cell_height=int(p["cell_height"]),
        fps=int(p["fps"]),
        encoding=encoding,
        duration=p["duration_mode"],
        audio=p["audio"],
        audio_kbps=int(p["audio_bitrate_kbps"]),
    )


def _write_sources_manifest(path: Path, layout: str, items: list[dict]) -> None:
    path.write_text(
        json.dumps(
            {
                "layout": layout,
                "sources": [
                    {"path": it["source"], "video_id": it.get("video_id"), "duration": it["duration"]}
                    for it in items
                ],
            },
            indent=2,
        )
    )


@stage("compile_random.render")
@stage("compile_quad.render")
@stage("compile_mega.render")
def compile_render(ctx: StageContext) -> dict:
    p = ctx.payload
    name = str(p["output_name"])
    if name not in ("compilation.mp4", "quad.mp4", "mega.mp4"):
        raise PermanentFailure(f"bad output name {name!r}")
    encoding = commands.VideoEncoding(encoder_of(p), p["preset"], int(p["crf"]))
    out_dir = Path(ctx.workspace) / "compile"
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / name
    partial = partial_path(final)
    argv = _render_argv(ctx, p, partial, encoding)
    run_ffmpeg(
        ctx, argv, duration=float(p["duration"]), throttle=throttle_for(ctx), what=f"{p['layout']} {name}"
    )
    os.replace(partial, final)
    publish(ctx, final, name)
    manifest = out_dir / "sources.json"
    _write_sources_manifest(manifest, p["layout"], p["items"])
    publish(ctx, manifest, "sources.json", kind="data")
    ctx.progress(100.0)
    return {"output": name, "sources": len(p["items"])}


@stage("compile_gif")
def compile_gif(ctx: StageContext) -> dict:
    params = stage_params(ctx, "compile_gif")
    source = resolve_source(params, ctx)
    staged = stage_input(ctx, source)
    info = probe_media(staged)
    if params.start >= info.duration_seconds:
        raise PermanentFailure(f"start {params.start}s is beyond the video's {info.duration_seconds:.2f}s")
    duration = min(params.duration, info.duration_seconds - params.start)
    final = Path(ctx.workspace) / "gif" / "clip.gif"
    final.parent.mkdir(parents=True, exist_ok=True)
    partial = partial_path(final)
    palette = final.with_name("palette.png")
    shape = {"start": params.start, "duration": duration, "width": params.width, "fps": params.fps}
    argv = commands.gif_palette(staged, palette, max_colors=params.max_colors, **shape)
    run_ffmpeg(ctx, argv, duration=duration, throttle=None, what="gif palette")
    argv = commands.gif(staged, partial, palette=palette, dither=params.dither, **shape)
    run_ffmpeg(ctx, argv, duration=duration, throttle=throttle_for(ctx), what="gif")
    os.replace(partial, final)
    publish(ctx, final, "clip.gif")
    ctx.progress(100.0)
    return {"output": "clip.gif", "start": params.start, "duration": round(duration, 3)}
