"""transcode: JetEncode's adaptive-streaming pipeline.

    transcode (dispatch, cpu)         stage the input, probe, choose encoders/resources, plan the ladder
      ├─ transcode.rendition × N      one H.264/HEVC/AV1 + AAC MP4 per rung (media pool; GPU category
      │                               if a hardware encoder is used), keyframes on segment boundaries;
      │                               with target_vmaf, a CRF search on samples first
      ├─ transcode.thumbnail          one JPEG (cpu)
      └─ transcode.quality            waits for its siblings; scores every rendition against the
         │                            source, min_vmaf gate, quality.json (workers/stages/quality.py)
         └─ transcode.package         HLS per rendition (MPEG-TS for H.264; CMAF for HEVC/AV1: one
              │                       track per file, one audio rendition in an EXT-X-MEDIA group) +
              │                       master playlist
              └─ transcode.upload     (background pool) publishes everything to output storage
With `quality_metrics: []` the package waits for the renditions itself, as before measuring existed.

Renditions run in parallel on the worker's media slots; packaging and upload use the background
slot so they never hold media capacity. All stages after dispatch run on the dispatching worker,
in the job's workspace.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import replace
from pathlib import Path

from media import cmaf, commands, quality
from media.ffmpeg import select_encoder
from media.hls import (
    AUDIO_GROUP,
    FMP4_CODECS,
    AudioRendition,
    codec_string_of,
    ladder_for,
    master_playlist,
    variant_from_probe,
)
from media.jobtypes import JOB_TYPES, ResourceChoice
from media.params import TranscodeParams
from media.probe import probe
from workers import scratch
from workers.stages import split, split_encode
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
from workers.stages.quality import (
    QUALITY_DIR,
    QUALITY_JSON,
    crf_search,
    is_software,
    plan_reference_sample,
    run_encode,
)

RENDITIONS_DIR = "renditions"
HLS_DIR = "hls"
THUMBNAIL = "thumbnail.jpg"


def crf_for_codec(codec: str, crf: int) -> int:
    """The job's `crf` (x264 scale) on the encoder's own scale: x265 is about 5 higher for the same
    quality, AV1 (0..63) about 1.4 times."""
    if codec == "hevc":
        return min(51, crf + 5)
    if codec == "av1":
        return min(63, round(crf * 1.4))
    return crf


def rung_encoding(ctx: StageContext, codec: str, choice: ResourceChoice) -> tuple[str, ResourceChoice]:
    """(encoder, resource) for a rung of `codec`. H.264 keeps the job's choice (DECISIONS 8); HEVC and
    AV1 use a confirmed hardware encoder when `hardware` allows and the catalog has one (in the GPU
    category), else their software encoder (cpu, unless the job reserved a GPU anyway)."""
    if codec == "h264":
        return choice.encoder or "libx264", choice
    hardware = getattr(ctx, "job_hardware", None) or "auto"
    if choice.reason.startswith("resource_category override"):
        hardware = "gpu" if choice.use_gpu else "cpu"
    encoder, is_hardware = select_encoder(codec, dict(ctx.capabilities or {}), hardware)
    if encoder is None:
        raise PermanentFailure(f"this worker's FFmpeg has no {codec} encoder")
    if is_hardware:
        vram = choice.vram_mb if choice.use_gpu else JOB_TYPES["transcode"].vram_mb
        category = choice.category if choice.use_gpu else "gpu_encode"
        return encoder, ResourceChoice(category, vram, True, encoder, f"{codec}: worker has {encoder}")
    if choice.use_gpu:
        return encoder, ResourceChoice(choice.category, choice.vram_mb, True, encoder, choice.reason)
    return encoder, ResourceChoice("cpu", 0, False, encoder, f"{codec}: software encoder {encoder}")


def _rendition_child(
    params: TranscodeParams,
    rung: dict,
    size: tuple[int, int],
    staged_rel: str,
    choice: ResourceChoice,
    info,
    sample: dict | None = None,
) -> ChildSpec:
    width, height = size
    payload = {
        "input": staged_rel,
        "name": rung["name"],
        "width": width,
        "height": height,
        "video_bitrate_kbps": rung["video_bitrate_kbps"],
        "segment_seconds": params.segment_seconds,
        "codec": rung["codec"],
        "encoder": rung["encoder"],
        "preset": params.preset,
        "crf": crf_for_codec(rung["codec"], params.crf),
        "audio_bitrate_kbps": params.audio_bitrate_kbps,
        "duration": info.duration_seconds,
        "reference_sample": sample,
    }
    if params.target_vmaf is not None:
        payload.update(
            {
                "target_vmaf": params.target_vmaf,
                "source_width": info.width,
                "source_height": info.height,
                "fps": info.fps,
            }
        )
    return child("transcode.rendition", payload, resource=choice, duration=info.duration_seconds)


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


def _package_payload(params: TranscodeParams, ladder: list[dict], duration: float) -> dict:
    return {
        "renditions": [
            {"name": r["name"], "video_bitrate_kbps": r["video_bitrate_kbps"], "codec": r["codec"]}
            for r in ladder
        ],
        "segment_seconds": params.segment_seconds,
        "audio_bitrate_kbps": params.audio_bitrate_kbps,
        "duration": duration,
    }


def _package_child(params: TranscodeParams, ladder: list[dict], duration: float) -> ChildSpec:
    """HLS packaging once every rendition is done, on the background pool."""
    return child(
        "transcode.package",
        _package_payload(params, ladder, duration),
        pool="background",
        duration=duration,
        wait_for_siblings=True,
    )


def _n_subsample(params: TranscodeParams, info) -> int:
    frames = quality.frame_count(info.duration_seconds, info.fps)
    # Renditions have a keyframe at every segment boundary: the GOP the scored frames must not follow.
    gop = round(params.segment_seconds * (info.fps or 25))
    return quality.n_subsample_for(frames, info.fps, params.vmaf_subsample, gop_frames=gop)


def _sample_writer(params: TranscodeParams, ladder: list[dict], info) -> tuple[str | None, dict | None]:
    """(rung name, reference sample) when measuring and the sample fits, else (None, None). The
    smallest rung with a software encoder writes it beside its rendition (the ladder runs largest
    first): its encode is the shortest, so the sample's extra work is where there is most slack."""
    if not params.quality_metrics:
        return None, None
    writer = next((r["name"] for r in reversed(ladder) if is_software(r["encoder"])), None)
    sample = plan_reference_sample(info, _n_subsample(params, info)) if writer else None
    return (writer, sample) if sample else (None, None)


