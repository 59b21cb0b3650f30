"""The soak's actors: worker processes, the faults done to them and to PostgreSQL, operators who
never stop steering the queue, and a prober that replays stale leases on purpose.

- `WorkerProcess`: one `manage.py runworker --uid soak-i` subprocess (restarted with the same uid).
- `FaultInjector`: at random, SIGKILL a worker (restarted afterwards, now and then only after the
  reassignment threshold), SIGSTOP it past its lease then SIGCONT, SIGTERM it with work running,
  drain or evacuate it as an operator would (`repository.drain_worker` / `evacuate_worker`, then
  SIGTERM and restart), `pg_terminate_backend` one of its connections (the LISTEN one included),
  and, on a private instance only, restart PostgreSQL under load (`fast` and `immediate` in turn).
- `OperatorChaos`: moves, pauses, resumes, cancels and reprioritizes jobs through
  `scheduler.repository`, from its own thread.
- `StaleWriteProber`: remembers leases of running tasks; once a lease is provably stale (its task
  no longer runs under that token, which can never become current again) it sends a fenced write
  under it, which must be rejected (or, for a finish that already completed under that very token,
  answered as an idempotent replay).
"""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from django.db import connection

from scheduler import repository

log = logging.getLogger("jetencode.soak")

ROOT = Path(__file__).resolve().parent.parent.parent


def _db_errors() -> tuple[type[BaseException], ...]:
    """Everything a database call may raise (connection loss included)."""
    from django.db import utils as db_utils

    return (db_utils.DatabaseError, psycopg.Error)


def _connection_errors() -> tuple[type[BaseException], ...]:
    from django.db import utils as db_utils

    return (
        db_utils.OperationalError,
        db_utils.InterfaceError,
        psycopg.OperationalError,
        psycopg.InterfaceError,
    )


def describe_error(exc: BaseException) -> str:
    cause = exc.__cause__ or exc
    sqlstate = getattr(cause, "sqlstate", None)
    text = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
    return f"{sqlstate or type(cause).__name__}: {text}"[:200]


def reset_django_connection() -> None:
    try:
        connection.close()
    except Exception:
        connection.connection = None


# ---- worker processes ---------------------------------------------------------------------------


class WorkerProcess:
    """One worker uid; `start()` again after a kill starts a new process (a new session)."""

    def __init__(self, uid: str, *, concurrency: int, env: dict[str, str], logdir: Path, workspace: Path):
        self.uid = uid
        self.concurrency = concurrency
        self.env = env
        self.logdir = logdir
        self.workspace = workspace
        self.popen: subprocess.Popen | None = None
        self.starts = 0
        self.stopped = False  # SIGSTOPped
        self.expected_down = False  # killed or terminated on purpose, waiting for its restart
        self.draining = False  # drained or evacuated by the operator fault, waiting for its SIGTERM
        self.unexpected_exits: list[int] = []
        self._log = None

    def start(self) -> None:
        self.starts += 1
        if self._log is not None:
            self._log.close()
        self._log = open(self.logdir / f"{self.uid}.log", "ab")  # noqa: SIM115 (kept open for the process)
        self._log.write(f"\n==== start {self.starts} at {time.strftime('%H:%M:%S')} ====\n".encode())
        self._log.flush()
        argv = [
            sys.executable,
            str(ROOT / "manage.py"),
            "runworker",
            "--uid",
            self.uid,
            "--concurrency",
            str(self.concurrency),
            "--categories",
            f"cpu={self.concurrency}",
            "--vram-mb",
            "0",
            "--workspace",
            str(self.workspace),
        ]
        self.popen = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=self.env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.stopped = False
        self.expected_down = False
        self.draining = False

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def healthy(self) -> bool:
        return self.alive() and not self.stopped and not self.expected_down and not self.draining

    def signal(self, sig: int) -> None:
        if self.popen is None:
            return
        try:
            os.killpg(self.popen.pid, sig)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        self.expected_down = True
        self.signal(signal.SIGKILL)
        if self.popen is not None:
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                pass
        self.stopped = False

    def sigstop(self) -> None:
        self.signal(signal.SIGSTOP)
        self.stopped = True

    def sigcont(self) -> None:
        self.signal(signal.SIGCONT)
        self.stopped = False

    def terminate(self) -> None:
        self.expected_down = True
        self.signal(signal.SIGTERM)

    def shutdown(self, timeout: float = 20.0) -> int | None:
        """SIGCONT if frozen, SIGTERM (drain), then SIGKILL after `timeout`."""
        if not self.alive():
            return self.popen.returncode if self.popen else None
        self.expected_down = True
        self.sigcont()
        self.signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            return self.popen.wait(10)
        finally:
            if self._log is not None:
                self._log.close()
                self._log = None


