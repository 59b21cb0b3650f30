"""Measurement 1: end-to-end throughput of `noop` jobs ({"seconds": 0}) through real workers.

For each worker count: empty queue, start the workers (`manage.py runworker --concurrency 4`) and
let them finish a few warm-up jobs; then a producer enqueues the measured jobs (10 per transaction,
the API's enqueue function) while the workers drain them. Throughput is completed
stages / (last finish - first enqueue), both PostgreSQL timestamps; a `noop` job without children
is one stage (its dispatch), which the worker claims, runs and finishes.

With `drain`, the run has the ceiling's shape instead (bench/ceiling.py drains a table filled
before its clock starts): the measured jobs are committed in one statement while the workers idle
(nothing is visible to them before the commit), then drained. Throughput is completed stages /
(last finish - first claim), and the CPU is metered from the commit on, so the enqueue is left out.

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


class _Producer(threading.Thread):
    """Enqueues the measured jobs on its own connection, then keeps that connection open until
    `finish()`: the backend's CPU time is read before it goes away."""

    def __init__(self, url: str, args: dict, count: int, batch: int):
        super().__init__(name="producer", daemon=True)
        self.url, self.args, self.count, self.batch = url, args, count, batch
        self.release = threading.Event()
        self.enqueue_seconds = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with db.connect(self.url, application_name="jetencode-bench-producer") as producer:
                self.enqueue_seconds = jobs.enqueue_many(producer, self.args, self.count, batch=self.batch)
                self.release.wait(600)
        except BaseException as exc:  # re-raised by finish()
            self.error = exc

    def finish(self) -> None:
        self.release.set()
        self.join()
        if self.error is not None:
            raise self.error


def _warm_up(conn, args: dict, warm: int) -> None:
    jobs.enqueue_many(conn, args, warm)
    done = jobs.wait_for(conn, "SELECT count(*) FROM jobs WHERE status = 'completed'", (), warm, 60)
    if done < warm:
        raise RuntimeError(f"warm-up: only {done}/{warm} jobs completed in 60 s")


def _totals(conn, mark, *, from_first_claim: bool = False) -> tuple:
    """(stages completed, stages not completed, seconds from the first enqueue (or the first
    claim) to the last finish, workers that claimed) of the jobs created after `mark`."""
    start = "min(t.started_at)" if from_first_claim else "min(j.created_at)"
    return conn.execute(
        f"""SELECT count(*) FILTER (WHERE t.state = 'completed'),
                   count(*) FILTER (WHERE t.state <> 'completed'),
                   extract(epoch FROM max(t.finished_at) - {start}),
                   count(DISTINCT t.claimed_by)
              FROM jobs j JOIN queue_tasks t ON t.job_id = j.id AND t.placement <> 'cluster'
             WHERE j.created_at > %s""",
        [mark],
    ).fetchone()


def _rates_by_fifth(conn, mark, *, from_first_claim: bool = False) -> list[float]:
    """Completions per second in each fifth of the span (as _totals counts it): a queue that slows
    down as it churns (dead index entries at the head of the claim index) shows up as a falling
    series."""
    start = "min(t.started_at)" if from_first_claim else "min(j.created_at)"
    fifths = conn.execute(
        f"""WITH b AS (SELECT {start} AS t0, max(t.finished_at) AS t1
                        FROM jobs j JOIN queue_tasks t ON t.job_id = j.id WHERE j.created_at > %(m)s)
           SELECT width_bucket(extract(epoch FROM t.finished_at - b.t0), 0,
                               extract(epoch FROM b.t1 - b.t0) + 1e-6, 5) AS fifth,
                  count(*) / (extract(epoch FROM b.t1 - b.t0) / 5)
             FROM jobs j JOIN queue_tasks t ON t.job_id = j.id, b
            WHERE j.created_at > %(m)s AND t.state = 'completed'
            GROUP BY 1, b.t0, b.t1 ORDER BY 1""",
        {"m": mark},
    ).fetchall()
    return [round(float(rate), 1) for _, rate in fifths]


def _use_per_stage(before: dict, after: dict, stages: int) -> tuple[dict, dict]:
    """The index_stats() difference per completed stage: (index use, sequential scans)."""
    index_use, seq_scans = {}, {}
    if not stages:
        return index_use, seq_scans
    for name, (scans, read, fetched) in after.items():
        b = before.get(name, (0, 0, 0))
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
    return index_use, seq_scans


