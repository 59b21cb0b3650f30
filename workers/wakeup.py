"""Waking idle slots: LISTEN/NOTIFY as a shortcut, polling as the truth.

Task-producing transactions run `pg_notify('jetencode_queue_tasks', '<pool>')`. The `Listener`
thread holds one raw autocommit psycopg connection (not Django's, so it never takes a slot's
connection), LISTENs, and turns each notification into `Wakeup.notify(pool)`. Idle slots wait on
`Wakeup` for at most POLL_SECONDS, so a lost notification costs one poll interval, never work.

After every (re)connect the listener LISTENs again, checks that a notification really comes back
(it does not through PgBouncer in transaction mode, for instance) and wakes every slot once,
because notifications sent while it was away are gone. When LISTEN is refused or the check fails,
the worker logs a warning and keeps polling.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid

import psycopg
from django.db import connection as django_connection

from scheduler.constants import POOLS
from workers.db import Backoff, RateLimitedLog

log = logging.getLogger("jetencode.worker")

CHANNEL = "jetencode_queue_tasks"


class Wakeup:
    """A condition variable with a generation counter per pool, so no wake-up is lost between a
    slot's empty claim and its wait: a slot reads the generation before claiming and waits only if
    it has not moved since."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._generation = dict.fromkeys(POOLS, 0)
        self.received = 0

    def generation(self, pool: str) -> int:
        with self._cond:
            return self._generation[pool]

    def notify(self, pool: str) -> None:
        with self._cond:
            self._generation[pool] += 1
            self.received += 1
            self._cond.notify_all()

    def wake_all(self) -> None:
        with self._cond:
            for pool in POOLS:
                self._generation[pool] += 1
            self._cond.notify_all()

    def wait(self, pool: str, seen: int, timeout: float) -> bool:
        """Wait until the pool's generation differs from `seen` or `timeout` passes. True if woken."""
        with self._cond:
            return self._cond.wait_for(lambda: self._generation[pool] != seen, timeout)


def connection_params(application_name: str) -> dict:
    """psycopg.connect() keyword arguments for the configured database, from Django's settings."""
    settings = django_connection.settings_dict
    params: dict = {}
    options = dict(settings.get("OPTIONS") or {})
    for django_only in (
        "isolation_level",
        "assume_role",
        "server_side_binding",
        "pool",
        "cursor_factory",
        "prepare_threshold",
        "context",
    ):
        options.pop(django_only, None)
    params.update(options)
    params["dbname"] = settings.get("NAME") or "postgres"
    for key, name in (("USER", "user"), ("PASSWORD", "password"), ("HOST", "host"), ("PORT", "port")):
        if settings.get(key):
            params[name] = settings[key]
    params["application_name"] = application_name[:63]
    params.setdefault("connect_timeout", 10)
    # Notice a dead peer even when no notification is due.
    params.setdefault("keepalives", 1)
    params.setdefault("keepalives_idle", 10)
    params.setdefault("keepalives_interval", 5)
    params.setdefault("keepalives_count", 3)
    params["autocommit"] = True
    return params


class Listener(threading.Thread):
    PROBE_SECONDS = 5.0
    PING_EVERY = 30.0

    def __init__(self, wakeup: Wakeup, stop: threading.Event, application_name: str):
        super().__init__(name="listen", daemon=True)
        self.wakeup = wakeup
        self.stop_event = stop
        self.application_name = application_name
        self.state = "starting"  # starting | listening | reconnecting | polling-only
        self.reconnects = 0
        self._conn: psycopg.Connection | None = None
        self._trouble = RateLimitedLog(30)

    def run(self) -> None:
        backoff = Backoff(0.2, 10.0)
        first = True
        while not self.stop_event.is_set():
            try:
                conn = psycopg.connect(**connection_params(self.application_name))
            except psycopg.Error as exc:
                self.state = "reconnecting"
                self._trouble.warning("LISTEN connection failed (%s); polling until it is back", _short(exc))
                backoff.sleep(self.stop_event)
                continue
            self._conn = conn
            try:
                try:
                    conn.execute(f"LISTEN {CHANNEL}")
                except psycopg.OperationalError:
                    raise
                except psycopg.Error as exc:
                    self._give_up(f"LISTEN was refused ({_short(exc)})")
                    return
                if not self._probe(conn):
                    self._give_up("a test notification did not come back (a pooler in transaction mode?)")
                    return
                if not first:
                    self.reconnects += 1
                    log.info("LISTEN connection re-established; polling once")
                first = False
                self.state = "listening"
                backoff.reset()
                self.wakeup.wake_all()  # anything sent while we were away: poll once
                self._listen(conn)
            except psycopg.Error as exc:
                if not self.stop_event.is_set():
                    self.state = "reconnecting"
                    log.warning("LISTEN connection lost (%s); reconnecting", _short(exc))
                    self.wakeup.wake_all()
                    backoff.sleep(self.stop_event)
            finally:
                self._close()

    def _listen(self, conn: psycopg.Connection) -> None:
        last_ping = time.monotonic()
        while not self.stop_event.is_set():
            for note in conn.notifies(timeout=1.0):
                if note.channel == CHANNEL and note.payload in POOLS:
                    self.wakeup.notify(note.payload)
            if time.monotonic() - last_ping >= self.PING_EVERY:
                conn.execute("SELECT 1")  # a half-open connection shows up here
                last_ping = time.monotonic()

    def _probe(self, conn: psycopg.Connection) -> bool:
        # The test notification is sent from a connection of its own: through a pooler in
        # transaction mode the listener's server connection is not pinned, and a notification sent
        # on the listening connection itself can come back by luck.
        token = f"probe-{uuid.uuid4().hex}"
        with psycopg.connect(**connection_params(self.application_name)) as sender:  # autocommit
            sender.execute("SELECT pg_notify(%s, %s)", [CHANNEL, token])
        deadline = time.monotonic() + self.PROBE_SECONDS
        while time.monotonic() < deadline and not self.stop_event.is_set():
            for note in conn.notifies(timeout=max(0.05, deadline - time.monotonic())):
                if note.payload == token:
                    return True
                if note.channel == CHANNEL and note.payload in POOLS:
                    self.wakeup.notify(note.payload)
        return False

    def _give_up(self, why: str) -> None:
        self.state = "polling-only"
        log.warning("notifications unavailable: %s; falling back to polling only", why)

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def close(self) -> None:
        """Called at shutdown from another thread: the notifies() loop ends within a second anyway."""
        self.stop_event.set()


def _short(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
