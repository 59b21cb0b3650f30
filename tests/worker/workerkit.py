"""Helpers for worker tests (imported as tests.worker.workerkit; fixtures live in conftest.py)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
TEST_STAGES = Path(__file__).resolve().parent / "stages_for_tests.py"

LEASE = 4.0
HEARTBEAT = 1.0
GRACE = 3.0
TIMING = {
    "JETENCODE_LEASE_SECONDS": str(LEASE),
    "JETENCODE_HEARTBEAT_SECONDS": str(HEARTBEAT),
    "JETENCODE_RECOVERY_INTERVAL_SECONDS": "1",
    "JETENCODE_POLL_SECONDS": "0.5",
    "JETENCODE_STALE_WORKER_SECONDS": "3",
    # JETENCODE_REASSIGN_AFTER_SECONDS keeps its default (120 s): failover must not wait for it
    # unless a job has local work (tests about the delay shorten it themselves).
    "JETENCODE_SHUTDOWN_GRACE_SECONDS": str(GRACE),
}


def sql(query, params=()):
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def one(query, params=()):
    rows = sql(query, params)
    return rows[0][0] if rows else None


def wait_for(predicate, timeout: float, what: str, interval: float = 0.05, workers=()):
    """Poll `predicate` until it returns something truthy; fail with the workers' output."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            logs = "\n".join(
                f"--- worker {w.uid} (rc={w.popen.poll()}) ---\n{w.output()[-6000:]}" for w in workers
            )
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{logs}")
        time.sleep(interval)


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


class WorkerProcess:
    def __init__(self, uid: str, popen: subprocess.Popen, log_path: Path):
        self.uid = uid
        self.popen = popen
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.popen.pid

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

    def session(self):
        return one(
            "SELECT current_session_id FROM queue_workers WHERE uid = %s AND pid = %s", [self.uid, self.pid]
        )

    def wait_ready(self, timeout: float = 30.0, listening: bool = True) -> None:
        """Registered, and (by default) its LISTEN connection is up."""
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
