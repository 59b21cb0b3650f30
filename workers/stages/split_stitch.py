"""The stitch of a split transcode: check every chunk, then join each rung's chunks and mux the audio.

It runs once every sibling (chunks, audio, thumbnail) has completed. A chunk whose frame count
(packets) differs from the plan is never stitched: the stitch sends it back (a new chunk task for
that index, and a new stitch waiting for it) and ends; the new stitch reads the redone chunk, the
latest completed task of its index. After MAX_REDO_ROUNDS such rounds the job fails.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from media.split.plan import SplitPlan
from media.split.stitch import packet_count, stitch_argv, verify_chunks
from workers import scratch
from workers.stages.base import RESERVED_PAYLOAD_KEYS, PermanentFailure, StageContext, stage
from workers.stages.common import child, partial_path, run_ffmpeg
from workers.stages.split import MAX_REDO_ROUNDS, chunk_results, single_result


def plan_of(state: dict) -> SplitPlan:
    return SplitPlan.from_state(state)


def chunk_files(ctx: StageContext, p: dict, results: dict[int, dict]) -> dict[str, list[Path]]:
    """{rung name: its chunk files in plan order}, from the accepted chunk results."""
    indexes = [int(c["index"]) for c in p["plan"]["chunks"]]
    missing = [i for i in indexes if i not in results]
    if missing:
        raise PermanentFailure(f"chunks without a completed encode: {missing}")
    return {
        r["name"]: [scratch.resolve(ctx, results[i]["files"][r["name"]]) for i in indexes]
        for r in p["renditions"]
    }


def mismatches(plan: SplitPlan, files: dict[str, list[Path]]) -> dict[int, list[str]]:
    """{chunk index: what is wrong, per rung} for the chunks whose frame counts differ from the plan."""
    wrong: dict[int, list[str]] = {}
    for name, paths in files.items():
        for bad in verify_chunks(paths, plan):
            wrong.setdefault(int(bad.index), []).append(
                f"{name}: {bad.reason} ({bad.got} frames, planned {bad.expected})"
            )
    return wrong


def send_back(ctx: StageContext, p: dict, wrong: dict[int, list[str]]) -> dict:
    """Redo the chunks in `wrong` and stitch again once they are done."""
    round_ = int(p.get("round", 0)) + 1
    if round_ > MAX_REDO_ROUNDS:
        raise PermanentFailure(f"chunks still mismatch after {MAX_REDO_ROUNDS} redos: {wrong}")
    payloads = {int(c.payload["chunk"]["index"]): c for c in chunk_specs(ctx, p, set(wrong))}
    for index, what in sorted(wrong.items()):
        ctx.log(f"stitch: chunk {index} does not match its plan ({'; '.join(what)}); redoing it")
        ctx.spawn_child(payloads[index])
    spec = child(
        "transcode.stitch", {**_own(p), "round": round_}, pool="background", duration=p.get("duration")
    )
    ctx.spawn_child(replace(spec, placement="cluster", wait_for_siblings=True))
    return {"redo": sorted(wrong), "round": round_, "mismatches": {str(k): v for k, v in wrong.items()}}


def _own(payload: dict) -> dict:
    """A payload without the keys the scheduler adds to every child's (RESERVED_PAYLOAD_KEYS)."""
    return {k: v for k, v in payload.items() if k not in RESERVED_PAYLOAD_KEYS}


def chunk_specs(ctx: StageContext, p: dict, indexes: set[int]):
    """The chunk tasks to run again, with the payload (and category) of the original ones."""
    from scheduler.models import QueueTask
    from workers.db import release_connection

    rows = (
        QueueTask.objects.filter(
            job_id=ctx.job_id, execution_id=ctx.execution_id, task_type="transcode.chunk"
        )
        .order_by("id")
        .values("payload", "resource_category", "vram_mb", "timeout_seconds", "pool")
    )
    found = {}
    for row in rows:
        index = int(row["payload"]["chunk"]["index"])
        if index in indexes:
            found[index] = row
    release_connection()
    for index in sorted(indexes):
        row = found[index]
        payload = _own(row["payload"])
        yield replace(
            child("transcode.chunk", {**payload, "redo": int(p.get("round", 0)) + 1}),
            placement="cluster",
            resource_category=row["resource_category"],
            vram_mb=row["vram_mb"],
            timeout_seconds=row["timeout_seconds"],
        )


def stitch_rendition(
    ctx: StageContext, plan: SplitPlan, name: str, files: list[Path], audio: Path | None, out_dir: Path
) -> Path:
    """Join `files` by copying, mux `audio`; a +faststart MP4 under `out_dir` (this attempt's)."""
    final = out_dir / f"{name}.mp4"
    partial = partial_path(final)
    argv = stitch_argv(files, audio, partial, list_file=out_dir / f"{name}.concat.txt", plan=plan)
    run_ffmpeg(ctx, argv, duration=None, throttle=None, what=f"stitch {name}")
    os.replace(partial, final)
    return final


@stage("transcode.stitch")
def transcode_stitch(ctx: StageContext) -> dict:
    p = ctx.payload
    started = time.monotonic()
    plan = plan_of(p["plan"])
    results = chunk_results(ctx)
    files = chunk_files(ctx, p, results)
    wrong = mismatches(plan, files)
    if wrong:
        return send_back(ctx, p, wrong)
    audio = single_result(ctx, "transcode.audio")
    audio_path = scratch.resolve(ctx, audio["file"]) if audio else None
    out_dir = scratch.attempt_dir(ctx, "stitch")
    stitched = {}
    for rung in p["renditions"]:
        ctx.check_cancelled()
        path = stitch_rendition(ctx, plan, rung["name"], files[rung["name"]], audio_path, out_dir)
        frames = packet_count(path)
        if frames != plan.frame_count:
            raise RuntimeError(f"stitched {rung['name']} has {frames} frames, planned {plan.frame_count}")
        stitched[rung["name"]] = scratch.rel(ctx, path)
    thumbnail = single_result(ctx, "transcode.thumbnail")
    artifacts = {"renditions": stitched, "thumbnail": (thumbnail or {}).get("file")}
    seconds = round(time.monotonic() - started, 2)
    ctx.log(f"stitch: {len(stitched)} renditions of {plan.frame_count} frames in {seconds}s")
    hand_on(ctx, p, artifacts, results)
    ctx.progress(100.0)
    return {
        "renditions": stitched,
        "frames": plan.frame_count,
        "seconds": seconds,
        "round": int(p.get("round", 0)),
    }


def hand_on(ctx: StageContext, p: dict, artifacts: dict[str, Any], results: dict[int, dict]) -> None:
    """Pooling the chunks' measurements (and measuring those that did not measure themselves) when
    asked, else what comes next straight away: packaging (transcode) or publishing
    (reencode_streaming)."""
    from workers.stages.split_quality import next_stage, quality_children

    after = p["next"]
    view = scratch.ScratchView(ctx)
    if after.get("metrics"):
        for spec in quality_children(p, after, artifacts, results):
            view.spawn_child(spec)
    else:
        view.spawn_child(next_stage(after, artifacts))
