"""The heartbeat thread: one beat every HEARTBEAT_SECONDS on the connection it shares with
maintenance only (workers/db.py: never the one claims and finishes wait for).

A beat is one round trip and one transaction (`repository.worker_beat`: its lock and statement
timeouts set for that transaction only, no session state). It renews the leases of all of this
session's running tasks in one statement (still fenced per task) and then refreshes the worker row
with a psutil sample. Task leases go first: they are what a slow beat would cost. For each task
the answer is one of
- accepted: the lease is renewed (its monotonic deadline moves), and if the job asks for
  cancellation the run is aborted, which kills its subprocess group at once;
- rejected: the lease is lost; the run is aborted and will write nothing more.
A beat that fails (database unreachable) is retried with a short backoff; if renewals keep failing,
the supervisor stops the work itself before the lease runs out (see runtime.Worker._watch_runs).
`SessionSuperseded` means a newer process took our uid: the worker exits.
"""

from __future__ import annotations

import logging
import threading
import time

from scheduler import repository
from workers import capabilities
from workers.db import (
    DB_ERRORS,
    KEEPER_ALIAS,
    Backoff,
    RateLimitedLog,
    raw_connection,
    release_connection,
    reset_connection,
    use_keeper_connection,
)
from workers.session import CANCELLED, LEASE_LOST, TAKEN_OVER, Session, TaskRun

log = logging.getLogger("jetencode.worker")


class Heartbeat(threading.Thread):
    def __init__(self, session: Session):
        super().__init__(name="heartbeat", daemon=True)
        self.session = session
        self.interval = session.timing.heartbeat
        self.stop_event = threading.Event()
        # Held while a beat is in flight. A slot takes it to remove its lease from future beats
        # before its final write, so a renewal never races the finish (which would only produce a
        # spurious "rejected heartbeat" audit row).
        self.lock = threading.Lock()
        self.enabled = True
        self.last_ok: float | None = None
        self.lifecycle: str | None = None
        self._trouble = RateLimitedLog(30)

    def run(self) -> None:
        # A lock wait longer than a beat (our own slow finish holds the worker row) must not stall
        # the renewal of every other lease: give up and try again at the next beat.
        use_keeper_connection()
        backoff = Backoff(0.1, max(0.2, self.interval))
        next_beat = time.monotonic()
        while not self.stop_event.is_set():
            delay = next_beat - time.monotonic()
            if delay > 0 and self.stop_event.wait(delay):
                break
            ok = self.beat()
            if ok:
                backoff.reset()
                next_beat = max(next_beat + self.interval, time.monotonic() + self.interval * 0.5)
            else:
                next_beat = time.monotonic() + min(self.interval, backoff.next_delay())

    def stop_renewing(self, run: TaskRun, timeout: float | None = None) -> None:
        """Remove `run` from future beats, waiting for a beat in flight (bounded)."""
        acquired = self.lock.acquire(timeout=timeout if timeout is not None else max(1.0, 2 * self.interval))
        try:
            run.renew = False
        finally:
            if acquired:
                self.lock.release()

    def disable(self, timeout: float = 2.0) -> None:
        """No more beats (shutdown: before the session says offline, so no beat flips it back)."""
        self.stop_event.set()
        acquired = self.lock.acquire(timeout=timeout)
        try:
            self.enabled = False
        finally:
            if acquired:
                self.lock.release()

    def beat(self) -> bool:
        session = self.session
        sample = capabilities.system_sample(session.workspace_root, session.runs.count())
        with self.lock:
            if not self.enabled:
                return True
            runs = [run for run in session.runs.snapshot() if run.renew]
            sent_at = time.monotonic()
            try:
                answers = self._send(runs, sample)
                self._apply(runs, answers, sent_at)
            except repository.SessionSuperseded:
                for run in runs:
                    run.abort(TAKEN_OVER, "uid taken over by a newer session")
                session.on_taken_over()
                return True
            except DB_ERRORS as exc:
                reset_connection()
                self._trouble.warning("heartbeat failed (%s); retrying", _short(exc), extra=session.log_extra)
                return False
            finally:
                release_connection()
        self.last_ok = sent_at
        return True

    def _send(self, runs: list[TaskRun], sample: dict) -> list[repository.TaskHeartbeat]:
        """One round trip, one transaction: the leases first (they are what a slow beat would
        cost), then the worker row. A lock wait longer than most of a beat (our own slow finish
        holds the worker row) gives up, and the next beat tries again."""
        session = self.session
        with raw_connection(KEEPER_ALIAS) as conn:
            self.lifecycle, answers = repository.worker_beat(
                session.uid,
                session.session_id,
                [run.lease for run in runs],
                session.timing.lease,
                sample,
                lock_timeout=f"{max(200, int(self.interval * 1000 * 0.8))}ms",
                statement_timeout=f"{max(1000, int(session.timing.lease * 500))}ms",
                conn=conn,
            )
        return answers

    @staticmethod
    def _apply(runs: list[TaskRun], answers: list[repository.TaskHeartbeat], sent_at: float) -> None:
        by_id = {run.task.id: run for run in runs}
        for answer in answers:
            run = by_id.get(answer.task_id)
            if run is None:
                continue
            if answer.accepted:
                run.renewed(sent_at)
                if answer.cancel_requested:
                    run.abort(CANCELLED, "cancel requested (seen by the heartbeat)")
            else:
                run.abort(LEASE_LOST, f"heartbeat rejected: {answer.reason}")


def _short(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
