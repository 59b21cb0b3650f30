"""Group commit: the finishes of a process's slots share transactions, and their WAL flushes.

A slot's final write goes through the process's `heartbeat` connection (workers/db.py
`raw_connection`), in turn with the other slots. A finish must wait for its commit's WAL
flush (~1 ms on a quiet disk, much more on a busy one) before its slot may move on, and on one
connection those flushes would queue up behind each other. So a slot that finishes puts its finish
in a queue; one slot at a time (the leader) takes a turn on the connection and writes every finish
queued by then in one statement (one transaction), and the slots whose finish it wrote are woken
with their outcome; the first finish queued after its group leads next. Under load most finishes
travel in twos and threes (docs/benchmarks.md).

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
    done: threading.Event = field(default_factory=threading.Event)  # outcome or error is set
    wake: threading.Event = field(default_factory=threading.Event)  # done, or this slot writes next
    outcome: repository.FenceResult | None = None
    error: BaseException | None = None

    def write(self, cursor) -> repository.FenceResult:
        return repository.finish(self.lease, self.result, self.children, self.outputs, cursor)


class GroupCommit:
    """Write finishes in groups: `finish()` returns this finish's outcome or raises its error.

    One slot at a time writes (the leader); a slot that finishes meanwhile queues its finish and
    sleeps until it is written, or until it is its turn to lead (the leader hands over to the first
    finish still queued after its group). Only the leaders queue for the connection, so a written
    finish's slot moves on at once instead of waiting for a turn on the connection it no longer
    needs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queued: list[_Finish] = []
        self._leading = False  # a slot is writing, or has been handed the turn
        self.groups = 0  # transactions that wrote more than one finish (tests and benchmarks)
        self.grouped = 0  # finishes written in those

    def finish(
        self, job_id: uuid.UUID, lease: repository.Lease, result: Any, children: list, outputs: list
    ) -> repository.FenceResult:
        mine = _Finish(job_id, lease, result, list(children), list(outputs))
        with self._lock:
            self._queued.append(mine)
            lead = not self._leading
            self._leading = True
        if not lead:
            mine.wake.wait()  # written by a leader, or handed the turn
        if not mine.done.is_set():
            self._lead(mine)
        if mine.error is not None:
            raise mine.error
        assert mine.outcome is not None
        return mine.outcome

    def _lead(self, mine: _Finish) -> None:
        """Write everything queued by the time the connection is ours, then hand over."""
        try:
            # Waits for this thread's turn on the heartbeat connection (beats go in between).
            with raw_connection(KEEPER_ALIAS) as conn:
                with self._lock:
                    group, self._queued = self._queued, []
                self._write(conn, group)
        except DB_ERRORS as exc:
            if self._withdraw(mine):
                mine.error = exc  # nobody took it: the slot retries as it always did
                mine.done.set()
        finally:
            with self._lock:
                if self._queued:
                    self._queued[0].wake.set()  # the next leader (still _leading)
                else:
                    self._leading = False

    def _withdraw(self, mine: _Finish) -> bool:
        """Take a finish back out of the queue; False if a writer had already taken it."""
        with self._lock:
            if mine in self._queued:
                self._queued.remove(mine)
                return True
        return False

    def _write(self, conn, group: list[_Finish]) -> None:
        """Write the group on `conn` (psycopg, autocommit) and give every finish of it its outcome
        or error; never raises. Several finishes go in one statement (repository.finish_many):
        one round trip and one commit."""
        if len(group) > 1:
            group.sort(key=lambda f: str(f.job_id))  # one lock order for every group
            try:
                with conn.cursor() as cursor:
                    outcomes = repository.finish_many(
                        [(f.lease, f.result, f.children, f.outputs) for f in group], cursor
                    )
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
            f.wake.set()