def _quality_child(
    params: TranscodeParams, ladder: list[dict], staged_rel: str, info, sample: dict | None
) -> ChildSpec:
    """Scoring once every rendition is done (media pool, cpu: libvmaf is CPU work); it spawns the
    package, so a failed gate stops the job before anything is packaged or published."""
    duration = info.duration_seconds
    return child(
        "transcode.quality",
        {
            "reference": staged_rel,
            "reference_sample": sample,
            "source_width": info.width,
            "source_height": info.height,
            "renditions": [
                {
                    "name": r["name"],
                    "file": f"{RENDITIONS_DIR}/{r['name']}.mp4",
                    "codec": r["codec"],
                    "encoder": r["encoder"],
                    "crf": crf_for_codec(r["codec"], params.crf) if params.target_vmaf is None else None,
                }
                for r in ladder
            ],
            "metrics": list(params.quality_metrics),
            "min_vmaf": params.min_vmaf,
            "target_vmaf": params.target_vmaf,
            "n_subsample": _n_subsample(params, info),
            "duration": duration,
            "package": _package_payload(params, ladder, duration),
        },
        duration=duration,
        wait_for_siblings=True,
    )


def _place_ladder(ctx: StageContext, params: TranscodeParams, info, choice: ResourceChoice) -> list:
    """(rung, size, resource) per rung of the ladder, largest first."""
    requested = [r.model_dump() for r in params.ladder] if params.ladder else None
    ladder = ladder_for(min(info.width, info.height), requested)
    codecs = {r.height: r.codec for r in params.ladder or [] if r.codec}
    placed = []
    for rung in ladder:
        size = commands.fit_short_side(info.width, info.height, rung["height"])
        rung["resolution"] = f"{size[0]}x{size[1]}"
        rung["codec"] = codecs.get(rung["height"], params.codec)
        rung["encoder"], rung_choice = rung_encoding(ctx, rung["codec"], choice)
        placed.append((rung, size, rung_choice))
    return placed