def _cpu_per_stage(cpu: dict, stages: int) -> dict:
    per_stage = (cpu["workers_cpu_seconds"] + cpu["backends_cpu_seconds"]) / stages
    ms = {
        "workers": round(1000 * cpu["workers_cpu_seconds"] / stages, 3),
        "postgres_backends": round(1000 * cpu["backends_cpu_seconds"] / stages, 3),
        "total": round(1000 * per_stage, 3),
    }
    # The backends split by whom they serve: the workers' claims/finishes/heartbeats, the
    # producer's enqueues, the bench's own polling and sampling.
    for role, seconds in cpu.get("backends_cpu_seconds_by_role", {}).items():
        ms[f"postgres_{role}"] = round(1000 * seconds / stages, 3)
    return {
        "cpu_ms_per_stage": ms,
        # What the machine's cores would allow if this run had had them to itself.
        "cpu_bound_stages_per_second": round(cpu["machine_cpus"] / per_stage, 1) if per_stage else None,
    }


def _measured_run(
    conn, url: str, database: str, pool: WorkerPool, producer: _Producer, count: int, drain: bool = False
) -> dict:
    """From the producer's first enqueue (or, draining, from the commit of the whole batch) until
    every measured job is terminal, with the CPU of the workers and PostgreSQL metered and the
    workers' backends sampled; then the run's totals."""
    mark = db.scalar(conn, "SELECT clock_timestamp()")
    if drain:  # one statement: the workers see none of it before it commits
        producer.enqueue_seconds = jobs.enqueue_many(conn, producer.args, count, batch=count)
    indexes_before = index_stats(conn)
    meter = CpuMeter(database, pool.pids(), url).start()
    sampler = ActivitySampler(url)
    sampler.start()
    started = time.perf_counter()
    if not drain:
        producer.start()
    finished = jobs.wait_for(
        conn,
        "SELECT count(*) FROM jobs WHERE created_at > %s AND status IN ('completed', 'failed', 'cancelled')",
        [mark],
        count,
        timeout=120 + count / 10,
        # The span comes from PostgreSQL's timestamps, not from this loop; draining, the count
        # over the whole batch is asked less often (on two cores, every 50 ms cost ~0.5 ms of
        # PostgreSQL CPU per stage).
        poll=0.25 if drain else 0.05,
    )
    wall = time.perf_counter() - started
    cpu = meter.stop()
    activity = sampler.stop()
    if not drain:
        producer.finish()
    stages, not_completed, span, workers_used = _totals(conn, mark, from_first_claim=drain)
    return {
        "indexes_before": indexes_before,
        "finished": finished,
        "wall": wall,
        "cpu": cpu,
        "activity": activity,
        "stages": stages,
        "not_completed": not_completed,
        "span": float(span or wall),
        "workers_used": workers_used,
        "by_fifth": _rates_by_fifth(conn, mark, from_first_claim=drain),
    }


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
    drain: bool = False,
    log=print,
) -> dict:
    args = jobs.job_args(PAYLOAD)
    producer = _Producer(url, args, count, batch)
    with db.connect(url) as conn:
        db.reset_queue(conn, analyze_empty=stale_statistics)
        pool = WorkerPool(url, workdir, processes, concurrency=concurrency, poll_seconds=poll_seconds)
        pool.start()
        try:
            _warm_up(conn, args, processes * concurrency * 2)
            run = _measured_run(conn, url, database, pool, producer, count, drain)
        finally:
            producer.release.set()
            pool.stop()
        time.sleep(0.5)  # exited backends have flushed their statistics
        indexes_after = index_stats(conn)
    stages, span, cpu = run["stages"], run["span"], run["cpu"]
    index_use, seq_scans = _use_per_stage(run["indexes_before"], indexes_after, stages)
    result = {
        "worker_processes": processes,
        "slots": processes * concurrency,
        "jobs": count,
        "jobs_finished": run["finished"],
        "stages_completed": stages,
        "stages_not_completed": run["not_completed"],
        "workers_that_claimed": run["workers_used"],
        "span_seconds": round(span, 3),
        "wall_seconds": round(run["wall"], 3),
        "enqueue_seconds": round(producer.enqueue_seconds, 3),
        "producer_batch": count if drain else batch,
        "stale_statistics": stale_statistics,
        "drain": drain,
        "stages_per_second": round(stages / span, 1) if span > 0 else None,
        "stages_per_second_by_fifth": run["by_fifth"],
        "cpu": cpu,
        "worker_backends": run["activity"],
        "index_use": index_use,
        "sequential_scans": seq_scans,
        **(_cpu_per_stage(cpu, stages) if stages else {}),
    }
    label = " with statistics of the empty queue" if stale_statistics else ""
    label += ", draining a filled queue" if drain else ""
    log(
        f"  throughput {processes}x{concurrency}{label}: {result['stages_per_second']} stages/s "
        f"({stages} stages in {span:.2f}s; machine busy {cpu['machine_busy_cpu_seconds']:.1f} CPU-s of "
        f"{cpu['wall_seconds'] * cpu['machine_cpus']:.1f})"
    )
    return result
