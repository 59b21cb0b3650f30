"""One stage from claim to fenced finish: the claimer, the slots and the stage's conclusion.

    Claimer.step()            one synchronous claim per free slot (no prefetch, no local buffer);
      │                       an idle poll asks a cheap read first and skips the scheduler lock
      ▼                       when it shows nothing this worker could take
    StageRunner.start()       the slot's thread takes it: TaskRun + RunContext, the handler
      │
      ▼
    StageRunner.conclude()    the one fenced final write (table below), retried until the lease
                              deadline; the slot is free again and the claimer is woken

How a run ends:

| what happened                               | write                                              |
|---------------------------------------------|----------------------------------------------------|
| handler returned                            | finish + children + outputs (files renamed inside) |
| handler raised / StageTimeout               | fail (retryable unless PermanentFailure)           |
| job cancelled (seen by heartbeat or write)  | finish, which the SQL turns into `cancelled`       |
| worker shutting down                        | release: pending again, no attempt used            |
| lease lost / uid taken over                 | nothing                                            |
| heartbeats failing, lease about to expire   | one fenced fail try (rejected if already too late) |

A replayed finish under the same token is idempotent in the SQL. Every database call here runs on
the process's one shared `work` connection (workers/db.py) and hands it back when done.
"""

from __future__ import annotations

import json
import logging
import queue
import random
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.db import transaction

from scheduler import repository
from workers.context import RunContext
from workers.db import (
    DB_ERRORS,
    Backoff,
    RateLimitedLog,
    on_keeper_connection,
    raw_connection,
    release_connection,
    reset_connection,
)
from workers.finishes import GroupCommit
from workers.session import (
    CANCELLED,
    LEASE_EXPIRING,
    LEASE_LOST,
    SHUTDOWN,
    TAKEN_OVER,
    TIMEOUT,
    Session,
    TaskRun,
)
from workers.stages.base import HANDLERS, LeaseLost, PermanentFailure, StageCancelled, StageTimeout

log = logging.getLogger("jetencode.worker")

POOL_ORDER = ("media", "background")
# A poll (or a slot coming free) claims work that has been runnable this long: younger work was
# announced to the worker that should take it, which is claiming it now. Missed notifications cost
# at most a poll interval plus this. Work announced to every worker (no free slot could be offered
# it) is the exception: after such a notification, a backlog of any age is claimed slot after slot.
HINT_GRACE_SECONDS = 0.5


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def failure_text(exc: BaseException, tb: str) -> str:
    """What goes into last_failure: the summary first (the job log shows the first line), then the
    traceback."""
    summary = f"{type(exc).__name__}: {exc}".strip()
    return f"{summary}\n\n{tb}" if tb else summary


# ---- slots ---------------------------------------------------------------------------------------


class Slots:
    """The process's slots by pool: which are free, and the stage each busy one runs."""

    def __init__(self, media: int, background: int):
        self._lock = threading.Lock()
        self._free = {
            "media": [f"media-{i + 1}" for i in range(media)],
            "background": ["background"]
            if background == 1
            else [f"background-{i + 1}" for i in range(background)],
        }
        self._busy: dict[str, object] = {}  # slot -> the stage handed to it (None until then)

    def free(self, pool: str) -> int:
        with self._lock:
            return len(self._free[pool])

    def take(self, pool: str) -> str | None:
        with self._lock:
            if not self._free[pool]:
                return None
            name = self._free[pool].pop(0)
            self._busy[name] = None
            return name

    def running(self, name: str, stage: object) -> None:
        with self._lock:
            self._busy[name] = stage

    def put_back(self, pool: str, name: str, stage: object = None) -> None:
        """Free the slot; at the end of a stage (`stage`), only if the slot is still that stage's
        (the supervisor may have freed it already for a handler that ignored its timeout, and the
        slot may be running another stage since)."""
        with self._lock:
            if name not in self._busy or (stage is not None and self._busy[name] is not stage):
                return
            del self._busy[name]
            self._free[pool].append(name)
            self._free[pool].sort(key=lambda n: (len(n), n))

    def abandon(self, name: str, pool: str) -> None:
        """Free a slot whose thread will not end (a handler ignoring its timeout)."""
        self.put_back(pool, name)

    def busy(self) -> int:
        with self._lock:
            return len(self._busy)


