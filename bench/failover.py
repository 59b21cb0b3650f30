"""Measurement 7: failover, from a worker's SIGKILL or SIGTERM to the job's next stage elsewhere.

Two real workers on an empty queue: a victim (`--concurrency 1`, so a job's children run one after
the other) and a survivor (`--concurrency 4`), both with short timings (`Timing`: lease 4 s,
heartbeat 1 s, recovery every 1 s, poll 1 s, shutdown grace 3 s, reassignment after 10 s instead of
120 s) so that one repetition takes seconds. Each repetition starts from an empty queue and fresh
processes:

1. the victim starts; the bench enqueues one `noop` job (the API's own arguments) and waits until
   the victim has claimed its dispatch; then the survivor starts (so it cannot take the job first);
2. the bench waits for the phase of the case: `dispatch` — the dispatch still running (it sleeps
   120 s, `children` 0); `later` — local work: `{"seconds": S, "children": 2}`, the first child
   completed and the second running on the victim (S = grace + 4 s, so it outlasts the grace);
3. it reads PostgreSQL's `clock_timestamp()` (with the victim's last heartbeat and the task it
   holds) and at once sends the signal to the victim;
4. it polls (every 50 ms) until a task of that job has been claimed by the survivor. The figure is
   that task's `started_at` (the claim's transaction time) minus the signal's database time.

Beside it each sample records where the time went (database times, from the signal): when the
victim's task was recovered (lease expired, `queue_fence_audit` operation `recover`) or handed back
(`release`), when the job left the victim (its schedule's assignment seen cleared by the polling, or
the new execution's dispatch created), when the claimed task became runnable (`available_at`), and
the cause counted in `queue_scheduler_state.reassignments` (drained, lost_in_dispatch,
lost_after_delay). `predict()` gives the range the rules allow for each case; every sample is
checked against it.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import asdict, dataclass
from datetime import datetime

from bench import db, jobs
from bench.stats import summary_ms
from bench.workers import WorkerPool

CASES = ("sigkill_dispatch", "sigkill_later", "sigterm_dispatch", "sigterm_later")
LABELS = {
    "sigkill_dispatch": "SIGKILL in dispatch",
    "sigkill_later": "SIGKILL in a later stage (local work)",
    "sigterm_dispatch": "SIGTERM in dispatch",
    "sigterm_later": "SIGTERM in a later stage (local work)",
}
DISPATCH_SECONDS = 120.0  # the dispatch case's stage outlasts any grace and wait
SURVIVOR_CONCURRENCY = 4
POLL_EVERY = 0.05


@dataclass(frozen=True)
class Timing:
    """The worker timings of the measurement (both workers), in seconds."""

    lease: float = 4.0
    heartbeat: float = 1.0
    recovery_interval: float = 1.0
    poll: float = 1.0
    stale_worker: float = 4.0
    reassign_after: float = 10.0
    shutdown_grace: float = 3.0

    def env(self) -> dict[str, str]:
        return {
            "JETENCODE_LEASE_SECONDS": f"{self.lease:g}",
            "JETENCODE_HEARTBEAT_SECONDS": f"{self.heartbeat:g}",
            "JETENCODE_RECOVERY_INTERVAL_SECONDS": f"{self.recovery_interval:g}",
            "JETENCODE_POLL_SECONDS": f"{self.poll:g}",
            "JETENCODE_STALE_WORKER_SECONDS": f"{self.stale_worker:g}",
            "JETENCODE_REASSIGN_AFTER_SECONDS": f"{self.reassign_after:g}",
            "JETENCODE_SHUTDOWN_GRACE_SECONDS": f"{self.shutdown_grace:g}",
        }

    def describe(self) -> str:
        return (
            f"lease {self.lease:g} s, heartbeat {self.heartbeat:g} s, recovery every {self.recovery_interval:g} s, "
            f"poll {self.poll:g} s, shutdown grace {self.shutdown_grace:g} s, "
            f"reassignment after {self.reassign_after:g} s"
        )


def later_stage_seconds(timing: Timing) -> float:
    """Each stage's sleep in the `later` cases: the running child must outlast the grace."""
    return timing.shutdown_grace + 4.0


