"""The worker process: who starts what, and the main thread's supervision.

Threads and connections (workers/db.py; at most three connections whatever the slot count):

    main ─────────┐  register, supervise, drain / abort, lifecycle     ┐
    claimer ──────┤  one claim per free slot (workers/slots.py)        ├─ work (one shared connection)
    slot threads ─┘  handler, progress, fenced final write             ┘
    heartbeat ────┐  lease renewals, worker row                        ┐
    maintenance ──┘  recovery, stale workers, samples, retention       ┘─ heartbeat (shared)
    listen ──────────  LISTEN jetencode_queue_tasks (optional)          ── listen

The main thread registers the session, starts the others and supervises: it stops a run whose
lease is about to expire without a renewal or whose deadline passed (killing its subprocesses and
freeing its slot even if the handler ignores the stop), drains on SIGTERM or SIGINT, aborts on a
second one, and exits when a newer process takes the uid over. One stage from claim to fenced
finish is workers/slots.py. See docs/worker.md.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import pkgutil
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings

from scheduler import repository
from workers import processes
from workers.config import Timing, WorkerOptions
from workers.db import (
    DB_ERRORS,
    Backoff,
    RateLimitedLog,
    listen_params,
    release_connection,
    released,
    reset_connection,
    use_worker_connections,
)
from workers.heartbeat import Heartbeat
from workers.maintenance import Maintenance
from workers.reservation import EXIT_REFUSED, DedicatedRun
from workers.session import LEASE_EXPIRING, SHUTDOWN, TIMEOUT, Session
from workers.slots import Claimer, Slots, StageRunner
from workers.stages.base import HANDLERS
from workers.wakeup import Listener

log = logging.getLogger("jetencode.worker")

EXIT_OK = 0
EXIT_TAKEN_OVER = 3
EXTRA_STAGE_MODULES_ENV = "JETENCODE_EXTRA_STAGE_MODULES"
TAKEN_OVER_MESSAGE = "uid taken over"


def load_stage_modules() -> list[str]:
    """Import every handler module (workers.stages.*), then the extra ones named in
    JETENCODE_EXTRA_STAGE_MODULES (comma-separated module names or paths to .py files; used by
    tests and for site-specific stages). Returns the registered task types."""
    import workers.stages as package

    for info in pkgutil.iter_modules(package.__path__):
        try:
            importlib.import_module(f"{package.__name__}.{info.name}")
        except Exception:
            log.exception(
                "stage module workers.stages.%s failed to import; its task types will fail", info.name
            )
    for entry in filter(
        None, (item.strip() for item in os.environ.get(EXTRA_STAGE_MODULES_ENV, "").split(","))
    ):
        if entry.endswith(".py"):
            path = Path(entry).resolve()
            name = f"jetencode_extra_stages_{path.stem}"
            if name in sys.modules:
                continue
            spec = importlib.util.spec_from_file_location(name, path)
            if spec is None or spec.loader is None:
                raise ImportError(f"{EXTRA_STAGE_MODULES_ENV}: cannot load {entry}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        else:
            importlib.import_module(entry)
    return sorted(HANDLERS)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("jetencode")
    except Exception:
        return "dev"


def _signal_words(signum: int) -> str:
    """How a log line names what stopped us: SIGINT comes from Ctrl-C (directly or through the
    run command, which passes the terminal's Ctrl-C on as SIGINT)."""
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _output_location() -> str:
    bucket = getattr(settings, "S3_BUCKET", "") or ""
    if bucket:
        return f"s3://{bucket}/{getattr(settings, 'S3_PREFIX', '') or ''}"
    return str(settings.OUTPUT_ROOT_DIR)


class Worker:
    def __init__(
        self,
        options: WorkerOptions,
        timing: Timing,
        capabilities: dict[str, Any],
        *,
        hostname: str | None = None,
        stderr: Callable[[str], None] | None = None,
        reservation_id: uuid.UUID | None = None,
    ):
        self.options = options
        self.session = Session(options.uid, timing, capabilities, options.workspace)
        self.hostname = hostname or socket.gethostname()
        self._stderr = stderr or (lambda text: print(text, file=sys.stderr, flush=True))
        self.phase = "starting"  # starting | running | draining | stopping
        self.grace_deadline: float | None = None
        self._drain_requested = False
        self._drain_signal = signal.SIGTERM
        self._abort_signal: int | None = None

        self.heartbeat = Heartbeat(self.session)
        self.maintenance = Maintenance(self.session, lambda: self.heartbeat.last_ok)
        self.slots = Slots(options.concurrency, options.background_slots)
        self.outcome = StageRunner(self.session, self.slots, self.heartbeat.stop_renewing)
        self.listener: Listener | None = None
        self.claimer = Claimer(self.session, self.slots, self.outcome, self._listening)
        # `runworker --reservation`: this session runs one dedicated job (workers/reservation.py).
        self.dedicated = DedicatedRun(reservation_id, self.session) if reservation_id else None

    # What the handler context and the tests read of the session.
    uid = property(lambda self: self.session.uid)
    session_id = property(lambda self: self.session.session_id)
    timing = property(lambda self: self.session.timing)
    capabilities = property(lambda self: self.session.capabilities)
    workspace_root = property(lambda self: self.session.workspace_root)
    runs = property(lambda self: self.session.runs)
    kill_grace = property(lambda self: self.session.kill_grace)
    log_extra = property(lambda self: self.session.log_extra)
    taken_over = property(lambda self: self.session.taken_over)

    def on_taken_over(self) -> None:
        self.session.on_taken_over()

    def _listening(self) -> bool:
        return self.listener is not None and self.listener.state == "listening"

    # ---- lifecycle ---------------------------------------------------------------------------

    def run(self) -> int:
        """Register, start the threads and supervise until shutdown. Returns the exit status."""
        use_worker_connections(self.uid, self.timing.lease)
        self._install_signals()
        try:
            if not self._register():  # a signal came before the database answered: nothing to drain
                return 128 + self._abort_signal if self._abort_signal else EXIT_OK
            refusal = self.dedicated.bind() if self.dedicated else None
            if refusal:
                self._stderr(f"cannot run reservation {self.dedicated.reservation_id}: {refusal}")
                return self._finish(EXIT_REFUSED)
            self.phase = "running"
            self.heartbeat.start()
            self.maintenance.start()
            if self.timing.notify:
                self.listener = Listener(
                    self.session.wakeup,
                    threading.Event(),
                    listen_params(f"jetencode-worker {self.uid} listen"),
                    uid=self.uid,
                )
                self.listener.start()
            self.claimer.start()
            if self.dedicated:
                self.dedicated.watch(self.request_drain)
            log.info(
                "worker %s ready: session %s, %d media slot(s) + %d background",
                self.uid,
                self.session_id,
                self.options.concurrency,
                self.options.background_slots,
                extra=self.log_extra,
            )
            return self._supervise()
        finally:
            leftovers = processes.kill_all()
            if leftovers:
                log.warning("killed %d leftover process group(s) at exit", leftovers, extra=self.log_extra)

    def _register(self) -> bool:
        registration = repository.WorkerRegistration(
            uid=self.uid,
            session_id=self.session_id,
            hostname=self.hostname,
            pid=os.getpid(),
            version=_version(),
            concurrency=self.options.concurrency,
            background_slots=self.options.background_slots,
            category_limits=dict(self.options.category_limits),
            vram_total_mb=self.options.vram_mb,
            capabilities=self.capabilities,
            workspace=str(self.workspace_root),
        )
        backoff = Backoff(0.5, 10.0)
        trouble = RateLimitedLog(30)
        while self._abort_signal is None and not self._drain_requested:
            try:
                alive = repository.session_heartbeating(self.uid, self.timing.stale_worker)
                previous = repository.register_worker(registration)
            except DB_ERRORS as exc:
                reset_connection()
                trouble.warning(
                    "cannot register with the database (%s); retrying", _first_line(exc), extra=self.log_extra
                )
                backoff.sleep(self.session.attention)
                self.session.attention.clear()
                continue
            finally:
                release_connection()
            if previous and previous != self.session_id and alive:
                # Another live process with our uid: it is fenced out from now on.
                log.warning(
                    "uid %s was registered by session %s (still heartbeating): that process is fenced out now",
                    self.uid,
                    previous,
                    extra=self.log_extra,
                )
            elif previous and previous != self.session_id:
                # A normal restart: the previous process drained, or died long ago.
                log.info(
                    "worker %s restarted (previous session %s has stopped)",
                    self.uid,
                    previous,
                    extra=self.log_extra,
                )
            return True
        return False

    def _install_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, frame) -> None:  # noqa: ARG002
        """The first SIGTERM or SIGINT (Ctrl-C) drains; a second one of either aborts."""
        if self._drain_requested:
            self._abort_signal = signum
        else:
            self._drain_requested = True
            self._drain_signal = signum
        self.session.attention.set()

    def request_drain(self) -> None:
        """What SIGTERM does (for embedding, e.g. the `run` command)."""
        self._drain_requested = True
        self.session.attention.set()

    # ---- supervision (main thread) -----------------------------------------------------------

    def _supervise(self) -> int:
        while True:
            if self.taken_over.is_set():
                return self._exit_taken_over()
            if self._abort_signal is not None:
                return self._abort(self._abort_signal)
            if self._drain_requested and self.phase == "running":
                self._begin_drain()
                continue
            if self.phase == "draining":
                if not self.slots.busy() and not self.claimer.claiming:
                    log.info("drained: every running stage finished", extra=self.log_extra)
                    return self._finish(EXIT_OK)
                if time.monotonic() >= self.grace_deadline:
                    self._stop_remaining()
                    return self._finish(EXIT_OK)
            self._watch_runs()
            # Deadlines and leases are watched ten times a second while stages run; an idle worker
            # only waits for a signal or a takeover (both set `attention`), once a second.
            self.session.attention.wait(0.1 if self.runs.count() or self.phase != "running" else 1.0)
            self.session.attention.clear()

    def _watch_runs(self) -> None:
        """Stop work the database may already have given away: a lease not renewed for almost its
        whole length (heartbeats failing), or a stage past its wall-clock deadline. A handler that
        does not stop within the kill grace is abandoned: its final write is made from here."""
        now = time.monotonic()
        margin = self.timing.heartbeat
        for run in self.runs.snapshot():
            if run.abort_kind is not None:
                # Its subprocesses were killed at the abort; a handler at a checkpoint has raised
                # StageTimeout within a fraction of a second. One that has not by now ignores its
                # context: give up on the thread (the deadline margin leaves room for the fail).
                if run.abort_kind == TIMEOUT and run.aborted_at is not None:
                    if now - run.aborted_at > max(0.5, self.kill_grace):
                        self._abandon(run)
                continue
            if not run.renew:
                continue
            if now >= run.deadline:
                run.abort(TIMEOUT, f"stage deadline of {run.task.timeout_seconds:g}s passed")
            elif now >= run.lease_deadline - margin:
                silent = now - (run.lease_deadline - run.lease_seconds)
                run.abort(LEASE_EXPIRING, f"no lease renewal for {silent:.1f}s: the lease is about to expire")

    def _abandon(self, run) -> None:
        """A timed-out handler that ignores its context: kill what it started, record the timeout
        (a fenced fail) and free its slot now. The thread itself cannot be killed in Python; if it
        ever returns, its own final write finds the conclusion taken and writes nothing."""
        if not run.take_conclusion():
            return
        for group in run.groups():
            group.kill_now()
        log.warning(
            "task %s (%s): the handler did not stop after its timeout; its slot is freed and the "
            "attempt failed (the thread is left to end on its own)",
            run.task.id,
            run.task.task_type,
            extra=run.extra,
        )
        reason = run.abort_reason
        self.outcome.final(
            run, "fail", lambda: repository.fail(run.lease, f"StageTimeout: {reason}", retryable=True)
        )
        self.runs.remove(run)
        self.slots.abandon(run.slot, run.task.pool)
        self.session.wakeup.freed(run.task.pool)

    def _begin_drain(self) -> None:
        self.phase = "draining"
        self.grace_deadline = time.monotonic() + self.timing.shutdown_grace
        log.info(
            "%s: draining (no new claims; running stages get %gs; %s to stop now)",
            _signal_words(self._drain_signal),
            self.timing.shutdown_grace,
            "press Ctrl-C again" if self._drain_signal == signal.SIGINT else "signal again",
            extra=self.log_extra,
        )
        self._stop_claims()
        self._set_lifecycle("draining", seconds=5.0)

    def _stop_claims(self) -> None:
        self.session.stop_claiming.set()
        self.session.wakeup.wake_all()
        self.claimer.cancel_in_flight()

    def _stop_remaining(self) -> None:
        runs = self.runs.snapshot()
        if runs:
            log.info(
                "shutdown grace over: stopping %d stage(s) and handing them back",
                len(runs),
                extra=self.log_extra,
            )
        for run in runs:
            run.abort(SHUTDOWN, f"shutdown grace period of {self.timing.shutdown_grace:g}s is over")
        self._wait_for_slots(self.kill_grace + 5.0)
        self._release_leftovers(until_seconds=5.0)

    def _abort(self, signum: int) -> int:
        self.phase = "stopping"
        name = _signal_words(signum)
        log.warning("%s again: aborting now (stages killed and handed back)", name, extra=self.log_extra)
        self._stop_claims()
        for run in self.runs.snapshot():
            run.abort(SHUTDOWN, f"worker aborted by {name}", kill_now=True)
        self._wait_for_slots(2.0)
        self._release_leftovers(until_seconds=1.0)
        return self._finish(128 + signum)

    def _wait_for_slots(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if not self.runs.count() and not self.slots.busy():
                return
            if not self.runs.count() and self.session.stop_claiming.is_set():
                return
            time.sleep(0.05)

    def _release_leftovers(self, until_seconds: float) -> None:
        """Hand back tasks whose handler did not return (it ignores the context): the main thread
        writes the release; the slot's own write, if it ever comes, will be rejected."""
        for run in self.runs.snapshot():
            for group in run.groups():
                group.kill_now()
            if run.take_conclusion():
                self.outcome.final(
                    run,
                    "release",
                    lambda r=run: repository.release(r.lease, r.abort_reason or "worker stopped"),
                    until=min(run.lease_deadline, time.monotonic() + until_seconds),
                )

    def _finish(self, code: int) -> int:
        self.phase = "stopping"
        self.session.stop_claiming.set()
        self.session.wakeup.wake_all()
        self.maintenance.stop_event.set()
        if self.listener is not None:
            self.listener.close()
        self.heartbeat.disable()
        processes.kill_all()
        if not self.taken_over.is_set():
            self._set_lifecycle("offline", seconds=5.0)
        finishes = self.outcome.finishes
        log.info(
            "worker %s offline (exit %s): %d claim(s), %d cheap read(s) instead of a claim, "
            "%d notification(s), %d finish(es) committed in %d shared transaction(s)",
            self.uid,
            code,
            self.claimer.claims,
            self.claimer.hints,
            self.session.wakeup.received,
            finishes.grouped,
            finishes.groups,
            extra=self.log_extra,
        )
        return code

    def _exit_taken_over(self) -> int:
        self.phase = "stopping"
        self.on_taken_over()
        self.maintenance.stop_event.set()
        if self.listener is not None:
            self.listener.close()
        self.heartbeat.disable(timeout=0.5)
        self._wait_for_slots(self.kill_grace + 1.0)
        processes.kill_all()
        message = (
            f"{TAKEN_OVER_MESSAGE}: another process registered worker uid {self.uid!r}; "
            f"this process (session {self.session_id}) stops and writes nothing more"
        )
        log.error(message, extra=self.log_extra)
        self._stderr(message)
        return EXIT_TAKEN_OVER

    def _set_lifecycle(self, lifecycle: str, seconds: float = 10.0) -> None:
        deadline = time.monotonic() + seconds
        backoff = Backoff(0.1, 1.0)
        while True:
            try:
                with released():
                    moved = repository.set_session_lifecycle(self.uid, self.session_id, lifecycle)
                if moved is None:
                    log.warning(
                        "session no longer current: lifecycle %s not recorded",
                        lifecycle,
                        extra=self.log_extra,
                    )
                elif moved:
                    log.info(
                        "%s: %d job(s) pinned to this worker moved to the other workers",
                        lifecycle,
                        moved,
                        extra=self.log_extra,
                    )
                return
            except DB_ERRORS as exc:
                reset_connection()
                if time.monotonic() >= deadline:
                    log.error(
                        "could not mark the session %s: %s", lifecycle, _first_line(exc), extra=self.log_extra
                    )
                    return
                backoff.sleep(limit=deadline - time.monotonic())

    # ---- description ---------------------------------------------------------------------------

    def describe(self) -> list[str]:
        limits = ", ".join(f"{k}={v}" for k, v in self.options.category_limits.items())
        t = self.timing
        catalog = self.capabilities
        hardware = ", ".join(catalog.get("hardware_encoders") or []) or "none"
        ffmpeg = catalog.get("ffmpeg") or f"not found ({catalog.get('error', 'unknown')})"
        return [
            f"JetEncode worker {self.uid} (session {self.session_id}, pid {os.getpid()})",
            f"  concurrency  {self.options.concurrency} media slot(s) + {self.options.background_slots} background",
            f"  categories   {limits}",
            f"  vram         {self.options.vram_mb} MB",
            f"  workspace    {self.workspace_root}",
            f"  outputs      {_output_location()}",
            f"  ffmpeg       {ffmpeg} (version {catalog.get('version') or '?'}); hardware encoders: {hardware}",
            f"  timing       lease {t.lease:g}s, heartbeat {t.heartbeat:g}s, stale {t.stale_worker:g}s, "
            f"grace {t.shutdown_grace:g}s, poll {t.poll:g}s, recovery every {t.recovery_interval:g}s",
            f"  wake-ups     {'LISTEN jetencode_queue_tasks + polling' if t.notify else 'polling only (JETENCODE_NOTIFY=false)'}",
            f"  task types   {', '.join(sorted(HANDLERS)) or 'none'}",
        ]
