"""Measurement 3: claim latency with 1,000 / 100,000 / 1,000,000 pending tasks.

The queue is filled in bulk by SQL (see `db.bulk_pending_jobs`): jobs over 21 priorities, 10 %
targeted at and 10 % assigned to one of ten workers (`bw0`..`bw9`, registered), the rest waiting for
any worker. One registered worker session (`bw3`, 4 slots) then repeats, on one connection:

    SELECT * FROM claim_task_v1('bw3', session, 'media', 30)      <- timed (client round trip)
    SELECT * FROM finish_task_v1(task, token, 'bw3', session, ...) <- timed separately
    SELECT enqueue_job_v1(...)                                     <- untimed: keeps the queue size

so the pending count stays at the target while samples are taken. Sizes are reached by adding
jobs to the same queue (1k, then +99k, then +900k), with VACUUM ANALYZE after each fill. Beside the
client-side timing, EXPLAIN ANALYZE of the claim's statements (the index walk, the capacity
guard, the task pick) records their plans and server-side times at each size, and `op_costs`
measures the PostgreSQL CPU each statement of a noop stage costs (the bound on throughput when
the machine's cores, not the locks, run out).
"""

from __future__ import annotations

import random
import time
import uuid
from collections import defaultdict

import psutil

from bench import db, jobs
from bench.stats import summary_ms

WORKER = "bw3"

WALK = """
SELECT c.job_id FROM (
  (SELECT js.job_id, js.priority, js.position, js.media_runnable_at FROM job_schedule js
    WHERE js.group_key = %(w)s AND js.media_runnable_at IS NOT NULL
    ORDER BY js.priority DESC, js.position, js.media_runnable_at, js.job_id)
  UNION ALL
  (SELECT js.job_id, js.priority, js.position, js.media_runnable_at FROM job_schedule js
    WHERE js.group_key = '' AND js.media_runnable_at IS NOT NULL
    ORDER BY js.priority DESC, js.position, js.media_runnable_at, js.job_id)
) c ORDER BY c.priority DESC, c.position, c.media_runnable_at, c.job_id LIMIT 1
"""
GUARD = """
SELECT count(*) FILTER (WHERE q.pool = 'media'), coalesce(sum(q.vram_mb) FILTER (WHERE q.pool = 'media'), 0)
  FROM queue_tasks q WHERE q.claimed_worker_session_id = %(s)s AND q.state = 'running'
"""
PICK = """
SELECT * FROM queue_tasks q
 WHERE q.job_id = %(j)s AND q.execution_id = 1 AND q.state IN ('pending', 'retry_wait') AND q.available_at <= now()
   AND q.pool = 'media'
 ORDER BY q.available_at, q.created_at, q.id LIMIT 1
"""


def register(conn, uid: str, concurrency: int = 4) -> uuid.UUID:
    session = uuid.uuid4()
    conn.execute(
        "SELECT register_worker_v1(%s, %s, 'bench', 0, 'bench', %s, 1, %s::jsonb, 0, '{}', '/tmp')",
        [uid, session, concurrency, f'{{"cpu": {concurrency}}}'],
    )
    return session


def explain(conn, query: str, params: dict) -> dict:
    """EXPLAIN ANALYZE under the planner settings claim_task_v1 runs with (its SET clauses)."""
    config = db.scalar(conn, "SELECT proconfig FROM pg_proc WHERE proname = 'claim_task_v1'") or []
    with conn.transaction():
        for item in config:
            name, _, value = item.partition("=")
            conn.execute("SELECT set_config(%s, %s, true)", [name, value])
        rows = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + query, params).fetchone()[0]
    plan = rows[0]
    nodes = []

    def walk(node, depth=0):
        label = node["Node Type"] + (f" on {node['Index Name']}" if "Index Name" in node else "")
        label += (
            f" ({node.get('Relation Name')})" if "Relation Name" in node and "Index Name" not in node else ""
        )
        nodes.append("  " * depth + label)
        for child in node.get("Plans", []):
            walk(child, depth + 1)

    walk(plan["Plan"])
    top = plan["Plan"]
    return {
        "execution_ms": round(plan["Execution Time"], 3),
        "planning_ms": round(plan["Planning Time"], 3),
        "settings": config,
        "shared_buffers_hit": top.get("Shared Hit Blocks"),
        "shared_buffers_read": top.get("Shared Read Blocks"),
        "plan": nodes,
    }


def _sample(conn, session, samples: int, args: dict) -> tuple[list[float], list[float], int]:
    claims: list[float] = []
    finishes: list[float] = []
    empty = 0
    for _ in range(samples):
        t0 = time.perf_counter()
        row = conn.execute(
            "SELECT id, lease_token, job_id FROM claim_task_v1(%s, %s, 'media', 30)", [WORKER, session]
        ).fetchone()
        t1 = time.perf_counter()
        if row is None:
            empty += 1
            continue
        conn.execute(
            "SELECT * FROM finish_task_v1(%s, %s, %s, %s, NULL, '[]', '[]')",
            [row[0], row[1], WORKER, session],
        )
        t2 = time.perf_counter()
        claims.append(t1 - t0)
        finishes.append(t2 - t1)
        args["priority"] = random.randint(-10, 10)  # the replacement job's priority
        conn.execute(jobs.ENQUEUE, args)
    return claims, finishes, empty


