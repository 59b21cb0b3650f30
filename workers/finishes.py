"""Group commit: the finishes of a process's slots share transactions, and their WAL flushes.

A slot's final write goes through the process's `heartbeat` connection (workers/db.py
`raw_connection`), in turn with the other slots. A finish must wait for its commit's WAL
flush (~1 ms on a quiet disk, much more on a busy one) before its slot may move on, and on one
connection those flushes would queue up behind each other. So a slot that finishes puts its finish
in a queue and waits for its turn on the connection; whichever slot gets the turn first writes
every finish queued by then in one transaction, and the slots whose finish it wrote find it done
when their own turn comes. Under load most finishes travel in twos and threes (docs/benchmarks.md).

Only finishes that move no files into place come here (those commit their files inside their own
transaction, workers/slots.py `_Publication`). Each finish stays fenced on its own (the SQL checks
each task's lease); grouping changes only which transaction commits it. The finishes of one group
are written in job order, so two groups never lock two jobs' rows in opposite orders. If the group
fails (a superseded session, a value PostgreSQL refuses), nothing of it was committed and each
finish is written again on its own, so each slot gets its own outcome or error; a lost connection
reaches every slot of the group, and each retries as it always did (a replayed finish under the
same token is idempotent).
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from scheduler import repository
from workers.db import DB_ERRORS, KEEPER_ALIAS, raw_connection


@dataclass(eq=False)
class _Finish:
    job_id: uuid.UUID
    lease: repository.Lease
    result: dict | None
    children: list
    outputs: list
    done: threading.Event = field(default_factory=threading.Event)
    outcome: repository.FenceResult | None = None
    error: BaseException | None = None

    def write(self, cursor) -> repository.FenceResult:
        return repository.finish(self.lease, self.result, self.children, self.outputs, cursor)


class GroupCommit:
    """Write finishes in groups: `finish()` returns this finish's outcome or raises its error."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queued: list[_Finish] = []
        self.groups = 0  # transactions that wrote more than one finish (tests and benchmarks)
        self.grouped = 0  # finishes written in those

    def finish(
        self, job_id: uuid.UUID, lease: repository.Lease, result: Any, children: list, outputs: list
    ) -> repository.FenceResult:
        mine = _Finish(job_id, lease, result, list(children), list(outputs))
        with self._lock:
            self._queued.append(mine)
        try:
            # Waits for this thread's turn on the heartbeat connection.
            with raw_connection(KEEPER_ALIAS) as conn:
                if not mine.done.is_set():
                    with self._lock:
                        group, self._queued = self._queued, []
                    self._write(conn, group)
        except DB_ERRORS:
            if self._withdraw(mine):
                raise  # nobody took it: the slot retries as it always did
        mine.done.wait()  # set already, unless another thread is writing it right now
        if mine.error is not None:
            raise mine.error
        assert mine.outcome is not None
        return mine.outcome

    def _withdraw(self, mine: _Finish) -> bool:
        """Take a finish back out of the queue; False if a writer had already taken it."""
        with self._lock:
            if mine in self._queued:
                self._queued.remove(mine)
                return True
        return False

    def _write(self, conn, group: list[_Finish]) -> None:
        """Write the group on `conn` (psycopg) and give every finish of it its outcome or error;
        never raises."""
        if len(group) > 1:
            group.sort(key=lambda f: str(f.job_id))
            try:
                with conn.transaction(), conn.cursor() as cursor:
                    outcomes = [f.write(cursor) for f in group]
            except DB_ERRORS as exc:
                self._settle(group, error=exc)  # the connection is gone: each slot retries
                return
            except Exception:
                pass  # nothing was committed: each finish again, on its own, below
            else:
                self.groups += 1
                self.grouped += len(group)
                for f, outcome in zip(group, outcomes, strict=True):
                    self._settle([f], outcome=outcome)
                return
        for f in group:
            try:
                with conn.cursor() as cursor:  # one statement in autocommit: atomic alone
                    self._settle([f], outcome=f.write(cursor))
            except Exception as exc:
                self._settle([f], error=exc)

    @staticmethod
    def _settle(group: list[_Finish], *, outcome=None, error: BaseException | None = None) -> None:
        for f in group:
            f.outcome, f.error = outcome, error
            f.done.set()
