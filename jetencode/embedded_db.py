"""The embedded PostgreSQL used when DATABASE_URL is unset.

This module alone wraps `pgserver` (a real PostgreSQL shipped in a wheel). The server's data lives
under `var/pgdata` in the checkout and is shared by every process of the project: web, workers,
tests, management commands. It is *kept running* when processes exit (pgserver's cleanup is
disabled), so a worker restart does not restart the database under the web process. pgserver
listens on a Unix socket only; a stale `postmaster.pid` left by a crash or reboot is detected (its
pid is not a live postmaster) and the server is started again.

Settings never start it: `connection_settings()` only reads where the server listens. The entry
points that need a database start it first with `start_if_used()`: manage.py (for every command but
`embedded_db` and help), wsgi/asgi, the tools and the test settings.
"""

import logging
import os
import subprocess
import time
import warnings
from pathlib import Path

from jetencode.env import envstr

BASE_DIR = Path(__file__).resolve().parent.parent
DEFAULT_PGDATA = BASE_DIR / "var" / "pgdata"
DATABASE_NAME = "jetencode"

logger = logging.getLogger(__name__)
# pgserver logs every handle at INFO, including from atexit after streams are closed.
logging.getLogger("pgserver").setLevel(logging.WARNING)


def _pgdata() -> Path:
    return Path(os.environ.get("JETENCODE_EMBEDDED_PGDATA", DEFAULT_PGDATA)).resolve()


def _pgserver():
    # XDG_RUNTIME_DIR is often unset under systemd units and CI; pgserver then warns and falls back
    # to /tmp, which is what we want, so keep the warning out of every command's output.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver
        import pgserver._commands
    return pgserver


def data_dir() -> Path:
    """Where the embedded server keeps its data (JETENCODE_EMBEDDED_PGDATA, default var/pgdata)."""
    return _pgdata()


def _server(pgdata: Path):
    pgserver = _pgserver()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    return pgserver.get_server(pgdata, cleanup_mode=None)


def _clear_stale_pidfile(pgdata: Path) -> None:
    """Remove a postmaster.pid whose pid is no longer a live postgres process.

    After a crash or a reboot the pid may be dead or reused by an unrelated process; pgserver would
    trust a reused pid and never start the server, so we check the process name ourselves.
    """
    pidfile = pgdata / "postmaster.pid"
    try:
        pid = int(pidfile.read_text().splitlines()[0])
    except (OSError, ValueError, IndexError):
        return
    import psutil

    try:
        alive = psutil.Process(pid).name().startswith("postgres")
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        alive = False
    if not alive:
        logger.warning("removing stale %s (pid %s is not a running postgres)", pidfile, pid)
        pidfile.unlink(missing_ok=True)


def start_if_used() -> None:
    """Start the embedded server if this process will use it, i.e. DATABASE_URL is unset."""
    if not envstr("DATABASE_URL"):
        ensure_running()


# What this process's ensure_running() found and did, for the run command's narration:
# {"action": "created" | "started" | "running", "seconds": float, "pgdata": Path}.
last_start: dict | None = None


def ensure_running() -> dict:
    """Start the embedded server if needed and return Django connection settings for it."""
    global last_start
    began = time.monotonic()
    pgdata = _pgdata()
    _clear_stale_pidfile(pgdata)
    if not (pgdata / "PG_VERSION").exists():
        action = "created"
    elif not (pgdata / "postmaster.pid").exists():
        action = "started"
    else:
        action = "running"
    _ensure_database(_server(pgdata))
    last_start = {"action": action, "seconds": time.monotonic() - began, "pgdata": pgdata}
    return connection_settings()


def connection_settings() -> dict:
    """Django connection settings for the embedded server, without starting it: the socket directory
    is the one the running server wrote in its postmaster.pid (pgserver puts the socket in the data
    directory unless that path is too long for a socket name); before a start, the data directory."""
    return {
        "HOST": _socket_dir(_pgdata()),
        "PORT": "",
        "USER": "postgres",
        "NAME": DATABASE_NAME,
        "PASSWORD": "",
    }


def socket_dir_of(pgdata: Path) -> str:
    """The socket directory of the server running on `pgdata` (a benchmark's own server, say)."""
    return _socket_dir(pgdata)


def _socket_dir(pgdata: Path) -> str:
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
    except OSError:
        return str(pgdata)
    # postmaster.pid: pid, data directory, start time, port, socket directory, listen address, ...
    return lines[4] if len(lines) > 4 and lines[4] else str(pgdata)


def _ensure_database(server) -> None:
    marker = _pgdata() / ".jetencode-db-created"
    if marker.exists():
        return
    out = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE_NAME}';")
    if "(0 rows)" in out:
        server.psql(f"CREATE DATABASE {DATABASE_NAME};")
    marker.touch()


def status() -> str:
    pgdata = _pgdata()
    pidfile = pgdata / "postmaster.pid"
    if not pidfile.exists():
        return f"stopped (data directory {pgdata})"
    lines = pidfile.read_text().splitlines()
    pid = int(lines[0])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return f"stopped, stale postmaster.pid (pid {pid}) in {pgdata}"
    socket_dir = lines[4] if len(lines) > 4 else "?"
    return f"running, pid {pid}, socket {socket_dir}, data {pgdata}"


def stop() -> str:
    pgdata = _pgdata()
    if not (pgdata / "postmaster.pid").exists():
        return "not running"
    pg_ctl = _pgserver()._commands.pg_ctl
    user = "pgserver" if os.geteuid() == 0 else None
    try:
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=user)
    except subprocess.CalledProcessError as exc:
        return f"stop failed: {exc}"
    return "stopped"
