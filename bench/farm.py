"""The farm benchmark (issue 15): what N worker processes cost PostgreSQL.

`python -m bench --only farm` starts a PostgreSQL of its own (Debian's server binaries,
/usr/lib/postgresql/<version>/bin, `max_connections` raised for the farm, pg_stat_statements loaded
to count the statements), migrates a database on it with `manage.py migrate`, and for each N of the
profile starts N real `manage.py runworker` processes with 4 noop media slots each (default
timings: heartbeat 5 s, recovery every 5 s, poll 1 s, LISTEN on). At each N it measures
- connections per worker process (pg_stat_activity, by the uid in application_name);
- with an empty queue: transactions per second in the database and the CPU of every PostgreSQL
  process of the server, in % of one core (the kernel's exact run time, and the tick-sampled
  utime + stime that earlier figures used), over 40 s once the farm is steady (95 s after the
  last worker was ready: past every worker's start-up chores) and, as before, over 20 s from 8 s
  after it was ready (`idle.after_startup`);
- at 20 and 100 enqueued noop jobs per second (one producer connection, paced): claim statements
  per job (`claim_task_v1` calls counted by pg_stat_statements, divided by the jobs), cheap reads
  per job, and enqueue→start p50/p99 (the task's started_at minus the job's created_at: both are
  PostgreSQL's clock).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import psutil
import psycopg

from bench import db
from bench.workers import WorkerPool

ROOT = db.ROOT
CONCURRENCY = 4
STARTUP_IDLE_SECONDS = 20.0
IDLE_SECONDS = 40.0
RATES = ((20, 15.0), (100, 10.0))  # jobs per second, seconds of enqueueing
SETTLE_SECONDS = 8.0  # after start-up: every worker's first look and first beats are over
# The steady idle window starts this long after the last worker was ready: by then every worker is
# past its start-up chores (its first retention purge comes 30-90 s after it starts, its first
# sample within 5 s; each backend's first calls load caches and compile functions). In the first
# minute an idle farm costs PostgreSQL more, and a 10-s timeline at 100 workers moved from 8.2 %
# of a core to 4-5 % over three minutes (docs/benchmarks-history.md, "Sixth round"): both are reported.
STEADY_AFTER_SECONDS = 95.0


def _server_binaries() -> Path:
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (candidate / "postgres").exists() and (candidate / "initdb").exists():
            return candidate
    raise RuntimeError("the farm benchmark needs PostgreSQL's server binaries (/usr/lib/postgresql/*/bin)")


def _as_postgres() -> dict:
    """initdb and postgres refuse to run as root: as root, run them as the postgres account."""
    if os.geteuid() != 0:
        return {}
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise RuntimeError("running as root and there is no postgres account for the server") from None
    return {"user": "postgres"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class OwnPostgres:
    """A throw-away PostgreSQL server for the farm: its own data directory, port and settings."""

    def __init__(self, max_connections: int, log=print):
        self.bin = _server_binaries()
        self.dir = Path(tempfile.mkdtemp(prefix="jetencode-farm-pg-"))
        self.dir.chmod(0o777)
        self.data = self.dir / "data"
        self.port = _free_port()
        self.max_connections = max_connections
        self.log = log
        self.proc: subprocess.Popen | None = None
        self.user = _as_postgres()

    def start(self) -> str:
        subprocess.run(
            [str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
            check=True,
            capture_output=True,
            **self.user,
        )
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": str(self.dir),
            "max_connections": str(self.max_connections),
            "shared_buffers": "256MB",
            "shared_preload_libraries": "pg_stat_statements",
            "pg_stat_statements.track": "top",
            "log_min_messages": "warning",
        }
        args = [str(self.bin / "postgres"), "-D", str(self.data)]
        for key, value in settings.items():
            args += ["-c", f"{key}={value}"]
        self.log_path = self.dir / "postgres.log"
        with open(self.log_path, "wb") as handle:
            self.proc = subprocess.Popen(args, stdout=handle, stderr=subprocess.STDOUT, **self.user)
        url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        deadline = time.monotonic() + 60
        while True:
            try:
                with psycopg.connect(url, autocommit=True, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                break
            except psycopg.Error:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"own PostgreSQL did not start:\n{self.log_path.read_text()[-3000:]}"
                    ) from None
                time.sleep(0.2)
        self.log(
            f"  own PostgreSQL {self.version(url)} on port {self.port}, max_connections {self.max_connections}"
        )
        return url

    @staticmethod
    def version(url: str) -> str:
        with psycopg.connect(url, autocommit=True) as conn:
            return conn.execute("SHOW server_version").fetchone()[0]

    def cpu_seconds(self) -> float:
        """CPU seconds of the postmaster and every process it started (backends, checkpointer, ...),
        each as the kernel's exact run time (/proc/<pid>/schedstat) where Linux gives it, plus the
        processes that have ended (an autovacuum worker: their sampled time, all there is).

        Not utime + stime: those are sampled at each timer tick, and a backend that runs ~0.3 ms
        once a second is charged a whole tick or nothing; for an idle farm they read 10–20 % low on
        the test VM (`cpu_seconds_sampled`: what the farm figures measured before this method)."""
        try:
            ended = psutil.Process(self.proc.pid).cpu_times()
        except psutil.Error:
            return 0.0
        return ended.children_user + ended.children_system + sum(_run_time(pid) for pid in self._pids())

    def cpu_seconds_sampled(self) -> float:
        """The same processes' utime + stime (tick-sampled; live processes only)."""
        return _cpu_of(self._pids())

    def _pids(self) -> list[int]:
        """The postmaster and every live process it started."""
        try:
            root = psutil.Process(self.proc.pid)
            return [root.pid, *(child.pid for child in root.children(recursive=True))]
        except psutil.Error:
            return []

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # fast shutdown
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def _create_database(server_url: str, log) -> str:
    url = server_url.rsplit("/", 1)[0] + "/jetencode_farm"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute("CREATE DATABASE jetencode_farm")
    db.migrate(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    log("  database jetencode_farm migrated")
    return url


def _xacts(conn) -> int:
    return db.scalar(
        conn, "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"
    )


def _statement_calls(conn) -> dict[str, int]:
    rows = conn.execute(
        """SELECT CASE WHEN query LIKE '%%claim_task_v1%%' THEN 'claims'
                       WHEN query LIKE '%%runnable_pools_v1%%' THEN 'hints'
                       ELSE 'other' END, sum(calls)::bigint
             FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
            WHERE d.datname = current_database()
            GROUP BY 1"""
    ).fetchall()
    return {name: int(calls) for name, calls in rows}


def _run_time(pid: int) -> float:
    """A process's exact time on a CPU in seconds (schedstat), else its sampled utime + stime."""
    try:
        with open(f"/proc/{pid}/schedstat") as handle:
            return int(handle.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return _cpu_of([pid])


def _cpu_of(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            times = psutil.Process(pid).cpu_times()
            total += times.user + times.system
        except psutil.Error:
            continue
    return total


def _connections(conn, uids: list[str]) -> dict:
    rows = conn.execute(
        """SELECT split_part(application_name, ' ', 2) AS uid, count(*)
             FROM pg_stat_activity
            WHERE datname = current_database() AND application_name LIKE 'jetencode-worker %%'
            GROUP BY 1"""
    ).fetchall()
    per = {uid: n for uid, n in rows if uid in uids}
    counts = [per.get(uid, 0) for uid in uids]
    return {
        "max": max(counts),
        "mean": round(sum(counts) / len(counts), 2),
        "total": sum(counts),
    }


class _PacedProducer(threading.Thread):
    def __init__(self, url: str, args: dict, rate: float, seconds: float):
        super().__init__(name="farm-producer", daemon=True)
        self.url, self.args, self.rate, self.seconds = url, args, rate, seconds
        self.sent = 0
        self.late = 0.0  # how far behind its schedule the producer fell, at most
        self.error: BaseException | None = None

    def run(self) -> None:
        from scheduler import repository

        try:
            with db.connect(self.url, application_name="jetencode-bench-producer") as conn:
                start = time.monotonic()
                total = int(self.rate * self.seconds)
                for i in range(total):
                    due = start + i / self.rate
                    delay = due - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    else:
                        self.late = max(self.late, -delay)
                    conn.execute(repository.ENQUEUE_SQL, self.args)
                    self.sent += 1
        except BaseException as exc:
            self.error = exc


def _rate_run(conn, url: str, args: dict, rate: int, seconds: float, log) -> dict:
    mark = db.scalar(conn, "SELECT now()")
    conn.execute("SELECT pg_stat_statements_reset()")
    producer = _PacedProducer(url, args, rate, seconds)
    producer.start()
    producer.join()
    if producer.error is not None:
        raise producer.error
    done = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done = db.scalar(
            conn, "SELECT count(*) FROM jobs WHERE created_at >= %s AND status = 'completed'", [mark]
        )
        if done >= producer.sent:
            break
        time.sleep(0.2)
    calls = _statement_calls(conn)
    p50, p99, worst = conn.execute(
        """SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY d), percentile_cont(0.99) WITHIN GROUP (ORDER BY d),
                  max(d)
             FROM (SELECT extract(epoch FROM t.started_at - j.created_at) * 1000 AS d
                     FROM jobs j JOIN queue_tasks t ON t.job_id = j.id AND t.placement = 'dispatch'
                    WHERE j.created_at >= %s AND t.started_at IS NOT NULL) x""",
        [mark],
    ).fetchone()
    workers_used = db.scalar(
        conn,
        "SELECT count(DISTINCT t.claimed_by) FROM jobs j JOIN queue_tasks t ON t.job_id = j.id WHERE j.created_at >= %s",
        [mark],
    )
    result = {
        "jobs_per_second": rate,
        "jobs": producer.sent,
        "completed": done,
        "producer_late_ms": round(producer.late * 1000, 1),
        "claims": calls.get("claims", 0),
        "claims_per_job": round(calls.get("claims", 0) / max(producer.sent, 1), 2),
        "hints_per_job": round(calls.get("hints", 0) / max(producer.sent, 1), 2),
        "enqueue_to_start_ms": {
            "p50": round(float(p50 or 0), 1),
            "p99": round(float(p99 or 0), 1),
            "max": round(float(worst or 0), 1),
        },
        "workers_that_claimed": workers_used,
    }
    log(
        f"    {rate} jobs/s: {result['claims_per_job']} claims/job, {result['hints_per_job']} cheap reads/job, "
        f"enqueue->start p50 {result['enqueue_to_start_ms']['p50']} ms, p99 {result['enqueue_to_start_ms']['p99']} ms "
        f"({done}/{producer.sent} completed, {workers_used} workers claimed)"
    )
    return result


def _counters(conn, server: OwnPostgres, pool: WorkerPool) -> tuple[int, float, float, float, float]:
    """Transactions so far, the server's CPU seconds (tick-sampled, exact), the workers' CPU
    seconds and the monotonic time: the idle window is the difference of two of these."""
    return (
        _xacts(conn),
        server.cpu_seconds_sampled(),
        server.cpu_seconds(),
        _cpu_of(pool.pids()),
        time.monotonic(),
    )


def _idle_window(conn, server: OwnPostgres, pool: WorkerPool, seconds: float, ready: float) -> dict:
    """What the idle farm cost over the next `seconds` (`ready`: when its last worker was ready)."""
    n = len(pool.uids)
    x0, s0, cpu0, w0, t0 = _counters(conn, server, pool)
    time.sleep(seconds)
    x1, s1, cpu1, w1, t1 = _counters(conn, server, pool)
    return {
        "from_ready_seconds": round(t0 - ready, 1),
        "seconds": round(t1 - t0, 1),
        "transactions_per_second": round((x1 - x0) / (t1 - t0), 1),
        "transactions_per_second_per_worker": round((x1 - x0) / (t1 - t0) / n, 2),
        "postgres_cpu_percent_of_one_core": round(100 * (cpu1 - cpu0) / (t1 - t0), 2),
        "postgres_cpu_percent_of_one_core_sampled": round(100 * (s1 - s0) / (t1 - t0), 2),
        "worker_cpu_percent_of_one_core_per_worker": round(100 * (w1 - w0) / (t1 - t0) / n, 3),
    }


def _one_size(server: OwnPostgres, url: str, workdir: Path, n: int, args: dict, log) -> dict:
    pool = WorkerPool(url, workdir, n, concurrency=CONCURRENCY, poll_seconds=1.0, uid_prefix=f"farm{n}")
    started = time.monotonic()
    pool.start(timeout=120 + 6 * n)
    ready = time.monotonic()
    startup = ready - started
    rss = sum(psutil.Process(pid).memory_info().rss for pid in pool.pids()) / max(n, 1) / 2**20
    log(f"  N={n}: {n} workers ready in {startup:.0f}s ({rss:.0f} MB RSS each)")
    try:
        time.sleep(SETTLE_SECONDS)
        with db.connect(url) as conn:
            connections = _connections(conn, pool.uids)
            after_startup = _idle_window(conn, server, pool, STARTUP_IDLE_SECONDS, ready)
            time.sleep(max(0.0, ready + STEADY_AFTER_SECONDS - time.monotonic()))
            idle = _idle_window(conn, server, pool, IDLE_SECONDS, ready)
            idle["after_startup"] = after_startup
            connections_later = _connections(conn, pool.uids)
            log(
                f"    connections per worker: max {max(connections['max'], connections_later['max'])}, "
                f"mean {connections['mean']}"
            )
            for name, window in (("just after start-up", after_startup), ("steady", idle)):
                log(
                    f"    idle, {name} ({window['seconds']:g} s from {window['from_ready_seconds']:g} s after "
                    f"ready): {window['transactions_per_second']} xact/s, PostgreSQL CPU "
                    f"{window['postgres_cpu_percent_of_one_core']} % of one core (tick-sampled: "
                    f"{window['postgres_cpu_percent_of_one_core_sampled']} %), each worker "
                    f"{window['worker_cpu_percent_of_one_core_per_worker']} %"
                )
            rates = [_rate_run(conn, url, args, rate, seconds, log) for rate, seconds in RATES]
            connections_busy = _connections(conn, pool.uids)
    finally:
        pool.stop(grace=60)
    with db.connect(url) as conn:
        db.reset_queue(conn)
        conn.execute("DELETE FROM queue_workers")
    return {
        "workers": n,
        "slots_per_worker": CONCURRENCY,
        "startup_seconds": round(startup, 1),
        "worker_rss_mb": round(rss, 1),
        "connections_per_worker": {
            "idle": connections,
            "idle_later": connections_later,
            "after_load": connections_busy,
            "max": max(connections["max"], connections_later["max"], connections_busy["max"]),
        },
        "idle": idle,
        "rates": rates,
    }


def measure(workdir: Path, sizes: list[int], log=print) -> dict:
    from scheduler import repository

    available = psutil.virtual_memory().available / 2**20
    fits = [n for n in sizes if n * 110 < available * 0.8]  # ~90-110 MB per worker process
    if len(fits) < len(sizes):
        log(f"  skipping N={sorted(set(sizes) - set(fits))}: {available:.0f} MB available")
    server = OwnPostgres(max_connections=max(fits) * 3 + 60, log=log)
    server_url = server.start()
    try:
        url = _create_database(server_url, log)
        args = repository.enqueue_arguments(repository.NewJob("noop", {"seconds": 0}), stale_seconds=60)
        runs = [_one_size(server, url, workdir / f"farm-{n}", n, args, log) for n in fits]
        return {
            "postgresql": OwnPostgres.version(url),
            "max_connections": server.max_connections,
            "sizes": runs,
            "timings": "heartbeat 5 s, recovery every 5 s, poll 1 s (with jitter), LISTEN on",
        }
    finally:
        server.stop()
