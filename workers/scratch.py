"""The shared scratch of split transcodes (issue 33, DECISIONS 19).

A split job keeps nothing in a worker's workspace: its chunks, audio, stitched renditions, HLS
package and quality document live under `JETENCODE_SCRATCH_ROOT/<job id>/<execution id>/`, a
directory every worker mounts (by default one under the var directory, which every worker of one
machine shares). The layout is the workspace's, so `workers.workspaces.sweep` removes it the same way.

Two-phase, like outputs: a stage writes its files under a directory named by its task id and attempt
(`<what>/t<task>a<attempt>/`) and names them in its result or in its children's payloads, which the
scheduler stores only with the fenced finish. A later stage reads only the files an accepted finish
named, so a superseded attempt's files (a zombie that kept writing after its lease was lost) are never
read; they go with the job's directory when it ends.

`ScratchView` lets the existing handlers (package, upload, thumbnail) run on the scratch: it is
the stage context with the execution's scratch directory as its workspace, and every child it spawns
is placed `cluster` and stays on the scratch.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from django.conf import settings

from media.paths import UnsafePathError, workspace_file
from workers.stages.base import ChildSpec, PermanentFailure, StageContext

SCRATCH_KEY = "scratch"  # payload flag: this stage belongs to a split job and works on the scratch


def scratch_root() -> Path:
    return Path(settings.SCRATCH_ROOT_DIR)


def execution_dir(job_id: str, execution_id: int) -> Path:
    return scratch_root() / str(job_id) / str(int(execution_id))


def on_scratch(ctx: StageContext) -> bool:
    return bool((ctx.payload or {}).get(SCRATCH_KEY))


def attempt_dir(ctx: StageContext, what: str) -> Path:
    """A fresh directory for this attempt's files: `<what>/t<task id>a<attempt>/`."""
    path = execution_dir(ctx.job_id, ctx.execution_id) / what / f"t{ctx.task_id}a{ctx.attempt}"
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def rel(ctx: StageContext, path: Path) -> str:
    """`path` relative to the execution's scratch directory (what payloads and results carry)."""
    base = execution_dir(ctx.job_id, ctx.execution_id).resolve()
    return Path(path).resolve().relative_to(base).as_posix()


def resolve(ctx: StageContext, relative: str) -> Path:
    """A scratch path named by a payload or result, checked to stay inside the execution's directory."""
    try:
        return workspace_file(execution_dir(ctx.job_id, ctx.execution_id), relative)
    except UnsafePathError as exc:
        raise PermanentFailure(str(exc)) from None


class ScratchView:
    """The stage context, with the scratch as its workspace; children stay on the scratch, anywhere."""

    def __init__(self, ctx: StageContext):
        self._ctx = ctx

    def __getattr__(self, name):
        return getattr(self._ctx, name)

    @property
    def workspace(self) -> Path:
        path = execution_dir(self._ctx.job_id, self._ctx.execution_id)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def spawn_child(self, child: ChildSpec) -> None:
        payload = {**child.payload, SCRATCH_KEY: True}
        self._ctx.spawn_child(replace(child, payload=payload, placement="cluster"))


def view(ctx: StageContext) -> StageContext:
    """`ctx` itself for a stage of an unsplit job, its ScratchView for one of a split job."""
    return ScratchView(ctx) if on_scratch(ctx) else ctx
