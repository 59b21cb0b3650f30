"""The box every process that reads user media runs in: FFmpeg for a stage, PyAV for a probe.

- its environment is the few variables below (`minimal_environment`): the locale, PATH and what
  GPU drivers read; never DATABASE_URL, cloud credentials, the secret key or any other
  JETENCODE_/AWS_ variable. FFmpeg and PyAV may be handed hostile files.
- its address space is capped (RLIMIT_AS, JETENCODE_FFMPEG_MEMORY_MB): an allocation past it
  fails inside the decoder, which exits with an error, instead of the OOM killer picking the
  worker or a web process.
- on Linux it dies with its parent (PR_SET_PDEATHSIG).

workers.processes starts stage subprocesses with these (child_setup between fork and exec); a
probe (media.probe) gets the same environment and limit, and sets the limit and the parent-death
signal itself once started (media/probe_child.py), because its parent may be a threaded web process.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import sys

PR_SET_PDEATHSIG = 1

_prctl = None
if sys.platform.startswith("linux"):
    try:
        _prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # no libc symbol: no parent-death signal
        _prctl = None

SUBPROCESS_ENV_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "USER",
        "LOGNAME",
        "LD_LIBRARY_PATH",
        "PYTHONUNBUFFERED",
    }
)
SUBPROCESS_ENV_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "LIBVA_", "VDPAU_", "INTEL_", "MFX_", "ONEVPL_")


def minimal_environment(source: dict[str, str] | None = None) -> dict[str, str]:
    """`source` (default os.environ) filtered to the names above."""
    source = os.environ if source is None else source
    return {
        name: value
        for name, value in source.items()
        if name in SUBPROCESS_ENV_NAMES or name.startswith(SUBPROCESS_ENV_PREFIXES)
    }


def memory_limit_bytes() -> int:
    """JETENCODE_FFMPEG_MEMORY_MB as bytes (0: no limit), read when a process starts."""
    from django.conf import settings

    megabytes = int(getattr(settings, "JETENCODE", {}).get("FFMPEG_MEMORY_MB", 0) or 0)
    return max(0, megabytes) * 1024 * 1024


def child_setup(parent_pid: int, memory_bytes: int) -> None:  # between fork and exec: keep it tiny
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(111)
    if memory_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
