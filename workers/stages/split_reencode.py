"""reencode_streaming split in chunks (issue 33): the transcode's chunk, audio, stitch and measuring
stages (workers/stages/split*.py) with one rung, then the re-encoded file is published and
registered in the library from the scratch.

    reencode_streaming (dispatch)    probes in place, plans the chunks
      ├─ transcode.chunk × K         cluster: the chunk's frames at the job's settings
      ├─ transcode.audio             cluster: the whole source's audio, once
      └─ transcode.stitch            cluster, waits: checks, joins, muxes the audio
           ├─ (with quality_metrics) transcode.split_quality (gate) over the chunks' own
           │   measurements (transcode.chunk_quality for a GPU chunk)
           └─ reencode_streaming.publish   cluster: publishes the file (and quality.json)
                └─ library.register        cluster: copies it from the scratch into the library
"""

from __future__ import annotations

from typing import Any

from media import quality
from workers import scratch
from workers.stages import split
from workers.stages.base import StageContext, stage
from workers.stages.common import child, probe_media, publish
from workers.stages.quality import QUALITY_JSON

PROGRESS = {  # payload "progress_group": the reencode_streaming groups they count in (15_progress.sql)
    "transcode.chunk": "reencode_streaming.encode",
    "transcode.audio": "reencode_streaming.encode",
    "transcode.chunk_quality": "reencode_streaming.quality",
    "transcode.split_quality": "reencode_streaming.quality",
}


def rung(params, name: str, encoder: str, size: tuple[int, int]) -> dict[str, Any]:
    """The one rung: the job's encoder, preset, CRF and peak (no forced keyframes but the chunks')."""
    return {
        "name": name,
        "codec": "h264",
        "encoder": encoder,
        "width": size[0],
        "height": size[1],
        "preset": params.preset,
        "crf": params.crf,
        "video_bitrate_kbps": params.target_bitrate_kbps,
        "segment_seconds": None,
    }


def spawn(ctx: StageContext, params, source, info, plan, choice, size, register: dict) -> None:
    """The split reencode's children; `register`: library.register's payload less its source."""
    name = register["output_name"][: -len(".mp4")]
    rungs = [rung(params, name, choice.encoder, size or (info.width, info.height))]
    frames = quality.frame_count(info.duration_seconds, info.fps)
    after = {
        "source": source.rel_path,
        "metrics": list(params.quality_metrics),
        "min_vmaf": params.min_vmaf,
        "target_vmaf": None,
        "n_subsample": quality.n_subsample_for(frames, info.fps, params.vmaf_subsample),
        "source_width": info.width,
        "source_height": info.height,
        "publish": {**register, "duration": info.duration_seconds},
        "progress": PROGRESS,
    }
    split.spawn_chunks(
        ctx, params, source.rel_path, info, plan, list(zip(rungs, [choice], strict=True)), after
    )


@stage("reencode_streaming.publish")
def reencode_streaming_publish(ctx: StageContext) -> dict:
    """Publish the stitched file (and quality.json), then register it in the library."""
    p = ctx.payload
    artifacts = p["artifacts"]
    name = p["output_name"][: -len(".mp4")]
    final = scratch.resolve(ctx, artifacts["renditions"][name])
    publish(ctx, final, p["output_name"])
    if artifacts.get("quality"):
        publish(ctx, scratch.resolve(ctx, artifacts["quality"]), QUALITY_JSON, kind="data")
    register = {k: p[k] for k in ("path", "directory", "title")}
    register.update(source=artifacts["renditions"][name], metadata=probe_media(final).asset_fields())
    scratch.ScratchView(ctx).spawn_child(child("library.register", register))
    ctx.progress(100.0)
    return {"output": p["output_name"], "library_path": p["path"]}