def _stage_costs(conn, backend: psutil.Process, session, args: dict, n: int) -> dict:
    """n stages, each statement timed: per call, the backend's CPU and the wall time of each
    statement, and of a noop stage in all."""
    spent, waited = defaultdict(float), defaultdict(float)

    def cpu() -> float:
        t = backend.cpu_times()
        return t.user + t.system

    def call(label, query, params):
        c0, t0 = cpu(), time.perf_counter()
        rows = conn.execute(query, params).fetchall()
        spent[label] += cpu() - c0
        waited[label] += time.perf_counter() - t0
        return rows

    for _ in range(n):
        call("enqueue_job_v1", jobs.ENQUEUE, args)
        rows = call(
            "claim_task_v1",
            "SELECT id, lease_token FROM claim_task_v1(%s, %s, 'media', 30)",
            [WORKER, session],
        )
        if not rows:
            continue
        task, token = rows[0]
        call(
            "report_progress_v1",
            "SELECT * FROM report_progress_v1(%s, %s, %s, %s, 100, NULL, NULL)",
            [task, token, WORKER, session],
        )
        call(
            "finish_task_v1",
            "SELECT * FROM finish_task_v1(%s, %s, %s, %s, NULL, '[]', '[]')",
            [task, token, WORKER, session],
        )
    costs = {
        label: {"cpu_ms": round(1000 * spent[label] / n, 3), "wall_ms": round(1000 * waited[label] / n, 3)}
        for label in spent
    }
    # A noop stage is enqueue + claim + finish (it writes no progress of its own any more); the
    # progress write is what each progress report of a longer stage costs.
    stage = [v for k, v in costs.items() if k != "report_progress_v1"]
    costs["stage_total"] = {
        "cpu_ms": round(sum(v["cpu_ms"] for v in stage), 3),
        "wall_ms": round(sum(v["wall_ms"] for v in stage), 3),
    }
    return costs


def op_costs(conn, session, args: dict, n: int) -> dict:
    """CPU (of this connection's PostgreSQL backend, read from /proc: the server must be local) and
    wall time per call of each statement of a stage: enqueue, claim, a progress write, finish.
    Twice: with the server's synchronous_commit, and with it off for this session
    (the difference is the commit's wait for the WAL flush)."""
    try:
        backend = psutil.Process(db.scalar(conn, "SELECT pg_backend_pid()"))
        backend.cpu_times()
    except psutil.Error as exc:
        return {"error": f"backend CPU not readable (is PostgreSQL on this machine?): {exc}"}
    out = {}
    for mode in ("synchronous_commit=on", "synchronous_commit=off"):
        conn.execute("SET synchronous_commit = " + mode.split("=")[1])
        out[mode] = _stage_costs(conn, backend, session, args, n)
    conn.execute("RESET synchronous_commit")
    return out


def measure(url: str, sizes: list[int], samples: int, log=print) -> dict:
    out: dict = {"worker": WORKER, "samples_per_size": samples, "sizes": {}}
    args = jobs.job_args({"type": "noop", "params": {"seconds": 0}}, notify=False)
    with db.connect(url) as conn:
        db.reset_queue(conn)
        for i in range(10):
            if f"bw{i}" != WORKER:
                register(conn, f"bw{i}")
        session = register(conn, WORKER)
        have = 0
        for size in sorted(sizes):
            started = time.monotonic()
            db.bulk_pending_jobs(conn, size - have)
            have = size
            db.analyze(conn)
            # A bulk load leaves a checkpoint due and many dirty buffers behind; take it now, so the
            # samples see a queue in its steady state rather than the load's aftermath.
            conn.execute("CHECKPOINT")
            fill = time.monotonic() - started
            pending = db.scalar(conn, "SELECT count(*) FROM queue_tasks WHERE state = 'pending'")
            _sample(conn, session, min(200, samples), dict(args))  # warm the caches, untimed
            claims, finishes, empty = _sample(conn, session, samples, dict(args))
            if "op_costs" not in out:
                out["op_costs"] = op_costs(conn, session, dict(args), max(20, min(300, samples)))
                total = out["op_costs"].get("synchronous_commit=on", {}).get("stage_total")
                if total:
                    log(
                        f"  PostgreSQL CPU per noop stage (enqueue+claim+progress+finish): {total['cpu_ms']} ms"
                    )
            plans = {
                "walk": explain(conn, WALK, {"w": WORKER}),
                "capacity_guard": explain(conn, GUARD, {"s": session}),
            }
            job = db.scalar(conn, WALK, {"w": WORKER})
            if job is not None:
                plans["task_pick"] = explain(conn, PICK, {"j": job})
            out["sizes"][str(size)] = {
                "pending_tasks": pending,
                "fill_seconds": round(fill, 1),
                "claim": summary_ms(claims),
                "finish": summary_ms(finishes),
                "empty_claims": empty,
                "explain": plans,
            }
            c = out["sizes"][str(size)]["claim"]
            log(
                f"  claim latency at {pending:,} pending: p50 {c.get('p50_ms')} ms, p99 {c.get('p99_ms')} ms "
                f"(filled in {fill:.0f}s)"
            )
        db.reset_queue(conn)
    return out