# ---- faults -------------------------------------------------------------------------------------


class FaultInjector(threading.Thread):
    """Injects one fault every `interval` seconds on average; at most `max_disabled` workers are
    down, frozen or draining at once, so somebody is always there to recover the rest.

    Each kind in `ensure` happens at least once per run: when `window` (the length of the fault
    window, seconds) is known and one of them has not come up by `ensure_after` of it, it is the
    next fault that may disable a worker."""

    KINDS = {
        "sigkill": 2,
        "sigkill_in_finish": 1,
        "sigstop": 2,
        "sigterm": 1,
        "drain": 1,
        "evacuate": 1,
        "pg_terminate_backend": 3,
        "pg_terminate_listen": 1,
        "postgres_restart": 1,
    }
    # Faults that take a worker out of service for a while (bounded by max_disabled).
    DISABLING = ("sigkill", "sigkill_in_finish", "sigstop", "sigterm", "drain", "evacuate")
    ENSURE = ("drain", "evacuate")

    def __init__(
        self,
        workers: list[WorkerProcess],
        *,
        admin_url: str,
        dbname: str,
        interval: float,
        lease: float,
        recovery_interval: float,
        reassign_after: float,
        rng: random.Random,
        private_pg=None,
        restart_every: float = 12.0,
        kinds: dict[str, int] | None = None,
        on_event: Callable[[str], None] | None = None,
        window: float | None = None,
        ensure: tuple[str, ...] = ENSURE,
        ensure_after: float = 0.1,
    ):
        super().__init__(name="soak-faults", daemon=True)
        self.workers = workers
        self.admin_url = admin_url
        self.dbname = dbname
        self.interval = interval
        self.lease = lease
        self.recovery_interval = recovery_interval
        self.reassign_after = reassign_after
        self.rng = rng
        self.private_pg = private_pg
        self.restart_every = restart_every
        self.kinds = dict(kinds or self.KINDS)
        if private_pg is None:
            self.kinds.pop("postgres_restart", None)
        self.max_disabled = max(1, (len(workers) - 1) // 2)
        self.counts: Counter[str] = Counter()
        self.details: Counter[str] = Counter()
        self.restart_seconds: list[float] = []
        self.stop_event = threading.Event()
        self._due: list[tuple[float, str, WorkerProcess]] = []  # (when, action, worker)
        self._lock = threading.Lock()
        self._last_restart = time.monotonic()
        self._admin: psycopg.Connection | None = None
        self.on_event = on_event or (lambda text: log.info(text))
        self.errors: list[str] = []
        self.window = window
        self.ensure = tuple(k for k in ensure if k in self.kinds)
        self.ensure_after = ensure_after
        self._window_started = time.monotonic()
        # Operator faults (drain, evacuate): ok / refused / error, like the operators' controls.
        self.outcomes: dict[str, Counter[str]] = defaultdict(Counter)
        self.failures: Counter[str] = Counter()  # database errors of those controls: a finding
        self.evacuated_jobs = 0  # what evacuate_worker said it moved

    # -- the loop ----------------------------------------------------------------------------------

    def run(self) -> None:
        self._window_started = time.monotonic()
        next_fault = self._window_started + self.rng.expovariate(1 / self.interval)
        try:
            while not self.stop_event.is_set():
                now = time.monotonic()
                self._run_due(now)
                self._watch_exits()
                if now >= next_fault:
                    try:
                        self._inject()
                    except Exception as exc:  # a fault that could not be injected is not a finding
                        self.errors.append(f"{type(exc).__name__}: {exc}")
                    next_fault = now + self.rng.expovariate(1 / self.interval)
                self.stop_event.wait(0.05)
            self.heal()
        finally:
            if self._admin is not None:
                self._admin.close()
            reset_django_connection()  # the drain and evacuate controls go through Django

    def stop(self) -> None:
        self.stop_event.set()
        self.join(60)

    def heal(self) -> None:
        """Undo every pending fault now: SIGCONT the frozen, restart the dead and the drained."""
        with self._lock:
            due, self._due = self._due, []
        for _, action, worker in due:
            self._apply(action, worker, healing=True)
        for worker in self.workers:
            if worker.stopped:
                worker.sigcont()
            if not worker.alive():
                worker.start()

    def _run_due(self, now: float) -> None:
        with self._lock:
            ready = [d for d in self._due if d[0] <= now]
            self._due = [d for d in self._due if d[0] > now]
        for _, action, worker in ready:
            self._apply(action, worker)

    def _apply(self, action: str, worker: WorkerProcess, healing: bool = False) -> None:
        if action == "sigcont":
            worker.sigcont()
            self.on_event(f"SIGCONT {worker.uid}")
        elif action == "restart":
            if worker.alive():  # a SIGTERMed worker still draining: kill it first
                worker.kill()
            worker.start()
            self.on_event(f"restarted {worker.uid}")
        elif action == "sigterm_restart":  # the end of an operator drain or evacuation
            worker.terminate()
            self.on_event(f"SIGTERM {worker.uid} (drained by the operator)")
            if healing:  # no loop left to run a later restart: let it drain, then start it
                try:
                    worker.popen.wait(10)
                except subprocess.TimeoutExpired:
                    pass
                self._apply("restart", worker)
            else:
                self._schedule(self.rng.uniform(1.5, 3.0), "restart", worker)

    def _watch_exits(self) -> None:
        for worker in self.workers:
            if worker.popen is None or worker.alive() or worker.expected_down:
                continue
            code = worker.popen.returncode
            worker.unexpected_exits.append(code)
            self.counts["unexpected_worker_exit"] += 1
            self.on_event(f"worker {worker.uid} exited on its own with status {code}: restarting it")
            worker.start()

    def _disabled(self) -> int:
        return sum(1 for w in self.workers if not w.healthy())

    def _inject(self) -> None:
        kinds = dict(self.kinds)
        if self._disabled() >= self.max_disabled:
            for kind in self.DISABLING:
                kinds.pop(kind, None)
        if "postgres_restart" in kinds and time.monotonic() - self._last_restart < self.restart_every:
            kinds.pop("postgres_restart")
        if not kinds:
            return
        missing = [k for k in self.ensure if k in kinds and not self.counts[k]]
        if (
            missing
            and self.window
            and time.monotonic() - self._window_started >= self.ensure_after * self.window
        ):
            kind = self.rng.choice(missing)
        else:
            kind = self.rng.choices(list(kinds), weights=list(kinds.values()))[0]
        getattr(self, f"_fault_{kind}")()

    def _pick_healthy(self) -> WorkerProcess | None:
        healthy = [w for w in self.workers if w.healthy()]
        return self.rng.choice(healthy) if healthy else None

    def _schedule(self, delay: float, action: str, worker: WorkerProcess) -> None:
        with self._lock:
            self._due.append((time.monotonic() + delay, action, worker))

    def _outage(self) -> float:
        """Mostly short; now and then longer than the reassignment threshold (the worker is lost)."""
        if self.rng.random() < 0.15:
            return self.rng.uniform(self.reassign_after + 1, self.reassign_after + 4)
        return self.rng.uniform(0.2, 2.0)

    def _fault_sigkill(self) -> None:
        worker = self._pick_healthy()
        if worker is None:
            return
        worker.kill()
        delay = self._outage()
        self._schedule(delay, "restart", worker)
        self.counts["sigkill"] += 1
        self.on_event(f"SIGKILL {worker.uid} (restart in {delay:.1f}s)")

    def _fault_sigkill_in_finish(self) -> None:
        """SIGKILL a worker while one of its connections is inside a finish (a fenced final write)."""
        healthy = {w.uid: w for w in self.workers if w.healthy()}
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline and not self.stop_event.is_set():
            try:
                rows = (
                    self._admin_conn()
                    .execute(
                        "SELECT application_name FROM pg_stat_activity WHERE datname = %s "
                        "AND application_name LIKE 'jetencode-worker%%' AND query LIKE '%%finish_task_v1%%' "
                        "AND (state = 'active' OR state LIKE 'idle in transaction%%')",
                        [self.dbname],
                    )
                    .fetchall()
                )
            except psycopg.Error:
                self._admin = None
                return
            uids = [name.split(" ")[1] for (name,) in rows if name.split(" ")[1] in healthy]
            if uids:
                worker = healthy[self.rng.choice(uids)]
                worker.kill()
                delay = self.rng.uniform(0.2, 2.0)
                self._schedule(delay, "restart", worker)
                self.counts["sigkill"] += 1
                self.details["sigkill:inside finish"] += 1
                self.on_event(f"SIGKILL {worker.uid} inside a finish (restart in {delay:.1f}s)")
                return
            time.sleep(0.005)
        self._fault_sigkill()

    def _fault_sigstop(self) -> None:
        worker = self._pick_healthy()
        if worker is None:
            return
        past_lease = self.lease + self.recovery_interval
        if self.rng.random() < 0.15:
            delay = self.rng.uniform(self.reassign_after + 1, self.reassign_after + 4)
        else:
            delay = self.rng.uniform(past_lease + 0.5, past_lease + 3)
        worker.sigstop()
        self._schedule(delay, "sigcont", worker)
        self.counts["sigstop"] += 1
        self.on_event(f"SIGSTOP {worker.uid} for {delay:.1f}s")

    def _fault_sigterm(self) -> None:
        worker = self._pick_healthy()
        if worker is None:
            return
        worker.terminate()
        # It drains (a short grace, then hands running stages back) and exits; restart it after.
        self._schedule(self.rng.uniform(1.5, 3.0), "restart", worker)
        self.counts["sigterm"] += 1
        self.on_event(f"SIGTERM {worker.uid}")

    def _pick_registered(self) -> WorkerProcess | None:
        """A healthy worker whose current process has registered and is active in the database (a
        drain of a process still starting up would be undone by its registration)."""
        try:
            rows = (
                self._admin_conn()
                .execute("SELECT uid, pid FROM queue_workers WHERE lifecycle = 'active'")
                .fetchall()
            )
        except psycopg.Error:
            self._admin = None
            return None
        active = dict(rows)
        ready = [w for w in self.workers if w.healthy() and active.get(w.uid) == w.pid]
        return self.rng.choice(ready) if ready else None

    def _operator_fault(self, kind: str, control: Callable[[str], Any], wait: tuple[float, float]) -> None:
        """Drain or evacuate a live worker through the repository (what the API, the dashboard and
        the admin call), then SIGTERM it `wait` seconds later and restart it with the same uid: a
        drained worker claims nothing until a new process registers."""
        worker = self._pick_registered()
        if worker is None:
            return
        self.counts[kind] += 1
        answer = None
        for attempt in (1, 2):
            try:
                answer = control(worker.uid)
            except (repository.ActionNotAllowed, repository.JobNotFound) as exc:
                self.outcomes[kind]["refused"] += 1
                self.on_event(f"{kind} {worker.uid} refused: {exc}")
                return
            except _connection_errors():
                # Mostly this thread's connection, dead since a PostgreSQL restart: once more on a
                # new one (both controls may be repeated). If the second try fails too, the first
                # may still have committed: the worker is treated as drained either way.
                reset_django_connection()
                if attempt == 1:
                    continue
                self.outcomes[kind]["error"] += 1
            except _db_errors() as exc:
                reset_django_connection()
                self.outcomes[kind]["error"] += 1
                self.failures[f"{kind}: {describe_error(exc)}"] += 1
            else:
                self.outcomes[kind]["ok"] += 1
            break
        worker.draining = True
        delay = self.rng.uniform(*wait)
        self._schedule(delay, "sigterm_restart", worker)
        moved = f", {answer} job(s) moved" if kind == "evacuate" and answer is not None else ""
        if moved:
            self.evacuated_jobs += answer
        self.on_event(f"{kind} {worker.uid}{moved} (SIGTERM in {delay:.1f}s)")

    def _fault_drain(self) -> None:
        # Long enough for some of its stages to end and their jobs to move while it drains.
        self._operator_fault("drain", repository.drain_worker, (0.5, 3.0))

    def _fault_evacuate(self) -> None:
        self._operator_fault("evacuate", repository.evacuate_worker, (0.2, 1.5))

    def _admin_conn(self) -> psycopg.Connection:
        if self._admin is None or self._admin.closed or self._admin.broken:
            self._admin = psycopg.connect(
                self.admin_url, autocommit=True, connect_timeout=5, application_name="jetencode-soak-faults"
            )
        return self._admin

    def _terminate(self, listen_only: bool) -> None:
        try:
            conn = self._admin_conn()
            rows = conn.execute(
                "SELECT pid, application_name FROM pg_stat_activity "
                "WHERE datname = %s AND application_name LIKE 'jetencode-worker%%' AND pid <> pg_backend_pid() "
                + ("AND application_name LIKE '%% listen'" if listen_only else ""),
                [self.dbname],
            ).fetchall()
            if not rows:
                return
            pid, name = self.rng.choice(rows)
            conn.execute("SELECT pg_terminate_backend(%s)", [pid])
        except psycopg.Error as exc:
            self._admin = None
            self.errors.append(f"pg_terminate_backend: {exc}")
            return
        role = name.rsplit(" ", 1)[-1]
        self.counts["pg_terminate_backend"] += 1
        self.details[f"pg_terminate_backend:{role.rstrip('0123456789-')}"] += 1
        self.on_event(f"pg_terminate_backend({pid}) [{name}]")

    def _fault_pg_terminate_backend(self) -> None:
        self._terminate(listen_only=False)

    def _fault_pg_terminate_listen(self) -> None:
        self._terminate(listen_only=True)

    def _fault_postgres_restart(self) -> None:
        mode = "immediate" if self.counts["postgres_restart"] % 2 else "fast"
        self.on_event(f"restarting PostgreSQL ({mode})")
        seconds = self.private_pg.restart(mode)
        self._admin = None
        self._last_restart = time.monotonic()
        self.restart_seconds.append(seconds)
        self.counts["postgres_restart"] += 1
        self.details[f"postgres_restart:{mode}"] += 1
        self.on_event(f"PostgreSQL back after {seconds:.2f}s")


# ---- operators ----------------------------------------------------------------------------------


class _DjangoThread(threading.Thread):
    """A thread that uses its own Django connection and survives database outages."""

    def __init__(self, name: str, interval: float, rng: random.Random):
        super().__init__(name=name, daemon=True)
        self.interval = interval
        self.rng = rng
        self.stop_event = threading.Event()
        self.connection_errors = 0  # expected while connections are killed and PostgreSQL restarts
        self.failures: Counter[str] = Counter()  # any other database error: a finding

    def run(self) -> None:
        lost, errors = _connection_errors(), _db_errors()
        try:
            while not self.stop_event.is_set():
                try:
                    self.step()
                except lost:
                    self.connection_errors += 1
                    reset_django_connection()
                    self.stop_event.wait(0.3)
                    continue
                except errors as exc:
                    self.failures[describe_error(exc)] += 1
                    reset_django_connection()
                self.stop_event.wait(self.rng.uniform(0.5, 1.5) * self.interval)
        finally:
            reset_django_connection()

    def stop(self) -> None:
        self.stop_event.set()
        self.join(30)

    def step(self) -> None:  # pragma: no cover (abstract)
        raise NotImplementedError

    @staticmethod
    def fetch(query: str, params=()) -> list[tuple]:
        with connection.cursor() as cursor:
            cursor.execute(query, params)
            return cursor.fetchall()


class OperatorChaos(_DjangoThread):
    """Operators steering the queue at random: every action through `scheduler.repository`."""

    # retry (of a failed job) and redispatch (a new execution) go beyond the list; they
    # exercise the manual-retry reset and the execution fence under the same load.
    ACTIONS = {
        "move": 6,
        "set_priority": 4,
        "pause": 3,
        "resume": 3,
        "cancel": 1,
        "retry": 1,
        "redispatch": 0.5,
    }

    def __init__(self, interval: float, rng: random.Random, *, cancel_weight: float = 1.0):
        super().__init__("soak-operators", interval, rng)
        self.actions = dict(self.ACTIONS, cancel=cancel_weight)
        self.outcomes: dict[str, Counter[str]] = defaultdict(Counter)

    def _job(self, action: str) -> str | None:
        if action == "resume":
            rows = self.fetch("SELECT job_id FROM job_schedule WHERE paused ORDER BY random() LIMIT 1")
        elif action == "retry":
            rows = self.fetch("SELECT id FROM jobs WHERE status = 'failed' ORDER BY random() LIMIT 1")
        else:
            rows = self.fetch(
                "SELECT s.job_id FROM job_schedule s JOIN jobs j ON j.id = s.job_id "
                "WHERE j.status IN ('pending', 'running', 'retry_wait', 'paused') ORDER BY random() LIMIT 1"
            )
        return rows[0][0] if rows else None

    def step(self) -> None:
        action = self.rng.choices(list(self.actions), weights=list(self.actions.values()))[0]
        job = self._job(action)
        if job is None:
            return
        direction = self.rng.choice(["up", "down", "top", "bottom"])
        if action == "move":
            action = f"move {direction}"
        try:
            if action.startswith("move"):
                repository.move(job, direction)
            elif action == "set_priority":
                repository.set_priority(job, self.rng.randint(-5, 5))
            elif action == "pause":
                repository.pause(job)
            elif action == "resume":
                repository.resume(job)
            elif action == "cancel":
                repository.cancel(job)
            elif action == "retry":
                repository.retry(job)
            elif action == "redispatch":
                repository.redispatch(job, "redispatched by the soak's operators")
        except (repository.ActionNotAllowed, repository.JobNotFound, repository.InvalidArgument):
            self.outcomes[action]["refused"] += 1
            return
        except _db_errors():
            self.outcomes[action]["error"] += 1
            raise
        self.outcomes[action]["ok"] += 1

    def resume_everything(self, deadline: float) -> int:
        """At the end of the load: resume every paused job (so the queue can drain)."""
        resumed = 0
        errors = _db_errors()
        try:
            while time.monotonic() < deadline:
                try:
                    rows = self.fetch(
                        "SELECT s.job_id FROM job_schedule s JOIN jobs j ON j.id = s.job_id "
                        "WHERE s.paused AND j.status NOT IN ('completed', 'failed', 'cancelled')"
                    )
                    if not rows:
                        return resumed
                    for (job,) in rows:
                        try:
                            repository.resume(job)
                            resumed += 1
                        except (repository.ActionNotAllowed, repository.JobNotFound):
                            pass
                except errors:
                    reset_django_connection()
                    time.sleep(0.3)
            return resumed
        finally:
            reset_django_connection()


# ---- stale writes on purpose ----------------------------------------------------------------------


class StaleWriteProber(_DjangoThread):
    """Remembers leases of running tasks and, once one is provably stale, writes under it."""

    OPERATIONS = ("heartbeat", "progress", "finish", "fail", "release")

    def __init__(self, interval: float, rng: random.Random, lease_seconds: float):
        super().__init__("soak-prober", interval, rng)
        self.lease_seconds = lease_seconds
        self.watch: dict[tuple[int, str], repository.Lease] = {}
        self.sent: Counter[str] = Counter()
        self.rejected: Counter[str] = Counter()
        self.replayed = 0
        self.accepted: list[tuple] = []  # violations: (task id, token, operation, outcome)

    def step(self) -> None:
        for task_id, token, uid, session in self.fetch(
            "SELECT id, lease_token, claimed_by, claimed_worker_session_id FROM queue_tasks "
            "WHERE state = 'running' ORDER BY random() LIMIT 3"
        ):
            if len(self.watch) < 300:
                self.watch[(task_id, str(token))] = repository.Lease(task_id, token, uid, session)
        if not self.watch:
            return
        ids = sorted({key[0] for key in self.watch})
        current = {
            row[0]: (row[1], str(row[2]))
            for row in self.fetch("SELECT id, state, lease_token FROM queue_tasks WHERE id = ANY(%s)", [ids])
        }
        stale = [key for key in self.watch if key[0] not in current or current[key[0]] != ("running", key[1])]
        for key in stale[:5]:
            lease = self.watch.pop(key)
            self._probe(lease, current.get(key[0], ("missing", None))[0])

    def _probe(self, lease: repository.Lease, state: str) -> None:
        operation = self.rng.choice(self.OPERATIONS)
        self.sent[operation] += 1
        try:
            if operation == "heartbeat":
                try:
                    answer = repository.heartbeat_tasks(
                        lease.worker_uid, lease.session_id, [lease], self.lease_seconds
                    )[0]
                    ok, outcome = answer.accepted, answer.reason
                except repository.SessionSuperseded:
                    ok, outcome = False, "session superseded"
            elif operation == "progress":
                answer = repository.report_progress(lease, 50.0, lines=["stale-write probe"])
                ok, outcome = answer.accepted, answer.reason
            elif operation == "finish":
                result = repository.finish(
                    lease, {"probe": True}, children=[repository.Child("noop", {"seconds": 0, "probe": True})]
                )
                if result.reason == "already recorded":
                    self.replayed += 1
                    return
                ok, outcome = result.accepted, result.outcome
            elif operation == "fail":
                result = repository.fail(lease, "stale-write probe")
                ok, outcome = result.accepted, result.outcome
            else:
                result = repository.release(lease, "stale-write probe")
                ok, outcome = result.accepted, result.outcome
        except repository.SessionSuperseded:
            ok, outcome = False, "session superseded"
        if ok:
            self.accepted.append(
                (lease.task_id, str(lease.lease_token), operation, f"accepted ({outcome}) while {state}")
            )
        else:
            self.rejected[operation] += 1
