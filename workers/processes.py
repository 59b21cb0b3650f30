"""Subprocesses the runtime owns.

Every stage subprocess starts in a session (and so a process group) of its own, so the runtime can
signal the whole group: FFmpeg and anything it spawned. Stopping a group is SIGTERM, a short grace,
then SIGKILL. On Linux the direct child also gets PR_SET_PDEATHSIG=SIGKILL, so it dies with the
worker even when the worker itself is SIGKILLed (grandchildren are not covered by that; stages run
FFmpeg directly, which spawns none).

Every group started by this process is remembered until it is gone, so the worker can make sure
nothing is left running when it exits (`kill_all()`).
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from media import ffmpeg, sandbox

log = logging.getLogger("jetencode.worker")

# The box (environment, memory limit, parent-death signal) is media.sandbox's, shared with probes.
_child_setup = sandbox.child_setup
memory_limit_bytes = sandbox.memory_limit_bytes


def _live_members(pgid: int) -> int | None:
    """Processes of group `pgid` that are not zombies, from /proc (None where there is no /proc).
    An orphaned grandchild stays a zombie until init reaps it, which some inits do lazily."""
    if not _HAS_PROC:
        return None
    alive = 0
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            alive += 1
    return alive


_HAS_PROC = os.path.isdir("/proc/self")


class ProcessGroup:
    """One started subprocess and its process group (pgid == the child's pid)."""

    def __init__(self, popen: subprocess.Popen, argv: Sequence[str]):
        self.popen = popen
        self.pgid = popen.pid
        self.argv = list(argv)
        self._stop_lock = threading.Lock()
        self._stopping = False

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def group_exists(self) -> bool:
        """Some process of the group is still alive (zombies waiting for a slow init don't count)."""
        try:
            os.killpg(self.pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        members = _live_members(self.pgid)
        return True if members is None else members > 0

    def finished(self) -> bool:
        """The child was reaped and no process of its group is left."""
        return self.popen.poll() is not None and not self.group_exists()

    def stop(self, grace: float) -> None:
        """SIGTERM the group, wait up to `grace`, then SIGKILL whatever is left. Blocks."""
        with self._stop_lock:
            if self._stopping:
                already = True
            else:
                self._stopping = True
                already = False
        if not already:
            self.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if self.finished():
                _forget(self)
                return
            time.sleep(0.05)
        self.signal(signal.SIGKILL)
        # Reap the leader so no zombie stays behind (it cannot ignore SIGKILL).
        try:
            self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            log.error("process group %s did not exit after SIGKILL", self.pgid)
            return
        if not self.group_exists():
            _forget(self)

    def stop_async(self, grace: float) -> None:
        threading.Thread(target=self.stop, args=(grace,), name=f"kill-{self.pgid}", daemon=True).start()

    def kill_now(self) -> None:
        self.signal(signal.SIGKILL)


_live: set[ProcessGroup] = set()
_live_lock = threading.Lock()


def _forget(group: ProcessGroup) -> None:
    with _live_lock:
        _live.discard(group)


# What a stage process (FFmpeg) inherits from the worker's environment: media.sandbox's few names.
SUBPROCESS_ENV_NAMES = sandbox.SUBPROCESS_ENV_NAMES
SUBPROCESS_ENV_PREFIXES = sandbox.SUBPROCESS_ENV_PREFIXES
minimal_environment = sandbox.minimal_environment


def start(
    argv: Sequence[str],
    *,
    cwd: Path | str | None = None,
    env: dict[str, str] | None = None,
    pass_fds: Sequence[int] = (),
) -> ProcessGroup:
    """Start `argv` in its own session with stdout and stderr piped and no stdin, under the stage
    memory limit (RLIMIT_AS, JETENCODE_FFMPEG_MEMORY_MB; not for hardware encoders, see
    media.ffmpeg.uses_hardware) and with a minimal environment
    (`minimal_environment`) unless `env` is given. No descriptor is inherited but `pass_fds`
    (under the same numbers: an input opened by descriptor and named `/proc/self/fd/N` in argv).

    FFmpeg's file inputs get the input whitelists (media.ffmpeg.guard_inputs: local files and
    media demuxers only), whichever stage built the argv."""
    argv = list(argv)
    if ffmpeg.is_ffmpeg(argv):
        argv = ffmpeg.guard_inputs(argv)
    # A GPU encoder's process runs unlimited: CUDA reserves more address space than any sane limit.
    memory = 0 if ffmpeg.uses_hardware(argv) else memory_limit_bytes()
    popen = subprocess.Popen(
        argv,
        cwd=str(cwd) if cwd is not None else None,
        env=minimal_environment() if env is None else env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        # The child setup is tiny: a prctl and a setrlimit, no locks, no imports.
        preexec_fn=functools.partial(_child_setup, os.getpid(), memory),  # noqa: PLW1509
        close_fds=True,
        pass_fds=tuple(pass_fds),
    )
    group = ProcessGroup(popen, argv)
    with _live_lock:
        _live.add(group)
    return group


def forget_if_finished(group: ProcessGroup) -> None:
    if group.finished():
        _forget(group)


def live_groups() -> list[ProcessGroup]:
    with _live_lock:
        return list(_live)


def kill_all() -> int:
    """SIGKILL every group this process started that still exists (the last line of defence)."""
    killed = 0
    for group in live_groups():
        if group.group_exists():
            group.kill_now()
            killed += 1
        try:
            group.popen.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass
        _forget(group)
    return killed
