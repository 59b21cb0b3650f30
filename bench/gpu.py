"""Measurement 13: NVIDIA hardware encoders (NVENC) through JetEncode, where a GPU is at hand.

Skipped, with the reason, unless this machine's FFmpeg confirms an NVENC encoder with its one-second
test encode (media.ffmpeg.encoder_catalog): that is every machine without an NVIDIA GPU and driver,
and every FFmpeg built without NVENC (imageio-ffmpeg's static binary has none: point
JETENCODE_FFMPEG at one that has), and every GPU without a video encoder (the H100 and H200 have
none: docs/benchmarks.md (13)).

1. Raw speed: FFmpeg alone re-encodes a generated 1080p source with each confirmed NVENC encoder and
   with libx264 on every core, for scale: frames per second (decoding included).
2. Through JetEncode: one worker, its slots from its own detection (the GPU gives it gpu_encode
   slots), runs a `hardware: gpu` transcode per codec (a 1080p + 720p ladder), unsplit and split in
   4-second chunks, measured by the quality stage where that FFmpeg has libvmaf. Per job: wall time, the encoders its stages used,
   and per rendition the frame count against the source's, the chunk starts that are not keyframes,
   whether timestamps strictly increase, whether a full decode prints anything at `-v error`, the
   bitrate and the pooled scores.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from bench import db
from bench.split import make_source
from bench.workers import WorkerPool, stop_processes

SOURCE_SECONDS = 12
CHUNK_SECONDS = 4
LADDER = (1080, 720)
RAW_SECONDS = 10


def nvenc_encoders() -> tuple[list[str], dict]:
    from media.ffmpeg import encoder_catalog

    catalog = encoder_catalog(refresh=True)
    confirmed = [name for name in catalog.get("hardware_encoders", []) if name.endswith("_nvenc")]
    return confirmed, catalog


def raw_speed(source: Path, encoders: list[str]) -> dict:
    """Frames per second of FFmpeg alone for each encoder (decode of the source included)."""
    from media.ffmpeg import ffmpeg_path

    frames = int(SOURCE_SECONDS * 25)
    out = {}
    for encoder in [*encoders, "libx264"]:
        argv = [ffmpeg_path(), "-nostdin", "-hide_banner", "-loglevel", "error", "-i", str(source)]
        argv += ["-an", "-c:v", encoder]
        argv += ["-preset", "p4", "-cq", "25"] if encoder.endswith("_nvenc") else ["-preset", "medium"]
        argv += ["-f", "null", "-"]
        started = time.monotonic()
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
        seconds = time.monotonic() - started
        out[encoder] = (
            {"fps": round(frames / seconds, 1), "seconds": round(seconds, 2)}
            if proc.returncode == 0
            else {"error": " | ".join(proc.stderr.strip().splitlines()[:4]) or f"exit {proc.returncode}"}
        )
    return out


def stream_facts(path: Path) -> dict:
    """Video packets, keyframe indices (presentation order), timestamp order and bitrate of a file."""
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        packets = [(p.pts, p.dts, p.is_keyframe) for p in container.demux(stream) if p.size]
        duration = float(stream.duration * stream.time_base) if stream.duration else None
        codec = stream.codec_context.name
    pts = sorted(p[0] for p in packets)
    dts = [p[1] for p in packets]
    by_pts = {p: i for i, p in enumerate(pts)}
    keyframes = sorted(by_pts[p[0]] for p in packets if p[2])
    bits = path.stat().st_size * 8
    return {
        "codec": codec,
        "frames": len(packets),
        "keyframes": keyframes,
        "pts_strictly_increasing": len(set(pts)) == len(pts),
        "dts_strictly_increasing": all(b > a for a, b in zip(dts, dts[1:], strict=False)),
        "kbps": round(bits / duration / 1000, 1) if duration else None,
    }


def decode_errors(path: Path) -> str:
    """What a full decode at `-v error` prints (FFmpeg can exit 0 on a broken join)."""
    from media.ffmpeg import ffmpeg_path

    argv = [ffmpeg_path(), "-nostdin", "-hide_banner", "-v", "error", "-i", str(path), "-f", "null", "-"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    return (proc.stderr.strip() or ("" if proc.returncode == 0 else f"exit {proc.returncode}"))[:300]


def wait(conn, job_id, timeout: float) -> tuple[str, float, str | None]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = conn.execute(
            "SELECT status, extract(epoch FROM coalesce(finished_at, now()) - created_at), last_error "
            "FROM jobs WHERE id = %s",
            [job_id],
        ).fetchone()
        if row[0] in ("completed", "failed", "cancelled"):
            return row[0], float(row[1]), row[2]
        time.sleep(0.2)
    return "timeout", timeout, None


def encoders_used(conn, job_id) -> list[str]:
    rows = conn.execute("SELECT result FROM queue_tasks WHERE job_id = %s", [job_id]).fetchall()
    found: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "encoder" and isinstance(value, str):
                    found.add(value)
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for (result,) in rows:
        walk(result)
    return sorted(found)


def job_facts(conn, job_id, outputs: Path, source_frames: int) -> dict:
    """Per rendition: frames against the source, chunk starts that are not keyframes, timestamps,
    decode errors, bitrate; and the pooled scores of the quality stage."""
    split = db.scalar(
        conn,
        "SELECT result->'split' FROM queue_tasks WHERE job_id = %s AND task_type = 'transcode'",
        [job_id],
    )
    starts = [int(c["first_frame"]) for c in (split or {}).get("chunks", [])]
    quality = db.scalar(
        conn,
        "SELECT result->'quality' FROM queue_tasks WHERE job_id = %s AND state = 'completed' "
        "AND task_type IN ('transcode.quality', 'transcode.split_quality')",
        [job_id],
    )
    renditions = {}
    for path in sorted((outputs / str(job_id) / "renditions").glob("*.mp4")):
        facts = stream_facts(path)
        keyframes = set(facts.pop("keyframes"))
        facts["frames_match_source"] = facts["frames"] == source_frames
        facts["chunk_starts_not_keyframes"] = [s for s in starts if s not in keyframes]
        facts["decode_errors"] = decode_errors(path)
        renditions[path.stem] = facts
    scores = {
        e["name"]: {
            k: e.get(k) for k in ("vmaf", "vmaf_p1", "psnr_y", "psnr", "ssim", "float_ssim") if k in e
        }
        for e in (quality or {}).get("renditions", [])
    }
    return {"chunks": len(starts), "renditions": renditions, "scores": scores}


def run_jobs(url: str, workdir: Path, rel: str, codecs: list[str], hardware: str, metrics, log) -> list:
    """One worker; per codec a transcode unsplit and split; the facts of each."""
    from media import submission

    source_frames = stream_facts(workdir / "media" / rel)["frames"]
    pool = WorkerPool(url, workdir, 1, concurrency=4, poll_seconds=0.2, uid_prefix="bench-gpu")
    runs = []
    with db.connect(url) as conn:
        db.reset_queue(conn)
        pool.start()
        try:
            for codec in codecs:
                for split in ("off", "chunks"):
                    params = {"input": rel, "ladder": [{"height": h, "codec": codec} for h in LADDER]}
                    params |= {"split": split, "chunk_seconds": CHUNK_SECONDS, "quality_metrics": metrics}
                    job = submission.create_job(
                        None, {"type": "transcode", "params": params, "hardware": hardware}
                    )
                    status, seconds, error = wait(conn, job.id, 600)
                    run = {
                        "codec": codec,
                        "split": split,
                        "status": status,
                        "wall_seconds": round(seconds, 2),
                    }
                    run["encoders"] = encoders_used(conn, job.id)
                    if status == "completed":
                        run |= job_facts(conn, job.id, workdir / "outputs", source_frames)
                    else:
                        run["error"] = error
                    log(
                        f"  {codec:>4} split={split:<6} {status} in {seconds:.1f}s, encoders {run['encoders']}"
                    )
                    runs.append(run | {"job_id": str(job.id)})
        finally:
            stop_processes(pool.procs, 30.0)
    return runs


def keep_files(workdir: Path, rel: str, runs: list, keep: Path) -> list[str]:
    """Copy the source and each unsplit job's top rung to `keep` (to score them elsewhere)."""
    keep.mkdir(parents=True, exist_ok=True)
    shutil.copy(workdir / "media" / rel, keep / "source.mp4")
    kept = ["source.mp4"]
    for run in runs:
        top = workdir / "outputs" / run["job_id"] / "renditions" / f"{LADDER[0]}p.mp4"
        if run["split"] == "off" and top.exists():
            name = f"{run['codec']}-{top.name}"
            shutil.copy(top, keep / name)
            kept.append(name)
    return kept


