"""Measurement 10: JetEncode's end-to-end noop throughput side by side with procrastinate 3.10 and
pgqueuer 1.6, on the same server, in the same run, by the same method.

Each system gets a database of its own (JetEncode: the bench database; the peers:
`<database>_procrastinate` and `<database>_pgqueuer`, created and given their schema by each
library's own command line, dropped at the end). For each shape (worker processes x 4 concurrent
noop tasks) and each system, in rounds whose order alternates:

1. empty the system's tables (TRUNCATE), start its workers as real processes with their own command
   line (`manage.py runworker`, `procrastinate ... worker`, `pgq run`), each waking by LISTEN/NOTIFY
   with a 0.1 s poll fallback and fetching one job per free slot (pgqueuer `--batch-size 1`);
2. warm up: 2 jobs per slot, enqueued and completed;
3. one producer connection enqueues N noop jobs, 10 per transaction, with the library's own enqueue
   API (JetEncode: the API's `enqueue_job_v1` arguments, as bench/throughput.py; procrastinate:
   `Task.batch_defer`; pgqueuer: `SyncQueries.enqueue` with lists), while the workers drain them;
   the bench polls the completed count every 50 ms to know when to stop;
4. throughput = jobs / (last completion - first enqueue), both from the system's own PostgreSQL
   timestamps (transaction start times, `now()`): JetEncode `queue_tasks.finished_at` and
   `jobs.created_at`; procrastinate `procrastinate_events.at` of the `deferred` and `succeeded`
   events; pgqueuer `pgqueuer_log.created` of the `queued` and `successful` rows.

The CPU seconds of the worker processes and of the system's PostgreSQL backends (bench/workers.py's
CpuMeter, split by whom the backends serve) and the load average before and after are recorded per
run. Nothing else of the suite (no pg_stat_activity sampler) runs during a measured window.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from bench import db
from bench.workers import CpuMeter, WorkerPool, stop_processes, tail

SYSTEMS = ("jetencode", "procrastinate", "pgqueuer")
PEER_PACKAGES = {"procrastinate": ">=3.10,<3.11", "pgqueuer": ">=1.6,<1.7"}
PIP_COMMAND = (
    ".venv/bin/pip install 'procrastinate>=3.10,<3.11' 'pgqueuer>=1.6,<1.7'  # or: pip install -e '.[dev]'"
)
CONCURRENCY = 4
POLL_SECONDS = 0.1
PRODUCER_BATCH = 10
WAIT_POLL_SECONDS = 0.05
PAYLOAD = {"type": "noop", "params": {"seconds": 0}}
ROOT = db.ROOT
TIMING_SOURCE = (
    "each system's own PostgreSQL timestamps (transaction start, now()): JetEncode jobs.created_at -> "
    "queue_tasks.finished_at; procrastinate procrastinate_events.at ('deferred' -> 'succeeded'); "
    "pgqueuer pgqueuer_log.created ('queued' -> 'successful')"
)


def versions() -> dict:
    out = {}
    for name in ("procrastinate", "pgqueuer", "psycopg", "psycopg-pool"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def missing_packages() -> list[str]:
    found = versions()
    return [name for name in PEER_PACKAGES if not found.get(name)]


class _Producer(threading.Thread):
    """One connection that enqueues `count` jobs, `batch` per transaction, then stays open until
    `finish()` (CpuMeter reads its backend's CPU before it goes away)."""

    def __init__(self, system, count: int, batch: int):
        super().__init__(name=f"producer-{system.name}", daemon=True)
        self.system, self.count, self.batch = system, count, batch
        self.release = threading.Event()
        self.ready = threading.Event()
        self.go = threading.Event()
        self.enqueue_seconds = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.system.producer() as enqueue:
                self.ready.set()
                self.go.wait(600)
                started = time.perf_counter()
                left = self.count
                while left > 0:
                    n = min(self.batch, left)
                    enqueue(n)
                    left -= n
                self.enqueue_seconds = time.perf_counter() - started
                self.release.wait(600)
        except BaseException as exc:  # re-raised by finish()
            self.error = exc
            self.ready.set()

    def finish(self) -> None:
        self.release.set()
        self.go.set()
        self.join(60)
        if self.error is not None:
            raise self.error


class _ProcessPool:
    """Worker processes started with a command line of their own (the peers' CLIs)."""

    def __init__(self, workdir: Path, name: str, commands: list[list[str]], env: dict):
        self.workdir, self.name, self.commands, self.env = workdir, name, commands, env
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []

    def start(self) -> None:
        for index, command in enumerate(self.commands):
            log_path = self.workdir / "logs" / f"{self.name}-{index + 1}-{int(time.time() * 1000)}.log"
            log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(log_path, "wb") as log_file:
                self.procs.append(
                    subprocess.Popen(
                        command,
                        cwd=ROOT,
                        env=self.env,
                        stdin=subprocess.DEVNULL,
                        stdout=log_file,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
            self.logs.append(log_path)

    def check_alive(self) -> None:
        for proc, path in zip(self.procs, self.logs, strict=True):
            if proc.poll() is not None:
                raise RuntimeError(f"{self.name} worker exited with {proc.returncode}:\n{tail(path)}")

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.poll() is None]

    def stop(self, grace: float = 20.0) -> None:
        stop_processes(self.procs, grace)


# ---- the three systems ------------------------------------------------------------------------


class JetEncode:
    name = "jetencode"

    def __init__(self, url: str, database: str, workdir: Path):
        self.url, self.database, self.workdir = url, database, workdir
        self.pool: WorkerPool | None = None
        self._args: dict | None = None

    def settings(self) -> dict:
        return {
            "workers": "manage.py runworker --concurrency 4 (real processes, bench/workers.py WorkerPool)",
            "wake": f"LISTEN/NOTIFY on, JETENCODE_POLL_SECONDS={POLL_SECONDS:g}",
            "fetch": "one claim (claim_task_v1) per free slot, no prefetch",
            "enqueue": "enqueue_job_v1 with the API's arguments (media.submission.build_new_job), "
            "10 per statement (generate_series), as bench/throughput.py",
            "database": self.database,
        }

    def setup(self, log) -> None:  # the bench database, created and migrated by the runner
        from bench import jobs

        self._args = jobs.job_args(PAYLOAD)

    def teardown(self) -> None:  # the runner drops its database
        pass

    def reset(self, conn) -> None:
        db.reset_queue(conn)

    def start(self, processes: int, concurrency: int) -> list[int]:
        self.pool = WorkerPool(
            self.url, self.workdir, processes, concurrency=concurrency, poll_seconds=POLL_SECONDS
        )
        self.pool.start()
        return self.pool.pids()

    def check_alive(self) -> None:
        pass

    def stop(self) -> None:
        if self.pool:
            self.pool.stop()
            self.pool = None

    def producer(self):
        from contextlib import contextmanager

        from bench import jobs

        @contextmanager
        def open_producer():
            with db.connect(self.url, application_name="jetencode-bench-producer") as conn:
                yield lambda n: conn.execute(jobs.ENQUEUE_MANY, self._args | {"count": n})

        return open_producer()

    def mark(self, conn):
        return db.scalar(conn, "SELECT clock_timestamp()")

    def done(self, conn, mark) -> int:
        return db.scalar(
            conn,
            "SELECT count(*) FROM jobs WHERE created_at > %s AND status IN ('completed', 'failed', 'cancelled')",
            [mark],
        )

    def totals(self, conn, mark) -> tuple:
        """(jobs completed, first enqueue, last completion) of the jobs created after `mark`."""
        return conn.execute(
            """SELECT count(*) FILTER (WHERE t.state = 'completed'), min(j.created_at), max(t.finished_at)
                 FROM jobs j JOIN queue_tasks t ON t.job_id = j.id AND t.placement <> 'cluster'
                WHERE j.created_at > %s""",
            [mark],
        ).fetchone()


class _Peer:
    """What the two peers share: their own database, created here, and CLI worker processes."""

    name = ""

    def __init__(self, url: str, database: str, workdir: Path):
        self.database = f"{database}_{self.name}"
        self.url = db.database_url(self.database)
        self.workdir = workdir
        self.pool: _ProcessPool | None = None

    def env(self) -> dict:
        from bench import peer_apps

        return {
            **os.environ,
            peer_apps.DSN_ENV: self.url,
            "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "PYTHONUNBUFFERED": "1",
        }

    def setup(self, log) -> None:
        with db.connect(db.server_url()) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
            admin.execute(f'CREATE DATABASE "{self.database}"')
        proc = subprocess.run(
            self.install_command(), cwd=ROOT, env=self.env(), capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"{self.name} schema install failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
            )
        log(f"  database {self.database}: created, {self.name} schema installed")

    def teardown(self) -> None:
        db.drop_database(self.database)

    def reset(self, conn) -> None:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT quote_ident(tablename) FROM pg_tables WHERE schemaname = 'public' AND tablename LIKE %s",
                [self.name + "%"],
            ).fetchall()
        ]
        conn.execute("TRUNCATE " + ", ".join(tables) + " RESTART IDENTITY CASCADE")

    def start(self, processes: int, concurrency: int) -> list[int]:
        self.pool = _ProcessPool(
            self.workdir,
            self.name,
            [self.worker_command(i, concurrency) for i in range(processes)],
            self.env(),
        )
        self.pool.start()
        deadline = time.monotonic() + 60
        with db.connect(self.url) as conn:
            while not self.ready(conn, processes):
                self.pool.check_alive()
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{self.name} workers not ready after 60 s:\n{tail(self.pool.logs[0])}"
                    )
                time.sleep(0.1)
        time.sleep(0.5)  # LISTEN issued after the connection shows up
        return self.pool.pids()

    def check_alive(self) -> None:
        if self.pool:
            self.pool.check_alive()

    def stop(self) -> None:
        if self.pool:
            self.pool.stop()
            self.pool = None


