"""The provisioner seam of dedicated execution (`manage.py provision`; docs/scheduler.md).

The scheduler only records reservations. Bringing a worker up for one is an external program,
JETENCODE_PROVISIONER (a command line, split like a shell would but run without one), run once
per due `requested` reservation with a JSON document on its stdin (`request_document`): the
reservation id, the attempt, and the job's facts. It must be idempotent by reservation id (it is
run again after a failure, and again a while after a success if no worker has bound the
reservation by then) and should return quickly: exit 0 once the worker is on its way, anything
else for a failure. Its exit status and the last line of its stderr land in the reservation's
`last_error`; failures are retried with exponential backoff; a run still going after
JETENCODE_PROVISIONER_TIMEOUT_SECONDS is killed with its whole process group.

Examples: deploy/provisioners/local.py (a detached `runworker --reservation ID` on this machine)
and deploy/provisioners/kubernetes_job.py (a Kubernetes Job rendered from the document).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import threading
from dataclasses import dataclass
from typing import Any

from scheduler import repository

log = logging.getLogger("jetencode.provisioner")

DOCUMENT_VERSION = 1
BATCH = 10


def request_document(request: repository.ProvisionRequest) -> dict[str, Any]:
    """What the provisioner reads on stdin."""
    return {
        "version": DOCUMENT_VERSION,
        "reservation_id": str(request.reservation_id),
        "attempt": request.attempt,
        "generation": request.generation,
        "requested_at": request.requested_at.isoformat(),
        "job": {
            "id": str(request.job_id),
            "type": request.job_type,
            "params": request.params,
            "priority": request.priority,
            "hardware": request.hardware,
            "resource_category": request.resource_category,
            "vram_mb": request.vram_mb,
            "required_category": request.required_category,
            "required_vram_mb": request.required_vram_mb,
        },
        "worker_command": ["manage.py", "runworker", "--reservation", str(request.reservation_id)],
    }


def run_provisioner(argv: list[str], document: dict[str, Any], timeout: float) -> str | None:
    """Run the provisioner once. None on success, else the line for `last_error`."""
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: a timeout kills all of it
        )
    except OSError as exc:
        return f"provisioner cannot start: {exc.strerror or exc} ({argv[0]})"
    try:
        _, stderr = proc.communicate(json.dumps(document).encode(), timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        return f"provisioner timed out after {timeout:g}s (killed)"
    if proc.returncode == 0:
        return None
    lines = [line.strip() for line in stderr.decode(errors="replace").splitlines() if line.strip()]
    return f"provisioner exited {proc.returncode}: {lines[-1] if lines else '(no stderr)'}"[:1000]


@dataclass
class Provisioner:
    """The loop's steps (Healthchecks' shape): `step()` provisions what is due and says whether it
    found any; `run()` repeats it until stopped."""

    argv: list[str]
    timeout: float
    backoff_seconds: float = 5.0  # after the first failure; doubles, at most backoff_cap
    backoff_cap: float = 300.0
    recheck_seconds: float = 60.0  # after a success: run again if no worker has bound it by then

    def step(self) -> bool:
        taken = repository.take_provisioning(BATCH, hold_seconds=self.timeout + 5)
        for request in taken:
            self.provision(request)
        return bool(taken)

    def provision(self, request: repository.ProvisionRequest) -> str | None:
        error = run_provisioner(self.argv, request_document(request), self.timeout)
        retry = self.recheck_seconds if error is None else self.backoff(request.attempt)
        repository.record_provisioning(request.reservation_id, request.attempt, error, retry)
        extra = {"reservation_id": str(request.reservation_id), "job_id": str(request.job_id)}
        if error is None:
            log.info(
                "reservation %s: provisioner ran (attempt %s)",
                request.reservation_id,
                request.attempt,
                extra=extra,
            )
        else:
            log.warning(
                "reservation %s: %s (attempt %s; next in %gs)",
                request.reservation_id,
                error,
                request.attempt,
                retry,
                extra=extra,
            )
        return error

    def backoff(self, attempt: int) -> float:
        return min(self.backoff_cap, self.backoff_seconds * 2 ** max(0, attempt - 1))

    def run(self, stop: threading.Event, interval: float = 1.0) -> None:
        from django.db import close_old_connections

        while not stop.is_set():
            close_old_connections()
            try:
                found = self.step()
            except Exception:
                log.exception("provisioning round failed")
                found = False
            if not found:
                stop.wait(interval)