def _spawn_unsplit(ctx: StageContext, params: TranscodeParams, info, staged_rel: str, placed: list) -> None:
    """Today's path: renditions, thumbnail and measuring/packaging on this worker (placement job)."""
    ladder = [rung for rung, _size, _choice in placed]
    writer, sample = _sample_writer(params, ladder, info)
    for rung, size, rung_choice in placed:
        mine = sample if rung["name"] == writer else None
        ctx.spawn_child(_rendition_child(params, rung, size, staged_rel, rung_choice, info, mine))
    ctx.spawn_child(_thumbnail_child(params, staged_rel, info.duration_seconds))
    if params.quality_metrics:
        ctx.log(
            f"reference sample: {sample['frames']} frames, written by rendition {writer}"
            if sample
            else "reference sample: none (no software-encoded rung, or too big); measuring decodes the source"
        )
        ctx.spawn_child(_quality_child(params, ladder, staged_rel, info, sample))
    else:
        ctx.spawn_child(_package_child(params, ladder, info.duration_seconds))


def _spawn_split(ctx: StageContext, params: TranscodeParams, info, source, plan, placed: list) -> None:
    """The split path: every stage after this one on any worker (workers/stages/split.py)."""
    rungs = []
    for rung, size, rung_choice in placed:
        crf = crf_for_codec(rung["codec"], params.crf)
        rungs.append((split.rung_payload(params, rung, size, crf), rung_choice))
    split.spawn_split(ctx, params, source.rel_path, info, plan, rungs)


@stage("transcode")
def transcode(ctx: StageContext) -> dict:
    params = stage_params(ctx, "transcode")
    source = resolve_source(params, ctx)
    ctx.check_cancelled()
    # In place (a split job never stages its input on this worker), by descriptor: the probe and
    # the planning read the file the check approved, whatever its name means by then.
    with split_encode.media_source(source.rel_path, what="input") as opened:
        info = probe_media(source.path, fd=opened.fd)
        ctx.log(
            f"source: {info.width}x{info.height} {info.fps} fps {info.video_codec}/{info.audio_codec or '-'} "
            f"{info.duration_seconds:.2f}s"
        )
        plan, record, note = split.try_plan(ctx, params, opened.path, info)
    choice = choose_resource(ctx)
    placed = _place_ladder(ctx, params, info, choice)
    if plan is not None:
        _spawn_split(ctx, params, info, source, plan, placed)
    else:
        staged = stage_input(ctx, source)
        _spawn_unsplit(ctx, params, info, workspace_rel(ctx, staged), placed)
    ctx.progress(100.0)
    ladder = [rung for rung, _size, _choice in placed]
    ctx.log(
        "ladder: "
        + ", ".join(
            f"{r['name']} {r['resolution']} {r['codec']} ({r['encoder']}) {r['video_bitrate_kbps']}k"
            for r in ladder
        )
    )
    return {
        "source": {k: v for k, v in info.to_dict().items() if k != "path"},
        "ladder": ladder,
        "resource": choice.as_dict(),
        "split": record,
        **({"job_log": note} if note else {}),
    }


def _rendition_encoding(p: dict) -> commands.VideoEncoding:
    """The rung's encoder and rate control from the payload (bad values cannot get better)."""
    kbps = int(p["video_bitrate_kbps"])
    try:
        return commands.VideoEncoding(
            encoder_of(p),
            p.get("preset", "veryfast"),
            int(p.get("crf", 23)),
            kbps,
            2 * kbps,
            float(p["segment_seconds"]),
        )
    except ValueError as exc:
        raise PermanentFailure(str(exc)) from None


