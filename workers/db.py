"""Database plumbing for the worker process: three connections whatever the slot count.

| connection                      | Django alias      | used by                                            |
|---------------------------------|-------------------|----------------------------------------------------|
| `jetencode-worker <uid> work`   | default (pool: 1) | the claimer, every slot's progress, handlers' own  |
|                                 |                   | ORM reads, the main thread                         |
| `jetencode-worker <uid> heartbeat` | jetencode_keeper (pool: 1) | heartbeats, maintenance and the slots' |
|                                 |                   | final writes (finish, fail, release)               |
| `jetencode-worker <uid> listen` | (raw psycopg)     | LISTEN (workers/wakeup.py), optional               |

`use_worker_connections()` gives each of the two Django aliases a pool of exactly one connection
(`OneConnection`, through Django 5.1+'s pooled path, `OPTIONS["pool"]`). The threads sharing a pool take turns on its
connection: a thread holds it from its first query until it calls `release_connection()`, which the
runtime does after every unit of work (a claim, a progress write, a final write) and the handler
context does at each of its checkpoints — before a subprocess starts above all, so no connection is
held while FFmpeg runs. A transaction therefore never mixes two threads' statements. The hot path
(the claim and its hint, the file-less finishes) takes its turn on the same connection as the
plain psycopg connection (`raw_connection()`), without Django's per-unit connect/close bookkeeping.

Nothing here keeps session state on the server: the name goes in the startup packet
(`application_name`), timeouts are `SET LOCAL` inside the heartbeat's transaction, and server-side
prepared statements are used only on a direct connection (`prepared_statements_allowed`), so
everything but LISTEN runs through PgBouncer in transaction mode.

A lost connection (PostgreSQL restarted, `pg_terminate_backend`, network) surfaces as
`OperationalError`/`InterfaceError`. Callers catch `DB_ERRORS`, call `reset_connection()` and try
again after a `Backoff` pause; the next turn on the connection reconnects.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import random
import threading
import time

import psycopg
from django.db import DEFAULT_DB_ALIAS, close_old_connections, connection, connections
from django.db import utils as db_utils

log = logging.getLogger("jetencode.worker")

DB_ERRORS: tuple[type[BaseException], ...] = (
    db_utils.OperationalError,
    db_utils.InterfaceError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)

KEEPER_ALIAS = "jetencode_keeper"
_POOLS: dict[str, OneConnection] = {}  # by alias, once use_worker_connections() ran
POOL_WAIT_SECONDS = 30.0


def harden_connection_options(lease_seconds: float, options: dict | None = None) -> dict:
    """Make a dead database visible as an error instead of a hang (call before threads connect):
    a connect timeout, TCP keepalives for idle connections and a TCP user timeout for requests in
    flight, shorter than the lease so a stuck heartbeat cannot outlive it. Explicit OPTIONS win."""
    if options is None:
        options = connections.settings[DEFAULT_DB_ALIAS].setdefault("OPTIONS", {})
    for key, value in (
        ("connect_timeout", 10),
        ("keepalives", 1),
        ("keepalives_idle", 10),
        ("keepalives_interval", 5),
        ("keepalives_count", 3),
        ("tcp_user_timeout", max(1000, int(lease_seconds * 1000 / 2))),
    ):
        options.setdefault(key, value)
    return options


class OneConnection:
    """A pool of exactly one connection in the shape Django's pooling calls (`open`, `getconn`,
    `putconn`, `close`): threads take turns on it. Unlike psycopg_pool, nothing reconnects in the
    background: the thread whose turn finds the connection missing or broken connects itself,
    so a dead database reaches the caller as an error at once and the caller's own `Backoff` decides
    when to try again (as with one connection per thread before)."""

    def __init__(self, alias: str, wait: float = POOL_WAIT_SECONDS):
        wrapper = connections.create_connection(alias)
        self.alias = alias
        self.kwargs = wrapper.get_connection_params() | {"autocommit": True}
        self.kwargs.pop("pool", None)
        self._configure = wrapper._configure_connection
        self.wait = wait
        self._cond = threading.Condition()
        self._taken = False
        self._conn: psycopg.Connection | None = None
        self.connects = 0

    def open(self, *args, **kwargs) -> None:
        pass

    def getconn(self, timeout: float | None = None) -> psycopg.Connection:
        with self._cond:
            if not self._cond.wait_for(lambda: not self._taken, self.wait if timeout is None else timeout):
                raise psycopg.OperationalError(
                    f"no turn on the {self.alias} connection within {self.wait:g}s (another thread holds it)"
                )
            self._taken = True
        try:
            conn = self._conn
            if conn is None or conn.closed or conn.broken:
                self._conn = None
                conn = psycopg.Connection.connect(**self.kwargs)
                self.connects += 1
                if self._configure(conn) and not conn.autocommit:
                    conn.commit()
                conn._pool = self
                self._conn = conn
            return conn
        except BaseException:
            self._give_turn()
            raise

    def putconn(self, conn: psycopg.Connection) -> None:
        try:
            if conn is self._conn and not conn.closed and not conn.broken:
                status = conn.info.transaction_status
                if status != psycopg.pq.TransactionStatus.IDLE:
                    try:
                        conn.rollback()  # a unit of work left a transaction open: never pass it on
                    except psycopg.Error:
                        conn.close()
            elif conn is not self._conn:
                conn.close()
            if self._conn is not None and (self._conn.closed or self._conn.broken):
                self._conn = None
        finally:
            self._give_turn()

    def _give_turn(self) -> None:
        with self._cond:
            self._taken = False
            self._cond.notify()

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def use_worker_connections(uid: str, lease_seconds: float) -> None:
    """Configure this process's database access as the table above says. Call once, from the main
    thread, before any worker thread connects."""
    connections.close_all()
    base = connections.settings[DEFAULT_DB_ALIAS]
    base["CONN_MAX_AGE"] = 0  # pooled: "closing" hands the connection back to the pool
    base["CONN_HEALTH_CHECKS"] = False  # the worker reconnects on any error; no SELECT 1 per unit
    options = harden_connection_options(lease_seconds, base.setdefault("OPTIONS", {}))
    if not prepared_statements_allowed(base):
        options.pop("server_side_binding", None)
        options["prepare_threshold"] = None
    keeper = copy.deepcopy(base)
    options["application_name"] = f"jetencode-worker {uid} work"[:63]
    options["pool"] = True  # Django's pooled path: it asks OneConnection for its connection
    keeper["OPTIONS"]["application_name"] = f"jetencode-worker {uid} heartbeat"[:63]
    keeper["OPTIONS"]["pool"] = True
    connections.settings[KEEPER_ALIAS] = keeper
    for alias in (DEFAULT_DB_ALIAS, KEEPER_ALIAS):
        wrapper = connections.create_connection(alias)
        # Django keeps one pool per alias here and uses it when present (it would build a
        # psycopg_pool.ConnectionPool otherwise).
        _POOLS[alias] = type(wrapper)._connection_pools[alias] = OneConnection(alias)


def use_keeper_connection() -> None:
    """From now on this thread's default connection is the heartbeat/maintenance pool's."""
    if KEEPER_ALIAS in connections.settings:
        connections[DEFAULT_DB_ALIAS] = connections.create_connection(KEEPER_ALIAS)


@contextlib.contextmanager
def on_keeper_connection():
    """Run one unit of work on the heartbeat pool's connection, then hand it back: the slots' final
    writes. A finish waits for its commit's WAL flush; on a connection of their own those waits
    neither hold up the claims on the work connection nor queue behind them, and the finishes that
    meet there share transactions (workers/finishes.py). Without the worker's pools (a test calling
    the runtime's parts directly) the unit runs on the thread's own connection."""
    if KEEPER_ALIAS not in connections.settings:
        try:
            yield
        finally:
            release_connection()
        return
    work = connections[DEFAULT_DB_ALIAS]
    connections[DEFAULT_DB_ALIAS] = _keeper_wrapper()
    try:
        yield
    finally:
        release_connection()
        connections[DEFAULT_DB_ALIAS] = work


_thread_keeper = threading.local()


def _keeper_wrapper():
    """This thread's Django wrapper of the heartbeat pool, made once: a slot thread lives for many
    stages, and building a wrapper per final write was ~4 % of a worker's Python time per noop stage
    (py-spy --gil, docs/benchmarks-history.md "Seventh round"). Between units it holds no connection."""
    wrapper = getattr(_thread_keeper, "wrapper", None)
    if wrapper is None:
        wrapper = _thread_keeper.wrapper = connections.create_connection(KEEPER_ALIAS)
    return wrapper


@contextlib.contextmanager
def raw_connection(alias: str = DEFAULT_DB_ALIAS):
    """A turn on the alias's one connection as the plain psycopg connection (autocommit), past
    Django's wrapper: the hot path (the claim and its hint, file-less finishes). Django's connect,
    cursor and close bookkeeping around each unit of work cost about a quarter of a worker's CPU
    per noop stage (py-spy, docs/benchmarks.md). Errors arrive as psycopg's (`DB_ERRORS` has the
    connection ones); a broken connection is dropped when handed back. Without the worker's pools
    (a test calling the runtime's parts directly) this thread's own Django connection is used."""
    pool = _POOLS.get(alias)
    if pool is None:
        connection.ensure_connection()
        try:
            yield connection.connection
        finally:
            release_connection()
        return
    conn = pool.getconn()
    try:
        yield conn
    finally:
        pool.putconn(conn)


PREPARED_ENV = "JETENCODE_PREPARED_STATEMENTS"


def prepared_statements_allowed(settings_dict: dict) -> bool:
    """Server-side prepared statements survive only on a connection that is the same server session
    from one transaction to the next. JETENCODE_PREPARED_STATEMENTS=true/false decides; unset, they
    are used only when the server says it is the one we dialled (`inet_server_port()` equals the
    port in the settings): through PgBouncer (before 1.21, or without max_prepared_statements) or
    any other proxy the ports differ and the worker does without."""
    explicit = os.environ.get(PREPARED_ENV, "").strip().lower()
    if explicit in ("1", "true", "yes", "on"):
        return True
    if explicit in ("0", "false", "no", "off"):
        return False
    return not behind_a_proxy(settings_dict)


def behind_a_proxy(settings_dict: dict) -> bool:
    """True when the server's own port differs from the one we connect to (PgBouncer, a TCP proxy)."""
    params = connection_params("jetencode-worker probe", settings_dict)
    wanted = int(params.get("port") or 5432)
    try:
        with psycopg.connect(**params) as conn:
            port = conn.execute("SELECT inet_server_port()").fetchone()[0]
    except psycopg.Error:
        return True  # unknown: the safe answer
    return port is not None and int(port) != wanted


def connection_params(application_name: str, settings_dict: dict | None = None) -> dict:
    """psycopg.connect() keyword arguments (autocommit) for the configured database, from Django's
    settings, or for JETENCODE_LISTEN_DATABASE_URL with `listen=True`."""
    settings = settings_dict if settings_dict is not None else connections.settings[DEFAULT_DB_ALIAS]
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
    return _direct(params, application_name)


def listen_params(application_name: str) -> dict:
    """Where the LISTEN connection goes: JETENCODE_LISTEN_DATABASE_URL, else the database itself."""
    url = os.environ.get(LISTEN_URL_ENV, "").strip()
    if url:
        return _direct(dict(psycopg.conninfo.conninfo_to_dict(url)), application_name)
    return connection_params(application_name)


def _direct(params: dict, application_name: str) -> dict:
    params["application_name"] = application_name[:63]
    params.setdefault("connect_timeout", 10)
    # Notice a dead peer even when no notification is due.
    params.setdefault("keepalives", 1)
    params.setdefault("keepalives_idle", 10)
    params.setdefault("keepalives_interval", 5)
    params.setdefault("keepalives_count", 3)
    params["autocommit"] = True
    return params


LISTEN_URL_ENV = "JETENCODE_LISTEN_DATABASE_URL"


def release_connection() -> None:
    """Hand this thread's connection back (to its pool) between units of work. Never raises."""
    conn = connections[DEFAULT_DB_ALIAS]  # one lookup (each `connection.x` is one)
    if conn.connection is None or conn.in_atomic_block:
        return  # nothing held (the hot path runs past Django), or inside a transaction
    try:
        conn.close()
    except Exception:
        conn.connection = None


@contextlib.contextmanager
def released():
    """Run a unit of work on this thread's connection and hand the connection back afterwards."""
    try:
        yield
    finally:
        release_connection()


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
