"""Fixtures for the deployment tests: a controllable TCP link to PostgreSQL and real worker processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/deploy has no __init__.py

from deploy_support import BASE_DIR, WorkerProcess, proxy_target  # noqa: E402
from tcpproxy import TcpProxy  # noqa: E402


@pytest.fixture
def make_proxy(database_url):
    """make_proxy() -> a started TcpProxy to this test run's PostgreSQL; all are closed at teardown."""
    proxies: list[TcpProxy] = []

    def make() -> TcpProxy:
        proxy = TcpProxy(proxy_target(database_url)).start()
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.close()


@pytest.fixture
def start_worker(tmp_path, request):
    """start_worker(uid, database_url, *runworker_args, **env) -> WorkerProcess. Every worker is
    stopped at teardown (before the test database is flushed); their output is printed when the
    test failed."""
    workers: list[WorkerProcess] = []

    def start(uid: str, database_url: str, *args: str, **env: str) -> WorkerProcess:
        root = tmp_path / uid
        root.mkdir(parents=True, exist_ok=True)
        environment = {
            **os.environ,
            "DATABASE_URL": database_url,
            "JETENCODE_VAR_DIR": str(tmp_path / "var"),
            "JETENCODE_MEDIA_ROOT": str(tmp_path / "media"),
            "JETENCODE_OUTPUT_ROOT": str(tmp_path / "outputs"),
            "JETENCODE_WORKSPACE_ROOT": str(root / "workspace"),
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        environment.pop("JETENCODE_TEST_DATABASE_NAME", None)
        log_path = tmp_path / f"{uid}.log"
        with log_path.open("wb") as log:
            popen = subprocess.Popen(
                [
                    sys.executable,
                    str(BASE_DIR / "manage.py"),
                    "runworker",
                    "--uid",
                    uid,
                    "--workspace",
                    str(root / "workspace"),
                    *args,
                ],
                cwd=BASE_DIR,
                env=environment,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        worker = WorkerProcess(uid, popen, log_path)
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        worker.stop()
    report = getattr(request.node, "rep_call", None)
    if report is None or report.failed:
        for worker in workers:
            sys.stderr.write(f"\n----- worker {worker.uid} (exit {worker.popen.returncode}) -----\n")
            sys.stderr.write(worker.output()[-20000:])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)
