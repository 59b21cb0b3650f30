"""Fixtures for worker tests: real `manage.py runworker` processes against the test database.

Timings are short (lease 4 s, heartbeat 1 s, recovery every 1 s, poll 0.5 s) so crash scenarios
finish in seconds. Every process started here is killed (with its stage subprocesses) before the
test database is flushed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.worker.workerkit import ROOT, TEST_STAGES, TIMING, WorkerProcess


@pytest.fixture
def worker_env(database_url, tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith("JETENCODE_")}
    env.update(TIMING)
    env.update(
        {
            "DATABASE_URL": database_url,
            "JETENCODE_WORKSPACE_ROOT": str(tmp_path / "workspace"),
            "JETENCODE_OUTPUT_ROOT": str(tmp_path / "outputs"),
            "JETENCODE_EXTRA_STAGE_MODULES": str(TEST_STAGES),
            "JETENCODE_VAR_DIR": str(ROOT / "var"),
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


@pytest.fixture
def start_worker(worker_env, tmp_path):
    started: list[WorkerProcess] = []

    def start(uid: str, *args: str, env: dict | None = None, ready: bool = True) -> WorkerProcess:
        log_path = tmp_path / f"worker-{uid}-{len(started)}.log"
        handle = open(log_path, "wb")  # noqa: SIM115 (the child keeps it open)
        popen = subprocess.Popen(
            [sys.executable, "manage.py", "runworker", "--uid", uid, *args],
            cwd=ROOT,
            env={**worker_env, **(env or {})},
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        handle.close()
        worker = WorkerProcess(uid, popen, log_path)
        started.append(worker)
        if ready:
            worker.wait_ready()
        return worker

    yield start
    for worker in started:
        if worker.popen.poll() is None:
            worker.popen.send_signal(signal.SIGCONT)
            worker.popen.kill()
            worker.popen.wait(10)
    # Stage subprocesses of killed workers die with them (PR_SET_PDEATHSIG); grandchildren that
    # the test stage recorded are killed here in case a test failed half-way.
    for pidfile in tmp_path.glob("*.pids"):
        for pid in pidfile.read_text().split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
