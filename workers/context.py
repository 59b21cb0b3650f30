"""The handler's view of one claimed task: `RunContext` (the runtime's is `session.TaskRun`).

`RunContext` implements `workers.stages.base.StageContext` on top of it. Progress and log lines
are fenced writes through `repository.report_progress` (throttled: 5 % or 2 s), subprocesses go
through `run()`, and children/files are only buffered here — the slot publishes them with the
finish.

Every checkpoint (progress, log, check_cancelled, and run() before it starts a subprocess) hands
the thread's database connection back to the process's shared pool (workers/db.py): a handler's own
ORM reads take the connection only until its next checkpoint, and never hold it while FFmpeg runs.
"""

from __future__ import annotations

import json
import logging
import queue
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from media.paths import check_output_name
from scheduler import repository
from workers import processes
from workers.db import DB_ERRORS, RateLimitedLog, release_connection, reset_connection
from workers.session import (  # noqa: F401 (re-exported: the abort kinds, TaskRun, WorkerShutdown)
    CANCELLED,
    LEASE_EXPIRING,
    LEASE_LOST,
    SHUTDOWN,
    TAKEN_OVER,
    TIMEOUT,
    Session,
    TaskRun,
    WorkerShutdown,
)
from workers.stages.base import ChildSpec, LeaseLost, PublishSpec, StageTimeout

log = logging.getLogger("jetencode.worker")

PROGRESS_STEP = 5.0  # percent
PROGRESS_INTERVAL = 2.0  # seconds
LOG_FLUSH_LINES = 200
LOG_BUFFER_MAX = 1000
STDOUT_KEEP_BYTES = 16 * 1024 * 1024
STDERR_TAIL_BYTES = 64 * 1024


def _utc_stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


