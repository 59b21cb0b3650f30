"""Measurement 2: the database's own ceiling for a serialized claim + finish.

A minimal raw-SQL loop on a plain table of its own, run by N processes (one connection each, N =
the number of media slots of the matching throughput run, so there is no GIL between them):

    claim  (one round trip):  BEGIN; lock the singleton row FOR UPDATE;
                              UPDATE one pending row (highest priority, oldest; picked with
                              FOR UPDATE SKIP LOCKED) to running RETURNING id; COMMIT
    finish (one round trip):  UPDATE that row to completed (autocommit)

This is the shape of the scheduler's claim (one lock serializes selection, SKIP LOCKED pick, one
update) without any of its bookkeeping: no worker session check, capacity guard, job status,
derived columns, audit or progress write. The scheduler's throughput is reported as a share of it.
"""

from __future__ import annotations

import multiprocessing as mp
import time

from bench import db
from bench.workers import CpuMeter

TEARDOWN = "DROP TABLE IF EXISTS bench_ceiling_jobs; DROP TABLE IF EXISTS bench_ceiling_lock;"
SETUP = (
    TEARDOWN
    + """
CREATE TABLE bench_ceiling_lock (id int PRIMARY KEY, claims bigint NOT NULL DEFAULT 0);
INSERT INTO bench_ceiling_lock VALUES (1, 0);
CREATE TABLE bench_ceiling_jobs (
  id bigserial PRIMARY KEY,
  priority int NOT NULL,
  state text NOT NULL,
  worker int,
  claimed_at timestamptz,
  finished_at timestamptz
);
CREATE INDEX bench_ceiling_pick ON bench_ceiling_jobs (priority DESC, id) WHERE state = 'pending';
"""
)

CLAIM = (
    "BEGIN; "
    "SELECT 1 FROM bench_ceiling_lock WHERE id = 1 FOR UPDATE; "
    "UPDATE bench_ceiling_jobs SET state = 'running', worker = {worker}, claimed_at = now() "
    " WHERE id = (SELECT id FROM bench_ceiling_jobs WHERE state = 'pending' "
    "             ORDER BY priority DESC, id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id; "
    "COMMIT"
)
FINISH = "UPDATE bench_ceiling_jobs SET state = 'completed', finished_at = now() WHERE id = %s"


def _loop(url: str, worker: int, seconds: float, barrier, results, release) -> None:
    conn = db.connect(url, application_name=f"jetencode-bench-ceiling-{worker}")
    claim = CLAIM.format(worker=int(worker))
    done = 0
    barrier.wait()
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            cur = conn.execute(claim)  # simple query protocol: four statements, one round trip
            row = None
            while True:
                if cur.description is not None and cur.description[0].name == "id":
                    row = cur.fetchone()
                if not cur.nextset():
                    break
            if row is None:
                break  # the table ran dry
            conn.execute(FINISH, [row[0]])
            done += 1
    finally:
        results.put((worker, done))
        release.wait(60)  # keep the backend alive until the parent has read its CPU time
        conn.close()


def prepare(url: str, rows: int) -> None:
    with db.connect(url) as conn:
        conn.execute(SETUP)
        conn.execute(
            "INSERT INTO bench_ceiling_jobs (priority, state) SELECT (i %% 21) - 10, 'pending' FROM generate_series(1, %s) i",
            [rows],
        )
        conn.execute("VACUUM ANALYZE bench_ceiling_jobs")


def measure(url: str, database: str, connections: int, seconds: float) -> dict:
    """Claim+finish cycles per second with `connections` processes over `seconds`."""
    prepare(url, max(20000, int(seconds * 3000)))
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(connections + 1)
    results = ctx.Queue()
    release = ctx.Event()
    procs = [
        ctx.Process(target=_loop, args=(url, i, seconds, barrier, results, release), daemon=True)
        for i in range(connections)
    ]
    for proc in procs:
        proc.start()
    barrier.wait(timeout=60)
    started = time.monotonic()
    meter = CpuMeter(database, [p.pid for p in procs]).start()
    counts = [results.get(timeout=seconds + 60)[1] for _ in procs]
    elapsed = time.monotonic() - started
    cpu = meter.stop()
    release.set()
    for proc in procs:
        proc.join(timeout=10)
    with db.connect(url) as conn:
        completed = db.scalar(conn, "SELECT count(*) FROM bench_ceiling_jobs WHERE state = 'completed'")
        running = db.scalar(conn, "SELECT count(*) FROM bench_ceiling_jobs WHERE state = 'running'")
        conn.execute(TEARDOWN)
    total = sum(counts)
    return {
        "connections": connections,
        "seconds": round(seconds, 2),
        "cycles": total,
        "completed_rows": completed,
        "left_running": running,
        "per_second": round(total / seconds, 1),
        "wall_seconds": round(elapsed, 2),
        "cpu": cpu,
        "cpu_ms_per_cycle": {
            "loop_processes": round(1000 * cpu["workers_cpu_seconds"] / max(total, 1), 3),
            "postgres_backends": round(1000 * cpu["backends_cpu_seconds"] / max(total, 1), 3),
            "total": round(
                1000 * (cpu["workers_cpu_seconds"] + cpu["backends_cpu_seconds"]) / max(total, 1), 3
            ),
        },
    }
