"""Measurement 8: measured quality — what scoring every rendition costs, and what target_vmaf saves.

A. Cost of measuring. A 720p test clip (lavfi testsrc2 + sine, H.264/AAC; 20 s in the full profile)
   is transcoded with the default ladder (720p/480p/360p here: rungs above the source are dropped)
   by one worker (`--concurrency 2`, hardware=cpu), alternately with `quality_metrics: []` (nothing
   measured) and with the default `["vmaf"]`, after one untimed warm-up job. Job wall time =
   created_at -> finished_at (PostgreSQL clock); the overhead is the median over pairs of
   (with / without - 1), and the `transcode.quality` stage's own run time is reported beside it.

B. Bits saved by target_vmaf at equal measured quality. For an easy clip (testsrc2) and a hard one
   (testsrc2 under heavy temporal noise), the fixed default ladder is transcoded and measured; then
   for each rung, a one-rung job with `target_vmaf` = that rung's measured fixed-ladder VMAF (capped
   to 50..99) searches its CRF on samples. Bits saved = 1 - (per-title bitrate / fixed bitrate), both
   measured from the files; the per-title VMAF is reported so "equal quality" can be checked (the
   search aims at the target on the samples; a rung counts as reaching the target within 1 point).
   Then the whole ladder at one common target (COMMON_TARGET) in one job, against the same fixed
   ladder: what an operator who asks for "VMAF 90 everywhere" gets, in bits and in VMAF.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from pathlib import Path

from bench import db
from bench.workers import WorkerPool

HARD_NOISE = "noise=alls=25:allf=t+u"
COMMON_TARGET = 90.0  # part B's second comparison: the whole ladder at one target


def make_clip(path: Path, seconds: float, size: str, *, noisy: bool = False) -> None:
    from media.ffmpeg import ffmpeg_path

    path.parent.mkdir(parents=True, exist_ok=True)
    video = f"testsrc2=size={size}:rate=25:duration={seconds:g}" + (f",{HARD_NOISE}" if noisy else "")
    subprocess.run(
        [ffmpeg_path(), "-nostdin", "-hide_banner", "-loglevel", "error", "-y"]
        + [
            "-f",
            "lavfi",
            "-i",
            video,
            "-f",
            "lavfi",
            "-i",
            f"sine=frequency=440:sample_rate=48000:duration={seconds:g}",
        ]
        + ["-c:v", "libx264", "-preset", "veryfast", "-crf", "12", "-pix_fmt", "yuv420p"]
        + ["-c:a", "aac", "-b:a", "128k", "-shortest", str(path)],
        check=True,
        timeout=900,
    )


def run_job(conn, params: dict, timeout: float) -> dict:
    """Submit a transcode as users do (hardware=cpu), wait for it; its wall time, stage times and
    measured quality."""
    from media import submission

    job = submission.create_job(None, {"type": "transcode", "params": params, "hardware": "cpu"})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if db.scalar(conn, "SELECT status FROM jobs WHERE id = %s", [job.id]) in (
            "completed",
            "failed",
            "cancelled",
        ):
            break
        time.sleep(0.1)
    status, seconds, error = conn.execute(
        "SELECT status, extract(epoch FROM finished_at - created_at), last_error FROM jobs WHERE id = %s",
        [job.id],
    ).fetchone()
    if status != "completed":
        raise RuntimeError(f"transcode job {job.id} ended {status}: {error}")
    stages = conn.execute(
        "SELECT task_type, extract(epoch FROM finished_at - started_at), result FROM queue_tasks "
        "WHERE job_id = %s AND placement <> 'cluster' ORDER BY id",
        [job.id],
    ).fetchall()
    quality = next((r[2].get("quality") for r in stages if r[0] == "transcode.quality" and r[2]), None)
    return {
        "job_id": str(job.id),
        "seconds": round(float(seconds), 3),
        "quality_stage_seconds": next(
            (round(float(r[1]), 3) for r in stages if r[0] == "transcode.quality"), None
        ),
        "rendition_stage_seconds": [round(float(r[1]), 3) for r in stages if r[0] == "transcode.rendition"],
        "quality": quality,
    }


def measure_cost(conn, rel: str, pairs: int, timeout: float, log) -> dict:
    runs = []
    overheads = []
    for index in range(pairs + 1):
        without = run_job(conn, {"input": rel, "quality_metrics": []}, timeout)
        with_vmaf = run_job(conn, {"input": rel}, timeout)
        if index == 0:
            continue  # warm-up pair
        overhead = with_vmaf["seconds"] / without["seconds"] - 1
        overheads.append(overhead)
        runs.append(
            {
                "without_seconds": without["seconds"],
                "with_vmaf_seconds": with_vmaf["seconds"],
                "quality_stage_seconds": with_vmaf["quality_stage_seconds"],
                # The rendition stages of both: with VMAF one of them also writes the reference sample.
                "rendition_stage_seconds": {
                    "without": without["rendition_stage_seconds"],
                    "with_vmaf": with_vmaf["rendition_stage_seconds"],
                },
                "n_subsample": with_vmaf["quality"]["settings"]["n_subsample"],
                "overhead": round(overhead, 4),
                "load_average_1m": round(os.getloadavg()[0], 2),  # how busy the machine was
            }
        )
        log(
            f"  quality cost pair {index}: without {without['seconds']:.2f}s, with VMAF "
            f"{with_vmaf['seconds']:.2f}s (+{overhead * 100:.1f} %), quality stage "
            f"{with_vmaf['quality_stage_seconds']:.2f}s, n_subsample {runs[-1]['n_subsample']}, "
            f"load average {runs[-1]['load_average_1m']}"
        )
    return {
        "runs": runs,
        "overhead_median": round(statistics.median(overheads), 4) if overheads else None,
        "without_median_seconds": round(statistics.median(r["without_seconds"] for r in runs), 3)
        if runs
        else None,
        "with_vmaf_median_seconds": round(statistics.median(r["with_vmaf_seconds"] for r in runs), 3)
        if runs
        else None,
        "quality_stage_median_seconds": round(statistics.median(r["quality_stage_seconds"] for r in runs), 3)
        if runs
        else None,
    }


def _per_title_rung(conn, rel: str, entry: dict, timeout: float, log) -> dict:
    """One rung of the fixed-CRF ladder encoded again alone with target_vmaf = its own VMAF: the bits
    the per-title search saves at equal quality."""
    target = round(min(99.0, max(50.0, float(entry["vmaf"]))), 2)
    height = int(entry["name"][:-1])
    per_title = run_job(conn, {"input": rel, "ladder": [{"height": height}], "target_vmaf": target}, timeout)
    [measured] = per_title["quality"]["renditions"]
    search = measured.get("search") or {}
    probes = len(search.get("probes") or [])
    saved = 1 - measured["bitrate_kbps"] / entry["bitrate_kbps"] if entry["bitrate_kbps"] else None
    log(
        f"  {rel} {entry['name']}: fixed {entry['bitrate_kbps']:.0f} kbit/s VMAF {entry['vmaf']:.2f}; "
        f"per-title crf {measured.get('crf')} {measured['bitrate_kbps']:.0f} kbit/s VMAF {measured['vmaf']:.2f} "
        f"({probes} probes, {search.get('seconds')} s): {(saved or 0) * 100:.1f} % bits saved"
    )
    return {
        "name": entry["name"],
        "fixed": {"crf": entry.get("crf"), "bitrate_kbps": entry["bitrate_kbps"], "vmaf": entry["vmaf"]},
        "target_vmaf": target,
        "per_title": {k: measured.get(k) for k in ("crf", "bitrate_kbps", "vmaf", "target_met")},
        "probes": probes,
        "search_seconds": search.get("seconds"),
        "bits_saved": round(saved, 4) if saved is not None else None,
    }


def _common_target(conn, rel: str, rungs: list[dict], fixed_total: float, timeout: float, log) -> dict:
    """The whole ladder at one target_vmaf (COMMON_TARGET), against the fixed-CRF ladder."""
    common = run_job(conn, {"input": rel, "target_vmaf": COMMON_TARGET}, timeout)
    by_name = {r["name"]: r for r in common["quality"]["renditions"]}
    keys = ("crf", "bitrate_kbps", "vmaf", "target_met")
    common_rungs = [
        {"name": r["name"], "fixed": r["fixed"], "per_title": {k: by_name[r["name"]].get(k) for k in keys}}
        for r in rungs
    ]
    common_total = sum(r["per_title"]["bitrate_kbps"] for r in common_rungs)
    log(
        f"  {rel} ladder at target_vmaf {COMMON_TARGET:g}: "
        + ", ".join(
            f"{r['name']} {r['per_title']['bitrate_kbps']:.0f} kbit/s VMAF {r['per_title']['vmaf']:.2f}"
            for r in common_rungs
        )
        + f" ({common['seconds']:.1f} s)"
    )
    return {
        "target_vmaf": COMMON_TARGET,
        "rungs": common_rungs,
        "ladder_bits_saved": round(1 - common_total / fixed_total, 4) if fixed_total else None,
        "job_seconds": common["seconds"],
    }


def measure_savings(conn, rel: str, timeout: float, log) -> dict:
    fixed = run_job(conn, {"input": rel}, timeout)
    rungs = [_per_title_rung(conn, rel, entry, timeout, log) for entry in fixed["quality"]["renditions"]]
    fixed_total = sum(r["fixed"]["bitrate_kbps"] for r in rungs)
    per_title_total = sum(r["per_title"]["bitrate_kbps"] for r in rungs)
    return {
        "rungs": rungs,
        "ladder_bits_saved": round(1 - per_title_total / fixed_total, 4) if fixed_total else None,
        "all_reached_target": all(r["per_title"]["target_met"] for r in rungs),
        "fixed_job_seconds": fixed["seconds"],
        "common_target": _common_target(conn, rel, rungs, fixed_total, timeout, log),
    }


PARTS = ("cost", "savings")


def measure(
    url: str,
    workdir: Path,
    media_root: Path,
    *,
    clip_seconds: float,
    size: str,
    pairs: int,
    parts: tuple[str, ...] = PARTS,
    log=print,
) -> dict:
    """Part A (`cost`) and/or part B (`savings`, the long one: CRF searches on two clips)."""
    clips = {
        "cost": ("videos/quality-cost.mp4", False),
        "easy": ("videos/quality-easy.mp4", False),
        "hard": ("videos/quality-hard.mp4", True),
    }
    make_clip(media_root / clips["cost"][0], clip_seconds, size)
    if "savings" in parts:
        make_clip(media_root / clips["hard"][0], clip_seconds, size, noisy=True)
    clips["easy"] = clips["cost"]  # the same easy clip serves both parts
    timeout = clip_seconds * 60 + 300
    with db.connect(url) as conn:
        db.reset_queue(conn)
        pool = WorkerPool(
            url, workdir, 1, concurrency=2, poll_seconds=1.0, notify=True, uid_prefix="bench-quality"
        )
        pool.start()
        results: dict = {
            "clip": {"seconds": clip_seconds, "size": size, "fps": 25, "hard": f"testsrc2 + {HARD_NOISE}"},
            "parts": list(parts),
        }
        try:
            if "cost" in parts:
                results["cost"] = measure_cost(conn, clips["cost"][0], pairs, timeout, log)
            if "savings" in parts:
                results["savings"] = {
                    name: measure_savings(conn, clips[name][0], timeout, log) for name in ("easy", "hard")
                }
        finally:
            pool.stop()
    return results


def table_rows(results: dict | None) -> list[tuple[str, str, str]]:
    if not results or "cost" not in results:
        return []
    cost = results["cost"]
    rows = [
        (
            "(8) quality: cost of VMAF",
            f"+{(cost.get('overhead_median') or 0) * 100:.1f} % job wall time",
            f"without {cost.get('without_median_seconds')} s, with {cost.get('with_vmaf_median_seconds')} s; "
            f"quality stage {cost.get('quality_stage_median_seconds')} s",
        )
    ]
    for name, saving in (results.get("savings") or {}).items():
        common = saving.get("common_target") or {}
        if common:
            rows.append(
                (
                    f"(8) target_vmaf {common['target_vmaf']:g}, {name} clip",
                    f"{(common.get('ladder_bits_saved') or 0) * 100:.1f} % bits saved",
                    ", ".join(
                        f"{r['name']} VMAF {r['fixed']['vmaf']:.1f}->{r['per_title']['vmaf']:.1f}"
                        for r in common["rungs"]
                    ),
                )
            )
        rows.append(
            (
                f"(8) target_vmaf = fixed VMAF, {name} clip",
                f"{(saving.get('ladder_bits_saved') or 0) * 100:.1f} % bits saved",
                ", ".join(
                    f"{r['name']} {r['fixed']['bitrate_kbps']:.0f}->{r['per_title']['bitrate_kbps']:.0f} kbit/s "
                    f"(VMAF {r['fixed']['vmaf']:.1f}->{r['per_title']['vmaf']:.1f})"
                    for r in saving["rungs"]
                ),
            )
        )
    return rows
