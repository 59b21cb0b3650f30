"""How a run ends: the one fenced final write that follows a handler (or its abort).

| what happened                               | write                                              |
|---------------------------------------------|----------------------------------------------------|
| handler returned                            | finish + children + outputs (files renamed inside) |
| handler raised / StageTimeout               | fail (retryable unless PermanentFailure)           |
| job cancelled (seen by heartbeat or write)  | finish, which the SQL turns into `cancelled`       |
| worker shutting down                        | release: pending again, no attempt used            |
| lease lost / uid taken over                 | nothing                                            |
| heartbeats failing, lease about to expire   | one fenced fail try (rejected if already too late) |

Final writes are retried on connection errors until the lease deadline; a replayed finish under
the same token is idempotent in the SQL.
"""

from __future__ import annotations

import json
import logging
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.db import transaction

from scheduler import repository
from workers.context import (
    CANCELLED,
    LEASE_EXPIRING,
    LEASE_LOST,
    SHUTDOWN,
    TAKEN_OVER,
    TIMEOUT,
    RunContext,
    TaskRun,
)
from workers.db import DB_ERRORS, Backoff, reset_connection
from workers.stages.base import LeaseLost, PermanentFailure, StageCancelled, StageTimeout

if TYPE_CHECKING:
    from workers.runtime import Worker

log = logging.getLogger("jetencode.worker")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def failure_text(exc: BaseException, tb: str) -> str:
    """What goes into last_failure: the summary first (the job log shows the first line), then the
    traceback."""
    summary = f"{type(exc).__name__}: {exc}".strip()
    return f"{summary}\n\n{tb}" if tb else summary


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
        self, lease: repository.Lease, result: Any, children: list, outputs: list[repository.Output]
    ) -> repository.FenceResult:
        if not self.prepared:
            # Nothing to move into place: finish_task_v1 is one statement, atomic on its own, so
            # autocommit saves the BEGIN and COMMIT round trips (and the job's row locks are not
            # held while they travel).
            return repository.finish(lease, result, children, outputs)
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


class Outcome:
    def __init__(self, worker: Worker):
        self.worker = worker

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
                    lease, f"stopped by worker {self.worker.uid}: {reason}", retryable=True
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
                    run, "finish", lambda: files.finish_and_commit(lease, result, ctx.children, outputs)
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
        self.worker.heartbeat.stop_renewing(run)
        until = run.lease_deadline if until is None else until
        backoff = Backoff(0.1, 2.0)
        while True:
            try:
                outcome = call()
                break
            except repository.SessionSuperseded:
                self.worker.on_taken_over()
                log.warning("task %s: %s not written: uid taken over", run.task.id, what, extra=run.extra)
                return None
            except DB_ERRORS as exc:
                reset_connection()
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