def _searched_encoding(
    ctx: StageContext, p: dict, src: Path, final: Path, encoding: commands.VideoEncoding, throttle
) -> tuple[commands.VideoEncoding, dict]:
    """With target_vmaf: the per-title CRF search on samples (its record kept beside the rendition
    for the quality stage), and the encoding at the chosen CRF."""
    name = str(p["name"])
    search = crf_search(
        ctx,
        src,
        name=name,
        encoding=encoding,
        size=(int(p["width"]), int(p["height"])),
        source_size=(int(p["source_width"]), int(p["source_height"])),
        duration=float(p["duration"]),
        fps=p.get("fps"),
        target_vmaf=float(p["target_vmaf"]),
        throttle=throttle,
    )
    final.with_name(f"{name}.search.json").write_text(json.dumps(search, sort_keys=True))
    return replace(encoding, crf=int(search["chosen_crf"])), search


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
    encoding = _rendition_encoding(p)
    ctx.log(f"rendition {name}: codec {encoding.codec}, encoder {encoding.encoder}")
    throttle = throttle_for(ctx)
    search = None
    if p.get("target_vmaf") is not None:
        encoding, search = _searched_encoding(ctx, p, src, final, encoding, throttle.span(0.0, 40.0))
    size = (int(p["width"]), int(p["height"]))
    argv = commands.encode_video(
        src, partial, encoding=encoding, audio_kbps=int(p.get("audio_bitrate_kbps", 128)), size=size
    )
    span = throttle.span(40.0, 100.0) if search is not None else throttle
    # This rung's run may also write the reference sample: it decodes the whole source anyway.
    sample = p.get("reference_sample") if is_software(encoding.encoder) else None
    run_encode(ctx, argv, sample, duration=float(p["duration"]), throttle=span, what=f"rendition {name}")
    os.replace(partial, final)
    return _rendition_result(ctx, name, final, encoding, search)


def _rendition_result(ctx: StageContext, name: str, final: Path, encoding, search: dict | None) -> dict:
    info = probe(final)
    ctx.log(
        f"rendition {name}: {info.width}x{info.height} {encoding.codec} ({encoding.encoder}, crf {encoding.crf}), "
        f"{info.bitrate} bit/s, {final.stat().st_size} bytes"
    )
    return {
        "name": name,
        "width": info.width,
        "height": info.height,
        "bitrate": info.bitrate,
        "codec": encoding.codec,
        "encoder": encoding.encoder,
        "crf": encoding.crf,
        "file": workspace_rel(ctx, final),
        **({"search": search} if search is not None else {}),
    }


@stage("transcode.thumbnail")
def transcode_thumbnail(ctx: StageContext) -> dict:
    p = ctx.payload
    with contextlib.ExitStack() as stack:
        if scratch.on_scratch(ctx):  # a split job: from the media root (by descriptor), onto the scratch
            source = stack.enter_context(split_encode.media_source(p["source"]))
            src, fds = source.path, source.pass_fds
            final = scratch.attempt_dir(ctx, "thumbnail") / THUMBNAIL
        else:
            src, fds = ws(ctx, p["input"]), ()
            final = Path(ctx.workspace) / THUMBNAIL
        partial = partial_path(final)
        argv = commands.thumbnail(src, partial, timestamp=float(p["timestamp"]), width=int(p["width"]))
        run_ffmpeg(ctx, argv, duration=None, throttle=None, what="thumbnail", pass_fds=fds)
    if not partial.exists():
        raise PermanentFailure(f"no frame at {p['timestamp']}s")
    os.replace(partial, final)
    ctx.progress(100.0)
    return {"file": scratch.rel(ctx, final) if scratch.on_scratch(ctx) else THUMBNAIL}


def _rendition_file(ctx: StageContext, name: str, artifacts: dict | None) -> Path:
    """A rendition's MP4: the stitch's (split job, named in the payload) or the workspace's."""
    if artifacts:
        return scratch.resolve(ctx, artifacts["renditions"][name])
    return ws(ctx, f"{RENDITIONS_DIR}/{name}.mp4")


