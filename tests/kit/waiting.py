"""Waiting for something another process does: poll a condition until a deadline."""

from __future__ import annotations

import time


def wait_for(predicate, timeout: float, what: str = "the condition", *, interval: float = 0.05, workers=()):
    """Poll `predicate` until it returns something truthy and return that; after `timeout` seconds
    fail (AssertionError) saying `what` was awaited, with the last output of `workers` (WorkerProcess)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            logs = "\n".join(
                f"--- worker {w.uid} (rc={w.popen.poll()}) ---\n{w.output()[-6000:]}" for w in workers
            )
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}\n{logs}".rstrip())
        time.sleep(interval)
