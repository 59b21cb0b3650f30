"""A real, in-process StageContext for testing stage handlers without the queue.

It does what the worker runtime does for a handler, minus the database: runs subprocesses in their
own process group (killed as a group on cancellation or stall), feeds stdout lines to the handler's
callback, keeps stderr for the handler to log, records progress, logs, children and files to
publish, and — like the runtime's fenced finish — publishes files only when the handler returned
normally (`finish`). `run_job` drives a whole stage graph: the dispatch, then children, holding
`wait_for_siblings` children until their siblings are done.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from media.storage import LocalStorage
from workers.stages import HANDLERS
from workers.stages.base import ChildSpec, PublishSpec, StageCancelled, StageTimeout


class LocalContext:
    def __init__(
        self,
        task_type: str,
        *,
        workspace: Path,
        job_type: str | None = None,
        payload: dict[str, Any] | None = None,
        job_params: dict[str, Any] | None = None,
        job_id: str | None = None,
        attempt: int = 1,
        capabilities: dict[str, Any] | None = None,
        job_hardware: str = "auto",
        job_resource_category: str | None = None,
        job_vram_mb: int | None = None,
        task_id: int = 1,
        execution_id: int = 1,
        cancel_event: threading.Event | None = None,
        default_stall_seconds: float | None = None,
    ):
        self.task_id = task_id
        self.task_type = task_type
        self.payload = dict(payload or {})
        self.attempt = attempt
        self.job_id = job_id or str(uuid.uuid4())
        self.job_type = job_type or task_type
        self.job_params = dict(job_params or {})
        self.job_hardware = job_hardware
        self.job_resource_category = job_resource_category
        self.job_vram_mb = job_vram_mb
        self.execution_id = execution_id
        self.worker_uid = "local-test"
        self.capabilities = (
            capabilities if capabilities is not None else {"encoders": ["libx264"], "hardware_encoders": []}
        )
        self.workspace = Path(workspace)
        self.workspace.mkdir(parents=True, exist_ok=True)
        self.cancel_event = cancel_event or threading.Event()
        self.default_stall_seconds = default_stall_seconds
        self.progress_calls: list[
            tuple[float, float, dict[str, Any] | None]
        ] = []  # (monotonic, percent, detail)
        self.logs: list[str] = []
        self.children: list[ChildSpec] = []
        self.published: list[PublishSpec] = []
        self.pids: list[int] = []
        self.argvs: list[list[str]] = []

    # --- the StageContext protocol ---------------------------------------------------------------

    def progress(self, percent: float, detail: dict[str, Any] | None = None) -> None:
        self.check_cancelled()  # the runtime raises at the next fenced write after a cancellation
        assert 0.0 <= percent <= 100.0, percent
        if detail is not None:
            json.dumps(detail)
        self.progress_calls.append((time.monotonic(), float(percent), detail))

    def log(self, message: str) -> None:
        self.logs.append(f"{time.strftime('%H:%M:%S')} {message}")

    def check_cancelled(self) -> None:
        if self.cancel_event.is_set():
            raise StageCancelled("cancelled")

    def run(
        self,
        argv: list[str],
        *,
        on_stdout_line: Callable[[str], None] | None = None,
        stall_seconds: float | None = None,
        cwd: Path | None = None,
    ) -> subprocess.CompletedProcess:
        assert isinstance(argv, list) and all(isinstance(a, str) for a in argv), "argv must be a list of str"
        self.argvs.append(list(argv))
        stall_seconds = stall_seconds or self.default_stall_seconds
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            start_new_session=True,
            text=True,
            errors="replace",
            bufsize=1,
        )
        self.pids.append(proc.pid)
        last_activity = [time.monotonic()]
        callback_error: list[BaseException] = []
        stderr_tail: deque[str] = deque(maxlen=200)

        def read_stdout() -> None:
            for line in proc.stdout:
                last_activity[0] = time.monotonic()
                if on_stdout_line is not None and not callback_error:
                    try:
                        on_stdout_line(line.rstrip("\n"))
                    except BaseException as exc:  # e.g. StageCancelled from ctx.progress
                        callback_error.append(exc)

        def read_stderr() -> None:
            for line in proc.stderr:
                stderr_tail.append(line)

        readers = [
            threading.Thread(target=read_stdout, daemon=True),
            threading.Thread(target=read_stderr, daemon=True),
        ]
        for reader in readers:
            reader.start()
        try:
            while proc.poll() is None:
                if self.cancel_event.is_set():
                    raise StageCancelled("cancelled while running " + os.path.basename(argv[0]))
                if callback_error:
                    raise callback_error[0]
                if stall_seconds and time.monotonic() - last_activity[0] > stall_seconds:
                    raise StageTimeout(f"no progress output for {stall_seconds}s")
                time.sleep(0.02)
        except BaseException:
            self._kill_group(proc)
            raise
        for reader in readers:
            reader.join(5)
        if callback_error:
            raise callback_error[0]
        return subprocess.CompletedProcess(argv, proc.returncode, "", "".join(stderr_tail))

    @staticmethod
    def _kill_group(proc: subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)

    def spawn_child(self, child: ChildSpec) -> None:
        assert isinstance(child, ChildSpec)
        json.dumps(child.payload)  # payloads are stored as jsonb
        assert child.placement in ("dispatch", "job", "cluster") and child.pool in ("media", "background")
        assert child.resource_category in ("cpu", "gpu_encode", "gpu_ai")
        self.children.append(child)

    def publish_file(self, spec: PublishSpec) -> None:
        assert isinstance(spec, PublishSpec)
        source = Path(spec.source).resolve()
        assert source.is_file(), f"{source} does not exist"
        assert source.is_relative_to(self.workspace.resolve()), "published files come from the workspace"
        json.dumps(spec.metadata)
        self.published.append(spec)

    # --- what the runtime does after the handler --------------------------------------------------

    def finish(self, output_root: Path) -> list[Path]:
        """Publish buffered files like the runtime's accepted finish: rename into place."""
        storage = LocalStorage(output_root)
        paths = []
        for spec in self.published:
            storage.publish(self.job_id, Path(spec.source), spec.name, move=True)
            paths.append(storage.path(self.job_id, spec.name))
        return paths