def has_libvmaf() -> bool:
    from media.ffmpeg import ffmpeg_path

    argv = [ffmpeg_path(), "-hide_banner", "-filters"]
    return " libvmaf " in subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout


def measure(url: str, workdir: Path, media_root: Path, *, keep: Path | None = None, log=print) -> dict:
    encoders, catalog = nvenc_encoders()
    unconfirmed = [e for e in catalog.get("hardware_encoders_unconfirmed", []) if e.endswith("_nvenc")]
    if not encoders and not unconfirmed:
        reason = f"no NVENC encoder in {catalog.get('ffmpeg')}"
        log(f"  skipped: {reason}")
        return {"skipped": reason}
    rel = "videos/bench-gpu.mp4"
    make_source(media_root / rel, "1920x1080", SOURCE_SECONDS)
    # Encoders that failed the test encode are tried once more here, for FFmpeg's own message.
    raw = raw_speed(media_root / rel, encoders or unconfirmed)
    log("  raw: " + "; ".join(f"{k} {v.get('fps', v.get('error'))}" for k, v in raw.items()))
    result = {"ffmpeg": catalog.get("ffmpeg"), "version": catalog.get("version"), "raw": raw}
    if not encoders:
        result["skipped"] = f"NVENC compiled in but no test encode succeeded ({', '.join(unconfirmed)})"
        log(f"  {result['skipped']}")
        return result
    log(f"  NVENC encoders confirmed: {', '.join(encoders)}")
    codecs = [e.split("_")[0] for e in encoders]
    result["jobs"] = run_jobs(url, workdir, rel, codecs, "gpu", ["vmaf"] if has_libvmaf() else [], log)
    if keep:
        result["kept"] = keep_files(workdir, rel, result["jobs"], keep)
    return result


def table_rows(result: dict | None) -> list[tuple[str, str, str]]:
    if not result or "error" in result:
        return []
    if "skipped" in result:
        return [("(13) NVENC through JetEncode", "skipped", result["skipped"])]
    rows = [
        (f"(13) raw {k}", f"{v.get('fps', '-')} fps", v.get("error", "")) for k, v in result["raw"].items()
    ]
    for run in result["jobs"]:
        bad = {
            name: f
            for name, f in run.get("renditions", {}).items()
            if not f["frames_match_source"] or f["chunk_starts_not_keyframes"] or f["decode_errors"]
        }
        rows.append(
            (
                f"(13) {run['codec']} split={run['split']}",
                f"{run['wall_seconds']:.1f} s",
                f"{run['status']}; {', '.join(run['encoders'])}; chunks {run.get('chunks', 0)}; "
                f"renditions with a defect: {len(bad)}",
            )
        )
    return rows