def predict(case: str, timing: Timing, backoff: float) -> dict:
    """What the rules allow, from the signal to the survivor's claim (seconds), and why.

    The victim's last heartbeat (which renewed its lease and its worker row) came at most one
    heartbeat before the signal; every recovery pass comes at most one interval (+10 % jitter)
    after the moment it is waiting for; an idle slot claims a task that became runnable without a
    notification within one poll interval, one that was notified (a release or a new execution
    sends one) in milliseconds."""
    recovery = 1.1 * timing.recovery_interval
    hand_back = 1.0  # the handler notices within 0.1 s; release, offline and the claim in well under a second
    if case == "sigkill_dispatch":
        low = timing.lease - timing.heartbeat + backoff
        high = timing.lease + recovery + backoff + timing.poll
        rule = (
            f"lease {timing.lease:g} (- up to a heartbeat) + up to a recovery interval: lease recovered, "
            f"job released (lost_in_dispatch); + retry backoff {backoff:g}; + up to a poll {timing.poll:g}"
        )
        formula = "lease - <=1 heartbeat + <=1 recovery interval + backoff + <=1 poll"
    elif case == "sigkill_later":
        low = timing.reassign_after - timing.heartbeat
        high = timing.reassign_after + recovery + 0.5
        rule = (
            f"reassignment delay {timing.reassign_after:g} (- up to a heartbeat) + up to a recovery interval "
            "(lost_after_delay: new execution, notified claim)"
        )
        formula = "reassignment delay - <=1 heartbeat + <=1 recovery interval"
    elif case in ("sigterm_dispatch", "sigterm_later"):
        low = timing.shutdown_grace
        high = timing.shutdown_grace + hand_back + recovery
        rule = (
            f"shutdown grace {timing.shutdown_grace:g} (the stage still runs) + hand-back; the offline "
            "transaction releases the job (drained), at worst the next recovery pass does"
        )
        formula = "grace + hand-back (+ <=1 recovery interval at worst)"
    else:
        raise ValueError(f"unknown case {case!r}")
    return {"low_s": round(low, 2), "high_s": round(high, 2), "formula": formula, "rule": rule}


# ---- one repetition ----------------------------------------------------------------------------


def _seconds(later: datetime | None, earlier: datetime) -> float | None:
    return None if later is None else round((later - earlier).total_seconds(), 3)


def _kill(pool: WorkerPool) -> None:
    """SIGKILL whatever is left of the pool's process groups, and reap."""
    for proc in pool.procs:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the group this pool started (start_new_session)
            except ProcessLookupError:
                pass
    pool.stop(grace=1.0)


def _wait(conn, query: str, params, timeout: float, what: str, pools=()):
    deadline = time.monotonic() + timeout
    while True:
        row = conn.execute(query, params).fetchone()
        if row is not None and row[0]:
            return row
        for pool in pools:
            for proc in pool.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"{what}: worker {pool.uids[0]} exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.02)


DISPATCH_RUNNING = (
    "SELECT true FROM queue_tasks WHERE job_id = %s AND placement = 'dispatch' AND state = 'running' "
    "AND claimed_by = %s"
)
LATER_STAGE_RUNNING = """SELECT count(*) FILTER (WHERE state = 'completed') >= 1
                                AND count(*) FILTER (WHERE state = 'running' AND claimed_by = %s) = 1
                           FROM queue_tasks WHERE job_id = %s AND placement = 'job'"""


@dataclass(frozen=True)
class _Fault:
    """The moment of the signal, in the database's time, and what the victim held then."""

    at: datetime
    last_beat: datetime
    held_id: int | None
    held_type: str | None
    held_started: datetime | None
    held_lease: datetime | None
    counted: dict | None  # queue_scheduler_state.reassignments before the fault


def _pools(url: str, workdir, timing: Timing) -> tuple[WorkerPool, WorkerPool]:
    """The victim (one slot, so a job's children run one after the other) and the survivor."""
    env = timing.env()
    victim = WorkerPool(
        url, workdir, 1, concurrency=1, poll_seconds=timing.poll, extra_env=env, uid_prefix="failover-victim"
    )
    survivor = WorkerPool(
        url,
        workdir,
        1,
        concurrency=SURVIVOR_CONCURRENCY,
        poll_seconds=timing.poll,
        extra_env=env,
        uid_prefix="failover-survivor",
    )
    return victim, survivor


