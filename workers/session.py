"""The bottom of the worker runtime: who this process is and what it is running.

`Session` is one process start of a worker uid (DECISIONS 12): its identity, its timing, its
`RunRegistry` of `TaskRun`s and the events every thread watches (stop claiming, taken over). The
helpers above it (context, heartbeat, maintenance, slots) receive the `Session` — or less — and
never the `Worker`; nothing here imports another module of the runtime except `workers.processes`.

`TaskRun` is one claimed task while it runs: the lease and everything the other threads may learn
about the attempt. The heartbeat renews its lease (monotonic deadline), sees cancellation or a
rejected renewal, and the supervisor stops it when the lease is about to run out or the stage
deadline passes. Whoever learns it calls `abort(kind)`, which kills the run's subprocess groups at
once; the handler then gets an exception at its next context call.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scheduler import repository
from workers import processes
from workers.config import Timing
from workers.stages.base import LeaseLost, StageCancelled, StageTimeout
from workers.wakeup import Wakeup

log = logging.getLogger("jetencode.worker")

# Why a run was stopped from outside the handler. The first reason wins, except that losing the
# lease (or the uid) overrides everything: then no write at all may follow.
CANCELLED = "cancelled"  # the job was cancelled: finish -> cancelled, no children
LEASE_LOST = "lease_lost"  # a fenced write was rejected: discard, write nothing
LEASE_EXPIRING = "lease_expiring"  # heartbeats kept failing: discard before the lease runs out
TIMEOUT = "timeout"  # the stage's wall-clock deadline passed: fail the attempt
SHUTDOWN = "shutdown"  # worker shutdown: hand the task back (release)
TAKEN_OVER = "taken_over"  # a newer process registered our uid: write nothing, exit
_OVERRIDING = (TAKEN_OVER, LEASE_LOST)


class WorkerShutdown(StageCancelled):
    """Raised in a handler when the worker stops it for shutdown (the task is handed back)."""


class TaskRun:
    def __init__(
        self,
        task: repository.ClaimedTask,
        lease: repository.Lease,
        slot: str,
        claimed_at: float,
        lease_seconds: float,
        deadline_margin: float,
    ):
        self.task = task
        self.lease = lease
        self.slot = slot
        self.claimed_at = claimed_at  # monotonic, taken before the claim was sent
        self.lease_seconds = lease_seconds
        self.lease_deadline = claimed_at + lease_seconds  # monotonic; moved by every renewal
        # Stop a little before the database's deadline, so the kill and the fenced `fail` that
        # follows still land while the attempt is ours.
        margin = min(deadline_margin, 0.25 * task.timeout_seconds)
        self.deadline = claimed_at + task.timeout_seconds - margin
        self.renew = True  # heartbeats include this lease until the slot starts its final write
        self.abort_kind: str | None = None
        self.abort_reason = ""
        self.aborted_at: float | None = None  # monotonic, when abort_kind was (last) set
        self.cancel_seen = False
        self.kill_grace = 1.0
        self._groups: set[processes.ProcessGroup] = set()
        self._lock = threading.Lock()
        self._concluded = False

    @functools.cached_property
    def extra(self) -> dict[str, Any]:
        """The run's fields for every log line (built once: logging only reads it)."""
        return {
            "job_id": str(self.task.job_id),
            "task_id": self.task.id,
            "slot": self.slot,
            "worker_uid": self.lease.worker_uid,
            "session_id": str(self.lease.session_id),
        }

    def renewed(self, sent_at: float) -> None:
        with self._lock:
            self.lease_deadline = max(self.lease_deadline, sent_at + self.lease_seconds)

    def abort(self, kind: str, reason: str, *, kill_now: bool = False) -> bool:
        """Record why the run must stop and kill its subprocess groups. True if this changed the kind."""
        with self._lock:
            changed = self.abort_kind is None or (kind in _OVERRIDING and self.abort_kind not in _OVERRIDING)
            if changed:
                self.abort_kind = kind
                self.abort_reason = reason
                self.aborted_at = time.monotonic()
            if kind == CANCELLED:
                self.cancel_seen = True
            groups = list(self._groups)
        if changed:
            level = logging.INFO if kind in (CANCELLED, SHUTDOWN) else logging.WARNING
            log.log(
                level,
                "task %s (%s): stopping, %s: %s",
                self.task.id,
                self.task.task_type,
                kind,
                reason,
                extra=self.extra,
            )
        for group in groups:
            if kill_now:
                group.kill_now()
            group.stop_async(self.kill_grace)
        return changed

    def add_group(self, group: processes.ProcessGroup) -> None:
        with self._lock:
            self._groups.add(group)
            aborted = self.abort_kind is not None
        if aborted:
            group.stop_async(self.kill_grace)

    def remove_group(self, group: processes.ProcessGroup) -> None:
        with self._lock:
            self._groups.discard(group)

    def groups(self) -> list[processes.ProcessGroup]:
        with self._lock:
            return list(self._groups)

    def take_conclusion(self) -> bool:
        """Exactly one thread (the slot, or the supervisor for a handler that never returned) writes
        the task's final outcome."""
        with self._lock:
            if self._concluded:
                return False
            self._concluded = True
            return True

    def raise_if_aborted(self) -> None:
        kind = self.abort_kind
        if kind is None:
            return
        if kind == CANCELLED:
            raise StageCancelled("the job was cancelled")
        if kind == SHUTDOWN:
            raise WorkerShutdown(self.abort_reason or "the worker is shutting down")
        if kind == TIMEOUT:
            raise StageTimeout(self.abort_reason)
        raise LeaseLost(self.abort_reason or kind)


class RunRegistry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[int, TaskRun] = {}

    def add(self, run: TaskRun) -> None:
        with self._lock:
            self._runs[run.task.id] = run

    def remove(self, run: TaskRun) -> None:
        with self._lock:
            if self._runs.get(run.task.id) is run:
                del self._runs[run.task.id]

    def snapshot(self) -> list[TaskRun]:
        with self._lock:
            return list(self._runs.values())

    def count(self) -> int:
        with self._lock:
            return len(self._runs)


@dataclass
class Session:
    """One process start of a worker uid, and what its threads share."""

    uid: str
    timing: Timing
    capabilities: dict[str, Any]
    workspace_root: Path
    session_id: uuid.UUID = field(default_factory=uuid.uuid4)
    runs: RunRegistry = field(default_factory=RunRegistry)
    wakeup: Wakeup = field(default_factory=Wakeup)
    stop_claiming: threading.Event = field(default_factory=threading.Event)
    taken_over: threading.Event = field(default_factory=threading.Event)
    # Set by whoever meets SessionSuperseded, so the supervising thread notices at once.
    attention: threading.Event = field(default_factory=threading.Event)

    @property
    def log_extra(self) -> dict[str, str]:
        return {"worker_uid": self.uid, "session_id": str(self.session_id)}

    @property
    def kill_grace(self) -> float:
        # Kill grace: SIGTERM, then SIGKILL. Short enough that a cancel ends within two beats.
        return max(0.2, min(2.0, self.timing.heartbeat / 2))

    def on_taken_over(self) -> None:
        """Any thread that meets SessionSuperseded calls this: stop everything, write nothing."""
        if self.taken_over.is_set():
            return
        self.taken_over.set()
        self.stop_claiming.set()
        for run in self.runs.snapshot():
            run.abort(TAKEN_OVER, "uid taken over by a newer session", kill_now=True)
        self.wakeup.wake_all()
        self.attention.set()