# ---- the claimer ---------------------------------------------------------------------------------


class Claimer(threading.Thread):
    """The process's one claiming thread (Healthchecks' loop of small steps): `step()` claims for
    the free slots and says whether it found work; when it did not, the thread waits for a
    notification, a slot coming free, or the next poll (POLL_SECONDS with ±20 % jitter)."""

    def __init__(
        self,
        session: Session,
        slots: Slots,
        runner: StageRunner,
        listening: Callable[[], bool] = lambda: False,
    ):
        """`listening()`: whether notifications reach this process now (its LISTEN is up)."""
        super().__init__(name="claimer", daemon=True)
        self.session = session
        self.listening = listening
        self.slots = slots
        self.runner = runner
        self.claims = 0  # claim statements sent (tests and the farm bench read them)
        self.hints = 0  # cheap reads sent instead
        self._looked: dict[str, tuple[int, int, int] | None] = dict.fromkeys(POOL_ORDER)
        self._more = dict.fromkeys(POOL_ORDER, False)  # the last claim saw a backlog
        # A notification to every worker arrived (the farm had no free slot to offer the work) and
        # no claim has seen the backlog end since: the backlog check counts work of any age.
        self._everyone = dict.fromkeys(POOL_ORDER, False)
        self._credit = dict.fromkeys(POOL_ORDER, 0)  # notifications not yet answered by a claim
        self._next_poll = 0.0
        self._lock = threading.Lock()
        self._in_flight: Any = None  # the psycopg connection of a claim being sent
        self.claiming = False
        self._backoff = Backoff(0.2, 5.0)
        self._trouble = RateLimitedLog(30)

    def run(self) -> None:
        while not self.session.stop_claiming.is_set():
            seen = self.session.wakeup.generations()
            if self.step(seen):
                continue
            self.session.wakeup.wait_any(seen, max(0.0, self._next_poll - time.monotonic()))
        release_connection()

    def step(self, seen: dict[str, int] | None = None) -> bool:
        """One claim per pool that has a free slot and something new to look at. True if a task
        was claimed (the caller steps again at once: more free slots may be waiting).

        A notification for the pool, the first look, or a backlog (the last claim saw more runnable
        work, `more_runnable`) claims at once: under load that is one claim per stage and nothing
        else. Anything else that might mean work — a slot coming free after the backlog ended, the
        idle poll — asks `runnable_hint` first: most of the time there is nothing, and that read
        takes no lock, so neither idle workers nor finishing stages queue on the scheduler lock for
        nothing."""
        seen = self.session.wakeup.generations() if seen is None else seen
        poll_due = time.monotonic() >= self._next_poll
        notified, maybe = [], []
        for pool in POOL_ORDER:
            if self.session.stop_claiming.is_set() or not self.slots.free(pool):
                continue
            looked = self._looked[pool]  # (notifications, frees, to everyone) already acted on
            now_seen = (seen[pool], seen[f"{pool}.free"], seen[f"{pool}.everyone"])
            self._looked[pool] = now_seen
            freed = looked is not None and now_seen[1] != looked[1]
            if looked is not None:
                self._credit[pool] += max(0, now_seen[0] - looked[0])
                self._everyone[pool] = self._everyone[pool] or now_seen[2] != looked[2]
            if looked is None or self._credit[pool] or self._more[pool]:
                notified.append(pool)  # a notification, or a backlog the last claim saw: claim
            elif poll_due or freed:
                maybe.append(pool)
        runnable = self._hint() if maybe else set()
        found = False
        for pool in POOL_ORDER:
            if pool in notified or pool in runnable:
                found = self._claim_one(pool) or found
        if poll_due:
            self._next_poll = time.monotonic() + self.session.timing.poll * random.uniform(0.8, 1.2)
        return found

    def _grace(self) -> float:
        """How old work must be for a poll or a backlog to claim it: while notifications arrive,
        younger work was announced to the worker that should take it; polling only, none."""
        return HINT_GRACE_SECONDS if self.listening() else 0.0

    def _hint(self) -> set[str]:
        """The pools worth a claim, by a read that takes no lock (one query for both pools)."""
        self.hints += 1
        try:
            with raw_connection() as conn, conn.cursor() as cursor:
                return repository.runnable_hint(self.session.uid, self._grace(), cursor)
        except DB_ERRORS:
            reset_connection()
            return set(POOL_ORDER)  # let the claims meet (and report) the error

    def _claim_one(self, pool: str) -> bool:
        slot = self.slots.take(pool)
        if slot is None:
            return False
        try:
            task, claimed_at = self._claim(pool)
        except repository.SessionSuperseded:
            self.slots.put_back(pool, slot)
            self.session.on_taken_over()
            return False
        except DB_ERRORS as exc:
            reset_connection()
            self.slots.put_back(pool, slot)
            if not self.session.stop_claiming.is_set():
                self._trouble.warning(
                    "claim failed (%s); retrying", _first_line(exc), extra=self.session.log_extra
                )
            self._backoff.sleep(self.session.stop_claiming)
            return False
        except Exception:
            self.slots.put_back(pool, slot)
            log.exception("claim failed", extra=self.session.log_extra)
            self._backoff.sleep(self.session.stop_claiming)
            return False
        self._backoff.reset()
        # One claim per notification: while some are unanswered, the next free slot claims at
        # once (a transaction that enqueued four jobs for this worker sent four); an empty claim
        # answers them all.
        self._credit[pool] = max(0, self._credit[pool] - 1) if task is not None else 0
        # While the claim saw more runnable work (a backlog), the next free slot claims at once;
        # once it saw none, a slot coming free asks the lock-free hint first.
        self._more[pool] = task is not None and task.more_runnable
        self._everyone[pool] = self._everyone[pool] and self._more[pool]
        if task is None:
            self.slots.put_back(pool, slot)
            return False
        self.runner.start(slot, task, claimed_at)
        return True

    def _claim(self, pool: str) -> tuple[repository.ClaimedTask | None, float]:
        session = self.session
        with raw_connection() as conn:
            with self._lock:
                if session.stop_claiming.is_set():
                    return None, 0.0
                self._in_flight = conn
                self.claiming = True
            try:
                claimed_at = time.monotonic()
                self.claims += 1
                # The backlog check after a claim leaves out work younger than the grace (it was
                # offered to a free slot elsewhere), except after a notification to every worker:
                # work the farm had no free slot to offer, which any slot coming free should take.
                grace = 0.0 if self._everyone[pool] else self._grace()
                with conn.cursor() as cursor:
                    task = repository.claim(
                        session.uid, session.session_id, pool, session.timing.lease, grace, cursor
                    )
                return task, claimed_at
            finally:
                with self._lock:
                    self.claiming = False
                    self._in_flight = None

    def cancel_in_flight(self, wait: float = 3.0) -> None:
        """Shutdown: stop a claim being sent (its transaction rolls back) and wait for the thread
        to notice (bounded)."""
        with self._lock:
            conn = self._in_flight
        if conn is not None:
            try:
                conn.cancel_safe(timeout=1.0)
            except Exception:
                pass
        deadline = time.monotonic() + wait
        while self.claiming and time.monotonic() < deadline:
            time.sleep(0.02)


