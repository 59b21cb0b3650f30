"""Measurement 12: split-and-stitch transcodes (issue 33) — one title over the whole farm.

A generated source with motion and scene changes (1920x1080, 150 s at 25 fps with audio; `--quick`:
640x360, 24 s) is transcoded with a three-rung ladder (1080/720/480; quick 360/240/144), VMAF
measured, once unsplit on one worker and then split (`split: "chunks"`) on 1, 2 and N workers (N =
the machine's cores). Every worker has one media slot and is pinned to a core of its own
(sched_setaffinity before exec: FFmpeg inherits it), and chunk encodes run with
JETENCODE_FFMPEG_THREADS=1, so N workers use N cores and the unsplit encode one.

Per run: wall time (job created -> finished, PostgreSQL clock), speed-up against the unsplit run,
the share of worker-busy seconds that is overhead (planning = the dispatch, audio, stitch,
measuring, packaging + upload) against encoding (chunks), the scratch bytes written, VMAF and
bitrate of every rung against the unsplit run, frame-count mismatches (stitches that sent a chunk
back), and the tail: from the first worker running out of chunks to the end of the job.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

from bench import db
from bench.workers import WorkerPool, stop_processes

FULL = {"size": "1920x1080", "seconds": 150, "ladder": [1080, 720, 480], "chunk_seconds": 10}
QUICK = {"size": "640x360", "seconds": 24, "ladder": [360, 240, 144], "chunk_seconds": 4}
# Many workers (`--split-shape farm --split-workers 2 4 8 16`): 30 chunks, so 16 workers get about two
# each, and a single-thread unsplit run of about a minute (the GPU machine's 16 cores in one lease).
FARM = {"size": "960x540", "seconds": 120, "ladder": [540, 360, 240], "chunk_seconds": 4}
SMOKE = {"size": "320x180", "seconds": 8, "ladder": [180, 144], "chunk_seconds": 2}  # tests only
SHAPES = {"full": FULL, "quick": QUICK, "farm": FARM, "smoke": SMOKE}
SCENES = (  # (lavfi source, filters) per scene: moving pattern, rotating, gradients, recoloured pattern
    ("testsrc2=size={size}:rate=25", ""),
    ("testsrc=size={size}:rate=25", ",rotate=a=0.4*t:fillcolor=black"),
    ("gradients=size={size}:rate=25:speed=0.08:n=5", ""),
    ("testsrc2=size={size}:rate=25", ",hue=H=2*PI*t/6:s=1.5,negate"),
)
BUSY_GROUPS = {
    "transcode": "planning",
    "transcode.chunk": "encoding",
    "transcode.audio": "audio",
    "transcode.thumbnail": "packaging",
    "transcode.stitch": "stitch",
    "transcode.chunk_quality": "measuring",
    "transcode.split_quality": "measuring",
    "transcode.rendition": "encoding",
    "transcode.quality": "measuring",
    "transcode.package": "packaging",
    "transcode.upload": "packaging",
}


def make_source(path: Path, size: str, seconds: int) -> None:
    """Scenes of equal length, each a different generator (hard cuts between them), plus a tone."""
    from media.ffmpeg import ffmpeg_path

    part = seconds / len(SCENES) * 1.0
    graph = ";".join(
        f"{src.format(size=size)}{extra},trim=duration={part:g},format=yuv420p,setsar=1[v{i}]"
        for i, (src, extra) in enumerate(SCENES)
    )
    graph += ";" + "".join(f"[v{i}]" for i in range(len(SCENES))) + f"concat=n={len(SCENES)}:v=1:a=0[v]"
    path.parent.mkdir(parents=True, exist_ok=True)
    argv = [ffmpeg_path(), "-nostdin", "-hide_banner", "-loglevel", "error", "-y", "-filter_complex", graph]
    argv += ["-f", "lavfi", "-i", f"sine=frequency=330:sample_rate=48000:duration={seconds}", "-map", "[v]"]
    argv += ["-map", "0:a", "-c:v", "libx264", "-preset", "veryfast", "-crf", "16", "-g", "50"]
    argv += ["-c:a", "aac", "-b:a", "160k", "-shortest", str(path)]
    subprocess.run(argv, check=True, timeout=3600)


class PinnedWorkers(WorkerPool):
    """`processes` workers of one media slot, worker i pinned to core i, chunk encodes one thread."""

    def start(self, timeout: float = 120.0) -> PinnedWorkers:
        env = self.env()
        cores = sorted(os.sched_getaffinity(0))
        for index in range(self.processes):
            uid = f"{self.uid_prefix}-{index + 1}"
            log_path = self.workdir / "logs" / f"{uid}-{int(time.time() * 1000)}.log"
            log_path.parent.mkdir(parents=True, exist_ok=True)
            core = cores[index % len(cores)]
            argv = [
                sys.executable,
                str(db.ROOT / "manage.py"),
                "runworker",
                "--uid",
                uid,
                "--concurrency",
                "1",
            ]
            argv += ["--workspace", str(self.workdir / "workspace" / uid)]
            with open(log_path, "wb") as log_file:
                proc = subprocess.Popen(
                    argv,
                    cwd=db.ROOT,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=lambda core=core: os.sched_setaffinity(0, {core}),
                )
            self.procs.append(proc)
            self.uids.append(uid)
            self.logs.append(log_path)
        self.wait_ready(timeout)
        return self


def run_job(conn, rel: str, params: dict, timeout: float) -> str:
    from media import submission

    job = submission.create_job(
        None, {"type": "transcode", "params": {"input": rel, **params}, "hardware": "cpu"}
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = db.scalar(conn, "SELECT status FROM jobs WHERE id = %s", [job.id])
        if status in ("completed", "failed", "cancelled"):
            if status != "completed":
                error = db.scalar(conn, "SELECT last_error FROM jobs WHERE id = %s", [job.id])
                raise RuntimeError(f"transcode job {job.id} ended {status}: {error}")
            return str(job.id)
        time.sleep(0.2)
    raise RuntimeError(f"transcode job {job.id} did not end within {timeout:g}s")


def job_figures(conn, job_id: str) -> dict:
    """Wall time, busy seconds by group, the tail, mismatches and the measured quality of a job."""
    wall = float(
        db.scalar(
            conn, "SELECT extract(epoch FROM finished_at - created_at) FROM jobs WHERE id = %s", [job_id]
        )
    )
    rows = conn.execute(
        "SELECT task_type, claimed_by, extract(epoch FROM finished_at - started_at), finished_at, result "
        "FROM queue_tasks WHERE job_id = %s AND state = 'completed' AND task_type <> 'webhook'",
        [job_id],
    ).fetchall()
    busy: dict[str, float] = {}
    for task_type, _worker, seconds, _end, result in rows:
        group = BUSY_GROUPS.get(task_type, "other")
        busy[group] = busy.get(group, 0.0) + float(seconds or 0)
        # A cpu chunk measures itself after its encode (workers/stages/split.py): that part of
        # its stage is measuring, not encoding.
        measured = float(((result or {}).get("quality") or {}).get("seconds") or 0)
        if task_type == "transcode.chunk" and measured:
            busy["encoding"] -= measured
            busy["measuring"] = busy.get("measuring", 0.0) + measured
    total = sum(busy.values()) or 1.0
    last_chunk = {}
    for task_type, worker, _s, end, _r in rows:
        if task_type in ("transcode.chunk", "transcode.rendition"):
            last_chunk[worker] = max(last_chunk.get(worker, end), end)
    end = db.scalar(conn, "SELECT finished_at FROM jobs WHERE id = %s", [job_id])
    tail = (end - min(last_chunk.values())).total_seconds() if last_chunk else None
    mismatches = sum(len((r[4] or {}).get("redo") or []) for r in rows if r[0] == "transcode.stitch")
    quality = next(
        (r[4].get("quality") for r in rows if r[0] in ("transcode.split_quality", "transcode.quality")), None
    )
    return {
        "job_id": job_id,
        "wall_seconds": round(wall, 2),
        "busy_seconds": {k: round(v, 2) for k, v in sorted(busy.items())},
        "overhead_share": round(1 - busy.get("encoding", 0.0) / total, 4),
        "overhead_share_by_group": {
            k: round(v / total, 4) for k, v in sorted(busy.items()) if k != "encoding"
        },
        "tail_seconds": round(tail, 2) if tail is not None else None,
        "frame_count_mismatches": mismatches,
        "renditions": {
            e["name"]: {
                "vmaf": e.get("vmaf"),
                "vmaf_p1": e.get("vmaf_p1"),
                "bitrate_kbps": e.get("bitrate_kbps"),
            }
            for e in (quality or {}).get("renditions", [])
        },
    }


def against(run: dict, unsplit: dict) -> dict:
    """Speed-up, and each rung's VMAF difference and bitrate ratio, against the unsplit run."""
    out = {"speedup": round(unsplit["wall_seconds"] / run["wall_seconds"], 3)}
    for name, figures in run["renditions"].items():
        base = unsplit["renditions"].get(name) or {}
        if base.get("vmaf") is not None and figures.get("vmaf") is not None:
            out[f"{name}_vmaf_delta"] = round(figures["vmaf"] - base["vmaf"], 3)
        if base.get("bitrate_kbps") and figures.get("bitrate_kbps"):
            out[f"{name}_bitrate_ratio"] = round(figures["bitrate_kbps"] / base["bitrate_kbps"], 4)
    return out


