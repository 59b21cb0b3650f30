"""What a split transcode (issue 33) shows operators: its plan, its chunk x rendition grid, and why
its progress went down. Reads only; the stages wrote it (workers/stages/split*.py).

- `job_split`: the plan the dispatch stored (`split` of the job detail): {"mode", "reason",
  "chunks": [{"index", "first_frame", "last_frame", "start_seconds", "end_seconds"}]}, None for a
  job that was not split.
- `progress_note`: a sentence when a chunk restarted (its frames went back, so progress went down).
- `chunk_grid`: rows per chunk, a cell per rendition (worker, state, seconds, VMAF) for the job page.
"""

from __future__ import annotations

from typing import Any

from scheduler.models import JobSchedule, QueueTask

CHUNK = "transcode.chunk"
CHUNK_QUALITY = "transcode.chunk_quality"


def _execution(job_id, execution_id: int | None) -> int | None:
    if execution_id is not None:
        return execution_id
    return JobSchedule.objects.filter(job_id=job_id).values_list("execution_id", flat=True).first()


def job_split(job_id, execution_id: int | None = None) -> dict[str, Any] | None:
    execution_id = _execution(job_id, execution_id)
    if execution_id is None:
        return None
    result = (
        QueueTask.objects.filter(
            job_id=job_id, execution_id=execution_id, placement="dispatch", state="completed"
        )
        .values_list("result", flat=True)
        .first()
    )
    split = result.get("split") if isinstance(result, dict) else None
    if not isinstance(split, dict):
        return None
    return {
        "mode": split.get("mode"),
        "reason": split.get("reason"),
        "chunks": list(split.get("chunks") or []),
    }


def _chunks(job_id, execution_id: int, task_type: str) -> list[dict[str, Any]]:
    return list(
        QueueTask.objects.filter(job_id=job_id, execution_id=execution_id, task_type=task_type)
        .order_by("id")
        .values(
            "id",
            "state",
            "attempt",
            "claimed_by",
            "started_at",
            "finished_at",
            "payload",
            "result",
            "last_failure",
        )
    )


def progress_note(job_id, execution_id: int | None = None) -> str | None:
    """Why a split job's progress went down: the chunks that started over, and why."""
    execution_id = _execution(job_id, execution_id)
    if execution_id is None:
        return None
    restarted = []
    for row in _chunks(job_id, execution_id, CHUNK):
        index = (row["payload"].get("chunk") or {}).get("index")
        redo = row["payload"].get("redo")
        if row["attempt"] > 1 or (row["attempt"] == 1 and row["state"] == "retry_wait"):
            why = (row["last_failure"] or "").strip().splitlines()[-1:] or ["restarted"]
            restarted.append(f"chunk {index} restarted (attempt {row['attempt']}: {why[0][:200]})")
        elif redo:
            restarted.append(f"chunk {index} redone after the stitch found its frame count wrong")
    if not restarted:
        return None
    return "progress went down: " + "; ".join(restarted) + " — a restarted chunk gives its frames back"


def _seconds(row: dict) -> float | None:
    if row["started_at"] and row["finished_at"]:
        return round((row["finished_at"] - row["started_at"]).total_seconds(), 1)
    return None


def chunk_grid(job_id, execution_id: int | None = None) -> dict[str, Any] | None:
    """{"renditions": [names], "rows": [{"index", "cells": [{worker, state, seconds, vmaf}]}]}, the
    latest task of each chunk (a redone chunk replaces the first); None for a job without chunks."""
    execution_id = _execution(job_id, execution_id)
    if execution_id is None:
        return None
    chunks = _chunks(job_id, execution_id, CHUNK)
    if not chunks:
        return None
    latest = {int(r["payload"]["chunk"]["index"]): r for r in chunks}
    names = [r["name"] for r in chunks[0]["payload"].get("renditions") or []]
    vmaf: dict[int, dict] = {}
    for row in _chunks(job_id, execution_id, CHUNK_QUALITY):
        if row["state"] == "completed" and isinstance(row["result"], dict):
            vmaf[int(row["result"]["index"])] = row["result"].get("vmaf") or {}
    for index, row in latest.items():  # a cpu chunk measures itself (workers/stages/split.py)
        measured = row["result"].get("quality") if isinstance(row["result"], dict) else None
        if measured:
            vmaf[index] = measured.get("vmaf") or {}
    rows = []
    for index in sorted(latest):
        row = latest[index]
        cell = {
            "worker": row["claimed_by"],
            "state": row["state"],
            "seconds": _seconds(row),
            "attempt": row["attempt"],
        }
        rows.append({"index": index, "cells": [{**cell, "vmaf": vmaf.get(index, {}).get(n)} for n in names]})
    return {"renditions": names, "rows": rows}