# ---- one stage -----------------------------------------------------------------------------------


class _SlotThread(threading.Thread):
    """A slot's thread: runs the stages handed to it (`inbox`), one at a time, for as long as it is
    its slot's thread. `busy` is set by the claimer when it hands over a stage and cleared by the
    thread when the stage has ended."""

    def __init__(self, slot: str, runner: StageRunner):
        super().__init__(name=f"slot-{slot}", daemon=True)
        self.slot = slot
        self.runner = runner
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.busy = False

    def run(self) -> None:
        while True:
            self.runner.in_slot(self.slot, self.inbox.get())
            if not self.runner.owns(self.slot, self):
                return  # abandoned meanwhile: the slot has a new thread


class StageRunner:
    """Runs each claimed stage in a thread of its slot: the handler, then its one fenced final
    write. `stop_renewing(run)` removes the run from the heartbeat before that write."""

    def __init__(self, session: Session, slots: Slots, stop_renewing: Callable[[TaskRun], None]):
        self.session = session
        self.slots = slots
        self.stop_renewing = stop_renewing
        self.finishes = GroupCommit()  # the slots' file-less finishes, committed together
        self._threads: dict[str, _SlotThread] = {}  # each slot's current thread (claimer only)

    def start(self, slot: str, task: repository.ClaimedTask, claimed_at: float) -> None:
        """Hand the stage to its slot's thread and return at once. The thread lives as long as it
        keeps its slot: starting a thread per stage made the claimer wait for each new thread to be
        scheduled, about a third of its time under load (py-spy, docs/benchmarks.md). A slot whose
        thread is still busy (a handler that ignored its timeout, abandoned by the supervisor) gets
        a new thread; the old one ends when its handler returns."""
        thread = self._threads.get(slot)
        fresh = thread is None or thread.busy
        if fresh:
            thread = _SlotThread(slot, self)
            self._threads[slot] = thread
        thread.busy = True
        stage = (task, claimed_at)
        self.slots.running(slot, stage)
        thread.inbox.put(stage)
        if fresh:
            thread.start()

    def owns(self, slot: str, thread: _SlotThread) -> bool:
        return self._threads.get(slot) is thread

    def in_slot(self, slot: str, stage: tuple[repository.ClaimedTask, float]) -> None:
        """One stage on its slot's thread; the slot is free again afterwards."""
        task, claimed_at = stage
        me = threading.current_thread()
        try:
            self.execute(slot, task, claimed_at)
        finally:
            release_connection()
            me.busy = False  # before the slot is put back: the claimer may hand it a stage at once
            self.slots.put_back(task.pool, slot, stage)
            self.session.wakeup.freed(task.pool)  # a slot (and its category) is free again

    def new_run(self, slot: str, task: repository.ClaimedTask, claimed_at: float) -> TaskRun:
        session = self.session
        run = TaskRun(
            task,
            repository.Lease.of(task, session.uid, session.session_id),
            slot,
            claimed_at,
            session.timing.lease,
            deadline_margin=max(session.timing.heartbeat, session.kill_grace + 1.0),
        )
        run.kill_grace = session.kill_grace
        return run

    def execute(self, slot: str, task: repository.ClaimedTask, claimed_at: float) -> None:
        session = self.session
        run = self.new_run(slot, task, claimed_at)
        session.runs.add(run)
        try:
            if session.stop_claiming.is_set():  # the claim returned as shutdown began: give it back
                run.abort(SHUTDOWN, "claimed while the worker began shutting down")
                self.conclude(run, None, None, None, "")
                return
            log.info(
                "task %s (%s) of job %s started on %s: attempt %s/%s",
                task.id,
                task.task_type,
                task.job_id,
                slot,
                task.attempt,
                task.max_attempts,
                extra=run.extra,
            )
            result, error, tb, ctx = None, None, "", None
            try:
                workspace = session.workspace_root / str(task.job_id) / str(task.execution_id)
                ctx = RunContext(session, run, workspace)
                handler = HANDLERS.get(task.task_type)
                if handler is None:
                    raise PermanentFailure(
                        f"worker {session.uid} has no handler for task type {task.task_type!r}"
                    )
                result = handler(ctx)
            except BaseException as exc:  # a handler crash fails its task, never the worker
                error, tb = exc, traceback.format_exc()
            release_connection()  # whatever the handler's last ORM read took
            self.conclude(run, ctx, result, error, tb)
        except Exception:
            log.exception("task %s: runtime error while concluding", task.id, extra=run.extra)
        finally:
            for group in run.groups():
                group.stop(run.kill_grace)
            session.runs.remove(run)

    # ---- the conclusion: one fenced final write --------------------------------------------------

    def conclude(
        self, run: TaskRun, ctx: RunContext | None, result: Any, error: BaseException | None, tb: str
    ) -> None:
        if not run.take_conclusion():
            return  # the supervisor already handed it back
        task, lease = run.task, run.lease
        if ctx is not None and run.abort_kind not in (LEASE_LOST, TAKEN_OVER, LEASE_EXPIRING):
            try:
                ctx.flush()  # the handler's last log lines, while the lease is still ours
            except (LeaseLost, StageCancelled):
                pass  # run.abort_kind says what happened
            except Exception:
                log.exception("task %s: could not flush its log", task.id, extra=run.extra)
        if run.abort_kind is not None:
            self.conclude_aborted(run)
            return
        if isinstance(error, LeaseLost):
            log.warning("task %s: lease lost (%s); discarding the attempt", task.id, error, extra=run.extra)
            return
        if isinstance(error, StageTimeout):
            self.final(run, "fail", lambda: repository.fail(lease, failure_text(error, tb), retryable=True))
            return
        if error is not None:
            if isinstance(error, StageCancelled):
                log.warning(
                    "task %s raised StageCancelled without a cancel request: failing the attempt",
                    task.id,
                    extra=run.extra,
                )
            retryable = not isinstance(error, PermanentFailure)
            level = logging.WARNING if isinstance(error, Exception) else logging.ERROR
            log.log(
                level,
                "task %s (%s) failed%s: %s",
                task.id,
                task.task_type,
                "" if retryable else " permanently",
                _first_line(error),
                extra=run.extra,
            )
            self.final(
                run, "fail", lambda: repository.fail(lease, failure_text(error, tb), retryable=retryable)
            )
            return
        self.complete(run, ctx, result)

    def conclude_aborted(self, run: TaskRun) -> None:
        kind, reason, lease = run.abort_kind, run.abort_reason, run.lease
        if kind in (LEASE_LOST, TAKEN_OVER):
            log.warning(
                "task %s: %s; attempt discarded, nothing written", run.task.id, reason, extra=run.extra
            )
        elif kind == LEASE_EXPIRING:
            # One fenced try: if the lease still holds, the attempt ends now (retried later);
            # otherwise the write is rejected and the recovery loop has it or will have it.
            self.final(
                run,
                "fail",
                lambda: repository.fail(
                    lease, f"stopped by worker {self.session.uid}: {reason}", retryable=True
                ),
                until=time.monotonic(),
            )
        elif kind == SHUTDOWN:
            self.final(run, "release", lambda: repository.release(lease, reason or "worker shutting down"))
        elif kind == CANCELLED:
            self.final(run, "finish", lambda: repository.finish(lease))  # the SQL ends it cancelled
        elif kind == TIMEOUT:
            self.final(run, "fail", lambda: repository.fail(lease, f"StageTimeout: {reason}", retryable=True))

    def complete(self, run: TaskRun, ctx: RunContext, result: Any) -> None:
        """The handler returned: its result must be JSON; its files are copied next to their final
        place, then one finish writes the result and the children and renames the files into place."""
        lease = run.lease
        if result is not None and not isinstance(result, dict):
            result = {"value": result}
        try:
            json.dumps(result)
        except (TypeError, ValueError) as exc:
            message = f"the handler returned a result that is not JSON: {exc}"
            self.final(run, "fail", lambda: repository.fail(lease, message, retryable=False))
            return
        files = _Publication(ctx.job_id, ctx.publications)
        try:
            try:
                # The slow part (copying bytes) happens before the transaction, heartbeats still on.
                files.prepare()
            except Exception as exc:
                self.fail_for_outputs(run, "preparing", exc)
                return
            if run.abort_kind is not None:  # cancelled or lost while the files were copied
                self.conclude_aborted(run)
                return
            outputs = files.outputs()
            try:
                self.final(
                    run,
                    "finish",
                    lambda: files.finish_and_commit(
                        lease, result, ctx.children, outputs, self.finishes, run.task.job_id
                    ),
                )
            except Exception as exc:  # publishing failed: the transaction was rolled back
                self.fail_for_outputs(run, "publishing", exc)
        finally:
            files.discard_uncommitted(run.extra)

    def fail_for_outputs(self, run: TaskRun, doing: str, exc: Exception) -> None:
        """A retryable fail when the stage's files could not be prepared or published (called while
        `exc` is being handled: its traceback goes into the failure)."""
        message = failure_text(exc, traceback.format_exc())
        log.warning("task %s: %s outputs failed: %s", run.task.id, doing, exc, extra=run.extra)
        self.final(run, "fail", lambda: repository.fail(run.lease, message, retryable=True))

    def final(
        self, run: TaskRun, what: str, call: Callable[[], repository.FenceResult], until: float | None = None
    ) -> repository.FenceResult | None:
        """A fenced final write (finish / fail / release), retried on connection errors until the
        lease deadline (the SQL makes a replay under the same token idempotent)."""
        self.stop_renewing(run)
        until = run.lease_deadline if until is None else until
        backoff = Backoff(0.1, 2.0)
        while True:
            try:
                with on_keeper_connection():
                    outcome = call()
                break
            except repository.SessionSuperseded:
                self.session.on_taken_over()
                log.warning("task %s: %s not written: uid taken over", run.task.id, what, extra=run.extra)
                return None
            except DB_ERRORS as exc:  # the broken connection went back to its pool, which drops it
                remaining = until - time.monotonic()
                if remaining <= 0:
                    log.error(
                        "task %s: %s not written (%s); the lease runs out, recovery will take it",
                        run.task.id,
                        what,
                        _first_line(exc),
                        extra=run.extra,
                    )
                    return None
                log.warning(
                    "task %s: %s failed (%s); retrying", run.task.id, what, _first_line(exc), extra=run.extra
                )
                backoff.sleep(limit=remaining)
        elapsed = time.monotonic() - run.claimed_at
        if outcome.accepted:
            log.info(
                "task %s (%s): %s -> %s%s after %.1fs",
                run.task.id,
                run.task.task_type,
                what,
                outcome.outcome,
                f" ({outcome.reason})" if outcome.reason else "",
                elapsed,
                extra=run.extra,
            )
        else:
            log.warning("task %s: %s rejected: %s", run.task.id, what, outcome.reason, extra=run.extra)
        return outcome


