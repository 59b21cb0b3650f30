"""Worker options and timing: parsed, defaulted from what the machine has, and validated.

Every problem raises `ConfigError` with a message meant for the operator; `runworker` prints it and
exits with status 2 before anything touches the database.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scheduler.constants import RESOURCE_CATEGORIES

MAX_CONCURRENCY = 256
MAX_CATEGORY_LIMIT = 256
UID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,99}$")


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Timing:
    lease: float
    heartbeat: float
    stale_worker: float
    reassign_after: float
    shutdown_grace: float
    poll: float
    recovery_interval: float
    sample_interval: float
    retention_days: int
    notify: bool
    reservation_timeout: float = 600.0  # an unbound reservation fails back to shared execution

    @classmethod
    def from_settings(cls, conf: dict[str, Any]) -> Timing:
        return cls(
            lease=float(conf["LEASE_SECONDS"]),
            heartbeat=float(conf["HEARTBEAT_SECONDS"]),
            stale_worker=float(conf["STALE_WORKER_SECONDS"]),
            reassign_after=float(conf["REASSIGN_AFTER_SECONDS"]),
            shutdown_grace=float(conf["SHUTDOWN_GRACE_SECONDS"]),
            poll=float(conf["POLL_SECONDS"]),
            recovery_interval=float(conf["RECOVERY_INTERVAL_SECONDS"]),
            sample_interval=float(conf["SAMPLE_INTERVAL_SECONDS"]),
            retention_days=int(conf["RETENTION_DAYS"]),
            notify=bool(conf["NOTIFY"]),
            reservation_timeout=float(conf.get("RESERVATION_TIMEOUT_SECONDS", 600)),
        )

    def validate(self) -> None:
        problems = []
        if self.heartbeat <= 0:
            problems.append(f"JETENCODE_HEARTBEAT_SECONDS must be positive (got {self.heartbeat:g})")
        elif self.lease < 3 * self.heartbeat:
            problems.append(
                f"JETENCODE_LEASE_SECONDS={self.lease:g} must be at least three heartbeats "
                f"(3 x JETENCODE_HEARTBEAT_SECONDS={self.heartbeat:g} = {3 * self.heartbeat:g})"
            )
        if self.stale_worker < 2 * self.heartbeat:
            problems.append(
                f"JETENCODE_STALE_WORKER_SECONDS={self.stale_worker:g} must be at least two heartbeats "
                f"({2 * self.heartbeat:g}), or healthy workers would be reported offline"
            )
        if self.shutdown_grace < 0:
            problems.append(
                f"JETENCODE_SHUTDOWN_GRACE_SECONDS must not be negative (got {self.shutdown_grace:g})"
            )
        if self.poll <= 0:
            problems.append(f"JETENCODE_POLL_SECONDS must be positive (got {self.poll:g})")
        if self.recovery_interval <= 0:
            problems.append(
                f"JETENCODE_RECOVERY_INTERVAL_SECONDS must be positive (got {self.recovery_interval:g})"
            )
        if problems:
            raise ConfigError("; ".join(problems))


def parse_positive_int(text: str | int, what: str, *, minimum: int = 1, maximum: int) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise ConfigError(f"{what} must be an integer (got {text!r})") from None
    if not minimum <= value <= maximum:
        raise ConfigError(f"{what} must be between {minimum} and {maximum} (got {value})")
    return value


def parse_categories(text: str) -> dict[str, int]:
    """`cpu=4,gpu_encode=1,gpu_ai=0` -> {"cpu": 4, "gpu_encode": 1, "gpu_ai": 0} (a subset is fine)."""
    limits: dict[str, int] = {}
    if not text or not text.strip():
        raise ConfigError("--categories must not be empty (e.g. cpu=4,gpu_encode=1,gpu_ai=0)")
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep:
            raise ConfigError(f"--categories: {item!r} is not NAME=N (e.g. cpu=4)")
        if name not in RESOURCE_CATEGORIES:
            raise ConfigError(
                f"--categories: unknown category {name!r} (known: {', '.join(RESOURCE_CATEGORIES)})"
            )
        if name in limits:
            raise ConfigError(f"--categories: {name} is given twice")
        limits[name] = parse_positive_int(
            value, f"--categories {name}", minimum=0, maximum=MAX_CATEGORY_LIMIT
        )
    return limits


def check_uid(uid: str) -> str:
    if not UID_PATTERN.match(uid or ""):
        raise ConfigError(
            f"--uid {uid!r} is not valid: 1-100 characters, letters, digits and . _ : @ - "
            "(starting with a letter or digit)"
        )
    return uid


def default_uid() -> str:
    host = socket.gethostname().split(".")[0] or "worker"
    cleaned = re.sub(r"[^A-Za-z0-9._:@-]", "-", host).lstrip("._:@-")[:100]
    return cleaned or "worker"


def prepare_workspace(path: str | Path) -> Path:
    workspace = Path(path).expanduser()
    try:
        workspace.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--workspace {str(path)!r} cannot be created: {exc.strerror or exc}") from None
    if not workspace.is_dir():
        raise ConfigError(f"--workspace {str(path)!r} is not a directory")
    if not os.access(workspace, os.W_OK | os.X_OK):
        raise ConfigError(f"--workspace {str(path)!r} is not writable")
    return workspace.resolve()


@dataclass(frozen=True)
class WorkerOptions:
    uid: str
    concurrency: int
    category_limits: dict[str, int]
    vram_mb: int
    workspace: Path
    background_slots: int = 1