class Procrastinate(_Peer):
    name = "procrastinate"

    def settings(self) -> dict:
        return {
            "workers": "python -m procrastinate --app=bench.peer_apps.procrastinate_app worker "
            f"--concurrency {CONCURRENCY} --fetch-job-polling-interval {POLL_SECONDS:g} --listen-notify "
            "(PsycopgConnector: psycopg_pool AsyncConnectionPool, default size 4, plus its LISTEN connection)",
            "wake": f"LISTEN/NOTIFY on, poll every {POLL_SECONDS:g} s otherwise",
            "fetch": "procrastinate_fetch_job_v2: one job per free sub-worker slot (semaphore of 4)",
            "task": "async def noop(): return None (name 'noop', default queue, no retry, delete_jobs=never)",
            "enqueue": "Task.batch_defer(10 x {}) on a one-connection sync pool: one procrastinate_defer_jobs_v1 "
            "statement per 10 jobs",
            "database": self.database,
        }

    def install_command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "procrastinate",
            "--app=bench.peer_apps.procrastinate_app",
            "schema",
            "--apply",
        ]

    def worker_command(self, index: int, concurrency: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "procrastinate",
            "--app=bench.peer_apps.procrastinate_app",
            "worker",
            "--name",
            f"bench-{index + 1}",
            "--concurrency",
            str(concurrency),
            "--fetch-job-polling-interval",
            f"{POLL_SECONDS:g}",
            "--listen-notify",
        ]

    def ready(self, conn, processes: int) -> bool:
        return db.scalar(conn, "SELECT count(*) FROM procrastinate_workers") >= processes

    def producer(self):
        from contextlib import contextmanager

        from bench import peer_apps

        @contextmanager
        def open_producer():
            # procrastinate logs every deferred batch at INFO; the bench process's logging config
            # would print them (its workers keep their CLI's default, INFO, as JetEncode's do).
            logging.getLogger("procrastinate").setLevel(logging.WARNING)
            app = peer_apps.make_procrastinate_app(
                self.url, "jetencode-bench-producer", min_size=1, max_size=1
            )
            app.open()
            try:
                task = app.tasks[peer_apps.NOOP]
                yield lambda n: task.batch_defer(*({} for _ in range(n)))
            finally:
                app.close()

        return open_producer()

    def mark(self, conn):
        return db.scalar(conn, "SELECT coalesce(max(id), 0) FROM procrastinate_jobs")

    def done(self, conn, mark) -> int:
        return db.scalar(
            conn,
            "SELECT count(*) FROM procrastinate_jobs WHERE id > %s AND status IN ('succeeded', 'failed', 'aborted', 'cancelled')",
            [mark],
        )

    def totals(self, conn, mark) -> tuple:
        return conn.execute(
            """SELECT count(*) FILTER (WHERE type = 'succeeded'), min(at) FILTER (WHERE type = 'deferred'),
                      max(at) FILTER (WHERE type = 'succeeded')
                 FROM procrastinate_events WHERE job_id > %s""",
            [mark],
        ).fetchone()