def _package_into(ctx: StageContext, building: Path, p: dict) -> list:
    """HLS of every rendition of payload `p` under `building`, and the master playlist. HEVC and AV1
    renditions are CMAF (`package_cmaf_audio`): video-only tracks plus one audio rendition."""
    renditions = p["renditions"]
    sources = _rendition_sources(ctx, renditions, p.get("artifacts"))
    cmaf_sources = [sources[str(r["name"])] for r in renditions if r.get("codec") in FMP4_CODECS]
    audio_src = next((src for src in cmaf_sources if probe(src).has_audio), None)
    throttle = throttle_for(ctx)
    steps = len(renditions) + (1 if audio_src else 0)
    variants = []
    for i, rendition in enumerate(renditions):
        ctx.check_cancelled()
        name = str(rendition["name"])
        fmp4 = rendition.get("codec") in FMP4_CODECS
        span = throttle.span(100.0 * i / steps, 100.0 * (i + 1) / steps)
        _package_rendition(
            ctx, sources[name], building / name, fmp4, separate_audio=bool(audio_src), span=span
        )
        variant = variant_from_probe(
            f"{name}/index.m3u8",
            probe(sources[name]),
            rendition.get("video_bitrate_kbps"),
            int(p.get("audio_bitrate_kbps", 128)),
            codec_string_of(sources[name]),
        )
        variants.append(replace(variant, audio_group=AUDIO_GROUP) if fmp4 and audio_src else variant)
    audio = None
    if audio_src is not None:
        span = throttle.span(100.0 * (steps - 1) / steps, 100.0)
        audio = package_cmaf_audio(ctx, audio_src, building / AUDIO_GROUP, span)
    version = 7 if cmaf_sources else 3
    (building / "master.m3u8").write_text(master_playlist(variants, version=version, audio=audio))
    return variants


def _rendition_sources(ctx: StageContext, renditions: list[dict], artifacts: dict | None) -> dict[str, Path]:
    sources = {str(r["name"]): _rendition_file(ctx, str(r["name"]), artifacts) for r in renditions}
    for name, src in sources.items():
        if not src.exists():
            # The scheduler holds this stage until its siblings completed; a missing rendition means
            # the workspace was lost (e.g. cleaned) and only a new execution can help.
            raise PermanentFailure(f"rendition {name} is missing from the workspace")
    return sources


def _package_rendition(
    ctx: StageContext, src: Path, out_dir: Path, fmp4: bool, *, separate_audio: bool, span
):
    """One rendition's media playlist: MPEG-TS with its audio muxed in, or a CMAF video track (its
    audio is the ladder's audio rendition when there is one)."""
    out_dir.mkdir()
    streams = "video" if fmp4 and separate_audio else "all"
    argv = commands.hls_package(
        src, out_dir, segment_seconds=float(ctx.payload["segment_seconds"]), fmp4=fmp4, streams=streams
    )
    duration = float(ctx.payload.get("duration") or 0) or None
    run_ffmpeg(ctx, argv, duration=duration, throttle=span, what=f"hls {out_dir.name}")
    if fmp4:
        cmaf.mark_segments(out_dir)


def package_cmaf_audio(ctx: StageContext, src: Path, out_dir: Path, span) -> AudioRendition:
    """The ladder's one audio rendition (CMAF, `audio/index.m3u8`), remuxed from a rendition's AAC
    track: every rendition encodes the same source audio at the same bitrate, so one serves all."""
    out_dir.mkdir()
    argv = commands.hls_package(
        src, out_dir, segment_seconds=float(ctx.payload["segment_seconds"]), fmp4=True, streams="audio"
    )
    duration = float(ctx.payload.get("duration") or 0) or None
    run_ffmpeg(ctx, argv, duration=duration, throttle=span, what="hls audio")
    cmaf.mark_segments(out_dir)
    return AudioRendition(uri=f"{out_dir.name}/index.m3u8", channels=probe(src).channels)