def _reach_phase(conn, victim: WorkerPool, survivor: WorkerPool, phase: str, timing: Timing):
    """Start the victim, give it the job, start the survivor once the victim holds the dispatch, and
    wait for the case's phase. The job's id."""
    seconds = later_stage_seconds(timing)
    params = (
        {"seconds": DISPATCH_SECONDS, "children": 0}
        if phase == "dispatch"
        else {"seconds": seconds, "children": 2}
    )
    victim.start()
    victim_uid = victim.uids[0]
    job_id = conn.execute(jobs.ENQUEUE, jobs.job_args({"type": "noop", "params": params})).fetchone()[0]
    _wait(conn, DISPATCH_RUNNING, [job_id, victim_uid], 30, "the victim to claim the dispatch", [victim])
    survivor.start()
    if phase == "dispatch":
        query, args = DISPATCH_RUNNING, [job_id, victim_uid]
    else:
        query, args = LATER_STAGE_RUNNING, [victim_uid, job_id]
    _wait(conn, query, args, 3 * seconds + 30, f"the {phase} phase", [victim, survivor])
    return job_id


def _signal(conn, job_id, victim: WorkerPool, sig: signal.Signals) -> _Fault:
    # The database's clock, the victim's last heartbeat and the task it holds, then the signal at
    # once (one round trip, ~1 ms, before it).
    fault = _Fault(
        *conn.execute(
            """SELECT clock_timestamp(), w.last_heartbeat_at, t.id, t.task_type, t.started_at, t.lease_expires_at,
                      (SELECT reassignments FROM queue_scheduler_state WHERE id = 1)
                 FROM queue_workers w
                 LEFT JOIN queue_tasks t ON t.job_id = %s AND t.state = 'running' AND t.claimed_by = w.uid
                WHERE w.uid = %s""",
            [job_id, victim.uids[0]],
        ).fetchone()
    )
    os.kill(victim.procs[0].pid, sig)
    if fault.held_id is None:
        raise RuntimeError("the victim held no running task of the job when signalled")
    return fault


def _survivor_claim(conn, job_id, victim_uid: str, survivor_uid: str, sig, timeout: float):
    """Poll (every POLL_EVERY) until the survivor has claimed a task of the job: (that task's id,
    type, placement and execution as text; when the polling first saw the job leave the victim)."""
    signalled = time.monotonic()
    released_seen = None
    while True:
        now, assigned, execution, claim = conn.execute(
            """SELECT clock_timestamp(), s.assigned_worker_uid, s.execution_id,
                      (SELECT ARRAY[t.id::text, t.task_type, t.placement, t.execution_id::text]
                         FROM queue_tasks t
                        WHERE t.job_id = s.job_id AND t.claimed_by = %s AND t.started_at IS NOT NULL
                        ORDER BY t.started_at LIMIT 1)
                 FROM job_schedule s WHERE s.job_id = %s""",
            [survivor_uid, job_id],
        ).fetchone()
        if released_seen is None and (assigned != victim_uid or execution != 1):
            released_seen = now
        if claim is not None:
            return claim, released_seen
        if time.monotonic() - signalled > timeout:
            raise RuntimeError(
                f"no task of job {job_id} claimed by the survivor {time.monotonic() - signalled:.0f}s "
                f"after {sig.name} (assigned {assigned}, execution {execution})"
            )
        time.sleep(POLL_EVERY)


def _audit_times(conn, held_id: int) -> tuple[datetime | None, datetime | None]:
    """When the victim's task was recovered (its lease expired) and when it was handed back."""
    recovered = db.scalar(
        conn, "SELECT min(at) FROM queue_fence_audit WHERE task_id = %s AND operation = 'recover'", [held_id]
    )
    handed_back = db.scalar(
        conn,
        "SELECT min(at) FROM queue_fence_audit WHERE task_id = %s AND operation = 'release' AND accepted",
        [held_id],
    )
    return recovered, handed_back


