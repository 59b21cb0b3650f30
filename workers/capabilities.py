"""What this machine offers: CPUs, NVIDIA GPUs, the FFmpeg catalog, and a live resource sample."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

log = logging.getLogger("jetencode.worker")

_started = time.time()


def cpu_count() -> int:
    """CPUs this process may run on (cgroup/affinity aware where the OS tells)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class GpuInfo:
    names: list[str] = field(default_factory=list)
    vram_mb: list[int] = field(default_factory=list)
    note: str = ""

    @property
    def count(self) -> int:
        return len(self.names)

    @property
    def vram_total_mb(self) -> int:
        return sum(self.vram_mb)


def parse_nvidia_smi(text: str) -> GpuInfo:
    """`nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits` output."""
    names, vram = [], []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, _, memory = line.rpartition(",")
        try:
            vram.append(int(float(memory.strip())))
        except ValueError:
            continue
        names.append(name.strip())
    return GpuInfo(names, vram)


def detect_gpus(timeout: float = 15.0) -> GpuInfo:
    binary = shutil.which("nvidia-smi")
    if not binary:
        return GpuInfo(note="no nvidia-smi on PATH")
    try:
        proc = subprocess.run(
            [binary, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return GpuInfo(note=f"nvidia-smi failed: {exc}")
    if proc.returncode != 0:
        first = (proc.stderr or proc.stdout).strip().splitlines()
        return GpuInfo(note=f"nvidia-smi exited {proc.returncode}: {first[0] if first else ''}".strip())
    info = parse_nvidia_smi(proc.stdout)
    return info if info.count else GpuInfo(note="nvidia-smi lists no GPU")


def ffmpeg_catalog() -> dict[str, Any]:
    """The FFmpeg capability catalog (`media.ffmpeg.encoder_catalog`), or an empty one
    with the reason when FFmpeg cannot be found or probed: the worker still runs FFmpeg-free stages."""
    from media import ffmpeg

    try:
        return ffmpeg.encoder_catalog()
    except Exception as exc:  # FFmpegNotFound, a broken binary, a timeout
        log.warning("FFmpeg catalog unavailable: %s", exc)
        return {
            "ffmpeg": None,
            "version": None,
            "encoders": [],
            "hardware_encoders": [],
            "hardware_encoders_unconfirmed": [],
            "hwaccels": [],
            "error": str(exc),
        }


def default_category_limits(concurrency: int, gpus: GpuInfo, catalog: dict[str, Any]) -> dict[str, int]:
    """cpu = every media slot; gpu_encode = one per NVIDIA GPU (or one when FFmpeg confirmed another
    hardware encoder, e.g. VAAPI/QSV); gpu_ai = one per NVIDIA GPU."""
    hardware = bool(catalog.get("hardware_encoders"))
    gpu_encode = gpus.count if gpus.count else (1 if hardware else 0)
    return {"cpu": concurrency, "gpu_encode": gpu_encode, "gpu_ai": gpus.count}


def system_sample(workspace: Path, running: int) -> dict[str, Any]:
    """The worker row's live sample (CPU, memory, workspace disk), taken at each heartbeat."""
    sample: dict[str, Any] = {
        "at": time.time(),
        "pid": os.getpid(),
        "uptime_seconds": round(time.time() - _started, 1),
        "running_tasks": running,
    }
    try:
        sample["cpu_percent"] = psutil.cpu_percent(interval=None)
        sample["cpu_count"] = cpu_count()
        sample["load_average"] = [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        pass
    try:
        memory = psutil.virtual_memory()
        sample["memory"] = {
            "total": memory.total,
            "available": memory.available,
            "used": memory.used,
            "percent": memory.percent,
        }
    except OSError:
        pass
    try:
        disk = psutil.disk_usage(str(workspace))
        sample["disk"] = {
            "path": str(workspace),
            "total": disk.total,
            "used": disk.used,
            "free": disk.free,
            "percent": disk.percent,
        }
    except OSError:
        pass
    return sample
