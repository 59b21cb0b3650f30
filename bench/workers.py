"""Real worker processes for the benchmark: `manage.py runworker` subprocesses on the bench database.

Each worker gets its own uid (`bench-<n>`), workspace and log file under the run's work directory.
`start()` returns once every worker is registered and its claimer runs, so a measurement never
times a worker's start-up. `stop()` sends SIGTERM (a
drain) and waits; whatever is still alive after the grace period is killed by its own process group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench import db

ROOT = db.ROOT
STAGES_MODULE = Path(__file__).resolve().parent / "stages.py"


@dataclass
class WorkerPool:
    url: str
    workdir: Path
    processes: int
    concurrency: int = 4
    poll_seconds: float = 0.1
    notify: bool = True
    extra_env: dict[str, str] = field(default_factory=dict)
    uid_prefix: str = "bench"
    extra_args: list[str] = field(default_factory=list)  # more runworker options (e.g. --categories)
    procs: list[subprocess.Popen] = field(default_factory=list)
    uids: list[str] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        media = self.workdir / "media"
        env = {
            **os.environ,
            "DATABASE_URL": self.url,
            "JETENCODE_POLL_SECONDS": f"{self.poll_seconds:g}",
            "JETENCODE_NOTIFY": "true" if self.notify else "false",
            "JETENCODE_EXTRA_STAGE_MODULES": str(STAGES_MODULE),
            "JETENCODE_MEDIA_ROOT": str(media),
            "JETENCODE_OUTPUT_ROOT": str(self.workdir / "outputs"),
            "JETENCODE_WORKSPACE_ROOT": str(self.workdir / "workspace"),
            "PYTHONUNBUFFERED": "1",
        }
        env.update(self.extra_env)
        return env

    def start(self, timeout: float = 90.0) -> WorkerPool:
        env = self.env()
        for index in range(self.processes):
            uid = f"{self.uid_prefix}-{index + 1}"
            log_path = self.workdir / "logs" / f"{uid}-{int(time.time() * 1000)}.log"
            log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(log_path, "wb") as log_file:
                proc = subprocess.Popen(
                    [
                        sys.executable,
                        str(ROOT / "manage.py"),
                        "runworker",
                        "--uid",
                        uid,
                        "--concurrency",
                        str(self.concurrency),
                        "--workspace",
                        str(self.workdir / "workspace" / uid),
                        *self.extra_args,
                    ],
                    cwd=ROOT,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            self.procs.append(proc)
            self.uids.append(uid)
            self.logs.append(log_path)
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float) -> None:
        """Every worker registered and its claimer started (its log says "ready")."""
        deadline = time.monotonic() + timeout
        with db.connect(self.url) as conn:
            while True:
                for proc, log_path in zip(self.procs, self.logs, strict=True):
                    if proc.poll() is not None:
                        raise RuntimeError(
                            f"worker exited with {proc.returncode} during start-up:\n{tail(log_path)}"
                        )
                ready = sum(" ready: session " in tail(path, 20000) for path in self.logs)
                registered = db.scalar(
                    conn,
                    "SELECT count(*) FROM queue_workers WHERE uid = ANY (%s) AND lifecycle = 'active'",
                    [self.uids],
                )
                if ready >= self.processes and registered == self.processes:
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"workers not ready after {timeout:g}s ({ready}/{self.processes} ready, "
                        f"{registered}/{self.processes} registered):\n{tail(self.logs[0])}"
                    )
                time.sleep(0.2)

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.poll() is None]

    def stop(self, grace: float = 30.0) -> None:
        stop_processes(self.procs, grace)

    def __enter__(self) -> WorkerPool:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def stop_processes(procs: list[subprocess.Popen], grace: float) -> None:
    """SIGTERM each process, wait up to `grace` seconds in all, then SIGKILL the process group of
    any left (each was started with start_new_session); empties `procs`."""
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for proc in procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)
    procs.clear()


def tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


class CpuMeter:
    """CPU seconds spent between start() and stop() by: the given worker processes (with their
    children), the PostgreSQL backends of the bench database, the autovacuum workers vacuuming it
    (seen only while they run: a worker that started and exited between the two samples is missed),
    and the whole machine (to show how busy it was with other work: it is shared with other test
    runs). Given the database's URL, the backends' CPU is also split by who they serve (the
    workers' connections, the producer, the bench's own polling and sampling), from
    pg_stat_activity's application_name."""

    def __init__(self, database: str, worker_pids: list[int], url: str | None = None):
        self.database = database
        self.worker_pids = worker_pids
        self.url = url
        self._roles: dict[int, str] = {}
        self._start: dict[str, dict[int, float]] = {}
        self._machine_start = None
        self._wall = 0.0

    def _sample(self) -> dict[str, dict[int, float]]:
        workers: dict[int, float] = {}
        for pid in self.worker_pids:
            try:
                proc = psutil.Process(pid)
                for p in [proc, *proc.children(recursive=True)]:
                    t = p.cpu_times()
                    workers[p.pid] = t.user + t.system
            except psutil.Error:
                continue
        backends: dict[int, float] = {}
        autovacuum: dict[int, float] = {}
        for p in psutil.process_iter(["name", "cmdline"]):
            try:
                cmd = " ".join(p.info["cmdline"] or [])
                if not cmd.startswith("postgres:"):
                    continue
                if "autovacuum worker" in cmd and cmd.rstrip().endswith(f" {self.database}"):
                    t = p.cpu_times()
                    autovacuum[p.pid] = t.user + t.system
                elif f" {self.database} " in cmd:
                    t = p.cpu_times()
                    backends[p.pid] = t.user + t.system
            except psutil.Error:
                continue
        return {"workers": workers, "backends": backends, "autovacuum": autovacuum}

    def _read_roles(self) -> None:
        if not self.url:
            return
        try:
            with db.connect(self.url) as conn:
                rows = conn.execute(
                    "SELECT pid, application_name FROM pg_stat_activity WHERE datname = current_database()"
                ).fetchall()
        except Exception:  # the split is a detail; the totals stand without it
            return
        for pid, name in rows:
            if name.startswith("jetencode-worker"):
                self._roles[pid] = "workers"
            elif name == "jetencode-bench-producer":
                self._roles[pid] = "producer"
            else:
                self._roles.setdefault(pid, "bench")

    def start(self) -> CpuMeter:
        self._read_roles()
        self._start = self._sample()
        self._machine_start = psutil.cpu_times()
        self._wall = time.monotonic()
        return self

    def stop(self) -> dict:
        end = self._sample()
        self._read_roles()
        machine_end = psutil.cpu_times()
        wall = time.monotonic() - self._wall
        out = {}
        for key in ("workers", "backends", "autovacuum"):
            before = self._start.get(key, {})
            out[f"{key}_cpu_seconds"] = round(sum(v - before.get(pid, 0.0) for pid, v in end[key].items()), 2)
        busy = sum(
            getattr(machine_end, f) - getattr(self._machine_start, f)
            for f in ("user", "nice", "system", "irq", "softirq", "steal")
        )
        if self.url:
            by_role: dict[str, float] = {}
            before = self._start.get("backends", {})
            for pid, value in end["backends"].items():
                role = self._roles.get(pid, "unknown")
                by_role[role] = by_role.get(role, 0.0) + value - before.get(pid, 0.0)
            out["backends_cpu_seconds_by_role"] = {k: round(v, 2) for k, v in sorted(by_role.items())}
        out["machine_busy_cpu_seconds"] = round(busy, 2)
        out["machine_cpus"] = psutil.cpu_count()
        out["wall_seconds"] = round(wall, 2)
        out["other_cpu_seconds"] = round(
            busy - out["workers_cpu_seconds"] - out["backends_cpu_seconds"] - out["autovacuum_cpu_seconds"], 2
        )
        return out
