"""Database plumbing for worker threads.

Django connections are thread-local: every worker thread (each slot, the heartbeat, maintenance,
the supervising main thread) has its own. `name_thread_connection()` gives the calling thread's
connection an `application_name` (`jetencode-worker <uid> <role>`, visible in pg_stat_activity)
and optional session settings; they are applied again on every reconnect through Django's
`connection_created` signal.

A lost connection (PostgreSQL restarted, `pg_terminate_backend`, network) surfaces as
`OperationalError`/`InterfaceError`. Callers catch `DB_ERRORS`, call `reset_connection()` and try
again after a `Backoff` pause; Django opens a fresh connection on the next query.
"""

from __future__ import annotations

import logging
import random
import threading
import time

import psycopg
from django.db import close_old_connections, connection, connections
from django.db import utils as db_utils
from django.db.backends.signals import connection_created

log = logging.getLogger("jetencode.worker")

DB_ERRORS: tuple[type[BaseException], ...] = (
    db_utils.OperationalError,
    db_utils.InterfaceError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)

_local = threading.local()
_hooked = False
_hook_lock = threading.Lock()


def _apply_session_settings(sender, connection, **kwargs) -> None:  # noqa: ARG001 (signal signature)
    name = getattr(_local, "name", None)
    if not name:
        return
    settings = getattr(_local, "settings", {}) or {}
    pairs = [("application_name", name[:63]), *settings.items()]
    sql = "SELECT " + ", ".join("set_config(%s, %s, false)" for _ in pairs)
    params = [value for pair in pairs for value in pair]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def harden_connection_options(lease_seconds: float) -> None:
    """Make a dead database visible as an error instead of a hang (call before threads connect):
    a connect timeout, TCP keepalives for idle connections and a TCP user timeout for requests in
    flight, shorter than the lease so a stuck heartbeat cannot outlive it. Explicit OPTIONS win."""
    options = connections.settings["default"].setdefault("OPTIONS", {})
    for key, value in (
        ("connect_timeout", 10),
        ("keepalives", 1),
        ("keepalives_idle", 10),
        ("keepalives_interval", 5),
        ("keepalives_count", 3),
        ("tcp_user_timeout", max(1000, int(lease_seconds * 1000 / 2))),
    ):
        options.setdefault(key, value)


def name_thread_connection(name: str, **session_settings: str) -> None:
    """Name this thread's connection (and set e.g. lock_timeout='1s') now and after every reconnect."""
    global _hooked
    with _hook_lock:
        if not _hooked:
            connection_created.connect(
                _apply_session_settings, dispatch_uid="jetencode-worker-connection-name"
            )
            _hooked = True
    _local.name = name
    _local.settings = dict(session_settings)
    # A connection opened before the name was set (or by another role of this thread): start over.
    reset_connection()


def reset_connection() -> None:
    """Drop this thread's connection after an error; the next query reconnects."""
    try:
        connection.close()
    except Exception:  # closing a dead connection may itself fail
        connection.connection = None


def refresh_connection() -> None:
    """Between units of work: close the connection if it is too old or broken (Django's rules)."""
    try:
        close_old_connections()
    except Exception:
        reset_connection()


class Backoff:
    """Exponential backoff with jitter: start, x2 each failure, capped."""

    def __init__(self, start: float = 0.2, cap: float = 5.0):
        self.start = start
        self.cap = cap
        self.failures = 0

    def reset(self) -> None:
        self.failures = 0

    def next_delay(self) -> float:
        # The exponent stops growing once the cap is reached: 2**1024 no longer fits a float, and a
        # database that stays unreachable for long would otherwise kill the retrying thread.
        delay = min(self.cap, self.start * (2 ** min(self.failures, 32)))
        self.failures += 1
        return delay * random.uniform(0.8, 1.2)

    def sleep(self, stop: threading.Event | None = None, limit: float | None = None) -> None:
        delay = self.next_delay()
        if limit is not None:
            delay = max(0.0, min(delay, limit))
        if stop is not None:
            stop.wait(delay)
        else:
            time.sleep(delay)


class RateLimitedLog:
    """Log a repeating failure once, then at most every `every` seconds."""

    def __init__(self, every: float = 30.0):
        self.every = every
        self._last = 0.0

    def warning(self, message: str, *args, **kwargs) -> None:
        now = time.monotonic()
        if now - self._last >= self.every:
            self._last = now
            log.warning(message, *args, **kwargs)