class _ProcessOutput:
    """The two pipes of a running process group, each drained by its own thread so the process never
    blocks on a full pipe: stdout lines go to `on_line` (or are kept, up to STDOUT_KEEP_BYTES),
    stderr keeps its last STDERR_TAIL_BYTES."""

    def __init__(self, group: processes.ProcessGroup, on_line: Callable[[str], None] | None):
        self._popen = group.popen
        self._on_line = on_line
        self._lines: queue.Queue = queue.Queue()
        self._kept: list[bytes] = []
        self._kept_size = 0
        self._stderr_tail: deque[bytes] = deque()
        self._stderr_size = 0
        self.stdout_done = False
        self.last_output = time.monotonic()
        self._readers = [
            threading.Thread(target=self._read_stdout, name=f"stdout-{group.pgid}", daemon=True),
            threading.Thread(target=self._read_stderr, name=f"stderr-{group.pgid}", daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read_stdout(self) -> None:
        try:
            for raw in iter(self._popen.stdout.readline, b""):
                self._lines.put(raw)
        finally:
            self._lines.put(None)

    def _read_stderr(self) -> None:
        # Chunks, not lines: FFmpeg's stats end in \r, and a "line" could grow for hours.
        for raw in iter(lambda: self._popen.stderr.read1(65536), b""):
            self._stderr_tail.append(raw)
            self._stderr_size += len(raw)
            while self._stderr_size > STDERR_TAIL_BYTES and len(self._stderr_tail) > 1:
                self._stderr_size -= len(self._stderr_tail.popleft())

    def next_line(self) -> bool:
        """Hand on the next stdout line, waiting up to 0.2 s for it (a short nap once stdout has
        closed). True if there was one."""
        try:
            raw = self._lines.get(timeout=0.0 if self.stdout_done else 0.2)
        except queue.Empty:
            if self.stdout_done:
                time.sleep(0.05)
            return False
        if raw is None:
            self.stdout_done = True
            return False
        self.last_output = time.monotonic()
        if self._on_line is not None:
            self._on_line(raw.decode("utf-8", "replace").rstrip("\r\n"))
        elif self._kept_size < STDOUT_KEEP_BYTES:
            self._kept.append(raw)
            self._kept_size += len(raw)
        return True

    def close(self) -> None:
        for reader in self._readers:
            reader.join(timeout=2)
        for stream in (self._popen.stdout, self._popen.stderr):
            try:
                stream.close()
            except Exception:
                pass

    def stdout_text(self) -> str:
        return b"".join(self._kept).decode("utf-8", "replace")

    def stderr_text(self) -> str:
        return b"".join(self._stderr_tail).decode("utf-8", "replace")


class RunContext:
    """The StageContext a handler receives."""

    def __init__(self, session: Session, run: TaskRun, workspace: Path):
        task = run.task
        self._session = session
        self._run = run
        self.task_id = task.id
        self.task_type = task.task_type
        self.payload = task.payload or {}
        self.attempt = task.attempt
        self.max_attempts = task.max_attempts
        self.job_id = str(task.job_id)
        self.job_type = task.job_type
        self.job_params = task.job_params or {}
        self.job_hardware = task.job_hardware
        self.execution_id = task.execution_id
        self.resource_category = task.resource_category
        self.vram_mb = task.vram_mb
        self.worker_uid = session.uid
        self.capabilities = session.capabilities
        self._workspace = workspace
        self.children: list[repository.Child] = []
        self.publications: list[PublishSpec] = []
        self._lines: list[str] = []
        self._last_flush = time.monotonic()
        self._last_percent: float | None = None
        self._pending_progress: tuple[float, dict | None] | None = None
        self._job_resources: tuple[str | None, int | None] | None = None
        self._db_trouble = RateLimitedLog(15)

    @property
    def workspace(self) -> Path:
        """The job execution's working directory, created on first use: most stages never touch it,
        and a mkdir per stage was a tenth of a noop stage's worker time."""
        self._workspace.mkdir(parents=True, exist_ok=True)
        return self._workspace

    # -- what the job asked for (dispatch stages choose resources from it) --------------------

    def _load_job_resources(self) -> tuple[str | None, int | None]:
        if self._job_resources is None:
            from scheduler.models import Job

            rows = Job.objects.filter(id=self.job_id).values_list("resource_category", "vram_mb")
            row = rows.first()
            release_connection()
            self._job_resources = tuple(row) if row else (None, None)
        return self._job_resources

    @property
    def job_resource_category(self) -> str | None:
        return self._load_job_resources()[0]

    @property
    def job_vram_mb(self) -> int | None:
        return self._load_job_resources()[1]

    # -- progress and logs -----------------------------------------------------------------

    def progress(self, percent: float, detail: dict[str, Any] | None = None) -> None:
        self.check_cancelled()
        percent = max(0.0, min(100.0, float(percent)))
        now = time.monotonic()
        due = (
            self._last_percent is None
            or abs(percent - self._last_percent) >= PROGRESS_STEP
            or now - self._last_flush >= PROGRESS_INTERVAL
        ) and percent < 100.0  # 100 % is written by the finish itself: no extra commit per stage
        if due:
            self._flush(percent, detail)
        else:
            self._pending_progress = (percent, detail)

    def log(self, message: str) -> None:
        self.check_cancelled()
        text = str(message)
        self._lines.append(f"{_utc_stamp()} {text}"[:4000])
        if len(self._lines) > LOG_BUFFER_MAX:  # the database keeps the last 1,000 lines anyway
            del self._lines[: len(self._lines) - LOG_BUFFER_MAX]
        log.debug("task %s: %s", self.task_id, text, extra=self._run.extra)
        self._maybe_flush()

    def check_cancelled(self) -> None:
        release_connection()  # a checkpoint: whatever the handler read, the connection goes back
        self._run.raise_if_aborted()
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        if not (self._lines or self._pending_progress):
            return
        if len(self._lines) >= LOG_FLUSH_LINES or time.monotonic() - self._last_flush >= PROGRESS_INTERVAL:
            pending = self._pending_progress
            self._flush(*(pending if pending else (None, None)))

    def flush(self) -> None:
        """Send what is buffered (the slot calls this before the final write). Never raises for a
        database error; LeaseLost/StageCancelled still propagate."""
        pending = self._pending_progress
        if pending and pending[0] >= 100.0 and not self._lines:
            self._pending_progress = None  # the finish records 100 %: no extra commit for it
            return
        if self._lines or pending:
            self._flush(*(pending if pending else (None, None)))

    def _flush(self, percent: float | None, detail: dict | None) -> None:
        if self._run.abort_kind in (LEASE_LOST, TAKEN_OVER, LEASE_EXPIRING):
            return  # the attempt is being given up: nothing more is written under its lease
        lines, self._lines = self._lines, []
        self._last_flush = time.monotonic()
        try:
            try:
                beat = repository.report_progress(self._run.lease, percent, detail, lines)
            finally:
                release_connection()
        except repository.SessionSuperseded:
            self._session.on_taken_over()
            self._run.abort(TAKEN_OVER, "uid taken over")
            raise LeaseLost("uid taken over by a newer session") from None
        except DB_ERRORS as exc:
            # Progress is best effort: keep the lines for the next try, never fail the stage for it.
            reset_connection()
            self._lines = (lines + self._lines)[-LOG_BUFFER_MAX:]
            self._db_trouble.warning(
                "task %s: progress not saved (%s); will retry",
                self.task_id,
                str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__,
                extra=self._run.extra,
            )
            return
        if percent is not None:
            self._last_percent = percent
            self._pending_progress = None
        if not beat.accepted:
            self._run.abort(LEASE_LOST, f"progress write rejected: {beat.reason}")
            self._run.raise_if_aborted()
        if beat.cancel_requested:
            self._run.abort(CANCELLED, "cancel requested (seen by a progress write)")
            self._run.raise_if_aborted()

    # -- children and files ------------------------------------------------------------------

    def spawn_child(self, child: ChildSpec) -> None:
        self.check_cancelled()
        json.dumps(child.payload)  # fail in the handler, not in the finish, on a bad payload
        self.children.append(
            repository.Child(
                task_type=child.task_type,
                payload=dict(child.payload or {}),
                placement=child.placement,
                pool=child.pool,
                resource_category=child.resource_category,
                vram_mb=child.vram_mb,
                timeout_seconds=child.timeout_seconds,
                wait_for_siblings=bool(getattr(child, "wait_for_siblings", False)),
            )
        )

    def publish_file(self, spec: PublishSpec) -> None:
        self.check_cancelled()
        check_output_name(spec.name)
        source = Path(spec.source)
        if not source.is_file():
            raise FileNotFoundError(f"publish_file: {source} is not a file")
        if any(existing.name == spec.name for existing in self.publications):
            raise ValueError(f"publish_file: {spec.name!r} is published twice by this stage")
        self.publications.append(spec)

    # -- subprocesses --------------------------------------------------------------------------

    def run(
        self,
        argv: list[str],
        *,
        on_stdout_line: Callable[[str], None] | None = None,
        stall_seconds: float | None = None,
        cwd: Path | None = None,
        pass_fds: tuple[int, ...] = (),
    ) -> subprocess.CompletedProcess:
        """Run argv in a process group the runtime owns; stream stdout lines to `on_stdout_line`.
        `pass_fds`: open descriptors the process inherits (workers.processes.start).

        Returns a CompletedProcess (text stdout — empty when a callback consumed it — and the tail
        of stderr) whatever the exit code. Raises StageCancelled / LeaseLost / StageTimeout (the
        group already killed) when the runtime stopped the stage, or StageTimeout when stdout was
        silent for `stall_seconds`.
        """
        self.check_cancelled()  # hands the connection back: none is held while the process runs
        run = self._run
        self._stop_past_deadline(time.monotonic())
        group = processes.start(argv, cwd=cwd or self.workspace, pass_fds=pass_fds)
        run.add_group(group)
        output = _ProcessOutput(group, on_stdout_line)
        try:
            self._watch(group, output, Path(argv[0]).name, stall_seconds)
        except BaseException:
            group.stop(run.kill_grace)
            raise
        finally:
            run.remove_group(group)
            if group.group_exists() and group.popen.poll() is not None:
                group.kill_now()  # leftovers of an exited leader: nothing outlives its stage
            output.close()
            processes.forget_if_finished(group)
        returncode = group.popen.wait()
        run.raise_if_aborted()  # killed between two checks
        return subprocess.CompletedProcess(list(argv), returncode, output.stdout_text(), output.stderr_text())

    def _watch(
        self, group: processes.ProcessGroup, output: _ProcessOutput, program: str, stall_seconds: float | None
    ) -> None:
        """Pass the output on until the process has exited and closed stdout, and at least every
        0.2 s check for an abort, the stage deadline and a stall, and send buffered progress."""
        exited_at: float | None = None
        last_check = 0.0
        while True:
            if output.next_line() and time.monotonic() - last_check < 0.2:
                continue  # drain what is queued; the checks below run at least every 0.2 s
            now = last_check = time.monotonic()
            self._run.raise_if_aborted()
            if group.popen.poll() is not None:
                exited_at = exited_at or now
                # A grandchild still holding stdout open must not keep the stage alive.
                if output.stdout_done or now - exited_at > 2.0:
                    return
            self._stop_past_deadline(now)
            if stall_seconds and now - output.last_output > stall_seconds:
                raise StageTimeout(f"{program} printed no progress for {stall_seconds:g}s (stalled)")
            self._maybe_flush()

    def _stop_past_deadline(self, now: float) -> None:
        run = self._run
        if now >= run.deadline:
            run.abort(TIMEOUT, f"stage deadline of {run.task.timeout_seconds:g}s passed")
            run.raise_if_aborted()
