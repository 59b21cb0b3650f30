"""Workers for tests: real `manage.py runworker` processes, and the runtime's own classes in this process.

`Workers` starts and stops worker processes; the `start_worker` fixture (tests/conftest.py) is
`Workers.start`, with the environment of the `worker_env` fixture, which a folder's conftest.py
overrides to add what its workers need (media roots, webhook settings). Timings are short (lease 4 s,
heartbeat 1 s, recovery every 1 s, poll 0.5 s) so crash scenarios finish in seconds.

`InProcessWorker` is for handler tests: a real `workers.runtime.Worker` (never started), registered in
the test database, whose stages are claimed, run and concluded by the runtime's `TaskRun`,
`RunContext` (subprocesses through `RunContext.run` and `workers.processes`) and `StageRunner` (workers.slots).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import psutil
from django.conf import settings

from scheduler import repository
from tests.kit import ROOT
from tests.kit.db import one, sql
from tests.kit.waiting import wait_for

TEST_STAGES = Path(__file__).resolve().with_name("stages.py")

LEASE = 4.0
HEARTBEAT = 1.0
GRACE = 3.0
STALE = 3.0
TIMING = {
    "JETENCODE_LEASE_SECONDS": str(LEASE),
    "JETENCODE_HEARTBEAT_SECONDS": str(HEARTBEAT),
    "JETENCODE_RECOVERY_INTERVAL_SECONDS": "1",
    "JETENCODE_POLL_SECONDS": "0.5",
    "JETENCODE_STALE_WORKER_SECONDS": str(STALE),
    # JETENCODE_REASSIGN_AFTER_SECONDS keeps its default (120 s): failover must not wait for it
    # unless a job has local work (tests about the delay shorten it themselves).
    "JETENCODE_SHUTDOWN_GRACE_SECONDS": str(GRACE),
}


def worker_environment(database_url: str, base: Path, **extra: str) -> dict[str, str]:
    """The environment of a test worker: this process's minus every JETENCODE_ variable, the short
    TIMING, the test database, media/output/workspace roots under `base`, the test stages."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("JETENCODE_")}
    env.update(TIMING)
    env.update(
        {
            "DATABASE_URL": database_url,
            "JETENCODE_MEDIA_ROOT": str(base / "media"),
            "JETENCODE_OUTPUT_ROOT": str(base / "outputs"),
            "JETENCODE_WORKSPACE_ROOT": str(base / "workspace"),
            "JETENCODE_SCRATCH_ROOT": str(base / "scratch"),
            "JETENCODE_EXTRA_STAGE_MODULES": str(TEST_STAGES),
            # This process's var dir: its secret key exists already, so workers starting together
            # do not race to create one.
            "JETENCODE_VAR_DIR": str(settings.VAR_DIR),
            "JETENCODE_SECRET_KEY": settings.SECRET_KEY,  # a deployment refuses to start without one
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is dead for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def processes_mentioning(*needles: Path | str) -> list[psutil.Process]:
    """Live processes (not this one) whose command line mentions any of `needles`, e.g. the FFmpeg
    of a job's workspace or output directory."""
    texts = [str(n) for n in needles]
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            cmdline = " ".join(proc.info["cmdline"] or [])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if proc.pid != os.getpid() and any(text in cmdline for text in texts):
            found.append(proc)
    return found


class WorkerProcess:
    """One `manage.py runworker` subprocess; its output goes to a file for failure reports."""

    def __init__(self, uid: str, popen: subprocess.Popen, log_path: Path):
        self.uid = uid
        self.popen = popen
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def signal(self, sig: int) -> None:
        self.popen.send_signal(sig)

    def wait(self, timeout: float) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"worker {self.uid} did not exit within {timeout}s\n{self.output()[-6000:]}"
            ) from None

    def drain(self, timeout: float = 20) -> int:
        """SIGTERM (the worker drains) and wait for the exit status."""
        if self.alive():
            self.signal(signal.SIGTERM)
        return self.wait(timeout)

    def kill(self) -> None:
        if self.alive():
            self.popen.send_signal(signal.SIGCONT)  # a stopped process cannot die of SIGKILL until reaped
            self.popen.kill()
            self.popen.wait(10)

    def session(self):
        return one(
            "SELECT current_session_id FROM queue_workers WHERE uid = %s AND pid = %s", [self.uid, self.pid]
        )

    def wait_ready(self, timeout: float = 60.0, listening: bool = True) -> None:
        """Registered, (by default) its LISTEN connection up, and its slots started."""
        wait_for(self.session, timeout, f"worker {self.uid} to register", workers=[self])
        if listening:
            wait_for(
                lambda: self.connections("listen"), timeout, f"worker {self.uid} to LISTEN", workers=[self]
            )
        wait_for(lambda: "ready" in self.output(), timeout, f"worker {self.uid} slots", workers=[self])

    def connections(self, role: str = "%") -> list[int]:
        return [
            row[0]
            for row in sql(
                "SELECT pid FROM pg_stat_activity WHERE application_name LIKE %s AND datname = current_database()",
                [f"jetencode-worker {self.uid} {role}"],
            )
        ]


class Workers:
    """Starts `runworker` processes with one environment and kills whatever they leave behind.

    `start(uid, *runworker_args, env=None, ready=True, database_url=None) -> WorkerProcess` is the
    `start_worker` fixture: `env` adds to the environment, `database_url` replaces the test
    database's (e.g. a URL through a TCP proxy), `ready` waits until the worker can take work.
    """

    def __init__(self, env: dict[str, str], log_dir: Path):
        self.env = env
        self.log_dir = log_dir
        self.started: list[WorkerProcess] = []

    def start(
        self,
        uid: str,
        *args: str,
        env: dict[str, str] | None = None,
        ready: bool = True,
        database_url: str | None = None,
    ) -> WorkerProcess:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"worker-{uid}-{len(self.started)}.log"
        environment = {**self.env, **(env or {})}
        if database_url is not None:
            environment["DATABASE_URL"] = database_url
        with open(log_path, "wb") as handle:
            popen = subprocess.Popen(
                [sys.executable, "manage.py", "runworker", "--uid", uid, *args],
                cwd=ROOT,
                env=environment,
                stdout=handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        worker = WorkerProcess(uid, popen, log_path)
        self.started.append(worker)
        if ready:
            worker.wait_ready()
        return worker

    def logs(self) -> str:
        return "\n".join(
            f"--- worker {w.uid} (rc={w.popen.poll()}) ---\n{w.output()[-20000:]}" for w in self.started
        )

    def stop_all(self) -> None:
        """Kill every worker, then what their stages may have left: processes a test stage recorded
        in a *.pids file under the log directory, and anything whose command line names one of the
        workers' roots (stage subprocesses die with their worker through PR_SET_PDEATHSIG; this is
        the safety net that keeps a failed test from leaving FFmpeg running)."""
        for worker in self.started:
            worker.kill()
        for pidfile in self.log_dir.glob("*.pids"):
            for pid in pidfile.read_text().split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
        roots = [
            self.env[name]
            for name in ("JETENCODE_WORKSPACE_ROOT", "JETENCODE_OUTPUT_ROOT", "JETENCODE_MEDIA_ROOT")
            if self.env.get(name)
        ]
        if self.started and roots:
            for proc in processes_mentioning(*roots):
                try:
                    proc.kill()
                except psutil.NoSuchProcess:
                    pass


# ---- a worker in this process, for handler tests -------------------------------------------------

DEFAULT_CAPABILITIES = {"encoders": ["libx264"], "hardware_encoders": []}  # a CPU-only machine


class Stage:
    """One claimed task in an `InProcessWorker`: the runtime's TaskRun and RunContext around it.

    `execute()` does what a worker slot does (workers.runtime.Worker._execute): the handler gets the
    RunContext, then the runtime's StageRunner (workers.slots) writes the one fenced conclusion (finish with children
    and published files, fail, or the cancelled finish). The only additions are records a test reads:
    every `progress` call, every process group `ctx.run` started, and an `on_progress` hook.
    """

    def __init__(self, worker: InProcessWorker, task: repository.ClaimedTask, claimed_at: float):
        from workers.context import RunContext, TaskRun

        stage = self

        class RecordingRun(TaskRun):
            def add_group(self, group) -> None:
                stage.groups.append(group)
                super().add_group(group)

        class RecordingContext(RunContext):
            def progress(self, percent: float, detail: dict[str, Any] | None = None) -> None:
                super().progress(percent, detail)
                stage.progress_calls.append((time.monotonic(), float(percent), detail))
                if stage.on_progress is not None:
                    stage.on_progress(percent)

        runtime = worker.runtime
        self.worker = worker
        self.task = task
        self.groups: list = []  # workers.processes.ProcessGroup, in start order
        self.progress_calls: list[tuple[float, float, dict | None]] = []  # (monotonic, percent, detail)
        self.on_progress = None  # called with the percent after each progress call
        self.result: dict | None = None
        self._cancel_requested = False
        lease = repository.Lease.of(task, runtime.uid, runtime.session_id)
        self.run = RecordingRun(
            task,
            lease,
            "media-1" if task.pool == "media" else "background",
            claimed_at,
            runtime.timing.lease,
            deadline_margin=max(runtime.timing.heartbeat, runtime.kill_grace + 1.0),
        )
        self.run.kill_grace = runtime.kill_grace
        workspace = runtime.workspace_root / str(task.job_id) / str(task.execution_id)
        self.ctx = RecordingContext(runtime, self.run, workspace)

    # What the handler sees and asked for.
    task_type = property(lambda self: self.task.task_type)
    payload = property(lambda self: self.task.payload or {})
    attempt = property(lambda self: self.task.attempt)
    job_id = property(lambda self: str(self.task.job_id))
    children = property(lambda self: self.ctx.children)  # repository.Child, as the finish sends them
    published = property(lambda self: self.ctx.publications)  # PublishSpec
    workspace = property(lambda self: self.ctx.workspace)

    def execute(self, *, conclude: bool = True):
        """Run the handler and (unless `conclude=False`: the conclusion is lost) its fenced final
        write. Returns the handler's result; re-raises what the handler raised."""
        runtime = self.worker.runtime
        from workers.stages.base import HANDLERS

        runtime.runs.add(self.run)
        error, tb = None, ""
        try:
            try:
                self.result = HANDLERS[self.task_type](self.ctx)
            except BaseException as exc:  # the slot fails the task; the test sees the exception
                error, tb = exc, traceback.format_exc()
            if self._cancel_requested:
                # The operator's request, written from the test's own thread (its transaction).
                repository.cancel(self.task.job_id)
            if conclude:
                runtime.outcome.conclude(self.run, self.ctx, self.result, error, tb)
        finally:
            for group in self.run.groups():
                group.stop(self.run.kill_grace)
            runtime.runs.remove(self.run)
        if error is not None:
            raise error
        return self.result

    def cancel(self) -> None:
        """An operator cancels the job while this stage runs, and the heartbeat sees it: the run is
        aborted at once (its process groups killed), from any thread. The request itself reaches the
        database when the handler has returned, before the conclusion."""
        from workers.context import CANCELLED

        self._cancel_requested = True
        self.run.abort(CANCELLED, "cancel requested (seen by the heartbeat)")

    def logs(self) -> list[str]:
        """The stage's log lines as stored (queue_task_logs), oldest first."""
        return [
            row[0]
            for row in sql(
                "SELECT message FROM queue_task_logs WHERE task_id = %s ORDER BY id", [self.task.id]
            )
        ]

    def outputs(self) -> list[Path]:
        """Where the files this stage published are now (after an accepted finish)."""
        from media.storage import LocalStorage

        storage = LocalStorage(settings.OUTPUT_ROOT_DIR)
        return [storage.path(self.job_id, spec.name) for spec in self.published]


@dataclasses.dataclass
class JobRun:
    job_id: str
    output_dir: Path
    stages: list[Stage] = dataclasses.field(default_factory=list)

    def of(self, task_type: str) -> list[Stage]:
        return [s for s in self.stages if s.task_type == task_type]

    def outputs(self) -> list[str]:
        """Every file under OUTPUT_ROOT/<job id>/, relative and sorted."""
        if not self.output_dir.exists():
            return []
        return sorted(
            p.relative_to(self.output_dir).as_posix() for p in self.output_dir.rglob("*") if p.is_file()
        )


class InProcessWorker:
    """A `workers.runtime.Worker` that is never started: registered in the test database, it claims
    with the repository and runs each stage through the runtime's classes (see `Stage`), one at a
    time, in the test's thread and transaction. Nothing of the runtime is replaced; what is missing
    is only its threads (no heartbeat, no LISTEN, no maintenance: the leases are long)."""

    def __init__(
        self,
        uid: str = "in-process",
        *,
        workspace_root: Path | None = None,
        capabilities: dict[str, Any] | None = None,
        category_limits: dict[str, int] | None = None,
        vram_mb: int = 0,
    ):
        from workers.config import Timing, WorkerOptions
        from workers.runtime import Worker, load_stage_modules

        load_stage_modules()
        limits = category_limits or {"cpu": 4}
        options = WorkerOptions(
            uid=uid,
            concurrency=4,
            category_limits=limits,
            vram_mb=vram_mb,
            workspace=Path(workspace_root or settings.WORKSPACE_ROOT_DIR),
        )
        timing = Timing(
            lease=600.0,
            heartbeat=1.0,
            stale_worker=600.0,
            reassign_after=600.0,
            shutdown_grace=3.0,
            poll=0.5,
            recovery_interval=1.0,
            sample_interval=60.0,
            retention_days=7,
            notify=False,
        )
        caps = dict(DEFAULT_CAPABILITIES if capabilities is None else capabilities)
        self.runtime = Worker(options, timing, caps)
        self.runtime.phase = "running"
        repository.register_worker(
            repository.WorkerRegistration(
                uid=uid,
                session_id=self.runtime.session_id,
                hostname="test",
                pid=os.getpid(),
                version="test",
                concurrency=options.concurrency,
                background_slots=options.background_slots,
                category_limits=limits,
                vram_total_mb=vram_mb,
                capabilities=caps,
                workspace=str(options.workspace),
            )
        )

    def submit(self, job_type: str, params: dict | None = None, **new_job) -> str:
        """Enqueue a job as the API does after validation (repository.enqueue_job); its id."""
        return str(
            repository.enqueue_job(repository.NewJob(job_type, params or {}, **new_job), stale_seconds=60)
        )

    def claim(self, pool: str = "media") -> Stage | None:
        claimed_at = time.monotonic()
        task = repository.claim(self.runtime.uid, self.runtime.session_id, pool, self.runtime.timing.lease)
        return None if task is None else Stage(self, task, claimed_at)

    def next_stage(self) -> Stage | None:
        """The next task the worker's slots would run: media first, then background."""
        return self.claim("media") or self.claim("background")

    def stage_of(self, job_type: str, params: dict | None = None, **new_job) -> Stage:
        """Submit a job and claim its dispatch."""
        job_id = self.submit(job_type, params, **new_job)
        stage = self.next_stage()
        assert stage is not None and stage.job_id == job_id, "the dispatch was not claimable"
        return stage

    def again(self, stage: Stage) -> Stage:
        """Claim `stage`'s task for its next attempt: after a failed attempt (the backoff skipped), or
        after one whose conclusion never arrived (its lease expires and recovery takes it first)."""
        from tests.kit.db import expire_lease, make_available, task_state

        if task_state(stage.task.id) == "running":
            expire_lease(stage.task.id)
            repository.recover_expired()
        make_available(stage.task.id)
        again = self.claim(stage.task.pool)
        assert again is not None and again.task.id == stage.task.id, "the task was not claimable again"
        return again

    def run_job(
        self, job_type: str, params: dict | None = None, *, max_stages: int = 200, **new_job
    ) -> JobRun:
        """Submit a job and run every stage it leads to, in claim order, until nothing is left to
        claim. A handler's exception propagates (after its stage was failed)."""
        job_id = self.submit(job_type, params, **new_job)
        run = JobRun(job_id, Path(settings.OUTPUT_ROOT_DIR) / job_id)
        while (stage := self.next_stage()) is not None:
            assert len(run.stages) < max_stages, "runaway stage graph"
            stage.execute()
            run.stages.append(stage)
        return run
