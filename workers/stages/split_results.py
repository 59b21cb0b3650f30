"""Reading the accepted results of a split job's stages (reads only; the scheduler wrote them).

A result is stored only by an accepted fenced finish, so a file it names is the accepted attempt's.
A chunk redone after a failed stitch check is a newer task of the same type and index: the latest
completed one wins.
"""

from __future__ import annotations

from scheduler.models import QueueTask
from workers.db import release_connection


def latest_results(job_id: str, execution_id: int, task_type: str) -> list[dict]:
    """The results of the completed `task_type` tasks of this execution, oldest first."""
    try:
        rows = list(
            QueueTask.objects.filter(
                job_id=job_id, execution_id=execution_id, task_type=task_type, state="completed"
            )
            .order_by("id")
            .values_list("result", flat=True)
        )
    finally:
        release_connection()
    return [row for row in rows if isinstance(row, dict)]
