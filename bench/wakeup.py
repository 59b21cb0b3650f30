"""Measurement 4: idle wake-up latency, enqueue -> handler start.

One worker (`--concurrency 4`) sits idle; the bench enqueues one `bench_probe` job (a stage from
bench/stages.py whose handler records time.time() the moment it starts), waits for it to finish,
then waits a random 0.3-0.7 s so the worker is idle again (and the next enqueue lands at a random
point of its poll cycle). Latency = handler start - the bench's clock just before it sent the
enqueue (same machine, same clock), so it includes the enqueue's own round trip and commit. The
database's view (claim started_at - job created_at) is recorded beside it.

Twice: with LISTEN/NOTIFY (JETENCODE_POLL_SECONDS=1, the default) and polling only
(JETENCODE_NOTIFY=false, JETENCODE_POLL_SECONDS=1).
"""

from __future__ import annotations

import random
import time

from bench import db, jobs
from bench.stats import summary_ms
from bench.workers import WorkerPool


def measure(url: str, workdir, *, samples: int, notify: bool, poll_seconds: float = 1.0, log=print) -> dict:
    args = jobs.raw_args("bench_probe", {}, notify=True)
    handler: list[float] = []
    database: list[float] = []
    with db.connect(url) as conn:
        db.reset_queue(conn)
        pool = WorkerPool(
            url, workdir, 1, concurrency=4, poll_seconds=poll_seconds, notify=notify, uid_prefix="bench-wake"
        )
        pool.start()
        try:
            time.sleep(1.0)
            warmup = 2 if samples >= 5 else 1
            for index in range(samples + warmup):
                sent = time.time()
                job_id = conn.execute(jobs.ENQUEUE, args).fetchone()[0]
                deadline = time.monotonic() + poll_seconds * 3 + 10
                row = None
                while time.monotonic() < deadline:
                    row = conn.execute(
                        """SELECT (t.result ->> 'handler_started')::float8,
                                  extract(epoch FROM t.started_at - j.created_at)
                             FROM queue_tasks t JOIN jobs j ON j.id = t.job_id
                            WHERE t.job_id = %s AND t.state = 'completed'""",
                        [job_id],
                    ).fetchone()
                    if row is not None:
                        break
                    time.sleep(0.005)
                if row is None:
                    raise RuntimeError(f"bench_probe job {job_id} did not complete in time")
                if index >= warmup:
                    handler.append(row[0] - sent)
                    database.append(float(row[1]))
                time.sleep(random.uniform(0.3, 0.7))
        finally:
            pool.stop()
    result = {
        "notify": notify,
        "poll_seconds": poll_seconds,
        "enqueue_to_handler_start": summary_ms(handler),
        "created_to_claim_started_db": summary_ms(database),
    }
    h = result["enqueue_to_handler_start"]
    log(
        f"  wake-up ({'notify' if notify else 'polling only'}): p50 {h.get('p50_ms')} ms, p99 {h.get('p99_ms')} ms"
    )
    return result