def _reassignments_since(conn, before: dict | None) -> dict:
    # The counters are cumulative (the scheduler row survives reset_queue): this fault's share.
    after = db.scalar(conn, "SELECT reassignments FROM queue_scheduler_state WHERE id = 1") or {}
    before = before or {}
    return {k: int(v) - int(before.get(k, 0)) for k, v in after.items() if int(v) != int(before.get(k, 0))}


def _exit_code(victim: WorkerPool, sig: signal.Signals, timing: Timing) -> int | None:
    """A SIGTERMed victim's exit status once it drained (None after a SIGKILL)."""
    if sig != signal.SIGTERM:
        return None
    try:
        return victim.procs[0].wait(timeout=timing.shutdown_grace + 20)
    except Exception:
        return None


def run_once(url: str, workdir, case: str, timing: Timing, prediction: dict) -> dict:
    kind, phase = case.split("_")
    sig = signal.SIGKILL if kind == "sigkill" else signal.SIGTERM
    with db.connect(url) as conn:
        db.reset_queue(conn)
        victim, survivor = _pools(url, workdir, timing)
        try:
            job_id = _reach_phase(conn, victim, survivor, phase, timing)
            victim_uid, survivor_uid = victim.uids[0], survivor.uids[0]
            fault = _signal(conn, job_id, victim, sig)
            claim, released_seen = _survivor_claim(
                conn, job_id, victim_uid, survivor_uid, sig, prediction["high_s"] + 30
            )
            task_id = int(claim[0])
            started, created, available = conn.execute(
                "SELECT started_at, created_at, available_at FROM queue_tasks WHERE id = %s", [task_id]
            ).fetchone()
            recovered, handed_back = _audit_times(conn, fault.held_id)
            reassignments = _reassignments_since(conn, fault.counted)
            new_execution = int(claim[3]) > 1
            # A new execution's dispatch is created by the release itself; a cleared assignment is
            # seen by the polling (within POLL_EVERY, and never after the claim that needed it).
            released = created if new_execution else min(released_seen or started, started)
            at = fault.at
            sample = {
                "case": case,
                "job_id": str(job_id),
                "victim": victim_uid,
                "survivor": survivor_uid,
                "signal": sig.name,
                "held_task": {
                    "id": fault.held_id,
                    "type": fault.held_type,
                    "running_for_s": _seconds(at, fault.held_started),
                },
                "victim_silent_at_fault_s": _seconds(at, fault.last_beat),
                "lease_left_at_fault_s": _seconds(fault.held_lease, at),
                "claimed_task": {
                    "id": task_id,
                    "type": claim[1],
                    "placement": claim[2],
                    "execution": int(claim[3]),
                },
                "to_next_stage_s": _seconds(started, at),
                "to_lease_recovered_s": _seconds(recovered, at),
                "to_handed_back_s": _seconds(handed_back, at),
                "to_released_s": _seconds(released, at),
                "released_observed_by_polling": not new_execution,
                "to_runnable_s": _seconds(max(available, released or available), at),
                "reassignments": reassignments,
                "victim_exit_code": _exit_code(victim, sig, timing),
            }
            sample["within_prediction"] = (
                prediction["low_s"] - 0.05 <= sample["to_next_stage_s"] <= (prediction["high_s"] + 0.05)
            )
            return sample
        finally:
            _kill(victim)
            _kill(survivor)


# ---- the measurement ---------------------------------------------------------------------------