@stage("transcode.package")
def transcode_package(ctx: StageContext) -> dict:
    """HLS for every rendition, then the master playlist. Builds into `hls.partial/` and renames it
    to `hls/` at the end, so a retry starts clean and upload never sees half a package. A split job
    builds in this attempt's scratch directory and names it to the upload."""
    p = ctx.payload
    upload = {"renditions": [str(r["name"]) for r in p["renditions"]]}
    if scratch.on_scratch(ctx):
        final = scratch.attempt_dir(ctx, "package") / HLS_DIR
        final.mkdir()
        variants = _package_into(ctx, final, p)
        upload["artifacts"] = {**p["artifacts"], "hls": scratch.rel(ctx, final)}
    else:
        workspace = Path(ctx.workspace)
        building = fresh_dir(workspace / f"{HLS_DIR}.partial")
        variants = _package_into(ctx, building, p)
        final = workspace / HLS_DIR
        if final.exists():
            shutil.rmtree(final)
        os.replace(building, final)
    upload_child = child("transcode.upload", upload, pool="background", duration=p.get("duration"))
    scratch.view(ctx).spawn_child(upload_child)
    ctx.progress(100.0)
    ctx.log(f"packaged {len(variants)} renditions; master playlist {HLS_DIR}/master.m3u8")
    return {
        "variants": [
            {"uri": v.uri, "bandwidth": v.bandwidth, "resolution": f"{v.width}x{v.height}"} for v in variants
        ]
    }


def _workspace_files(ctx: StageContext, names: list[str]) -> list[tuple[Path, str]]:
    workspace = Path(ctx.workspace)
    files = [(ws(ctx, f"{RENDITIONS_DIR}/{name}.mp4"), f"{RENDITIONS_DIR}/{name}.mp4") for name in names]
    files += _tree(ws(ctx, HLS_DIR), HLS_DIR)
    thumb = workspace / THUMBNAIL
    if thumb.exists():
        files.append((thumb, THUMBNAIL))
    measured = workspace / QUALITY_DIR / QUALITY_JSON
    if measured.exists():
        files.append((measured, QUALITY_JSON))
    return files


def _scratch_files(ctx: StageContext, names: list[str], artifacts: dict) -> list[tuple[Path, str]]:
    """A split job's outputs, each the file an accepted finish named."""
    files = [(scratch.resolve(ctx, artifacts["renditions"][n]), f"{RENDITIONS_DIR}/{n}.mp4") for n in names]
    files += _tree(scratch.resolve(ctx, artifacts["hls"]), HLS_DIR)
    if artifacts.get("thumbnail"):
        files.append((scratch.resolve(ctx, artifacts["thumbnail"]), THUMBNAIL))
    if artifacts.get("quality"):
        files.append((scratch.resolve(ctx, artifacts["quality"]), QUALITY_JSON))
    return files


def _tree(root: Path, prefix: str) -> list[tuple[Path, str]]:
    return [
        (path, f"{prefix}/{path.relative_to(root).as_posix()}")
        for path in sorted(root.rglob("*"))
        if path.is_file()
    ]


@stage("transcode.upload")
def transcode_upload(ctx: StageContext) -> dict:
    """Publish renditions, HLS and thumbnail. The runtime moves them to output storage (local
    directory or S3) when this stage finishes, all or nothing."""
    names = [str(n) for n in ctx.payload["renditions"]]
    if scratch.on_scratch(ctx):
        files = _scratch_files(ctx, names, ctx.payload["artifacts"])
    else:
        files = _workspace_files(ctx, names)
    missing = [name for path, name in files if not path.exists()]
    if missing:
        raise PermanentFailure(f"missing from the workspace: {', '.join(missing)}")
    throttle = throttle_for(ctx)
    for i, (path, name) in enumerate(files, start=1):
        ctx.check_cancelled()
        # Segments are many and uniform: their metadata is their size. MP4s and the JPEG are probed.
        publish(ctx, path, name, probe_it=path.suffix in (".mp4", ".jpg"))  # quality.json: kind data
        throttle.update(100.0 * i / len(files))
    ctx.progress(100.0)
    ctx.log(f"publishing {len(files)} files")
    return {"files": len(files), "master_playlist": f"{HLS_DIR}/master.m3u8"}
