"""Removing job workspaces a worker no longer needs (its maintenance thread calls `sweep`).

A job's stages share `WORKSPACE_ROOT/<job id>/<execution id>/` on its assigned worker, so nothing can
be deleted when one stage ends. The sweep asks the database instead, and removes:

- the whole job directory once the job is completed or cancelled (both final) for a minute, or
  when the job is gone (purged by retention);
- an execution directory below the job's current execution: a redispatch started the job over,
  elsewhere or here, and the old files will never be read.

A failed job keeps its workspace: an operator's retry resumes the same execution, and its stages
read what the earlier ones left. Retention purges the job in the end, and the directory with it.
Names that are not a job id / execution number are left alone.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

from scheduler import queries

# A job that has just ended may still have a slot finishing up in its directory.
GRACE_SECONDS = 60.0


def _job_dirs(root: Path) -> dict[str, Path]:
    found = {}
    for path in root.iterdir():
        try:
            job_id = str(uuid.UUID(path.name))
        except ValueError:
            continue
        if path.is_dir() and not path.is_symlink():
            found[job_id] = path
    return found


def sweep(root: Path, grace_seconds: float = GRACE_SECONDS) -> list[Path]:
    """Remove what no stage will read again; return the directories removed. Also sweeps the shared
    scratch of split jobs (workers/scratch.py), which has the same layout."""
    if not root.is_dir():
        return []
    job_dirs = _job_dirs(root)
    if not job_dirs:
        return []
    fates = queries.workspace_fates(list(job_dirs), grace_seconds)
    removed = []
    for job_id, path in job_dirs.items():
        fate = fates.get(job_id)
        if fate is None or (fate["status"] in ("completed", "cancelled") and fate["ended_a_while_ago"]):
            removed.append(path)
            continue
        for execution in path.iterdir():
            if execution.name.isdigit() and int(execution.name) < fate["execution_id"] and execution.is_dir():
                removed.append(execution)
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed
