"""A private PostgreSQL instance for the soak's restart fault, and scratch databases.

Restarting the shared server would break everybody else's connections, so the restart fault only
ever runs against an instance of our own: a fresh cluster (`initdb`) in a temporary directory,
listening on 127.0.0.1 and a free port, stopped and deleted afterwards. `fsync` is off (an
`immediate` restart is a PostgreSQL crash, not an OS crash, so nothing committed is lost);
`synchronous_commit` stays on, or an immediate restart would lose acknowledged commits. It uses the system's
PostgreSQL binaries when there are any (/usr/lib/postgresql/<version>/bin), else pgserver's.
As root the server runs as the `postgres` (or `pgserver`) user: PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import psycopg


def _bin_dir() -> Path:
    system = sorted(
        (p for p in Path("/usr/lib/postgresql").glob("*/bin") if (p / "pg_ctl").exists()),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    if system:
        return system[-1]
    import pgserver  # noqa: F401  (a dependency of the project)

    return Path(pgserver.__file__).parent / "pginstall" / "bin"


def _run_as() -> str | None:
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "pgserver"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise RuntimeError("running as root, but there is no postgres or pgserver user to run PostgreSQL as")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PrivatePostgres:
    """`with PrivatePostgres() as pg: pg.url("postgres")`; `pg.restart()` restarts it under load."""

    def __init__(self, *, max_connections: int = 200):
        self.bin = _bin_dir()
        self.user = _run_as()
        self.max_connections = max_connections
        self.root = Path(tempfile.mkdtemp(prefix="jetencode-soak-pg-"))
        self.data = self.root / "data"
        self.logfile = self.root / "postgres.log"
        self.port = free_port()
        self.restarts = 0

    # -- lifecycle -----------------------------------------------------------------------------

    def _cmd(
        self, name: str, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess:
        argv = [str(self.bin / name), *args]
        if self.user:
            argv = ["runuser", "-u", self.user, "--", *argv]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise RuntimeError(
                f"{name} failed ({result.returncode}): {result.stdout[-2000:]}\n{result.stderr[-2000:]}"
            )
        return result

    def start(self) -> PrivatePostgres:
        if self.user:
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self._cmd("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        options = " ".join(
            [
                f"-p {self.port}",
                "-c listen_addresses=127.0.0.1",
                f"-c unix_socket_directories={self.root}",
                f"-c max_connections={self.max_connections}",
                "-c fsync=off",
                "-c full_page_writes=off",
                "-c shared_buffers=64MB",
            ]
        )
        self._cmd(
            "pg_ctl", "-D", str(self.data), "-l", str(self.logfile), "-o", options, "-w", "-t", "60", "start"
        )
        self.wait_ready()
        return self

    def restart(self, mode: str = "fast") -> float:
        """Restart the server (`fast`: clean shutdown; `immediate`: crash, then recovery). Returns seconds."""
        started = time.monotonic()
        self._cmd(
            "pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "restart", "-l", str(self.logfile)
        )
        self.wait_ready()
        self.restarts += 1
        return time.monotonic() - started

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.url("postgres"), connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._cmd("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PrivatePostgres:
        try:
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(self, *exc) -> None:
        self.cleanup()

    # -- addresses ---------------------------------------------------------------------------------

    def url(self, dbname: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{quote(dbname)}"

    def settings(self, dbname: str) -> dict:
        return {
            "HOST": "127.0.0.1",
            "PORT": str(self.port),
            "USER": "postgres",
            "PASSWORD": "",
            "NAME": dbname,
        }


def url_for(settings_dict: dict) -> str:
    """A postgresql:// URL for a Django database settings dict (TCP host or a socket directory)."""
    host = settings_dict.get("HOST") or ""
    user = quote(settings_dict.get("USER") or "postgres")
    password = f":{quote(settings_dict['PASSWORD'])}" if settings_dict.get("PASSWORD") else ""
    name = quote(settings_dict["NAME"])
    if host.startswith("/"):
        return f"postgresql://{user}{password}@/{name}?host={quote(host)}"
    port = settings_dict.get("PORT") or 5432
    return f"postgresql://{user}{password}@{host or '127.0.0.1'}:{port}/{name}"
