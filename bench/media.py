"""Measurement 6: media overhead — a `reencode_streaming` job through the system vs the same FFmpeg
command run directly.

A test clip (lavfi testsrc2 + sine, H.264/AAC) is generated under the bench's media root. One
worker (`--concurrency 4`, notifications on, the default 1 s poll) runs the job as users would
submit it (`media.submission.create_job`, hardware=cpu): dispatch (stage the input, probe), encode (FFmpeg),
library.register. System time = job created_at -> finished_at (PostgreSQL clock). Direct time = the
encode stage's exact FFmpeg argv (rebuilt from its task payload with the same builder,
`media.commands.reencode_streaming`) run by subprocess on the same input. Runs alternate
(system, direct, system, direct, ...) after one untimed warm-up encode, and the reported ratio is the
median of the pairs, so a burst of load from other work on the machine hits both sides alike.
Because that load still moves single pairs by tens of percent, the CPU seconds of both sides (the
worker process with its FFmpeg children vs the direct FFmpeg) and the time the job spends outside
its encode stage (dispatch, hand-offs, library.register) are recorded too: they do not depend on
how busy the machine is.
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import time
from pathlib import Path

import psutil

from bench import db
from bench.workers import WorkerPool


def make_clip(path: Path, seconds: int, size: str = "1280x720") -> None:
    from media.ffmpeg import ffmpeg_path

    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            ffmpeg_path(),
            "-nostdin",
            "-hide_banner",
            "-loglevel",
            "error",
            "-y",
            "-f",
            "lavfi",
            "-i",
            f"testsrc2=size={size}:rate=30:duration={seconds}",
            "-f",
            "lavfi",
            "-i",
            f"sine=frequency=440:sample_rate=48000:duration={seconds}",
            "-c:v",
            "libx264",
            "-preset",
            "veryfast",
            "-pix_fmt",
            "yuv420p",
            "-c:a",
            "aac",
            "-b:a",
            "128k",
            "-shortest",
            str(path),
        ],
        check=True,
        timeout=600,
    )


def direct_argv(payload: dict, src: Path, dst: Path) -> list[str]:
    from media import commands

    return commands.reencode_streaming(
        src,
        dst,
        encoder=payload.get("encoder") or "libx264",
        preset=payload["preset"],
        crf=int(payload["crf"]),
        target_bitrate_kbps=int(payload["target_bitrate_kbps"]),
        audio_kbps=int(payload["audio_bitrate_kbps"]),
        size=tuple(payload["size"]) if payload.get("size") else None,
    )


def run_direct(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one direct FFmpeg run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=True,
        timeout=1800,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def process_cpu(pid: int) -> float:
    """CPU seconds of a process and of its children it has waited for (FFmpeg runs)."""
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system + t.children_user + t.children_system


def run_job(conn, rel: str, timeout: float, worker_pid: int) -> dict:
    from media import submission

    cpu_before = process_cpu(worker_pid)

    job = submission.create_job(
        None, {"type": "reencode_streaming", "params": {"input": rel}, "hardware": "cpu"}
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = db.scalar(conn, "SELECT status FROM jobs WHERE id = %s", [job.id])
        if status in ("completed", "failed", "cancelled"):
            break
        time.sleep(0.05)
    worker_cpu = process_cpu(worker_pid) - cpu_before
    row = conn.execute(
        "SELECT status, extract(epoch FROM finished_at - created_at), last_error FROM jobs WHERE id = %s",
        [job.id],
    ).fetchone()
    if row[0] != "completed":
        raise RuntimeError(f"reencode_streaming job {job.id} ended {row[0]}: {row[2]}")
    stages = conn.execute(
        """SELECT t.task_type, extract(epoch FROM t.started_at - j.created_at), extract(epoch FROM t.finished_at - t.started_at),
                  t.payload
             FROM queue_tasks t JOIN jobs j ON j.id = t.job_id
            WHERE t.job_id = %s AND t.placement <> 'cluster' ORDER BY t.started_at""",
        [job.id],
    ).fetchall()
    encode = next((float(st[2]) for st in stages if st[0] == "reencode_streaming.encode"), 0.0)
    return {
        "job_id": str(job.id),
        "seconds": float(row[1]),
        "outside_encode_stage_seconds": round(float(row[1]) - encode, 3),
        "worker_cpu_seconds": round(worker_cpu, 2),
        "stages": [
            {"task_type": s[0], "started_after": round(float(s[1]), 3), "ran": round(float(s[2]), 3)}
            for s in stages
        ],
        "encode_payload": next((s[3] for s in stages if s[0] == "reencode_streaming.encode"), None),
    }


def measure(url: str, workdir: Path, media_root: Path, *, clip_seconds: int, pairs: int, log=print) -> dict:
    clip = media_root / "videos" / "bench-clip.mp4"
    make_clip(clip, clip_seconds)
    rel = "videos/bench-clip.mp4"
    direct_out = workdir / "direct" / "out.mp4"
    direct_out.parent.mkdir(parents=True, exist_ok=True)
    system_runs, direct_runs, ratios, cpu_ratios = [], [], [], []
    with db.connect(url) as conn:
        db.reset_queue(conn)
        pool = WorkerPool(
            url, workdir, 1, concurrency=4, poll_seconds=1.0, notify=True, uid_prefix="bench-media"
        )
        pool.start()
        try:
            argv = None
            worker_pid = pool.pids()[0]
            for index in range(pairs + 1):
                job = run_job(conn, rel, timeout=clip_seconds * 60 + 120, worker_pid=worker_pid)
                if argv is None:
                    argv = direct_argv(job["encode_payload"], clip, direct_out)
                    run_direct(argv)  # warm-up: the first encode pays for cold caches
                    continue  # the first job is a warm-up too
                direct, direct_cpu = run_direct(argv)
                job.pop("encode_payload", None)
                job["direct_seconds"] = round(direct, 3)
                job["direct_cpu_seconds"] = round(direct_cpu, 2)
                system_runs.append(job)
                direct_runs.append(round(direct, 3))
                ratios.append(job["seconds"] / direct)
                cpu_ratios.append(job["worker_cpu_seconds"] / direct_cpu if direct_cpu else None)
                log(
                    f"  media pair {index}: system {job['seconds']:.2f}s, direct {direct:.2f}s, "
                    f"ratio {job['seconds'] / direct:.3f} (CPU: worker {job['worker_cpu_seconds']:.1f}s, "
                    f"direct {direct_cpu:.1f}s); outside the encode stage {job['outside_encode_stage_seconds']:.2f}s"
                )
        finally:
            pool.stop()
    return {
        "clip": {"seconds": clip_seconds, "size": "1280x720", "fps": 30, "audio": "sine 440 Hz"},
        "command": argv,
        "system_runs": system_runs,
        "direct_seconds": direct_runs,
        "ratios": [round(r, 4) for r in ratios],
        "ratio_median": round(statistics.median(ratios), 4) if ratios else None,
        "cpu_ratio_median": round(statistics.median(r for r in cpu_ratios if r), 4)
        if any(cpu_ratios)
        else None,
        "outside_encode_stage_median_seconds": (
            round(statistics.median(r["outside_encode_stage_seconds"] for r in system_runs), 3)
            if system_runs
            else None
        ),
        "system_median_seconds": round(statistics.median(r["seconds"] for r in system_runs), 3)
        if system_runs
        else None,
        "direct_median_seconds": round(statistics.median(direct_runs), 3) if direct_runs else None,
    }