def measure(
    url: str,
    workdir,
    *,
    repetitions: int,
    cases: list[str] | tuple[str, ...] = CASES,
    timing: Timing | None = None,
    log=print,
) -> dict:
    timing = timing or Timing()
    for case in cases:
        if case not in CASES:
            raise ValueError(f"unknown failover case {case!r}; choose from {', '.join(CASES)}")
    with db.connect(url) as conn:
        backoff = float(db.scalar(conn, "SELECT extract(epoch FROM retry_delay_v1(1))"))
    predictions = {case: predict(case, timing, backoff) for case in cases}
    log(f"  timings: {timing.describe()}; retry backoff after attempt 1: {backoff:g} s")
    samples: dict[str, list[dict]] = {case: [] for case in cases}
    errors: list[dict] = []
    # Cases interleaved (one of each per round), so the machine's noise spreads over all of them.
    for rep in range(repetitions):
        for case in cases:
            try:
                s = run_once(url, workdir, case, timing, predictions[case])
            except Exception as exc:  # one failed repetition is recorded; the others still count
                errors.append({"case": case, "repetition": rep + 1, "error": f"{type(exc).__name__}: {exc}"})
                log(f"  {case} #{rep + 1}: ERROR {type(exc).__name__}: {exc}")
                continue
            samples[case].append(s)
            parts = ", ".join(
                f"{label} +{s[key]:.1f}"
                for key, label in (
                    ("to_lease_recovered_s", "lease recovered"),
                    ("to_handed_back_s", "handed back"),
                    ("to_released_s", "released"),
                    ("to_runnable_s", "runnable"),
                )
                if s.get(key) is not None
            )
            log(
                f"  {case} #{rep + 1}: {s['to_next_stage_s']:.2f} s to {s['claimed_task']['type']} "
                f"(execution {s['claimed_task']['execution']}) on the survivor ({parts}; "
                f"{', '.join(s['reassignments']) or 'no reassignment counted'})"
                + ("" if s["within_prediction"] else " OUTSIDE THE PREDICTION")
            )
    if not any(samples.values()):
        raise RuntimeError(
            f"every failover repetition failed; first: {errors[0]['error'] if errors else '-'}"
        )
    result = analyse(samples, timing, predictions, repetitions=repetitions, backoff=backoff)
    result["errors"] = errors
    return result


def analyse(
    samples: dict[str, list[dict]], timing: Timing, predictions: dict, *, repetitions: int, backoff: float
) -> dict:
    """Summaries per case (milliseconds, like every other summary in the JSON) and the check
    against the prediction. Pure: the test suite calls it on made-up samples."""
    out_cases = {}
    for case, rows in samples.items():
        parts = {}
        for key in ("to_lease_recovered_s", "to_handed_back_s", "to_released_s", "to_runnable_s"):
            values = [r[key] for r in rows if r.get(key) is not None]
            if values:
                parts[key.removesuffix("_s")] = summary_ms(values)
        causes: dict[str, int] = {}
        for r in rows:
            for cause, count in (r.get("reassignments") or {}).items():
                causes[cause] = causes.get(cause, 0) + int(count)
        out_cases[case] = {
            "label": LABELS[case],
            "to_next_stage": summary_ms([r["to_next_stage_s"] for r in rows]),
            "parts": parts,
            "predicted": predictions[case],
            "all_within_prediction": all(r.get("within_prediction") for r in rows) if rows else None,
            "reassignments": causes,
            "samples": rows,
        }
    return {
        "timing": asdict(timing),
        "retry_backoff_seconds": backoff,
        "later_stage_seconds": later_stage_seconds(timing),
        "dispatch_stage_seconds": DISPATCH_SECONDS,
        "victim_concurrency": 1,
        "survivor_concurrency": SURVIVOR_CONCURRENCY,
        "repetitions": repetitions,
        "cases": out_cases,
    }


def table_rows(result: dict | None) -> list[tuple[str, str, str]]:
    """The printed table's rows for this measurement (bench/run.py's print_table)."""
    if not result or "cases" not in result:
        return []
    t = Timing(**result["timing"])
    rows = [
        (
            "(7) failover timings",
            f"{result['repetitions']} repetition(s)",
            f"{t.describe()}; retry backoff {result['retry_backoff_seconds']:g} s",
        )
    ]
    for data in result["cases"].values():
        s, p = data["to_next_stage"], data["predicted"]
        if not s.get("n"):
            continue
        within = "all within" if data["all_within_prediction"] else "NOT all within"
        rows.append(
            (
                f"(7) failover, {data['label']}",
                f"p50 {s['p50_ms'] / 1000:.2f} / p99 {s['p99_ms'] / 1000:.2f} s (n={s['n']})",
                f"predicted {p['low_s']:g}-{p['high_s']:g} s, {within}: {p['formula']}",
            )
        )
    if result.get("errors"):
        first = result["errors"][0]
        rows.append(
            (
                "(7) failover, failed repetitions",
                f"{len(result['errors'])}",
                f"{first['case']} #{first['repetition']}: {first['error'][:90]}",
            )
        )
    return rows
