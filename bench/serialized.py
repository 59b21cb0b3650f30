"""Measurement 11: how long a claim holds the serialized section, the scheduler's against the
ceiling's raw claim.

The ceiling (measurement 2) is named after its serialized section: one claimer at a time holds the
singleton lock, from taking it to its commit. On a machine whose cores do not run out, that section
bounds each side's claims per second at 1 / its length, so raw / scheduler is the share of the
ceiling a scheduler can reach there. The 2-core drain (target 1c) cannot show this: both sides are
CPU-bound on it, so its share is a ratio of CPU per stage.

On one connection, nothing else running, each claim is timed from the moment its transaction holds
the lock (the server's `clock_timestamp()`) to the moment its round trip returns (the client's
clock: the same machine's), less the one-way latency from server to client (the median of
`SELECT clock_timestamp()` round trips measured beside it). Row locks last until the commit, so
this is the whole section: the walk and the writes after the lock, and the commit.

  scheduler  the worker's claim statement (claim_task_v1 and, in the same statement, the backlog
             check) on an instrumented copy of claim_task_v1, `bench_claim_probe`, that raises a
             notice with the time right after taking the lock; each claimed stage is then finished
             (finish_task_v1, untimed), as a drain would
  scheduler, claim only
             the same copy without the backlog check
  raw        the ceiling's claim batch with `SELECT clock_timestamp()` after its lock (its COMMIT
             waits for the WAL flush, as the ceiling's does; the scheduler's claim commits without
             waiting: docs/scheduler.md), then its finish
  raw, no flush
             the same batch with `SET LOCAL synchronous_commit = off`: the difference is the flush,
             which depends on the disk, so the share a machine reaches depends on its disk too

The variants take turns claim by claim, so the queue and the machine are the same for each.
"""

from __future__ import annotations

import statistics
import time

from bench import ceiling, db, jobs
from bench.claim_latency import register
from bench.stats import summary_ms
from scheduler import repository

WORKER = "bench-serial"
PROBE = "bench_claim_probe"
LOCK = "PERFORM 1 FROM queue_scheduler_state st WHERE st.id = 1 FOR UPDATE;"
NOTICE = " RAISE NOTICE 'locked at %', extract(epoch FROM clock_timestamp());"

SCHEDULER = repository.QUERIES["claim_task"].replace("claim_task_v1(", PROBE + "(")
CLAIM_ONLY = f"SELECT * FROM {PROBE}(%(worker_uid)s, %(session_id)s, %(pool)s, %(lease_seconds)s)"
RAW_LOCK = "FOR UPDATE; "  # the first one in the batch is the singleton's (the pick's is SKIP LOCKED)
RAW = ceiling.CLAIM.format(worker=0).replace(
    RAW_LOCK, RAW_LOCK + "SELECT extract(epoch FROM clock_timestamp()) AS locked_at; ", 1
)
# The same without waiting for the WAL flush, as the scheduler's claim commits: raw - raw_no_flush is
# what the ceiling's section spends in the flush, which depends on the disk.
RAW_NO_FLUSH = RAW.replace("BEGIN; ", "BEGIN; SET LOCAL synchronous_commit = off; ", 1)


def install_probe(conn) -> None:
    """`bench_claim_probe`: claim_task_v1 as this database has it, plus the notice after the lock."""
    source = db.scalar(conn, "SELECT pg_get_functiondef('claim_task_v1'::regproc)")
    if source.count(LOCK) != 1 or "FUNCTION public.claim_task_v1(" not in source:
        raise RuntimeError("claim_task_v1 no longer takes the singleton lock as this probe expects")
    copy = source.replace("FUNCTION public.claim_task_v1(", f"FUNCTION public.{PROBE}(")
    conn.execute(copy.replace(LOCK, LOCK + NOTICE))


def one_way_latency(conn, samples: int = 200) -> float:
    """Seconds from the server reading its clock to this process holding the row (median)."""
    gaps = []
    for _ in range(samples):
        stamp = conn.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()[0]
        gaps.append(time.time() - float(stamp))
    return statistics.median(gaps)


