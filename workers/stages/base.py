"""The contract between the worker runtime and stage handlers.

A stage handler is a function registered for a task type with `@stage("type")`. The runtime claims
a task, builds a `StageContext` and calls the handler in a slot thread. The handler:
- reports progress and log lines through the context (fenced writes: a rejected write raises
  `LeaseLost`, a cancellation seen by the heartbeat raises `StageCancelled` at the next call);
- runs subprocesses only through `ctx.run(...)`, so the runtime owns their process group and can kill
  it on cancellation, lease loss, timeout or shutdown;
- buffers child tasks with `ctx.spawn_child(...)` and files with `ctx.publish_file(...)`; both are
  published only if the handler returns normally *and* the fenced finish is accepted, in the same
  transaction as the task's completion (files are renamed into place inside that transaction);
- returns an optional JSON-serialisable dict, stored as the task's result.
Raising any other exception fails the attempt (retried per the queue's policy); raising
`PermanentFailure` fails the task without further attempts (bad input will not get better).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


class LeaseLost(Exception):
    """A fenced write was rejected: this attempt no longer owns the task. Stop and publish nothing."""


class StageCancelled(Exception):
    """The job was cancelled by an operator; the runtime ends the task cancelled, without children."""


class StageTimeout(Exception):
    """The stage ran past its wall-clock deadline or its FFmpeg stalled."""


class PermanentFailure(Exception):
    """The stage cannot succeed by retrying (invalid input, missing file...): fail it for good."""


RESERVED_PAYLOAD_KEYS = frozenset({"parent_task_id", "index"})


@dataclass(frozen=True)
class ChildSpec:
    task_type: str
    payload: dict[str, Any]
    placement: str = "job"  # dispatch | job | cluster
    pool: str = "media"  # media | background
    resource_category: str = "cpu"  # cpu | gpu_encode | gpu_ai
    vram_mb: int = 0
    timeout_seconds: float | None = None
    # Hold this child until every sibling sharing its parent has completed (e.g. HLS packaging
    # after all renditions). The scheduler enforces it. Handlers spawn at most one such child per
    # parent (two would wait for each other); later steps are spawned by that child itself.
    wait_for_siblings: bool = False

    def __post_init__(self):
        # The scheduler adds these to every child's payload (docs/scheduler.md, "Finish"), overwriting
        # a handler's own value of the same name.
        reserved = RESERVED_PAYLOAD_KEYS & set(self.payload or {})
        if reserved:
            raise ValueError(f"child payload keys {sorted(reserved)} are reserved by the scheduler")


@dataclass(frozen=True)
class PublishSpec:
    """A finished file in the workspace and its name under JETENCODE_OUTPUT_ROOT/<job id>/."""

    source: Path
    name: str
    kind: str = "file"  # video | image | playlist | data | file
    metadata: dict[str, Any] = field(default_factory=dict)


class StageContext(Protocol):
    task_id: int
    task_type: str
    payload: dict[str, Any]
    attempt: int
    job_id: str
    job_type: str
    job_params: dict[str, Any]
    job_hardware: str  # auto | cpu | gpu
    # Optional: the job's resource overrides (None when not set). Handlers read them with
    # getattr(ctx, name, None), so a context without them behaves as "no override".
    job_resource_category: str | None
    job_vram_mb: int | None
    execution_id: int
    worker_uid: str
    capabilities: dict[str, Any]  # the worker's catalog: {"encoders": [...], "hwaccels": [...], ...}
    workspace: Path  # this job execution's directory on this worker (kept across its stages)

    def progress(self, percent: float, detail: dict[str, Any] | None = None) -> None: ...

    def log(self, message: str) -> None: ...

    def check_cancelled(self) -> None: ...

    def run(
        self,
        argv: list[str],
        *,
        on_stdout_line: Callable[[str], None] | None = None,
        stall_seconds: float | None = None,
        cwd: Path | None = None,
        pass_fds: tuple[int, ...] = (),
    ) -> subprocess.CompletedProcess: ...

    def spawn_child(self, child: ChildSpec) -> None: ...

    def publish_file(self, spec: PublishSpec) -> None: ...


Handler = Callable[[StageContext], dict[str, Any] | None]
HANDLERS: dict[str, Handler] = {}


def stage(task_type: str) -> Callable[[Handler], Handler]:
    def register(func: Handler) -> Handler:
        if task_type in HANDLERS:
            raise RuntimeError(f"two handlers registered for task type {task_type!r}")
        HANDLERS[task_type] = func
        return func

    return register
