"""Split-and-stitch transcodes (issue 33): one title's encoding spread over every free slot of the farm.

    transcode (dispatch, cpu)        probes the source in the media root, plans the chunks
      │                              (media.split.plan), stores the plan in its result (`split`)
      ├─ transcode.chunk × K         cluster: one FFmpeg run per chunk encodes the chunk's exact frame
      │                              range for every rung (one decode of the source); with
      │                              quality_metrics a cpu chunk then measures its own files, so
      │                              measuring overlaps the other chunks' encodes
      ├─ transcode.audio             cluster: the whole source's audio, once (never per chunk)
      ├─ transcode.thumbnail         cluster: the JPEG, from the media root
      └─ transcode.stitch            cluster, waits for its siblings: checks every chunk's frame count
           │                         against the plan; a chunk that does not match is redone (a new
           │                         chunk task and a new stitch); else joins each rung's chunks
           │                         without re-encoding and muxes the audio
           ├─ transcode.chunk_quality       per stitched chunk that did not measure itself (a GPU
           │                                chunk, or a wrong frame count there): scored here
           └─ transcode.split_quality       waits for them: pools the per-frame scores of the
                │                           stitched chunk attempts, seams, gate, quality.json
                └─ transcode.package → transcode.upload   as unsplit, on the scratch (cluster)

Every stage after the dispatch is placed `cluster` and works on the shared scratch (workers/scratch.py,
DECISIONS 19): a lost worker costs only the stages it was running. Files are named by task id and
attempt and read only through an accepted finish's result or payload.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from django.conf import settings

from media.params import TranscodeParams
from media.probe import MediaInfo
from media.split.plan import SplitImpossible, plan_split
from workers import scratch
from workers.stages import split_encode
from workers.stages.base import ChildSpec, PermanentFailure, StageContext, stage
from workers.stages.common import child, run_ffmpeg, throttle_for
from workers.stages.split_results import latest_results

SCENE_WINDOW_SECONDS = 2.0  # a boundary moves to a scene cut at most this far (media.split.plan)
MAX_REDO_ROUNDS = 2  # stitches that may send chunks back before the job fails


def split_mode(params: TranscodeParams, info: MediaInfo) -> tuple[str, str]:
    """("chunks" | "off", why) for `params.split` and this source."""
    minimum = float(settings.SPLIT_MIN_SECONDS)
    if params.split == "off":
        return "off", "split is off"
    if params.split == "auto" and info.duration_seconds < minimum:
        return "off", f"auto: the source ({info.duration_seconds:.1f}s) is shorter than {minimum:g}s"
    if params.split == "auto":
        return "chunks", f"auto: the source ({info.duration_seconds:.1f}s) is at least {minimum:g}s"
    return "chunks", "split: chunks was asked for"


def _dedicated(job_id) -> bool:
    from scheduler.models import JobSchedule

    return JobSchedule.objects.filter(job_id=job_id, execution_mode="dedicated").exists()


def try_plan(ctx: StageContext, params: TranscodeParams, source: Path, info: MediaInfo):
    """(plan, split record for the job detail, None), or (None, None, note) when the job takes the
    unsplit path: `note` says why, for the job's own log when the plan was asked for but is
    impossible (the dispatch's result names it `job_log`; finish_task_v1 appends it). A dedicated
    job (POST /v2/queue/{id}/dedicate) runs on its own worker, so `auto` does not split it
    (`chunks` cannot be dedicated: 409)."""
    mode, reason = split_mode(params, info)
    if mode == "chunks" and params.split == "auto" and _dedicated(ctx.job_id):
        mode, reason = "off", "auto: a dedicated job runs on its own worker"
    if mode == "off":
        ctx.log(f"split: off ({reason})")
        return None, None, None
    started = time.monotonic()
    try:
        plan = plan_split(
            source, chunk_seconds=params.chunk_seconds, scene_window_seconds=SCENE_WINDOW_SECONDS
        )
    except SplitImpossible as exc:
        note = f"split: not possible ({exc}); falling back to the unsplit path on one worker"
        ctx.log(note)
        return None, None, note
    seconds = round(time.monotonic() - started, 2)
    ctx.log(f"split: {len(plan.chunks)} chunks ({reason}); {plan.reason}; planned in {seconds}s")
    record = {**plan.to_dict(), "reason": f"{reason}; {plan.reason}", "planning_seconds": seconds}
    return plan, record, None


def rung_payload(params: TranscodeParams, rung: dict, size: tuple[int, int], crf: int) -> dict[str, Any]:
    return {
        "name": rung["name"],
        "codec": rung["codec"],
        "encoder": rung["encoder"],
        "width": size[0],
        "height": size[1],
        "preset": params.preset,
        "crf": crf,
        "video_bitrate_kbps": rung["video_bitrate_kbps"],
        "segment_seconds": params.segment_seconds,
    }


def cluster(spec: ChildSpec) -> ChildSpec:
    """`spec` placed `cluster` and on the scratch."""
    return replace(spec, placement="cluster", payload={**spec.payload, scratch.SCRATCH_KEY: True})


def _chunk_child(
    source_rel: str, info: MediaInfo, state: dict, chunk: dict, rungs: list[dict], target, choice, measure
) -> ChildSpec:
    seconds = float(chunk["end_seconds"]) - float(chunk["start_seconds"])
    payload = {
        "source": source_rel,
        "chunk": chunk,
        "prev_chunk": state["chunks"][chunk["index"] - 1] if chunk["index"] > 0 else None,
        "fps": state["fps"],
        "frame_count": state["frame_count"],
        "source_width": info.width,
        "source_height": info.height,
        "renditions": rungs,
        "target_vmaf": target,
        "measure": measure,
        # task_weight_v1: progress counts each chunk by its frames (duration x pixels).
        "duration": seconds,
        "width": rungs[0]["width"],
        "height": rungs[0]["height"],
    }
    return cluster(child("transcode.chunk", payload, resource=choice, duration=seconds))


def spawn_split(
    ctx: StageContext, params: TranscodeParams, source_rel: str, info: MediaInfo, plan, placed
) -> None:
    """A split transcode's children: chunks, audio, the thumbnail and the stitch (all cluster).
    `placed`: (rung payload, resource) per rung, largest first."""
    duration = info.duration_seconds
    at = params.thumbnail_at if params.thumbnail_at is not None else duration * 0.25
    thumb = {
        "source": source_rel,
        "timestamp": min(at, max(0.0, duration - 0.1)),
        "width": params.thumbnail_width,
    }
    ctx.spawn_child(cluster(child("transcode.thumbnail", thumb, duration=duration)))
    rungs = [payload for payload, _choice in placed]
    spawn_chunks(ctx, params, source_rel, info, plan, placed, _after_stitch(params, source_rel, info, rungs))


def spawn_chunks(
    ctx: StageContext, params, source_rel: str, info: MediaInfo, plan, placed, after: dict
) -> None:
    """Chunks, audio and the stitch that waits for them (and for the caller's other children);
    `after`: what the stitch hands on. `after["progress"]`, if any: {task type: the job type's
    progress group it counts in} (scheduler/sql/functions/15_progress.sql)."""
    rungs = [payload for payload, _choice in placed]
    # One run per chunk encodes every rung: its category is the most demanding rung's.
    choice = next((c for _p, c in placed if c.use_gpu), placed[0][1])
    groups = after.get("progress") or {}
    state = plan.to_state()
    measure = own_measuring(after, choice)
    for chunk in state["chunks"]:
        spec = _chunk_child(
            source_rel, info, state, chunk, rungs, getattr(params, "target_vmaf", None), choice, measure
        )
        ctx.spawn_child(grouped(spec, groups))
    duration = info.duration_seconds
    if info.has_audio:
        audio = {"source": source_rel, "audio_bitrate_kbps": params.audio_bitrate_kbps, "duration": duration}
        ctx.spawn_child(grouped(cluster(child("transcode.audio", audio, duration=duration)), groups))
    stitch = {"renditions": rungs, "plan": state, "round": 0, "next": after, "duration": duration}
    spec = child("transcode.stitch", stitch, pool="background", duration=duration, wait_for_siblings=True)
    ctx.spawn_child(cluster(spec))


def own_measuring(after: dict, choice) -> dict | None:
    """What a chunk stage measures right after its encode (None: nothing). Only a cpu chunk measures
    itself: a GPU chunk would hold its GPU slot (and VRAM) while libvmaf runs on the CPU, so its
    measurement stays a stage of its own, spawned by the stitch."""
    if not after.get("metrics") or choice.category != "cpu":
        return None
    return {"metrics": list(after["metrics"]), "n_subsample": int(after["n_subsample"])}


def grouped(spec: ChildSpec, groups: dict[str, str]) -> ChildSpec:
    """`spec` with the progress group its job type counts it in, when `groups` names one."""
    group = groups.get(spec.task_type)
    return replace(spec, payload={**spec.payload, "progress_group": group}) if group else spec


def _after_stitch(params: TranscodeParams, source_rel: str, info: MediaInfo, rungs: list[dict]) -> dict:
    """What the stitch hands on: measuring (when asked) and packaging."""
    from media import quality

    frames = quality.frame_count(info.duration_seconds, info.fps)
    return {
        "source": source_rel,
        "metrics": list(params.quality_metrics),
        "min_vmaf": params.min_vmaf,
        "target_vmaf": params.target_vmaf,
        "n_subsample": quality.n_subsample_for(frames, info.fps, params.vmaf_subsample),
        "source_width": info.width,
        "source_height": info.height,
        "package": {
            "renditions": [
                {"name": r["name"], "video_bitrate_kbps": r["video_bitrate_kbps"], "codec": r["codec"]}
                for r in rungs
            ],
            "segment_seconds": params.segment_seconds,
            "audio_bitrate_kbps": params.audio_bitrate_kbps,
            "duration": info.duration_seconds,
        },
    }


# --- the chunk and the audio ----------------------------------------------------------------------


ENCODE_SHARE = 75.0  # a measuring chunk's progress: encoding up to here, measuring the rest


class ProgressShare:
    """The stage context with its progress mapped to [low, high] of the stage's own."""

    def __init__(self, ctx: StageContext, low: float, high: float):
        self._ctx, self._low, self._high = ctx, low, high

    def __getattr__(self, name):
        return getattr(self._ctx, name)

    def progress(self, percent: float, detail: dict[str, Any] | None = None) -> None:
        share = max(0.0, min(100.0, float(percent))) / 100.0
        self._ctx.progress(self._low + share * (self._high - self._low), detail)


@stage("transcode.chunk")
def transcode_chunk(ctx: StageContext) -> dict:
    p = ctx.payload
    chunk = p["chunk"]
    index = int(chunk["index"])
    out_dir = scratch.attempt_dir(ctx, f"chunks/{index:05d}")
    started = time.monotonic()
    measuring = bool(p.get("measure"))
    frames = int(chunk["last_frame"]) - int(chunk["first_frame"]) + 1
    # One open for the encode and the measuring: both read the file this stage's check approved.
    with split_encode.media_source(p["source"]) as source:
        encoded = split_encode.encode_chunk(
            ProgressShare(ctx, 0.0, ENCODE_SHARE) if measuring else ctx, p, out_dir, source
        )
        seconds = round(time.monotonic() - started, 2)
        quality = measure_own(ctx, p, encoded.files, frames, out_dir, source) if measuring else None
    ctx.progress(100.0)
    result = {
        "index": index,
        "files": {name: scratch.rel(ctx, path) for name, path in encoded.files.items()},
        "crf": encoded.crf,
        "search": encoded.search,
        "frames": frames,
        "worker": ctx.worker_uid,
        "attempt": ctx.attempt,
        "seconds": seconds,
    }
    return {**result, "quality": quality} if quality else result


def measure_own(ctx: StageContext, p: dict, files: dict[str, Path], frames: int, out_dir: Path, source):
    """The chunk's measurement, right after its encode and by the same attempt (issue 33): it
    overlaps with the other chunks' encodes instead of waiting for the stitch, and it scores exactly
    the files this attempt's result names (a chunk the stitch sends back is measured again by its
    redo). A file with the wrong frame count is not measured: the stitch will send it back."""
    from media.split.stitch import packet_count
    from workers.stages.split_quality import measure_chunk

    wrong = {
        name: n for name, n in ((name, packet_count(path)) for name, path in files.items()) if n != frames
    }
    if wrong:
        ctx.log(f"chunk {p['chunk']['index']}: frames {wrong}, planned {frames}; not measured")
        return None
    return measure_chunk(ctx, {**p, **p["measure"]}, files, out_dir, source)


@stage("transcode.audio")
def transcode_audio(ctx: StageContext) -> dict:
    """The whole source's audio in one AAC encode: per-chunk audio would leave a priming gap at
    every seam."""
    from media.split.audio import audio_argv

    p = ctx.payload
    out = scratch.attempt_dir(ctx, "audio") / "audio.m4a"
    started = time.monotonic()
    with split_encode.media_source(p["source"]) as source:  # by descriptor: FFmpeg reads /proc/self/fd/N
        argv = audio_argv(source.path, out, kbps=int(p.get("audio_bitrate_kbps", 128)))
        duration, fds = float(p["duration"]), source.pass_fds
        run_ffmpeg(ctx, argv, duration=duration, throttle=throttle_for(ctx), what="audio", pass_fds=fds)
    if not out.exists():
        raise PermanentFailure("the audio encode wrote no file")
    ctx.progress(100.0)
    return {"file": scratch.rel(ctx, out), "seconds": round(time.monotonic() - started, 2)}


# --- helpers for the stitch ----------------------------------------------------------------------


def chunk_results(ctx: StageContext) -> dict[int, dict]:
    """{chunk index: result} of the accepted (latest completed) chunk task of each index."""
    found: dict[int, dict] = {}
    for result in latest_results(ctx.job_id, ctx.execution_id, "transcode.chunk"):
        found[int(result["index"])] = result
    return found


def single_result(ctx: StageContext, task_type: str) -> dict | None:
    results = latest_results(ctx.job_id, ctx.execution_id, task_type)
    return results[-1] if results else None
