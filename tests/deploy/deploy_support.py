"""Helpers for the deployment tests (imported by name: tests/deploy is on sys.path, see conftest)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit, urlunsplit

import pytest
from tcpproxy import TcpProxy

BASE_DIR = Path(__file__).resolve().parents[2]


def proxy_target(database_url: str):
    """Where the server named by a DATABASE_URL listens: (host, port), or a Unix socket path."""
    parts = urlsplit(database_url)
    socket_dir = parse_qs(parts.query).get("host", [None])[0]
    if socket_dir:  # the embedded server: postgresql://user@/name?host=/dir
        return str(Path(socket_dir) / f".s.PGSQL.{parts.port or 5432}")
    return (parts.hostname or "127.0.0.1", parts.port or 5432)


def via_proxy(database_url: str, proxy: TcpProxy) -> str:
    """The same URL (user, password, database) reached through `proxy` over TCP."""
    parts = urlsplit(database_url)
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@{proxy.host}:{proxy.port}" if userinfo else f"{proxy.host}:{proxy.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def wait_for(predicate, timeout: float, interval: float = 0.1, message: str = "condition"):
    """Poll `predicate` until it returns something truthy; return that, or fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {message}")
        time.sleep(interval)


class WorkerProcess:
    """`manage.py runworker` as a subprocess; its output goes to a file for the failure report."""

    def __init__(self, uid: str, popen: subprocess.Popen, log_path: Path):
        self.uid = uid
        self.popen = popen
        self.log_path = log_path

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout: float = 20) -> int | None:
        """SIGTERM (drain), then a second SIGTERM (abort), then SIGKILL."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.send_signal(signal.SIGTERM)
                try:
                    self.popen.wait(5)
                except subprocess.TimeoutExpired:
                    self.popen.kill()
                    self.popen.wait(5)
        return self.popen.returncode
