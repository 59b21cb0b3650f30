"""Everything but LISTEN works through PgBouncer in transaction mode (issue 15): Debian's real
`/usr/sbin/pgbouncer`, started here with a server pool smaller than the workers' connections, runs
real workers to finished jobs. One LISTENs on a direct connection (JETENCODE_LISTEN_DATABASE_URL),
the other has no direct connection and polls."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import pytest
from django.db import connection

from tests.kit.db import one, sql
from tests.kit.waiting import wait_for

PGBOUNCER = "/usr/sbin/pgbouncer"

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.timeout(180),
    pytest.mark.skipif(not Path(PGBOUNCER).exists(), reason="Debian's pgbouncer is not installed"),
]

SERVER_POOL = 3  # server connections PgBouncer may open: fewer than the workers hold


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _unprivileged() -> dict:
    """PgBouncer refuses to run as root: as root, run it as an ordinary account."""
    if os.geteuid() != 0:
        return {}
    for account in ("postgres", "nobody"):
        try:
            pwd.getpwnam(account)
        except KeyError:
            continue
        return {"user": account}
    pytest.skip("running as root with no unprivileged account for pgbouncer")


@pytest.fixture
def pgbouncer():
    """A PgBouncer in transaction mode in front of this test run's database; its DATABASE_URL."""
    tmp_path = Path(tempfile.mkdtemp(prefix="jetencode-pgbouncer-"))
    tmp_path.chmod(0o777)  # its log and pid file are written by the unprivileged account
    conf = connection.settings_dict
    if (conf["HOST"] or "").startswith("/"):
        pytest.skip("the test database is on a Unix socket")
    user = conf["USER"] or "postgres"
    port = free_port()
    (tmp_path / "users.txt").write_text(f'"{user}" "{conf.get("PASSWORD") or ""}"\n')
    ini = tmp_path / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        f"{conf['NAME']} = host={conf['HOST'] or '127.0.0.1'} port={conf['PORT'] or 5432} "
        f"dbname={conf['NAME']} user={user}"
        + (f" password={conf['PASSWORD']}" if conf.get("PASSWORD") else "")
        + "\n\n[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {tmp_path / 'users.txt'}\n"
        "pool_mode = transaction\n"
        f"default_pool_size = {SERVER_POOL}\nmax_client_conn = 100\n"
        "ignore_startup_parameters = extra_float_digits\n"
        f"logfile = {tmp_path / 'pgbouncer.log'}\npidfile = {tmp_path / 'pgbouncer.pid'}\n"
    )
    binary = shutil.which("pgbouncer") or PGBOUNCER
    process = subprocess.Popen(
        [binary, str(ini)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, **_unprivileged()
    )
    url = f"postgresql://{user}@127.0.0.1:{port}/{conf['NAME']}"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    else:
        process.kill()
        log = tmp_path / "pgbouncer.log"
        pytest.fail("pgbouncer did not start:\n" + (log.read_text() if log.exists() else "(no log)"))
    yield url
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(5)
    except subprocess.TimeoutExpired:
        process.kill()
    shutil.rmtree(tmp_path, ignore_errors=True)


def sockets_to(pid: int, url: str) -> list:
    """The established TCP connections of process `pid` to the host:port of `url`."""
    port = urlsplit(url).port or 5432
    return [
        c
        for c in psutil.Process(pid).net_connections("tcp")
        if c.raddr and c.raddr.port == port and c.status == "ESTABLISHED"
    ]


def server_connections_of_pgbouncer() -> int:
    return one(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND client_port IS NOT NULL AND pid <> pg_backend_pid() AND application_name NOT LIKE '%%listen'"
        " AND backend_type = 'client backend' AND client_addr IS NOT NULL"
        " AND application_name LIKE 'jetencode-worker%%'"
    )


def test_workers_finish_jobs_through_pgbouncer_in_transaction_mode(
    pgbouncer, start_worker, enqueue, database_url
):
    direct_listen = start_worker(
        "bouncer-listen",
        "--concurrency",
        "2",
        database_url=pgbouncer,
        env={"JETENCODE_LISTEN_DATABASE_URL": database_url},
    )
    polling = start_worker("bouncer-poll", "--concurrency", "2", database_url=pgbouncer, ready=False)
    polling.wait_ready(listening=False)
    # Fan-out jobs: children published by the finish, progress written while they run, the two
    # workers' four pooled connections sharing PgBouncer's three server connections.
    jobs = [enqueue("noop", {"seconds": 0.3, "children": 3}) for _ in range(6)]
    wait_for(
        lambda: (
            one("SELECT count(*) FROM jobs WHERE id = ANY(%s::uuid[]) AND status = 'completed'", [jobs])
            == len(jobs)
        ),
        90,
        "the jobs to complete through pgbouncer",
        workers=[direct_listen, polling],
    )
    ran_on = {
        uid
        for (uid,) in sql(
            "SELECT DISTINCT claimed_by FROM queue_tasks WHERE job_id = ANY(%s::uuid[])", [jobs]
        )
    }
    assert ran_on == {"bouncer-listen", "bouncer-poll"}, ran_on
    # Nothing a worker wrote was rejected, and nothing broke on a server connection it did not own.
    assert one("SELECT count(*) FROM queue_fence_audit WHERE NOT accepted") == 0
    for worker in (direct_listen, polling):
        output = worker.output()
        assert "prepared statement" not in output, output[-3000:]
        assert "Traceback" not in output, output[-3000:]
    # The LISTEN went straight to PostgreSQL; the other worker found LISTEN useless and polls.
    assert direct_listen.connections("listen")
    wait_for(lambda: "falling back to polling only" in polling.output(), 15, "the LISTEN probe to give up")
    # Counted on the worker's own sockets: PgBouncer keeps its server connections, and one that last
    # served the LISTEN probe still shows that application_name in pg_stat_activity until reused.
    wait_for(
        lambda: len(sockets_to(polling.pid, pgbouncer)) <= 2,
        15,
        "the polling worker to hold only its two pooled connections",
    )
    assert not sockets_to(polling.pid, database_url), "the polling worker has a direct connection"
    # PgBouncer never opened more server connections than its pool (plus the direct LISTEN).
    assert server_connections_of_pgbouncer() <= SERVER_POOL
    assert direct_listen.drain() == 0
    assert polling.drain() == 0
