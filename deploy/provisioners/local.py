#!/usr/bin/env python3
"""A JetEncode provisioner for one machine: starts `manage.py runworker --reservation ID` here,
detached, and exits 0 (docs/scheduler.md, "Dedicated execution").

    JETENCODE_PROVISIONER="python3 deploy/provisioners/local.py" manage.py provision

Reads the provisioner document (workers/provisioner.py) on stdin. Idempotent by reservation id: a
pid file per reservation under JETENCODE_PROVISIONER_STATE_DIR (default var/provisioners next to
manage.py); while the process it names is alive and runs that reservation, nothing new starts.
The worker inherits this environment (database, roots, timing); its output goes to
<state dir>/<reservation id>.log. JETENCODE_LOCAL_WORKER_ARGS adds runworker options (split like a
shell would, e.g. "--concurrency 2"). Standard library only: it need not import the project.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def state_dir() -> Path:
    path = Path(os.environ.get("JETENCODE_PROVISIONER_STATE_DIR") or ROOT / "var" / "provisioners")
    path.mkdir(parents=True, exist_ok=True)
    return path


def running(pidfile: Path, reservation: str) -> int | None:
    """The pid of the live worker this pid file names, if it still runs `reservation`."""
    try:
        pid = int(pidfile.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        status = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, ValueError, IndexError):
        return None
    return pid if reservation in cmdline and status != "Z" else None


def main() -> int:
    try:
        document = json.load(sys.stdin)
        reservation = str(uuid.UUID(str(document["reservation_id"])))
    except (ValueError, KeyError, TypeError) as exc:
        print(f"bad provisioner document: {exc}", file=sys.stderr)
        return 2
    folder = state_dir()
    pidfile = folder / f"{reservation}.pid"
    pid = running(pidfile, reservation)
    if pid is not None:
        print(f"reservation {reservation}: worker pid {pid} is already running")
        return 0
    argv = [
        sys.executable,
        str(ROOT / "manage.py"),
        "runworker",
        "--reservation",
        reservation,
        *shlex.split(os.environ.get("JETENCODE_LOCAL_WORKER_ARGS", "")),
    ]
    with open(folder / f"{reservation}.log", "ab") as output:
        proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # outlives this provisioner and its caller's signals
        )
    pidfile.write_text(f"{proc.pid}\n")
    print(f"reservation {reservation}: started worker pid {proc.pid}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
