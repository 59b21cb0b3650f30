"""Measurement 1: end-to-end throughput of `noop` jobs ({"seconds": 0}) through real workers.

For each worker count: empty queue, start the workers (`manage.py runworker --concurrency 4`) and
let them finish a few warm-up jobs; then a producer enqueues the measured jobs (10 per transaction,
the API's enqueue function) while the workers drain them. Throughput is completed
stages / (last finish - first enqueue), both PostgreSQL timestamps; a `noop` job without children
is one stage (its dispatch), which the worker claims, runs and finishes.

The queue tables start "never analyzed" (as on a fresh install). With `stale_statistics` they start
with statistics of the empty tables instead (ANALYZE of an empty queue, which is what autovacuum
records on a queue that was drained when it ran): the plans the workers' sessions cache then
believe the tables are tiny, and the run shows what that costs while the queue fills up.
Sequential scans per stage (pg_stat_user_tables) and claim-index entries read per stage
(pg_stat_user_indexes) are recorded for every run.
"""

from __future__ import annotations

import threading
import time

from bench import db, jobs
from bench.profile import ActivitySampler
from bench.workers import CpuMeter, WorkerPool

PAYLOAD = {"type": "noop", "params": {"seconds": 0}}
# Jobs per producer transaction. Small on purpose: a long enqueue statement holds back the xmin
# horizon, so the entries that claims leave dead at the head of the claim index cannot be killed
# and every claim re-reads them (100 per statement doubled the claim's CPU on this machine).
PRODUCER_BATCH = 10
INDEXES = (
    "schedule_claim_media",
    "task_runnable_in_job",
    "task_running_by_session",
    "task_running_lease",
    "job_schedule_pkey",
    "queue_tasks_pkey",
)


TABLES = ("jobs", "job_schedule", "queue_tasks", "queue_workers", "queue_fence_audit")


def index_stats(conn) -> dict:
    """Cumulative scans and entries read per index of the claim path (pg_stat_user_indexes), and
    sequential scans and the rows they read per queue table (pg_stat_user_tables)."""
    rows = conn.execute(
        "SELECT indexrelname, idx_scan, idx_tup_read, idx_tup_fetch FROM pg_stat_user_indexes WHERE indexrelname = ANY (%s)",
        [list(INDEXES)],
    ).fetchall()
    rows += conn.execute(
        "SELECT 'seq:' || relname, seq_scan, seq_tup_read, 0 FROM pg_stat_user_tables WHERE relname = ANY (%s)",
        [list(TABLES)],
    ).fetchall()
    return {name: (scans, read, fetched) for name, scans, read, fetched in rows}