class _Publication:
    """A stage's files on their way to output storage: prepared (copied next to their final place)
    before the finish, committed (renamed into place) inside the finish transaction, and whatever
    was not committed removed at the end."""

    def __init__(self, job_id: str, specs: list):
        from media.storage import get_storage

        self.storage = get_storage()
        self.job_id = job_id
        self.specs = specs
        self.prepared: list = []  # (spec, storage.Prepared)
        self.committed: set[str] = set()

    def prepare(self) -> None:
        for spec in self.specs:
            self.prepared.append((spec, self.storage.prepare(self.job_id, Path(spec.source), spec.name)))

    def outputs(self) -> list[repository.Output]:
        return [
            repository.Output(
                name=p.name,
                kind=spec.kind,
                size_bytes=p.size_bytes,
                storage_url=self.storage.url(self.job_id, p.name),
                metadata=dict(spec.metadata or {}),
            )
            for spec, p in self.prepared
        ]

    def finish_and_commit(
        self,
        lease: repository.Lease,
        result: Any,
        children: list,
        outputs: list[repository.Output],
        finishes: GroupCommit,
        job_id,
    ) -> repository.FenceResult:
        if not self.prepared:
            # Nothing to move into place: finish_task_v1 is one statement, atomic on its own, so
            # it may share a transaction (and its WAL flush) with other slots' finishes.
            return finishes.finish(job_id, lease, result, children, outputs)
        with transaction.atomic():
            outcome = repository.finish(lease, result, children, outputs)
            if outcome.outcome == "completed":
                # Inside the finish transaction: an error here rolls the completion back.
                for _spec, p in self.prepared:
                    if p.temp not in self.committed:
                        self.storage.commit(p)
                        self.committed.add(p.temp)
        return outcome

    def discard_uncommitted(self, extra: dict) -> None:
        for _spec, p in self.prepared:
            if p.temp not in self.committed:
                try:
                    self.storage.abort(p)
                except Exception:
                    log.warning("could not remove the temporary output %s", p.temp, extra=extra)
