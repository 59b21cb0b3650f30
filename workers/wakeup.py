"""Waking the claimer: LISTEN/NOTIFY as a shortcut, polling as the truth.

Task-producing transactions run `pg_notify('jetencode_queue_tasks', '<pool>[:<worker uid>]')`:
the pool, and the worker the new task is for when only one can take it (a job's own stages go to
its assigned worker; a new job is offered to one worker with a free slot, chosen by the enqueue).
The `Listener` thread holds one raw autocommit psycopg connection (not Django's), LISTENs, and turns
each notification for this worker (or for every worker) into `Wakeup.notify(pool)`; notifications
for other workers are dropped here, so they cost no claim. The claimer waits on `Wakeup` for at most
one poll interval, so a lost notification costs one poll, never work.

The connection goes to JETENCODE_LISTEN_DATABASE_URL when that is set (a direct connection next to
a PgBouncer in transaction mode), else to the database itself.

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
        # Per pool: notifications ("<pool>"), those of them sent to every worker ("<pool>.everyone":
        # work the farm had no free slot to offer) and slots coming free ("<pool>.free"), counted
        # apart: the claimer claims at once for a notification, but asks a cheap read first for a
        # slot; after a notification to everyone it treats waiting work of any age as a backlog.
        self._generation = (
            dict.fromkeys(POOLS, 0)
            | {f"{pool}.everyone": 0 for pool in POOLS}
            | {f"{pool}.free": 0 for pool in POOLS}
        )
        self.received = 0

    def generation(self, pool: str) -> int:
        with self._cond:
            return self._generation[pool]

    def notify(self, pool: str, everyone: bool = False) -> None:
        """A notification for the pool: for this worker, or (`everyone`) for every worker."""
        with self._cond:
            self._generation[pool] += 1
            if everyone:
                self._generation[f"{pool}.everyone"] += 1
            self.received += 1
            self._cond.notify_all()

    def freed(self, pool: str) -> None:
        """A slot of the pool is free again."""
        with self._cond:
            self._generation[f"{pool}.free"] += 1
            self._cond.notify_all()

    def wake_all(self) -> None:
        """Claim everywhere now (after a reconnect, at shutdown): as if every pool was notified."""
        with self._cond:
            for pool in POOLS:
                self._generation[pool] += 1
            self._cond.notify_all()

    def wait(self, pool: str, seen: int, timeout: float) -> bool:
        """Wait until the pool's generation differs from `seen` or `timeout` passes. True if woken."""
        with self._cond:
            return self._cond.wait_for(lambda: self._generation[pool] != seen, timeout)

    def generations(self) -> dict[str, int]:
        with self._cond:
            return dict(self._generation)

    def wait_any(self, seen: dict[str, int], timeout: float) -> bool:
        """Wait until any pool's generation differs from `seen` or `timeout` passes. True if woken."""
        with self._cond:
            return self._cond.wait_for(lambda: self._generation != seen, timeout)


def parse_payload(payload: str, uid: str | None) -> str | None:
    """The pool a notification wakes for worker `uid`, or None when it is not for this worker:
    `media`, `background` (any worker) or `media:<uid>#<n>` (one worker; `#<n>` only keeps the
    notifications of one transaction apart, and a uid cannot contain `#`)."""
    pool, _, target = payload.partition(":")
    target = target.partition("#")[0]
    if pool not in POOLS:
        return None
    if target and uid is not None and target != uid:
        return None
    return pool


class Listener(threading.Thread):
    PROBE_SECONDS = 5.0
    PING_EVERY = 30.0

    def __init__(self, wakeup: Wakeup, stop: threading.Event, params: dict, uid: str | None = None):
        super().__init__(name="listen", daemon=True)
        self.wakeup = wakeup
        self.stop_event = stop
        self.params = params  # psycopg.connect() keyword arguments (autocommit)
        self.uid = uid
        self.application_name = params.get("application_name", "")
        self.state = "starting"  # starting | listening | reconnecting | polling-only
        self.reconnects = 0
        self._conn: psycopg.Connection | None = None
        self._trouble = RateLimitedLog(30)

    def run(self) -> None:
        backoff = Backoff(0.2, 10.0)
        first = True
        while not self.stop_event.is_set():
            try:
                conn = psycopg.connect(**self.params)
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
                self._deliver(note)
            if time.monotonic() - last_ping >= self.PING_EVERY:
                conn.execute("SELECT 1")  # a half-open connection shows up here
                last_ping = time.monotonic()

    def _probe(self, conn: psycopg.Connection) -> bool:
        # The test notification is sent from a connection of its own: through a pooler in
        # transaction mode the listener's server connection is not pinned, and a notification sent
        # on the listening connection itself can come back by luck.
        token = f"probe-{uuid.uuid4().hex}"
        with psycopg.connect(**self.params) as sender:  # autocommit
            sender.execute("SELECT pg_notify(%s, %s)", [CHANNEL, token])
        deadline = time.monotonic() + self.PROBE_SECONDS
        while time.monotonic() < deadline and not self.stop_event.is_set():
            for note in conn.notifies(timeout=max(0.05, deadline - time.monotonic())):
                if note.payload == token:
                    return True
                self._deliver(note)
        return False

    def _deliver(self, note) -> None:
        pool = parse_payload(note.payload, self.uid) if note.channel == CHANNEL else None
        if pool is not None:
            self.wakeup.notify(pool, everyone=":" not in note.payload)

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