def measure(
    url: str,
    database: str,
    workdir,
    *,
    processes: int,
    count: int,
    concurrency: int = 4,
    poll_seconds: float = 0.1,
    batch: int = PRODUCER_BATCH,
    stale_statistics: bool = False,
    log=print,
) -> dict:
    args = jobs.job_args(PAYLOAD)
    release = threading.Event()  # the producer keeps its connection until its CPU time is read
    with db.connect(url) as conn:
        db.reset_queue(conn, analyze_empty=stale_statistics)
        pool = WorkerPool(url, workdir, processes, concurrency=concurrency, poll_seconds=poll_seconds)
        pool.start()
        try:
            warm = processes * concurrency * 2
            jobs.enqueue_many(conn, args, warm)
            done = jobs.wait_for(conn, "SELECT count(*) FROM jobs WHERE status = 'completed'", (), warm, 60)
            if done < warm:
                raise RuntimeError(f"warm-up: only {done}/{warm} jobs completed in 60 s")
            mark = db.scalar(conn, "SELECT clock_timestamp()")
            indexes_before = index_stats(conn)
            meter = CpuMeter(database, pool.pids(), url).start()
            sampler = ActivitySampler(url)
            sampler.start()
            producer_error: list[BaseException] = []
            enqueue_seconds = [0.0]

            def produce() -> None:
                try:
                    with db.connect(url, application_name="jetencode-bench-producer") as producer:
                        enqueue_seconds[0] = jobs.enqueue_many(producer, args, count, batch=batch)
                        release.wait(600)  # the backend's CPU time is read before it goes away
                except BaseException as exc:  # reported below
                    producer_error.append(exc)

            started = time.perf_counter()
            thread = threading.Thread(target=produce, name="producer", daemon=True)
            thread.start()
            finished = jobs.wait_for(
                conn,
                "SELECT count(*) FROM jobs WHERE created_at > %s AND status IN ('completed', 'failed', 'cancelled')",
                [mark],
                count,
                timeout=120 + count / 10,
                poll=0.05,
            )
            wall = time.perf_counter() - started
            cpu = meter.stop()
            activity = sampler.stop()
            release.set()
            thread.join()
            if producer_error:
                raise producer_error[0]
            row = conn.execute(
                """SELECT count(*) FILTER (WHERE t.state = 'completed'),
                          count(*) FILTER (WHERE t.state <> 'completed'),
                          extract(epoch FROM max(t.finished_at) - min(j.created_at)),
                          count(DISTINCT t.claimed_by)
                     FROM jobs j JOIN queue_tasks t ON t.job_id = j.id AND t.placement <> 'cluster'
                    WHERE j.created_at > %s""",
                [mark],
            ).fetchone()
            # Completions per second in each fifth of the span: a queue that slows down as it churns
            # (dead index entries at the head of the claim index) shows up as a falling series.
            fifths = conn.execute(
                """WITH b AS (SELECT min(j.created_at) AS t0, max(t.finished_at) AS t1
                                FROM jobs j JOIN queue_tasks t ON t.job_id = j.id WHERE j.created_at > %(m)s)
                   SELECT width_bucket(extract(epoch FROM t.finished_at - b.t0), 0,
                                       extract(epoch FROM b.t1 - b.t0) + 1e-6, 5) AS fifth,
                          count(*) / (extract(epoch FROM b.t1 - b.t0) / 5)
                     FROM jobs j JOIN queue_tasks t ON t.job_id = j.id, b
                    WHERE j.created_at > %(m)s AND t.state = 'completed'
                    GROUP BY 1, b.t0, b.t1 ORDER BY 1""",
                {"m": mark},
            ).fetchall()
        finally:
            release.set()
            pool.stop()
        time.sleep(0.5)  # exited backends have flushed their statistics
        indexes_after = index_stats(conn)
    stages, not_completed, span, workers_used = row
    index_use, seq_scans = {}, {}
    for name, (scans, read, fetched) in indexes_after.items():
        b = indexes_before.get(name, (0, 0, 0))
        if not stages:
            continue
        if name.startswith("seq:"):
            seq_scans[name[4:]] = {
                "seq_scans_per_stage": round((scans - b[0]) / stages, 2),
                "rows_read_per_stage": round((read - b[1]) / stages, 1),
            }
        else:
            index_use[name] = {
                "scans_per_stage": round((scans - b[0]) / stages, 2),
                "entries_read_per_stage": round((read - b[1]) / stages, 1),
                "heap_fetches_per_stage": round((fetched - b[2]) / stages, 1),
            }
    span = float(span or wall)
    result = {
        "worker_processes": processes,
        "slots": processes * concurrency,
        "jobs": count,
        "jobs_finished": finished,
        "stages_completed": stages,
        "stages_not_completed": not_completed,
        "workers_that_claimed": workers_used,
        "span_seconds": round(span, 3),
        "wall_seconds": round(wall, 3),
        "enqueue_seconds": round(enqueue_seconds[0], 3),
        "producer_batch": batch,
        "stale_statistics": stale_statistics,
        "stages_per_second": round(stages / span, 1) if span > 0 else None,
        "stages_per_second_by_fifth": [round(float(rate), 1) for _, rate in fifths],
        "cpu": cpu,
        "worker_backends": activity,
        "index_use": index_use,
        "sequential_scans": seq_scans,
    }
    if stages:
        per_stage = (cpu["workers_cpu_seconds"] + cpu["backends_cpu_seconds"]) / stages
        result["cpu_ms_per_stage"] = {
            "workers": round(1000 * cpu["workers_cpu_seconds"] / stages, 3),
            "postgres_backends": round(1000 * cpu["backends_cpu_seconds"] / stages, 3),
            "total": round(1000 * per_stage, 3),
        }
        # The backends split by whom they serve: the workers' claims/finishes/heartbeats, the
        # producer's enqueues, the bench's own polling and sampling.
        for role, seconds in cpu.get("backends_cpu_seconds_by_role", {}).items():
            result["cpu_ms_per_stage"][f"postgres_{role}"] = round(1000 * seconds / stages, 3)
        # What the machine's cores would allow if this run had had them to itself.
        result["cpu_bound_stages_per_second"] = (
            round(cpu["machine_cpus"] / per_stage, 1) if per_stage else None
        )
    label = " with statistics of the empty queue" if stale_statistics else ""
    log(
        f"  throughput {processes}x{concurrency}{label}: {result['stages_per_second']} stages/s "
        f"({stages} stages in {span:.2f}s; machine busy {cpu['machine_busy_cpu_seconds']:.1f} CPU-s of "
        f"{cpu['wall_seconds'] * cpu['machine_cpus']:.1f})"
    )
    return result