class Probe:
    """Times claims on one connection (the scheduler's through the probe's notice, the raw one
    through its own clock row) and finishes what each claimed, untimed."""

    def __init__(self, conn, session):
        self.conn = conn
        self.locked_at: list[float] = []
        self.cursor = conn.cursor()
        conn.add_notice_handler(self._notice)
        self.claim = {
            "worker_uid": WORKER,
            "session_id": session,
            "pool": "media",
            "lease_seconds": 60.0,
            "grace": 0.0,
        }

    def _notice(self, diag) -> None:
        message = diag.message_primary or ""
        if message.startswith("locked at "):
            self.locked_at.append(float(message.rsplit(" ", 1)[1]))

    def scheduler(self, query: str, n: int, latency: float) -> list[float]:
        holds = []
        for _ in range(n):
            self.locked_at.clear()
            cur = self.conn.execute(query, self.claim)
            row = cur.fetchone()
            returned = time.time()
            if row is None or not self.locked_at:
                raise RuntimeError("the probe's claim found nothing: the bench queue ran dry")
            holds.append(returned - self.locked_at[-1] - latency)
            claimed = dict(zip([c.name for c in cur.description], row, strict=True))
            lease = repository.Lease(claimed["id"], claimed["lease_token"], WORKER, self.claim["session_id"])
            repository.finish(lease, cursor=self.cursor)
        return holds

    def raw(self, query: str, n: int, latency: float) -> list[float]:
        holds = []
        for _ in range(n):
            cur = self.conn.execute(query)  # simple query protocol: one round trip
            locked_at = task = None
            while True:
                if cur.description is not None:
                    name = cur.description[0].name
                    if name == "locked_at":
                        locked_at = float(cur.fetchone()[0])
                    elif name == "id":
                        task = cur.fetchone()
                if not cur.nextset():
                    break
            returned = time.time()
            if task is None:
                raise RuntimeError("the raw claim found nothing: its table ran dry")
            holds.append(returned - locked_at - latency)
            self.conn.execute(ceiling.FINISH, [task[0]])
        return holds


def measure(url: str, samples: int, rounds: int, log=print) -> dict:
    variants = ("scheduler", "scheduler_claim_only", "raw", "raw_no_flush")
    held: dict[str, list[float]] = {v: [] for v in variants}
    per_round = []
    args = jobs.job_args({"type": "noop", "params": {"seconds": 0}}, notify=False)
    warm = min(50, samples)
    with db.connect(url) as conn:
        db.reset_queue(conn)
        session = register(conn, WORKER)
        jobs.enqueue_many(conn, args, 2 * (rounds * samples + warm), batch=500)
        ceiling.prepare(url, 2 * rounds * samples + warm + 100)
        db.analyze(conn)
        install_probe(conn)
        probe = Probe(conn, session)
        try:
            latency = one_way_latency(conn)
            probe.scheduler(SCHEDULER, warm, latency)  # untimed: caches, prepared statements
            probe.scheduler(CLAIM_ONLY, warm, latency)
            probe.raw(RAW, warm, latency)
            for _ in range(rounds):
                latency = one_way_latency(conn)
                this: dict[str, list[float]] = {v: [] for v in variants}
                for _ in range(samples):  # interleaved: the queue and the machine the same for each
                    this["scheduler"] += probe.scheduler(SCHEDULER, 1, latency)
                    this["scheduler_claim_only"] += probe.scheduler(CLAIM_ONLY, 1, latency)
                    this["raw"] += probe.raw(RAW, 1, latency)
                    this["raw_no_flush"] += probe.raw(RAW_NO_FLUSH, 1, latency)
                p50 = {v: statistics.median(this[v]) for v in variants}
                per_round.append(
                    {
                        "one_way_latency_us": round(1e6 * latency, 1),
                        **{f"{v}_hold_p50_us": round(1e6 * p50[v], 1) for v in variants},
                        "projected_share": round(p50["raw"] / p50["scheduler"], 3),
                        "projected_share_claim_only": round(p50["raw"] / p50["scheduler_claim_only"], 3),
                        # The flush the raw section would need for the scheduler to reach 80 % of it.
                        "flush_for_80_percent_us": round(
                            1e6 * (0.8 * p50["scheduler"] - p50["raw_no_flush"]), 1
                        ),
                    }
                )
                log(
                    f"  serialized section p50: scheduler {1e6 * p50['scheduler']:.0f} µs (claim only "
                    f"{1e6 * p50['scheduler_claim_only']:.0f}), raw {1e6 * p50['raw']:.0f} µs "
                    f"({1e6 * p50['raw_no_flush']:.0f} without its flush) "
                    f"-> projected share {per_round[-1]['projected_share']:.2f}"
                )
                for v in variants:
                    held[v] += this[v]
        finally:
            conn.execute(f"DROP FUNCTION IF EXISTS {PROBE}")
            conn.execute(ceiling.TEARDOWN)
            db.reset_queue(conn)
    shares = sorted(r["projected_share"] for r in per_round)
    return {
        "samples_per_round": samples,
        "rounds": per_round,
        "hold": {v: summary_ms(held[v]) for v in variants},
        # The median round's share: the section of one claimer at a time, where cores do not run out.
        "projected_share": shares[len(shares) // 2],
    }


def table_rows(result: dict | None) -> list[tuple[str, str, str]]:
    if not result or "hold" not in result:
        return []
    hold = result["hold"]
    rounds = ", ".join(f"{r['projected_share']:.2f}" for r in result["rounds"])
    return [
        (
            "(11) serialized section per claim",
            f"scheduler p50 {1000 * hold['scheduler']['p50_ms']:.0f} µs",
            f"claim only {1000 * hold['scheduler_claim_only']['p50_ms']:.0f} µs; raw claim "
            f"{1000 * hold['raw']['p50_ms']:.0f} µs ({1000 * hold['raw_no_flush']['p50_ms']:.0f} without "
            f"its WAL flush); raw / scheduler {result['projected_share']:.2f} "
            f"(rounds {rounds})",
        )
    ]
