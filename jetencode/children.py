"""The run command's two children (web and worker) and what a Ctrl-C does to them.

Each child runs in a process group of its own, so a Ctrl-C in the terminal (SIGINT to the run
command's group) reaches the run command only, once, and it decides who hears what:

1. the first Ctrl-C drains the worker (no new claims; running stages get the shutdown grace), while
   the web keeps answering; once the worker has stopped, the web stops gracefully;
2. a second one stops now: the worker aborts (its stages killed and handed back), the web stops;
3. a third kills what is left.

SIGTERM to the run command (systemd, kill) does the same and is named as such. The children die
with the run command (PR_SET_PDEATHSIG) if it is killed outright. Their output is copied to the
terminal line by line behind a `web    | ` or `worker | ` prefix.
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import threading
import time
from collections.abc import Callable

Write = Callable[[str], None]


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the run command dies (Linux; elsewhere a no-op)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Child:
    """One supervised process: its own process group, no stdin (a child outside the foreground
    group never stops on a terminal read), stdout and stderr copied to `write` with a prefix."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], write: Write):
        self.name = name
        self.stopping = False  # told to stop because the other child exited
        self.popen = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            process_group=0,
            preexec_fn=_die_with_parent,
        )
        prefix = f"{name:<6} | "
        self._copier = threading.Thread(target=self._copy, args=(prefix, write), daemon=True)
        self._copier.start()

    def _copy(self, prefix: str, write: Write) -> None:
        for raw in self.popen.stdout:
            write(prefix + raw.decode(errors="replace").rstrip("\n"))

    @property
    def pid(self) -> int:
        return self.popen.pid

    def running(self) -> bool:
        return self.popen.poll() is None

    def send(self, signum: int) -> None:
        if self.running():
            self.popen.send_signal(signum)

    def finish_output(self) -> None:
        """Wait (briefly) until the last lines of an exited child are copied."""
        self._copier.join(timeout=2.0)


def _who(signum: int) -> str:
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


class Supervisor:
    """Runs until both children have exited; `stop_reason` says why they stopped."""

    def __init__(self, web: Child, worker: Child | None, say: Write, grace_seconds: float):
        self.web = web
        self.worker = worker
        self._say = say
        self._grace = grace_seconds
        self._signals: list[int] = []  # appended by the handler; acted on by the loop
        self._acted = 0
        self.stop_reason: str | None = None  # None: still running or a child failed on its own
        self.failed = False

    def install(self) -> None:
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum: int, frame) -> None:  # noqa: ARG002
        # No printing here: the handler may interrupt a write that holds the output lock.
        self._signals.append(signum)

    def stop_requested(self) -> bool:
        return bool(self._signals)

    def give_up(self, why: str) -> None:
        """Stop both children after a failed start (the worker drains; nothing is left behind)."""
        self.failed = True
        self._say(why)
        for child in self.children():
            child.stopping = True
            child.send(signal.SIGTERM)

    def children(self) -> list[Child]:
        return [child for child in (self.web, self.worker) if child is not None]

    def run(self) -> None:
        while any(child.running() for child in self.children()):
            while self._acted < len(self._signals):
                self._acted += 1
                self._press(self._acted, self._signals[self._acted - 1])
            self._watch_exits()
            time.sleep(0.1)
        for child in self.children():
            child.finish_output()

    def _press(self, count: int, signum: int) -> None:
        who = _who(signum)
        self.stop_reason = self.stop_reason or who
        again = "press Ctrl-C again" if signum == signal.SIGINT else "send SIGTERM again"
        if count == 1 and self.worker is not None and self.worker.running():
            self._say(
                f"{who}: draining the worker first (running stages get up to {self._grace:g} s); "
                f"the web keeps answering. To stop now, {again}."
            )
            self.worker.send(signum)
        elif count <= 2:
            self._say(f"{who}{' again' if count > 1 else ''}: stopping now (running stages are handed back).")
            if self.worker is not None:
                self.worker.send(signum)
            self.web.send(signal.SIGTERM)
        else:
            self._say(f"{who} a third time: killing what is left.")
            for child in self.children():
                child.send(signal.SIGKILL)

    def _watch_exits(self) -> None:
        worker, web = self.worker, self.web
        if worker is not None and not worker.running() and web.running() and not web.stopping:
            web.stopping = True
            if self.stop_reason is None:
                self.failed = True
                self._say(f"The worker exited on its own (exit {worker.popen.returncode}): stopping the web.")
            else:
                self._say(f"The worker has stopped (exit {worker.popen.returncode}): stopping the web.")
            web.send(signal.SIGTERM)
        if worker is not None and worker.running() and not web.running() and not worker.stopping:
            worker.stopping = True
            if self.stop_reason is None:
                self.failed = True
                self._say(
                    f"The web server exited on its own (exit {web.popen.returncode}): draining the worker."
                )
                worker.send(signal.SIGTERM)