class PgQueuer(_Peer):
    name = "pgqueuer"

    def settings(self) -> dict:
        return {
            "workers": "python -m pgqueuer run bench.peer_apps:make_pgqueuer --batch-size 1 "
            f"--max-concurrent-tasks {CONCURRENCY} --dequeue-timeout {POLL_SECONDS:g} "
            "(QueueManager on one psycopg AsyncConnection for dequeues, logs, heartbeats and LISTEN)",
            "wake": f"LISTEN/NOTIFY on (its insert trigger), --dequeue-timeout {POLL_SECONDS:g} s otherwise",
            "fetch": "dequeue with batch_size 1, repeated until 4 jobs are picked (max_concurrent_tasks 4, "
            "enforced by the dequeue query)",
            "task": "async def noop(job): return None (entrypoint 'noop', no concurrency limit)",
            "defaults_kept": "schema installed by `pgq install` (durability=durable: logged tables); "
            "completion log buffer (max_size = batch_size = 1, 0.1 s timeout); pgqueuer_log rows for "
            "queued/picked/successful; log aggregation into pgqueuer_statistics every 30 s; heartbeat "
            "timeout 30 s; --log-level INFO",
            "enqueue": "SyncQueries.enqueue(['noop'] * 10, [None] * 10, [0] * 10) on one autocommit psycopg "
            "connection (the synchronous twin of Queries.enqueue: the same statement)",
            "database": self.database,
        }

    def install_command(self) -> list[str]:
        return [sys.executable, "-m", "pgqueuer", "--pg-dsn", self.url, "install"]

    def worker_command(self, index: int, concurrency: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "pgqueuer",
            "--pg-dsn",
            self.url,
            "run",
            "bench.peer_apps:make_pgqueuer",
            "--batch-size",
            "1",
            "--max-concurrent-tasks",
            str(concurrency),
            "--dequeue-timeout",
            f"{POLL_SECONDS:g}",
        ]

    def ready(self, conn, processes: int) -> bool:
        return (
            db.scalar(
                conn,
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND application_name = 'jetencode-worker-pgqueuer'",
            )
            >= processes
        )

    def producer(self):
        from contextlib import contextmanager

        from bench import peer_apps

        @contextmanager
        def open_producer():
            from pgqueuer.adapters.drivers.psycopg import SyncPsycopgDriver
            from pgqueuer.queries import SyncQueries

            with db.connect(self.url, application_name="jetencode-bench-producer") as conn:
                queries = SyncQueries(SyncPsycopgDriver(conn))
                yield lambda n: queries.enqueue([peer_apps.NOOP] * n, [None] * n, [0] * n)

        return open_producer()

    def mark(self, conn):
        return db.scalar(conn, "SELECT coalesce(max(job_id), 0) FROM pgqueuer_log")

    def done(self, conn, mark) -> int:
        return db.scalar(
            conn,
            "SELECT count(*) FROM pgqueuer_log WHERE job_id > %s AND status IN ('successful', 'exception', 'failed', 'canceled')",
            [mark],
        )

    def totals(self, conn, mark) -> tuple:
        return conn.execute(
            """SELECT count(*) FILTER (WHERE status = 'successful'), min(created) FILTER (WHERE status = 'queued'),
                      max(created) FILTER (WHERE status = 'successful')
                 FROM pgqueuer_log WHERE job_id > %s""",
            [mark],
        ).fetchone()