def one_run(url: str, workdir: Path, rel: str, workers: int, params: dict, timeout: float, log) -> dict:
    env = {"JETENCODE_FFMPEG_THREADS": "1", "JETENCODE_SCRATCH_ROOT": str(workdir / "scratch")}
    pool = PinnedWorkers(
        url, workdir, workers, concurrency=1, poll_seconds=0.5, extra_env=env, uid_prefix="bench-split"
    )
    with db.connect(url) as conn:
        db.reset_queue(conn)
        pool.start()
        try:
            job = run_job(conn, rel, params, timeout)
            scratch = workdir / "scratch" / job
            written = (
                sum(p.stat().st_size for p in scratch.rglob("*") if p.is_file()) if scratch.exists() else 0
            )
            figures = job_figures(conn, job)
            figures["scratch_bytes"] = written
        finally:
            stop_processes(pool.procs, 30.0)
    figures["workers"] = workers
    log(
        f"  {params['split']:>6} on {workers} worker(s): {figures['wall_seconds']:.1f}s, overhead "
        f"{100 * figures['overhead_share']:.1f} %, tail {figures['tail_seconds']}s"
    )
    return figures


def measure(
    url: str,
    workdir: Path,
    media_root: Path,
    *,
    shape: str = "full",
    measure_quality: bool = True,
    counts: list[int] | None = None,
    log=print,
) -> dict:
    """`counts`: the split runs' worker counts (default 1, 2 and the core count)."""
    name, shape = shape, SHAPES[shape]
    rel = "videos/bench-split.mp4"
    make_source(media_root / rel, shape["size"], shape["seconds"])
    cores = len(os.sched_getaffinity(0))
    counts = sorted(set(counts or {1, min(2, cores), cores}))
    ladder = [{"height": h} for h in shape["ladder"]]
    # Every frame scored (vmaf_subsample 1): subsampled, the split and the unsplit run would score
    # different frames (each chunk restarts the pattern), and their means would differ by that alone.
    base = {
        "ladder": ladder,
        "quality_metrics": ["vmaf"] if measure_quality else [],
        "chunk_seconds": shape["chunk_seconds"],
        **({"vmaf_subsample": 1} if measure_quality else {}),
    }
    timeout = shape["seconds"] * 60 + 600
    unsplit = one_run(url, workdir, rel, 1, {**base, "split": "off"}, timeout, log)
    runs = []
    for n in counts:
        run = one_run(url, workdir, rel, n, {**base, "split": "chunks"}, timeout, log)
        run.update(against(run, unsplit))
        run["target_speedup"] = round(0.8 * n, 2)
        runs.append(run)
        log(f"    speed-up {run['speedup']}x (target >= {run['target_speedup']}x)")
    return {
        "shape": name,
        "quality_measured": measure_quality,
        "source": {**shape, "fps": 25, "scenes": len(SCENES), "audio": "sine 330 Hz AAC"},
        "cores": cores,
        "physical_cores": psutil.cpu_count(logical=False),
        "unsplit": unsplit,
        "split": runs,
        "mismatches": sum(r["frame_count_mismatches"] for r in runs),
        "speedup_median_per_worker": round(statistics.median(r["speedup"] / r["workers"] for r in runs), 3),
    }


def table_rows(result: dict | None) -> list[tuple[str, str, str]]:
    if not result or "error" in result:
        return []
    unsplit = result["unsplit"]
    rows = [("(12) split: unsplit, 1 worker", f"{unsplit['wall_seconds']:.1f} s", "the baseline")]
    for run in result["split"]:
        vmaf = ", ".join(f"{k[:-11]} {v:+.2f}" for k, v in run.items() if k.endswith("_vmaf_delta"))
        rate = ", ".join(f"{k[:-14]} {v:.3f}" for k, v in run.items() if k.endswith("_bitrate_ratio"))
        rows.append(
            (
                f"(12) split on {run['workers']} worker(s)",
                f"{run['speedup']:.2f} x",
                f"{run['wall_seconds']:.1f} s; overhead {100 * run['overhead_share']:.1f} %; tail "
                f"{run['tail_seconds']} s; VMAF vs unsplit {vmaf}; bitrate x {rate}; "
                f"mismatches {run['frame_count_mismatches']}",
            )
        )
    return rows
