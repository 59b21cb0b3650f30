"""Where the database time goes while a measurement runs.

`ActivitySampler` polls pg_stat_activity of the bench database (every 20 ms, in a thread) and counts
what the shared work connection of each worker (claims, progress, finishes) is doing: running on CPU, waiting for a lock
(the scheduler singleton, a job row), waiting for its WAL flush at commit (IO/WALSync,
LWLock/WALWrite), or idle (the slot is in Python between round trips: after a claim that is the
handler, after a finish it is the way back to the next claim). pg_stat_statements is not loaded on
the shared server, so this sampling (plus EXPLAIN ANALYZE in bench/claim_latency.py) is the profile
the report is based on.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

from bench import db


class ActivitySampler(threading.Thread):
    def __init__(self, url: str, application_like: str = "jetencode-worker % work", interval: float = 0.02):
        super().__init__(name="activity-sampler", daemon=True)
        self.url = url
        self.like = application_like
        self.interval = interval
        self.counts: Counter[str] = Counter()
        self.producer: Counter[str] = Counter()
        self.samples = 0
        self._halt = threading.Event()

    def run(self) -> None:
        with db.connect(self.url, application_name="jetencode-bench-sampler") as conn:
            while not self._halt.is_set():
                rows = conn.execute(
                    """SELECT application_name, state, wait_event_type, wait_event, left(query, 60)
                         FROM pg_stat_activity
                        WHERE datname = current_database() AND pid <> pg_backend_pid()
                          AND (application_name LIKE %s OR application_name = 'jetencode-bench-producer')""",
                    [self.like],
                ).fetchall()
                self.samples += 1
                for app, state, wtype, wevent, query in rows:
                    role = "producer" if app == "jetencode-bench-producer" else "slot"
                    if state == "idle":
                        key = "idle in the worker, after " + _statement(query)
                    elif state != "active":
                        key = f"{state}, after " + _statement(query)
                    elif wtype is None:
                        key = "active on CPU: " + _statement(query)
                    else:
                        key = f"active waiting {wtype}/{wevent}: " + _statement(query)
                    (self.producer if role == "producer" else self.counts)[key] += 1
                time.sleep(self.interval)

    def stop(self) -> dict:
        self._halt.set()
        self.join(timeout=5)
        total = sum(self.counts.values()) or 1
        producer = sum(self.producer.values()) or 1
        return {
            "samples": self.samples,
            "slot_connections_percent": {
                k: round(100.0 * v / total, 1) for k, v in self.counts.most_common(16)
            },
            "producer_connection_percent": {
                k: round(100.0 * v / producer, 1) for k, v in self.producer.most_common(6)
            },
        }


def _statement(query: str | None) -> str:
    text = (query or "").strip()
    for name in (
        "claim_task_v1",
        "finish_task_v1",
        "report_progress_v1",
        "heartbeat_tasks_v1",
        "enqueue_job_v1",
        "worker_heartbeat_v1",
        "recover_expired_v1",
        "fail_task_v1",
        "release_task_v1",
    ):
        if name in text:
            return name
    return text[:30] or "?"
