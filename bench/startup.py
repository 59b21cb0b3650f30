"""Start-up: `manage.py runall` from a fresh var directory on a fresh embedded PostgreSQL, as a
newcomer's first `./scripts/run` after the installation (which this does not time: the virtualenv
is the bench's own). Measured from the command's start:

- each phase the run command narrates (`==> <what> (<seconds> s)`: the embedded server's initdb
  and start, the migrations, collectstatic, the demo media, the web answering, the worker ready);
- dashboard ready: when the command says "JetEncode is up" (it says so only once the dashboard
  answers an HTTP GET and the worker's row is active);
- demo transcode finished: when the seeded transcode job is completed in the database;
- stop: from one Ctrl-C (SIGINT to the command's process group) to its exit.

The embedded server is this measurement's own (a data directory under /tmp), stopped at the end.
Targets (issue 35): dashboard ≤ 30 s and demo transcode ≤ 40 s for the whole `./scripts/run`
including a warm-cache install, so these figures leave the install's share of the budget.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from jetencode import embedded_db

ROOT = Path(__file__).resolve().parent.parent
PHASE = re.compile(r"^==> (?P<what>.+) \((?P<seconds>\d+\.\d) s\)$")
UP_TIMEOUT_SECONDS = 180.0
TRANSCODE_TIMEOUT_SECONDS = 120.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _environment(var_dir: Path, pgdata: Path) -> dict[str, str]:
    """A newcomer's environment: no DATABASE_URL, no JETENCODE_ settings but the secret key (the
    bench's roots and debug flag are not the run command's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JETENCODE_") and k != "DATABASE_URL"}
    env.update(
        {
            "JETENCODE_VAR_DIR": str(var_dir),
            "JETENCODE_EMBEDDED_PGDATA": str(pgdata),
            "JETENCODE_SECRET_KEY": os.environ.get("JETENCODE_SECRET_KEY", "bench-startup"),
        }
    )
    return env


def _transcode_finished(pgdata: Path) -> bool:
    """Whether the seeded transcode job is completed (read from the embedded server's socket)."""
    try:
        with psycopg.connect(
            host=embedded_db.socket_dir_of(pgdata),
            dbname=embedded_db.DATABASE_NAME,
            user="postgres",
            connect_timeout=2,
        ) as conn:
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE status = 'completed'), count(*) FROM jobs WHERE type = 'transcode'"
            ).fetchone()
    except psycopg.Error:
        return False
    return row[1] > 0 and row[0] == row[1]


class _Run:
    """The run command as a terminal starts it, its output in a file and its timeline."""

    def __init__(self, workdir: Path, pgdata: Path):
        self.log_path = workdir / "runall.log"
        self.pgdata = pgdata
        self.env = _environment(workdir / "var", pgdata)
        self.started = time.monotonic()
        with self.log_path.open("wb") as log:
            self.popen = subprocess.Popen(
                [sys.executable, "manage.py", "runall", "--bind", f"127.0.0.1:{_free_port()}"],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, predicate, timeout: float, what: str) -> float:
        """Seconds since the start when `predicate()` first held."""
        while not predicate():
            if self.popen.poll() is not None:
                raise RuntimeError(
                    f"runall exited ({self.popen.returncode}) before {what}:\n{self.output()[-3000:]}"
                )
            if time.monotonic() - self.started > timeout:
                raise RuntimeError(f"no {what} after {timeout:g} s:\n{self.output()[-3000:]}")
            time.sleep(0.1)
        return time.monotonic() - self.started

    def stop(self) -> float:
        """Ctrl-C and the seconds until the command has exited."""
        began = time.monotonic()
        os.killpg(self.popen.pid, signal.SIGINT)
        self.popen.wait(120)
        return time.monotonic() - began

    def cleanup(self) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGKILL)
        subprocess.run(
            [sys.executable, "manage.py", "embedded_db", "stop"],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            timeout=60,
        )


def measure(workdir: Path, *, log) -> dict:
    workdir = Path(workdir) / "startup"
    workdir.mkdir(parents=True, exist_ok=True)
    # The server's socket lives in its data directory: a short path, readable by pgserver's user.
    pgroot = Path(tempfile.mkdtemp(prefix="je-bench-pg-", dir="/tmp"))
    pgroot.chmod(0o755)
    run = _Run(workdir, pgroot / "data")
    try:
        up = run.wait_for(lambda: "JetEncode is up" in run.output(), UP_TIMEOUT_SECONDS, "'JetEncode is up'")
        transcode = run.wait_for(
            lambda: _transcode_finished(run.pgdata), TRANSCODE_TIMEOUT_SECONDS, "finished demo transcode"
        )
        stop = run.stop()
    finally:
        run.cleanup()
        shutil.rmtree(pgroot, ignore_errors=True)
    phases = [
        {"phase": m["what"], "seconds": float(m["seconds"])}
        for m in (PHASE.match(line) for line in run.output().splitlines())
        if m
    ]
    for phase in phases:
        log(f"  {phase['seconds']:5.1f} s  {phase['phase']}")
    result = {
        "phases": phases,
        "dashboard_ready_seconds": round(up, 2),
        "demo_transcode_finished_seconds": round(transcode, 2),
        "stop_seconds": round(stop, 2),
        "exit_code": run.popen.returncode,
    }
    log(
        f"  dashboard ready {up:.1f} s, demo transcode finished {transcode:.1f} s after the start; "
        f"Ctrl-C to exit {stop:.1f} s"
    )
    return result


def table_rows(result: dict | None) -> list[tuple[str, str, str]]:
    if not result or "error" in result:
        return []
    slowest = sorted(result["phases"], key=lambda p: -p["seconds"])[:3]
    return [
        (
            "(startup) fresh var dir, embedded DB",
            f"dashboard {result['dashboard_ready_seconds']:.1f} s, "
            f"demo transcode {result['demo_transcode_finished_seconds']:.1f} s",
            "slowest: " + ", ".join(f"{p['phase'][:40]} {p['seconds']:.1f} s" for p in slowest),
        )
    ]