def run_stage(ctx: LocalContext) -> dict[str, Any] | None:
    result = HANDLERS[ctx.task_type](ctx)
    if result is not None:
        json.dumps(result)
    return result


@dataclass
class StageRecord:
    task_type: str
    payload: dict[str, Any]
    result: dict[str, Any] | None
    ctx: LocalContext


@dataclass
class JobRun:
    job_id: str
    output_dir: Path
    stages: list[StageRecord] = field(default_factory=list)

    def of(self, task_type: str) -> list[StageRecord]:
        return [s for s in self.stages if s.task_type == task_type]

    def outputs(self) -> list[str]:
        if not self.output_dir.exists():
            return []
        return sorted(
            p.relative_to(self.output_dir).as_posix() for p in self.output_dir.rglob("*") if p.is_file()
        )


def run_job(
    job_type: str,
    params: dict[str, Any],
    *,
    workspace: Path,
    output_root: Path,
    job_id: str | None = None,
    max_stages: int = 200,
    **ctx_kwargs,
) -> JobRun:
    """Run a job's whole stage graph in-process, in dependency order, publishing after each stage."""
    job_id = job_id or str(uuid.uuid4())
    run = JobRun(job_id, output_root / job_id)
    queue: deque[tuple[str, dict[str, Any]]] = deque([(job_type, {})])
    task_id = 0
    while queue:
        task_type, payload = queue.popleft()
        task_id += 1
        assert task_id <= max_stages, "runaway stage graph"
        ctx = LocalContext(
            task_type,
            workspace=workspace,
            job_type=job_type,
            payload=payload,
            job_params=params,
            job_id=job_id,
            task_id=task_id,
            **ctx_kwargs,
        )
        result = run_stage(ctx)
        ctx.finish(output_root)
        run.stages.append(StageRecord(task_type, payload, result, ctx))
        # Siblings first, then the one that waits for them (the scheduler's wait_for_siblings).
        for spec in sorted(ctx.children, key=lambda c: c.wait_for_siblings):
            queue.append((spec.task_type, spec.payload))
    return run
