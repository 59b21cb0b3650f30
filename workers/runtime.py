"""The worker process: slots that claim and run stages, and the threads that keep them honest.

Threads (each with its own database connection, named `jetencode-worker <uid> <role>`):
- one per media slot plus one background slot: claim one task -> run its handler -> fenced final
  write -> claim again. No prefetch: a slot claims only when it is free. Idle slots wait on
  `Wakeup` (LISTEN notifications) for at most POLL_SECONDS;
- heartbeat (workers/heartbeat.py): renews leases, sees cancellation and lost leases;
- listen (workers/wakeup.py): LISTEN jetencode_queue_tasks on a raw psycopg connection;
- maintenance (workers/maintenance.py): recovery, stale workers, reassignment, samples, retention;
- main: registers the session, handles signals and supervises: it stops a run whose lease is
  about to expire without a renewal or whose deadline passed, drains on SIGTERM or SIGINT, aborts
  on a second one, and exits when a newer process takes the uid over.

How a run ends (finish / fail / release / nothing) is workers/outcome.py. See docs/worker.md.
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
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection

from scheduler import repository
from workers import processes
from workers.config import Timing, WorkerOptions
from workers.context import (
    LEASE_EXPIRING,
    SHUTDOWN,
    TAKEN_OVER,
    TIMEOUT,
    RunContext,
    TaskRun,
)
from workers.db import (
    DB_ERRORS,
    Backoff,
    RateLimitedLog,
    harden_connection_options,
    name_thread_connection,
    refresh_connection,
    reset_connection,
)
from workers.heartbeat import Heartbeat
from workers.maintenance import Maintenance
from workers.outcome import Outcome
from workers.stages.base import HANDLERS, PermanentFailure
from workers.wakeup import Listener, Wakeup

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


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _output_location() -> str:
    bucket = getattr(settings, "S3_BUCKET", "") or ""
    if bucket:
        return f"s3://{bucket}/{getattr(settings, 'S3_PREFIX', '') or ''}"
    return str(settings.OUTPUT_ROOT_DIR)


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
class Slot:
    name: str
    pool: str
    thread: threading.Thread | None = None
    claiming: bool = False
    pg_conn: Any = None
    runs_done: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class Worker:
    def __init__(
        self,
        options: WorkerOptions,
        timing: Timing,
        capabilities: dict[str, Any],
        *,
        hostname: str | None = None,
        stderr: Callable[[str], None] | None = None,
    ):
        self.options = options
        self.timing = timing
        self.uid = options.uid
        self.session_id = uuid.uuid4()
        self.capabilities = capabilities
        self.workspace_root = options.workspace
        self.hostname = hostname or socket.gethostname()
        self.log_extra = {"worker_uid": self.uid, "session_id": str(self.session_id)}
        self._stderr = stderr or (lambda text: print(text, file=sys.stderr, flush=True))
        # Kill grace: SIGTERM, then SIGKILL. Short enough that a cancel ends within two beats.
        self.kill_grace = max(0.2, min(2.0, timing.heartbeat / 2))

        self.runs = RunRegistry()
        self.wakeup = Wakeup()
        self.stop_claiming = threading.Event()
        self.taken_over = threading.Event()
        self.phase = "starting"  # starting | running | draining | stopping
        self.grace_deadline: float | None = None
        self._drain_requested = False
        self._drain_signal = signal.SIGTERM
        self._abort_signal: int | None = None
        self._main_wake = threading.Event()
        self._claim_trouble = RateLimitedLog(30)

        self.heartbeat = Heartbeat(self)
        self.outcome = Outcome(self)
        self.maintenance = Maintenance(self)
        self.listener = (
            Listener(self.wakeup, threading.Event(), f"jetencode-worker {self.uid} listen")
            if timing.notify
            else None
        )
        self.slots = [Slot(f"media-{i + 1}", "media") for i in range(options.concurrency)]
        self.slots += [
            Slot("background" if options.background_slots == 1 else f"background-{i + 1}", "background")
            for i in range(options.background_slots)
        ]

    # ---- lifecycle ---------------------------------------------------------------------------

    def run(self) -> int:
        """Register, start the threads and supervise until shutdown. Returns the exit status."""
        harden_connection_options(self.timing.lease)
        name_thread_connection(f"jetencode-worker {self.uid} main")
        self._install_signals()
        try:
            if not self._register():  # a signal came before the database answered: nothing to drain
                return 128 + self._abort_signal if self._abort_signal else EXIT_OK
            self.phase = "running"
            self.heartbeat.start()
            self.maintenance.start()
            if self.listener is not None:
                self.listener.start()
            for slot in self.slots:
                slot.thread = threading.Thread(
                    target=self._slot_loop, args=(slot,), name=f"slot-{slot.name}", daemon=True
                )
                slot.thread.start()
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
                previous = repository.register_worker(registration)
            except DB_ERRORS as exc:
                reset_connection()
                trouble.warning(
                    "cannot register with the database (%s); retrying", _first_line(exc), extra=self.log_extra
                )
                backoff.sleep(self._main_wake)
                self._main_wake.clear()
                continue
            if previous and previous != self.session_id:
                log.warning(
                    "uid %s was registered by session %s: that process is fenced out now",
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
        self._main_wake.set()

    def request_drain(self) -> None:
        """What SIGTERM does (for embedding, e.g. the `run` command)."""
        self._drain_requested = True
        self._main_wake.set()

    def on_taken_over(self) -> None:
        """Any thread that meets SessionSuperseded calls this: stop everything, write nothing."""
        if self.taken_over.is_set():
            return
        self.taken_over.set()
        self.stop_claiming.set()
        for run in self.runs.snapshot():
            run.abort(TAKEN_OVER, "uid taken over by a newer session", kill_now=True)
        self.wakeup.wake_all()
        self._main_wake.set()

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
                if not any(slot.thread.is_alive() for slot in self.slots):
                    log.info("drained: every running stage finished", extra=self.log_extra)
                    return self._finish(EXIT_OK)
                if time.monotonic() >= self.grace_deadline:
                    self._stop_remaining()
                    return self._finish(EXIT_OK)
            self._watch_runs()
            self._main_wake.wait(0.1)
            self._main_wake.clear()

    def _watch_runs(self) -> None:
        """Stop work the database may already have given away: a lease not renewed for almost its
        whole length (heartbeats failing), or a stage past its wall-clock deadline."""
        now = time.monotonic()
        margin = self.timing.heartbeat
        for run in self.runs.snapshot():
            if run.abort_kind is not None or not run.renew:
                continue
            if now >= run.deadline:
                run.abort(TIMEOUT, f"stage deadline of {run.task.timeout_seconds:g}s passed")
            elif now >= run.lease_deadline - margin:
                silent = now - (run.lease_deadline - run.lease_seconds)
                run.abort(LEASE_EXPIRING, f"no lease renewal for {silent:.1f}s: the lease is about to expire")

    def _begin_drain(self) -> None:
        self.phase = "draining"
        self.grace_deadline = time.monotonic() + self.timing.shutdown_grace
        log.info(
            "%s: draining (no new claims; running stages get %gs; signal again to abort)",
            signal.Signals(self._drain_signal).name,
            self.timing.shutdown_grace,
            extra=self.log_extra,
        )
        self._stop_claims()
        self._set_lifecycle("draining", seconds=5.0)

    def _stop_claims(self) -> None:
        self.stop_claiming.set()
        self.wakeup.wake_all()
        for slot in self.slots:  # cancel claim calls in flight
            with slot.lock:
                conn = slot.pg_conn if slot.claiming else None
            if conn is not None:
                try:
                    conn.cancel_safe(timeout=1.0)
                except Exception:
                    pass
        deadline = time.monotonic() + 3.0
        while any(slot.claiming for slot in self.slots) and time.monotonic() < deadline:
            time.sleep(0.02)

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
        name = signal.Signals(signum).name
        log.warning("%s: aborting now (stages killed and handed back)", name, extra=self.log_extra)
        self._stop_claims()
        for run in self.runs.snapshot():
            run.abort(SHUTDOWN, f"worker aborted by {name}", kill_now=True)
        self._wait_for_slots(2.0)
        self._release_leftovers(until_seconds=1.0)
        return self._finish(128 + signum)

    def _wait_for_slots(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if not self.runs.count() and not any(
                slot.thread and slot.thread.is_alive() for slot in self.slots
            ):
                return
            if not self.runs.count() and self.stop_claiming.is_set():
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
        self.stop_claiming.set()
        self.wakeup.wake_all()
        self.maintenance.stop_event.set()
        if self.listener is not None:
            self.listener.close()
        self.heartbeat.disable()
        processes.kill_all()
        if not self.taken_over.is_set():
            self._set_lifecycle("offline", seconds=5.0)
        log.info("worker %s offline (exit %s)", self.uid, code, extra=self.log_extra)
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
                moved = repository.set_session_lifecycle(self.uid, self.session_id, lifecycle)
                if moved is None:
                    log.warning(
                        "session no longer current: lifecycle %s not recorded",
                        lifecycle,
                        extra=self.log_extra,
                    )
                elif moved:
                    log.info(
                        "%s: %d job(s) pinned to this worker moved to other workers",
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

    # ---- slots ---------------------------------------------------------------------------------

    def _slot_loop(self, slot: Slot) -> None:
        name_thread_connection(f"jetencode-worker {self.uid} {slot.name}")
        backoff = Backoff(0.2, 5.0)
        while not self.stop_claiming.is_set():
            refresh_connection()
            seen = self.wakeup.generation(slot.pool)
            try:
                task, claimed_at = self._claim(slot)
            except repository.SessionSuperseded:
                self.on_taken_over()
                break
            except DB_ERRORS as exc:
                reset_connection()
                if not self.stop_claiming.is_set():
                    self._claim_trouble.warning(
                        "claim failed (%s); retrying",
                        _first_line(exc),
                        extra={**self.log_extra, "slot": slot.name},
                    )
                backoff.sleep(self.stop_claiming)
                continue
            except Exception:
                log.exception("claim failed", extra={**self.log_extra, "slot": slot.name})
                backoff.sleep(self.stop_claiming)
                continue
            backoff.reset()
            if task is None:
                self.wakeup.wait(slot.pool, seen, self.timing.poll)
                continue
            self._execute(slot, task, claimed_at)
            slot.runs_done += 1
        reset_connection()

    def _claim(self, slot: Slot) -> tuple[repository.ClaimedTask | None, float]:
        connection.close_if_health_check_failed()
        connection.ensure_connection()
        with slot.lock:
            if self.stop_claiming.is_set():
                return None, 0.0
            slot.pg_conn = connection.connection
            slot.claiming = True
        try:
            claimed_at = time.monotonic()
            return repository.claim(self.uid, self.session_id, slot.pool, self.timing.lease), claimed_at
        finally:
            with slot.lock:
                slot.claiming = False
                slot.pg_conn = None

    def _execute(self, slot: Slot, task: repository.ClaimedTask, claimed_at: float) -> None:
        lease = repository.Lease.of(task, self.uid, self.session_id)
        run = TaskRun(
            task,
            lease,
            slot.name,
            claimed_at,
            self.timing.lease,
            deadline_margin=max(self.timing.heartbeat, self.kill_grace + 1.0),
        )
        run.kill_grace = self.kill_grace
        self.runs.add(run)
        extra = run.extra
        try:
            if self.stop_claiming.is_set():  # the claim returned as shutdown began: give it back
                run.abort(SHUTDOWN, "claimed while the worker began shutting down")
                self.outcome.conclude(run, None, None, None, "")
                return
            log.info(
                "task %s (%s) of job %s started on %s: attempt %s/%s",
                task.id,
                task.task_type,
                task.job_id,
                slot.name,
                task.attempt,
                task.max_attempts,
                extra=extra,
            )
            result, error, tb, ctx = None, None, "", None
            try:
                workspace = self.workspace_root / str(task.job_id) / str(task.execution_id)
                ctx = RunContext(self, run, workspace)
                handler = HANDLERS.get(task.task_type)
                if handler is None:
                    raise PermanentFailure(
                        f"worker {self.uid} has no handler for task type {task.task_type!r}"
                    )
                result = handler(ctx)
            except BaseException as exc:  # a handler crash fails its task, never the worker
                error, tb = exc, traceback.format_exc()
            self.outcome.conclude(run, ctx, result, error, tb)
        except Exception:
            log.exception("task %s: runtime error while concluding", task.id, extra=extra)
        finally:
            for group in run.groups():
                group.stop(run.kill_grace)
            self.runs.remove(run)
            self.wakeup.notify(task.pool)  # a slot (and its category) is free again

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
