"""Timed maintenance inside every worker (DECISIONS 9): not queued tasks, which could get stuck.

Every RECOVERY_INTERVAL_SECONDS (with a little jitter; in a farm of more than ASKS_PER_INTERVAL
live workers, that times live workers / ASKS_PER_INTERVAL, at most MAX_SPACING times, so the farm
asks about ASKS_PER_INTERVAL times an interval whatever its size), unless another worker made a
pass in the last half interval (`take_recovery_round`, which also records when the pass ran for
/metrics):
- `recover_expired` until it returns less than a full batch: leases nobody renewed go to
  retry_wait (attempt counted) or failed;
- `mark_stale_workers(STALE_WORKER_SECONDS)`: silent workers are reported offline;
- `release_jobs(LEASE_SECONDS, REASSIGN_AFTER_SECONDS)`: jobs pinned to a draining worker, or to a
  lost one (silent for a lease) that holds nothing of value for them, move on at once; jobs with
  local work on a lost worker move once it has been silent for REASSIGN_AFTER_SECONDS;
- `sweep_reservations` (workers/reservation.py): dedicated reservations whose worker was lost go back
  to requested, unbound ones older than RESERVATION_TIMEOUT_SECONDS fail back to shared execution;
Stale marking and reassignment are skipped while this worker's own heartbeat is not fresh (it was
stopped or cut off): then it is the stale one, and its view of the others is not to be trusted.
Every SAMPLE_INTERVAL_SECONDS `record_sample` (idempotent per minute), hourly
`purge_history(RETENTION_DAYS)`, and every five minutes a sweep of this worker's own workspace
directory (`workers.workspaces`: ended, purged and superseded jobs' files are removed), of abandoned
uploads (`media.uploads.expire_abandoned`) and of the fetch cache (`media.sources.cache.trim`).
All of it is safe with every worker doing it at once: the SQL locks with SKIP LOCKED.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable

from django.conf import settings

from media import uploads
from media.sources import cache as sources_cache
from scheduler import repository
from workers import reservation, scratch, workspaces
from workers.db import DB_ERRORS, RateLimitedLog, release_connection, reset_connection, use_keeper_connection

log = logging.getLogger("jetencode.worker")

RECOVER_BATCH = 100
# The farm asks for the recovery pass about this many times per RECOVERY_INTERVAL_SECONDS (a pass
# is due every half interval, so the next ask comes a tenth of an interval after it is due), and a
# worker spaces its asks by at most MAX_SPACING intervals: when most of a large farm goes at once,
# the survivors' next asks still come within MAX_SPACING intervals, and then at the full rate.
ASKS_PER_INTERVAL = 10
MAX_SPACING = 4.0
PURGE_BATCH = 500
PURGE_EVERY = 3600.0
SWEEP_EVERY = 300.0


class Maintenance(threading.Thread):
    def __init__(self, session, heartbeat_ok: Callable[[], float | None] = lambda: None):
        """`session`: what it needs of workers.session.Session (uid, timing, workspace_root,
        log_extra, on_taken_over); `heartbeat_ok`: the monotonic time of this worker's last
        accepted heartbeat (None: none yet)."""
        super().__init__(name="maintenance", daemon=True)
        self.worker = session
        self.heartbeat_ok = heartbeat_ok
        self.stop_event = threading.Event()
        self.rounds = 0
        self.spacing = 1.0  # this worker's recovery asks come every spacing intervals
        self._trouble = RateLimitedLog(60)

    def run(self) -> None:
        timing = self.worker.timing
        use_keeper_connection()  # shared with the heartbeat: taken for one step at a time
        now = time.monotonic()
        next_recovery = now
        next_sample = now + random.uniform(0, min(timing.sample_interval, 5.0))
        next_purge = now + random.uniform(30.0, 90.0)  # not every worker at the same second after a deploy
        next_sweep = now + random.uniform(10.0, 60.0)
        scratch_every = float(settings.SCRATCH_SWEEP_SECONDS)
        next_scratch = now + random.uniform(0.0, min(scratch_every, 10.0))
        while not self.stop_event.is_set():
            # A step that fails is tried again an interval later, as one that is not due yet.
            retry = time.monotonic() + timing.recovery_interval
            if time.monotonic() >= next_recovery:
                self._step("recovery", self.recover)
                next_recovery = time.monotonic() + timing.recovery_interval * self.spacing * random.uniform(
                    0.9, 1.1
                )
            now = time.monotonic()
            if now >= next_sample:
                next_sample = (
                    now + timing.sample_interval if self._step("sample", repository.record_sample) else retry
                )
            if now >= next_purge:
                next_purge = now + PURGE_EVERY if self._step("retention", self.purge) else retry
            if now >= next_sweep:
                next_sweep = now + SWEEP_EVERY if self._step("workspaces", self.sweep_workspaces) else retry
                self._step("sources", self.sweep_sources)
            if now >= next_scratch:
                next_scratch = now + scratch_every if self._step("scratch", self.sweep_scratch) else retry
            self.rounds += 1
            self.stop_event.wait(
                max(
                    0.0,
                    min(next_recovery, next_sample, next_purge, next_sweep, next_scratch) - time.monotonic(),
                )
            )

    def _step(self, what: str, func) -> bool:
        try:
            func()
            return True
        except repository.SessionSuperseded:
            self.worker.on_taken_over()
        except DB_ERRORS as exc:
            reset_connection()
            self._trouble.warning(
                "maintenance (%s) failed: %s",
                what,
                str(exc).strip().splitlines()[0] if str(exc).strip() else exc,
            )
        except Exception:
            log.exception("maintenance (%s) failed", what)
        finally:
            release_connection()
        return False

    def recover(self) -> None:
        timing = self.worker.timing
        # One pass per half interval across the whole farm, not one per worker: a worker whose turn
        # finds a pass just made (by anyone) skips its own. A single read-and-set of one row, so a
        # farm of idle workers costs one statement each per ask instead of four, and a large farm
        # spaces its asks by its size.
        turn = repository.take_recovery_round(timing.recovery_interval / 2, timing.stale_worker)
        self.spacing = min(MAX_SPACING, max(1.0, turn.live_workers / ASKS_PER_INTERVAL))
        if not turn.taken:
            return
        while not self.stop_event.is_set():
            rows = repository.recover_expired(RECOVER_BATCH)
            release_connection()  # the heartbeat may have been waiting for its turn
            for task_id, outcome in rows:
                log.info(
                    "recovered task %s (lease expired or deadline passed) -> %s",
                    task_id,
                    outcome,
                    extra={**self.worker.log_extra, "task_id": task_id},
                )
            if len(rows) < RECOVER_BATCH:
                break
        if not self._own_heartbeat_fresh():
            # Just resumed from a stop, or cut off from the database: this worker is the stale one.
            # Recovering expired leases is safe (the database's clock decides); judging others is not.
            return
        for uid in repository.mark_stale_workers(timing.stale_worker):
            log.warning(
                "worker %s is stale (no heartbeat for %gs): reported offline",
                uid,
                timing.stale_worker,
                extra=self.worker.log_extra,
            )
        for moved in repository.release_jobs(timing.lease, timing.reassign_after):
            log.warning(
                "job %s moved off worker %s (%s): execution %s runs on any worker",
                moved.job_id,
                moved.worker_uid,
                moved.cause,
                moved.execution_id,
                extra={**self.worker.log_extra, "job_id": str(moved.job_id), "cause": moved.cause},
            )
        reservation.sweep(self.worker)

    def _own_heartbeat_fresh(self) -> bool:
        last = self.heartbeat_ok()
        return last is not None and time.monotonic() - last < self.worker.timing.stale_worker / 2

    def purge(self) -> None:
        total = 0
        while not self.stop_event.is_set():
            purged = repository.purge_history(self.worker.timing.retention_days, PURGE_BATCH)
            release_connection()  # between batches: the heartbeat may be waiting for its turn
            total += purged
            if purged < PURGE_BATCH:
                break
        if total:
            log.info(
                "retention: purged %s finished jobs older than %s days",
                total,
                self.worker.timing.retention_days,
                extra=self.worker.log_extra,
            )

    def sweep_sources(self) -> None:
        """Abandoned uploads past their expiry, and the fetch cache beyond its size or retention."""
        expired = uploads.expire_abandoned()
        trimmed = sources_cache.trim(
            int(settings.SOURCES["FETCH_CACHE_MAX_BYTES"]), float(self.worker.timing.retention_days)
        )
        if expired or trimmed:
            log.info(
                "sources: removed %s abandoned uploads and %s cached downloads",
                expired,
                trimmed,
                extra=self.worker.log_extra,
            )

    def sweep_scratch(self) -> None:
        """The shared scratch of split jobs: every worker sweeps it (removing twice is harmless)."""
        removed = scratch.sweep(float(settings.SCRATCH_GRACE_SECONDS))
        if removed:
            log.info(
                "scratch: removed %s director%s of ended, purged or superseded jobs",
                len(removed),
                "y" if len(removed) == 1 else "ies",
                extra=self.worker.log_extra,
            )

    def sweep_workspaces(self) -> None:
        removed = workspaces.sweep(self.worker.workspace_root)
        if removed:
            log.info(
                "workspaces: removed %s director%s of ended, purged or superseded jobs",
                len(removed),
                "y" if len(removed) == 1 else "ies",
                extra=self.worker.log_extra,
            )
