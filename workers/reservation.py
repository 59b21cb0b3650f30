"""Dedicated execution on the worker side (docs/scheduler.md, "Dedicated execution").

`runworker --reservation ID` is an ordinary worker whose session binds one reservation right after
it registers (`DedicatedRun.bind`); the claim then hands it only that job's tasks, its webhook
included, and no shared work (the SQL enforces both sides). A `ReservationWatch` thread asks once a
heartbeat whether the job is done: when it has ended and nothing of it runs or is due, the
reservation is released (the job is shared again) and the worker drains and exits 0. A worker
whose reservation was taken from it (it was silent too long and another process bound it) drains
too: its writes are fenced already.

`sweep` is the maintenance side every worker runs (workers/maintenance.py): bound reservations
whose worker is lost go back to requested, unbound ones time out back to shared execution
(JETENCODE_RESERVATION_TIMEOUT_SECONDS), so the timeout holds without any provisioner running.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable

from scheduler import repository
from workers.db import DB_ERRORS, Backoff, release_connection, reset_connection, use_keeper_connection

log = logging.getLogger("jetencode.worker")

EXIT_REFUSED = 4  # runworker's exit status when the reservation cannot be bound
BIND_PATIENCE_SECONDS = 30.0  # database trouble while binding: give up after this long


class DedicatedRun:
    """One worker session's reservation: binding it, and watching for the end of its job."""

    def __init__(self, reservation_id: uuid.UUID, session):
        """`session`: workers.session.Session (uid, session_id, timing, log_extra)."""
        self.reservation_id = reservation_id
        self.session = session
        self.generation: int | None = None

    def bind(self) -> str | None:
        """Bind the reservation to this session. None when bound; else why not, for the operator
        (unknown reservation, bound to another live worker, no longer requested, job ended)."""
        deadline = time.monotonic() + BIND_PATIENCE_SECONDS
        backoff = Backoff(0.2, 2.0)
        while True:
            try:
                self.generation = repository.bind_reservation(
                    self.reservation_id,
                    self.session.uid,
                    self.session.session_id,
                    stale_seconds=self.session.timing.stale_worker,
                )
            except (repository.JobNotFound, repository.ActionNotAllowed) as exc:
                return str(exc)
            except DB_ERRORS as exc:
                reset_connection()
                if time.monotonic() >= deadline:
                    return f"cannot bind reservation {self.reservation_id}: {exc}"
                backoff.sleep(limit=deadline - time.monotonic())
                continue
            finally:
                release_connection()
            log.info(
                "bound reservation %s (generation %s): this worker runs its job alone",
                self.reservation_id,
                self.generation,
                extra=self.session.log_extra,
            )
            return None

    def watch(self, request_drain: Callable[[], None]) -> ReservationWatch:
        watcher = ReservationWatch(self, request_drain)
        watcher.start()
        return watcher


class ReservationWatch(threading.Thread):
    """Asks once a heartbeat whether the reserved job is done (`finish_reservation`): 'released'
    or 'lost: …' drains the worker; 'running' waits."""

    def __init__(self, run: DedicatedRun, request_drain: Callable[[], None]):
        super().__init__(name="reservation", daemon=True)
        self.run_ = run
        self.request_drain = request_drain
        self.stop_event = threading.Event()
        self.answer: str | None = None

    def run(self) -> None:
        session = self.run_.session
        use_keeper_connection()
        while not self.stop_event.wait(session.timing.heartbeat):
            try:
                self.answer = repository.finish_reservation(
                    self.run_.reservation_id, session.uid, session.session_id
                )
            except DB_ERRORS:
                reset_connection()
                continue
            finally:
                release_connection()
            if self.answer == "running":
                continue
            if self.answer == "released":
                log.info(
                    "reservation %s released: its job has ended; draining and exiting",
                    self.run_.reservation_id,
                    extra=session.log_extra,
                )
            else:
                log.warning("%s; draining and exiting", self.answer, extra=session.log_extra)
            self.request_drain()
            return


def sweep(session) -> None:
    """The maintenance pass over reservations (see the module docstring); logs what changed."""
    timing = session.timing
    for change in repository.sweep_reservations(timing.lease, timing.reservation_timeout):
        log.warning(
            "reservation %s -> %s: %s",
            change.reservation_id,
            change.outcome,
            change.detail,
            extra={**session.log_extra, "job_id": str(change.job_id)},
        )