# ---- one run ------------------------------------------------------------------------------------


def _wait_done(system, conn, mark, target: int, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while True:
        value = system.done(conn, mark)
        if value >= target or time.monotonic() > deadline:
            return value
        system.check_alive()
        time.sleep(WAIT_POLL_SECONDS)


def _connections(conn) -> dict:
    rows = conn.execute(
        """SELECT coalesce(nullif(application_name, ''), '(none)'), count(*) FROM pg_stat_activity
            WHERE datname = current_database() AND pid <> pg_backend_pid() GROUP BY 1 ORDER BY 1"""
    ).fetchall()
    return {name: n for name, n in rows}


COUNTERS = (
    "xact_commit",
    "xact_rollback",
    "tup_inserted",
    "tup_updated",
    "tup_deleted",
    "blks_hit",
    "blks_read",
)


def _db_counters(conn) -> dict:
    """The system's database in pg_stat_database (its backends' counters: transactions, rows
    written, buffers touched), after flushing this session's own pending counters."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.execute("SELECT 1")
    row = conn.execute(
        f"SELECT {', '.join(COUNTERS)} FROM pg_stat_database WHERE datname = current_database()"
    ).fetchone()
    return dict(zip(COUNTERS, row, strict=True))


def _per_job(before: dict, after: dict, jobs: int) -> dict:
    out = {k: round((after[k] - before[k]) / jobs, 2) for k in COUNTERS}
    out["blocks_touched"] = round(out.pop("blks_hit") + out.pop("blks_read"), 1)
    return out


def _warm_up(system, conn, warm: int) -> None:
    """Run `warm` jobs through the started workers before anything is measured."""
    warm_mark = system.mark(conn)
    with system.producer() as enqueue:
        for _ in range(warm // PRODUCER_BATCH):
            enqueue(PRODUCER_BATCH)
        if warm % PRODUCER_BATCH:
            enqueue(warm % PRODUCER_BATCH)
    if _wait_done(system, conn, warm_mark, warm, 60) < warm:
        raise RuntimeError(f"{system.name} warm-up: fewer than {warm} jobs completed in 60 s")
    time.sleep(0.3)  # the last warm-up completions' log/event writes are in


def _timed_drain(system, conn, producer, pids, count: int) -> dict:
    """Release the producer, wait for `count` jobs, and measure the span, CPU and totals."""
    producer.start()
    producer.ready.wait(30)
    mark = system.mark(conn)
    meter = CpuMeter(system.database, pids, system.url).start()
    bench_process = psutil.Process()
    own_before = bench_process.cpu_times()
    started = time.perf_counter()
    producer.go.set()
    finished = _wait_done(system, conn, mark, count, 120 + count / 10)
    wall = time.perf_counter() - started
    time.sleep(0.15)  # a batched log flush (pgqueuer) lands before the totals are read
    cpu = meter.stop()
    own_after = bench_process.cpu_times()
    producer.finish()
    completed, first, last = system.totals(conn, mark)
    own = (own_after.user + own_after.system) - (own_before.user + own_before.system)
    return {
        "finished": finished,
        "wall": wall,
        "cpu": cpu,
        "own_cpu": own,
        "totals": (completed, first, last),
    }


def _cpu_ms_per_job(cpu: dict, completed: int) -> dict:
    def ms(seconds):
        return round(1000 * seconds / completed, 3) if completed else None

    total = cpu["workers_cpu_seconds"] + cpu["backends_cpu_seconds"]
    return {
        "workers": ms(cpu["workers_cpu_seconds"]),
        "postgres_backends": ms(cpu["backends_cpu_seconds"]),
        **{f"postgres_{role}": ms(sec) for role, sec in cpu.get("backends_cpu_seconds_by_role", {}).items()},
        "total": ms(total) if total else None,
    }


def run_one(system, *, processes: int, concurrency: int, count: int, round_no: int, log) -> dict:
    load_before = os.getloadavg()
    producer = _Producer(system, count, PRODUCER_BATCH)
    warm = processes * concurrency * 2
    with db.connect(system.url, application_name="jetencode-bench-poller") as conn:
        system.reset(conn)
        counters_before = _db_counters(conn)
        pids = system.start(processes, concurrency)
        try:
            _warm_up(system, conn, warm)
            connections = _connections(conn)
            run = _timed_drain(system, conn, producer, pids, count)
        finally:
            producer.release.set()
            producer.go.set()
            system.stop()
        time.sleep(0.3)  # exited backends have flushed their counters
        counters_after = _db_counters(conn)
    load_after = os.getloadavg()
    completed, first, last = run["totals"]
    span = (last - first).total_seconds() if first and last else None
    result = {
        "system": system.name,
        "round": round_no,
        "worker_processes": processes,
        "concurrency": concurrency,
        "shape": f"{processes}x{concurrency}",
        "jobs": count,
        "jobs_finished": run["finished"],
        "jobs_completed": completed,
        "first_enqueue": first.isoformat() if first else None,
        "last_completion": last.isoformat() if last else None,
        "span_seconds": round(span, 3) if span else None,
        "wall_seconds": round(run["wall"], 3),
        "enqueue_seconds": round(producer.enqueue_seconds, 3),
        "jobs_per_second": round(completed / span, 1) if span else None,
        "cpu": run["cpu"],
        "cpu_ms_per_job": _cpu_ms_per_job(run["cpu"], completed),
        # The bench process itself (the producer's thread and the 50 ms poller): its Python, not
        # in the totals above (the producer's PostgreSQL backend is, as postgres_producer).
        "bench_process_cpu_ms_per_job": round(1000 * run["own_cpu"] / completed, 3) if completed else None,
        # pg_stat_database of the system's database from before its workers started until after
        # they stopped, per job processed (the measured jobs plus the warm-up): every backend's
        # transactions and rows written, the bench's own polls (20/s, read-only) included.
        "database_per_job": _per_job(counters_before, counters_after, count + warm),
        "connections_before_run": connections,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
    }
    log(
        f"  {system.name} {processes}x{concurrency} round {round_no}: {result['jobs_per_second']} jobs/s "
        f"({completed}/{count} in {span or 0:.2f} s; CPU {result['cpu_ms_per_job']['total']} ms/job; "
        f"load {load_before[0]:.2f} -> {load_after[0]:.2f})"
    )
    return result


# ---- the measurement ----------------------------------------------------------------------------


def summarize(runs: list[dict]) -> dict:
    """Per shape: each system's runs and medians, and JetEncode / peer ratios of the medians."""
    out: dict = {}
    for shape in dict.fromkeys(r["shape"] for r in runs):
        per: dict = {}
        for name in SYSTEMS:
            mine = [
                r for r in runs if r["shape"] == shape and r["system"] == name and r.get("jobs_per_second")
            ]
            if not mine:
                continue
            per[name] = {
                "jobs_per_second": [r["jobs_per_second"] for r in mine],
                "median_jobs_per_second": round(statistics.median(r["jobs_per_second"] for r in mine), 1),
                "median_cpu_ms_per_job": round(
                    statistics.median(r["cpu_ms_per_job"]["total"] for r in mine), 3
                ),
                "median_cpu_ms_per_job_workers": round(
                    statistics.median(r["cpu_ms_per_job"]["workers"] for r in mine), 3
                ),
                "median_cpu_ms_per_job_postgres": round(
                    statistics.median(r["cpu_ms_per_job"]["postgres_backends"] for r in mine), 3
                ),
            }
        ratios = {}
        if "jetencode" in per:
            for peer in ("procrastinate", "pgqueuer"):
                if peer in per and per[peer]["median_jobs_per_second"]:
                    ratios[f"jetencode/{peer}"] = round(
                        per["jetencode"]["median_jobs_per_second"] / per[peer]["median_jobs_per_second"], 3
                    )
        out[shape] = {"systems": per, "ratios": ratios}
    return out


def _rounds(systems: list, shapes: list[int], rounds: int, count: int, log) -> list[dict]:
    """Every shape, `rounds` times, the systems in alternating order (a system that always ran
    first or last would carry the machine's drift alone)."""
    runs: list[dict] = []
    for processes in shapes:
        for round_no in range(1, rounds + 1):
            order = systems if round_no % 2 else list(reversed(systems))
            for system in order:
                runs.append(
                    run_one(
                        system,
                        processes=processes,
                        concurrency=CONCURRENCY,
                        count=count,
                        round_no=round_no,
                        log=log,
                    )
                )
    return runs


def measure(
    url: str,
    database: str,
    workdir,
    *,
    count: int,
    shapes: list[int],
    rounds: int,
    keep_databases: bool = False,
    log=print,
) -> dict:
    missing = missing_packages()
    if missing:
        return {"error": f"missing peer packages: {', '.join(missing)}; install them: {PIP_COMMAND}"}
    workdir = Path(workdir)
    systems = [
        JetEncode(url, database, workdir),
        Procrastinate(url, database, workdir),
        PgQueuer(url, database, workdir),
    ]
    machine_load_start = [round(x, 2) for x in os.getloadavg()]
    try:
        for system in systems:
            system.setup(log)
        runs = _rounds(systems, shapes, rounds, count, log)
    finally:
        if not keep_databases:
            for system in systems:
                system.teardown()
    summary = summarize(runs)
    for shape, s in summary.items():
        medians = ", ".join(f"{n} {v['median_jobs_per_second']}" for n, v in s["systems"].items())
        log(f"  -> {shape} medians (jobs/s): {medians}; ratios {s['ratios']}")
    return {
        "versions": versions(),
        "python": sys.version.split()[0],
        "timing_source": TIMING_SOURCE,
        "jobs": count,
        "producer_batch": PRODUCER_BATCH,
        "concurrency": CONCURRENCY,
        "poll_seconds": POLL_SECONDS,
        "shapes": [f"{p}x{CONCURRENCY}" for p in shapes],
        "rounds": rounds,
        "order": "round 1: jetencode, procrastinate, pgqueuer; round 2 reversed; alternating after",
        "settings": {s.name: s.settings() for s in systems},
        "load_average_at_start": machine_load_start,
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "runs": runs,
        "summary": summary,
    }


def table_rows(results: dict | None) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    if not results or "error" in results:
        return rows
    for shape, s in (results.get("summary") or {}).items():
        for name, v in s["systems"].items():
            ratio = s["ratios"].get(f"jetencode/{name}")
            rows.append(
                (
                    f"(10) peers {shape} {name}",
                    f"median {v['median_jobs_per_second']:,.1f} jobs/s",
                    f"runs {', '.join(f'{x:,.1f}' for x in v['jobs_per_second'])}; CPU {v['median_cpu_ms_per_job']:.2f} "
                    f"ms/job (workers {v['median_cpu_ms_per_job_workers']:.2f}, PostgreSQL "
                    f"{v['median_cpu_ms_per_job_postgres']:.2f})"
                    + (f"; JetEncode / {name} = {ratio:.2f}" if ratio else ""),
                )
            )
    return rows
