"""What the run command says while it starts: one line per phase with the time it took, and the
checks behind "JetEncode is up" (the dashboard answers an HTTP GET, the worker's row is active).

`./scripts/run` exports JETENCODE_RUN_STARTED (the wall-clock second it began, before creating
the virtualenv), so the total counts the installation too; `manage.py runall` alone counts from
its own start. bench/startup.py reads these lines to time each phase.
"""

from __future__ import annotations

import os
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable

from scheduler import queries

STARTED_ENV = "JETENCODE_RUN_STARTED"
PHASE_MARK = "==> "


def _run_started() -> float:
    try:
        return float(os.environ[STARTED_ENV])
    except (KeyError, ValueError):
        return time.time()


class Narrator:
    """Prints `==> <what happened> (<seconds> s)` lines; `total()` counts from the run's start."""

    def __init__(self, write: Callable[[str], None]):
        self._write = write
        self._started = _run_started()
        self._phase_began = time.monotonic()

    def begin(self) -> None:
        """Start timing the next phase."""
        self._phase_began = time.monotonic()

    def done(self, what: str, seconds: float | None = None) -> None:
        """Say a phase is over; its time is since `begin()` unless given."""
        took = time.monotonic() - self._phase_began if seconds is None else seconds
        self._write(f"{PHASE_MARK}{what} ({took:.1f} s)")
        self.begin()

    def say(self, text: str) -> None:
        self._write(f"{PHASE_MARK}{text}")

    def total(self) -> float:
        return time.time() - self._started


def local_url(bind: str, path: str) -> str:
    """The URL this machine reaches the web server at for a gunicorn --bind address."""
    host, _, port = bind.rpartition(":")
    if host in ("", "0.0.0.0", "[::]", "::"):
        host = "127.0.0.1"
    return f"http://{host}:{port}{path}"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # the login redirect is an answer
        return None


def answers(url: str, timeout: float = 2.0) -> bool:
    """True when an HTTP GET of `url` gets any response below 500 (the dashboard redirects to login)."""
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(url, timeout=timeout) as response:
            return response.status < 500
    except urllib.error.HTTPError as error:
        return error.code < 500
    except (OSError, ValueError):
        return False


def registered_worker(pid: int) -> str | None:
    """The uid the worker process `pid` of this machine registered, once its row is active."""
    return queries.worker_of_process(socket.gethostname(), pid)
