"""Orchestration: start the workers, load the queue while the faults fly, drain, check, report.

`run_soak(config, database_url=...)` runs against the database Django's default connection points
at (the harness enqueues, steers and checks through it) and gives the workers `database_url`, which
must name the same database. `python -m tools.soak` (`__main__.py`) makes a scratch database or a
private PostgreSQL instance for it; the test suite uses its own test database.

Phases:
1. start N `manage.py runworker --uid soak-i` processes with short timings and wait until they
   registered;
2. load: enqueue `jobs` noop jobs (random seconds, fail_attempts, children, max_attempts, priority)
   spread over `duration` seconds, while the fault injector (worker faults, operator drains and
   evacuations, connection kills, PostgreSQL restarts), the operators and the stale-write prober
   run, and a monitor samples "nothing running past its lease" and "no idle job left pinned to a
   draining or lost worker" every second;
3. heal (SIGCONT and restart every worker), resume every paused job, and wait until every job is
   terminal;
4. stop the workers (SIGTERM), check every invariant in SQL, print the figures.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection

from scheduler import queries, repository
from scheduler.constants import TERMINAL_STATUSES as TERMINAL
from tools.soak import invariants
from tools.soak.faults import (
    FaultInjector,
    OperatorChaos,
    StaleWriteProber,
    WorkerProcess,
    _connection_errors,
    reset_django_connection,
)


@dataclass
class SoakConfig:
    workers: int = 4
    concurrency: int = 4
    jobs: int = 2000
    duration: float = 120.0  # the load phase, seconds
    drain_timeout: float = 300.0
    seed: int | None = None
    # The jobs: noop with random seconds, failures, children, attempts and priority.
    max_seconds: float = 1.5
    max_fail_attempts: int = 2
    max_children: int = 3
    max_attempts: tuple[int, int] = (1, 5)
    # Of the jobs, this many are split transcodes (issue 33) of a generated 8 s clip: four chunks
    # each, on any worker, through the same faults (the workers then need FFmpeg).
    split_jobs: int = 0
    # The actors.
    faults: bool = True
    fault_interval: float = 1.5  # mean seconds between two faults
    operators: bool = True
    operator_interval: float = 0.1
    cancel_weight: float = 1.0
    probes: bool = True
    probe_interval: float = 0.2
    restart_every: float = 12.0  # at most one PostgreSQL restart per this many seconds
    # Worker timings (JETENCODE_* settings of the worker processes).
    lease: float = 3.0
    heartbeat: float = 0.5
    recovery_interval: float = 0.5
    poll: float = 0.2
    stale_worker: float = 5.0
    reassign_after: float = 10.0
    shutdown_grace: float = 0.5
    slack: float = 5.0  # allowed beyond lease expiry + recovery interval before "stuck"
    # Time compression: retry_delay_v1 is replaced by a scaled copy in the soak database for the run
    # (and restored afterwards). 1.0 keeps the real 15 s, 16 s, 31 s... backoff.
    retry_delay_scale: float = 1.0
    keep_logs: bool = False
    workdir: str | None = None


@dataclass
class SoakReport:
    config: dict[str, Any]
    database: str
    seed: int
    jobs_enqueued: int = 0
    load_seconds: float = 0.0
    drain_seconds: float = 0.0
    drained: bool = False
    job_status: dict[str, int] = field(default_factory=dict)
    task_states: dict[str, int] = field(default_factory=dict)
    tasks: int = 0
    children: int = 0
    attempts: int = 0
    reexecuted_jobs: int = 0
    audit: dict[str, dict[str, int]] = field(default_factory=dict)
    rejection_reasons: dict[str, int] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)
    fault_details: dict[str, int] = field(default_factory=dict)
    fault_outcomes: dict[str, dict[str, int]] = field(default_factory=dict)  # drain, evacuate
    evacuated_jobs: int = 0  # jobs the evacuations moved at once
    reassignments: dict[str, int] = field(default_factory=dict)  # queries.reassignments(): by cause
    postgres_restart_seconds: list[float] = field(default_factory=list)
    operators: dict[str, dict[str, int]] = field(default_factory=dict)
    operator_failures: dict[str, int] = field(default_factory=dict)
    probes_sent: dict[str, int] = field(default_factory=dict)
    probes_rejected: int = 0
    probes_replayed: int = 0
    probes_accepted: list[Any] = field(default_factory=list)
    stuck_samples: int = 0
    stuck_tasks: list[Any] = field(default_factory=list)
    pinned_samples: int = 0
    pinned_jobs: list[Any] = field(default_factory=list)
    worker_starts: int = 0
    unexpected_worker_exits: int = 0
    harness_notes: list[str] = field(default_factory=list)
    invariants: list[dict[str, Any]] = field(default_factory=list)
    logs: str | None = None

    @property
    def passed(self) -> bool:
        return all(r["violations"] == 0 for r in self.invariants if not r.get("skipped")) and self.drained

    @property
    def stale_writes_rejected(self) -> int:
        return sum(ops.get("rejected", 0) for ops in self.audit.values())

    def render(self) -> list[str]:
        return [
            *self._header_lines(),
            *self._work_lines(),
            *self._fault_lines(),
            *self._failover_lines(),
            *self._actor_lines(),
            *self._stale_write_lines(),
            *self._verdict_lines(),
            "RESULT: " + ("PASS" if self.passed else "FAIL"),
        ]

    def _header_lines(self) -> list[str]:
        c = self.config
        return [
            f"JetEncode soak: {c['workers']} workers x {c['concurrency']} slots, {self.jobs_enqueued} jobs "
            f"({c.get('split_jobs') or 0} of them split transcodes, the rest noop), "
            f"{self.load_seconds:.0f}s load + {self.drain_seconds:.0f}s drain (seed {self.seed})",
            f"  database      {self.database}",
            f"  timings       lease {c['lease']:g}s, heartbeat {c['heartbeat']:g}s, recovery every "
            f"{c['recovery_interval']:g}s, stale {c['stale_worker']:g}s, reassign after {c['reassign_after']:g}s, "
            f"retry delays x{c['retry_delay_scale']:g}",
        ]

    def _work_lines(self) -> list[str]:
        """The jobs by status, the stages by state, the fenced writes accepted."""
        status = ", ".join(f"{n} {s}" for s, n in sorted(self.job_status.items(), key=lambda kv: -kv[1]))
        states = ", ".join(f"{n} {s}" for s, n in sorted(self.task_states.items(), key=lambda kv: -kv[1]))
        accepted = {op: v.get("accepted", 0) for op, v in self.audit.items()}
        return [
            f"  jobs          {self.jobs_enqueued} enqueued: {status}"
            + ("" if self.drained else "  ** NOT DRAINED **"),
            f"  stages        {self.tasks} tasks ({states}); {self.children} children; "
            f"{self.attempts} attempts; {self.reexecuted_jobs} jobs re-executed (moved off their worker or "
            "redispatched)",
            "  fenced writes accepted: " + ", ".join(f"{op} {n}" for op, n in sorted(accepted.items()) if n),
        ]

    def _fault_lines(self) -> list[str]:
        faults = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())) or "none"
        lines = [f"  faults        {faults}"]
        if self.fault_details:
            lines.append(
                "                ("
                + ", ".join(f"{k} {v}" for k, v in sorted(self.fault_details.items()))
                + ")"
            )
        if self.postgres_restart_seconds:
            lines.append(
                "                PostgreSQL down for "
                + ", ".join(f"{s:.2f}s" for s in self.postgres_restart_seconds)
            )
        return lines

    def _failover_lines(self) -> list[str]:
        """The drains and evacuations with their outcomes, and the reassignments by cause."""
        controls = []
        for kind in ("drain", "evacuate"):
            outcomes = self.fault_outcomes.get(kind, {})
            text = f"{kind} {self.faults.get(kind, 0)}"
            if outcomes:
                text += " (" + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())) + ")"
            controls.append(text)
        moved = (
            f"; the evacuations moved {self.evacuated_jobs} jobs at once"
            if self.faults.get("evacuate")
            else ""
        )
        return [
            "  failover      " + ", ".join(controls) + moved,
            "                reassignments by cause: "
            + (", ".join(f"{k} {v}" for k, v in self.reassignments.items()) or "none"),
        ]

    def _actor_lines(self) -> list[str]:
        """The worker processes and the operators."""
        lines = [
            f"  workers       {self.worker_starts} process starts, {self.unexpected_worker_exits} unexpected exits"
        ]
        ops = [
            f"{action} {sum(outcomes.values())} ("
            + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
            + ")"
            for action, outcomes in sorted(self.operators.items())
        ]
        lines.append("  operators     " + ("; ".join(ops) or "none"))
        if self.operator_failures:
            lines.append(f"  operator database errors: {self.operator_failures}")
        return lines

    def _stale_write_lines(self) -> list[str]:
        """The stale writes the fence rejected, the prober's, and the monitor's samples."""
        rejected = {op: v.get("rejected", 0) for op, v in self.audit.items()}
        lines = [
            f"  stale writes rejected: {self.stale_writes_rejected} ("
            + ", ".join(f"{op} {n}" for op, n in sorted(rejected.items()) if n)
            + ")"
        ]
        if self.rejection_reasons:
            by_reason = sorted(self.rejection_reasons.items(), key=lambda kv: -kv[1])
            lines.append("                by reason: " + ", ".join(f"{r} {n}" for r, n in by_reason))
        sent = sum(self.probes_sent.values())
        lines.append(
            f"  probes        {sent} stale writes sent on purpose: {self.probes_rejected} rejected, "
            f"{self.probes_replayed} answered as idempotent replays, {len(self.probes_accepted)} accepted"
        )
        lines.append(
            f"  monitor       {self.stuck_samples} samples of 'running past lease' and {self.pinned_samples} of "
            "'pinned to a departed worker' with a violation"
        )
        return lines

    def _verdict_lines(self) -> list[str]:
        """The harness's notes, each invariant's result, where the worker logs were kept."""
        lines = [f"  note          {note}" for note in self.harness_notes]
        passed = sum(1 for r in self.invariants if r["violations"] == 0 and not r.get("skipped"))
        lines.append(f"  invariants    {passed}/{len(self.invariants)} passed")
        fields = ("name", "description", "violations", "examples", "checked", "skipped")
        for r in self.invariants:
            lines.append("    " + invariants.InvariantResult(**{k: r[k] for k in fields}).line())
        if self.logs:
            lines.append(f"  worker logs   {self.logs}")
        return lines

    def to_json(self) -> str:
        return json.dumps(asdict(self), default=str, indent=2)


# ---- helpers ------------------------------------------------------------------------------------


def _fetch(query: str, params=()) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def _retry(func: Callable[[], Any], *, seconds: float = 60.0) -> Any:
    """Call `func`, riding out connection losses (PostgreSQL restarts, terminated backends)."""
    deadline = time.monotonic() + seconds
    lost = _connection_errors()
    while True:
        try:
            return func()
        except lost:
            reset_django_connection()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


RETRY_DELAY_SQL = """
CREATE OR REPLACE FUNCTION retry_delay_v1(p_attempt int) RETURNS interval
LANGUAGE sql IMMUTABLE AS $fn$
  SELECT make_interval(secs => least(power(greatest(p_attempt - 1, 0), 4) + 15, 3600) * {scale})
$fn$
"""


class RetryDelayScale:
    """Replace retry_delay_v1 with a scaled copy for the run; put the original back afterwards."""

    def __init__(self, scale: float):
        self.scale = scale
        self.original: str | None = None

    def __enter__(self):
        if self.scale != 1.0:
            self.original = _fetch("SELECT pg_get_functiondef('retry_delay_v1(int)'::regprocedure)")[0][0]
            with connection.cursor() as cursor:
                cursor.execute(RETRY_DELAY_SQL.format(scale=float(self.scale)))
        return self

    def __exit__(self, *exc):
        if self.original is not None:

            def restore():
                with connection.cursor() as cursor:
                    cursor.execute(self.original)

            _retry(restore)


class Monitor(threading.Thread):
    """Samples every second, on its own connection: nothing running past lease + recovery + slack,
    and no idle job pinned to a draining worker for longer than recovery + slack, or to a silent one
    past its failover delay (the lease, or the reassignment delay with local work) + recovery + slack.
    """

    def __init__(
        self,
        url: str,
        grace: float,
        out: Callable[[str], None],
        jobs_target: Callable[[], int],
        *,
        lease: float = 3.0,
        reassign_after: float = 10.0,
    ):
        super().__init__(name="soak-monitor", daemon=True)
        self.url = url
        self.grace = grace
        self.out = out
        self.jobs_target = jobs_target
        self.lease = lease
        self.reassign_after = reassign_after
        self.stop_event = threading.Event()
        self.violating_samples = 0
        self.stuck: dict[int, Any] = {}
        self.pinned_samples = 0
        self.pinned: dict[Any, Any] = {}  # job id -> (job, worker, why, seconds)
        self._draining_since: dict[tuple, float] = {}  # (job, worker, session) -> first seen
        self.started = time.monotonic()

    def _sample_pinned(self, cursor) -> int:
        rows = invariants.pinned_to_departed_workers(cursor, self.lease, self.reassign_after, self.grace)
        now = time.monotonic()
        seen: dict[tuple, float] = {}
        overdue = []
        for job, uid, session, why, seconds in rows:
            if why == "draining":
                key = (job, uid, session)
                seen[key] = self._draining_since.get(key, now)
                waited = now - seen[key]
                if waited > self.grace:
                    overdue.append(
                        (str(job), uid, "idle on a draining worker", round(waited - self.grace, 1))
                    )
            else:
                overdue.append((str(job), uid, "idle on a silent worker", float(seconds)))
        self._draining_since = seen
        for item in overdue:
            self.pinned[item[0]] = item
        if overdue:
            self.pinned_samples += 1
        return len(overdue)

    def run(self) -> None:
        conn = None
        last_report = 0.0
        while not self.stop_event.is_set():
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = psycopg.connect(
                        self.url,
                        autocommit=True,
                        connect_timeout=5,
                        application_name="jetencode-soak-monitor",
                    )
                with conn.cursor() as cursor:
                    rows = invariants.stuck_running(cursor, self.grace)
                    if rows:
                        self.violating_samples += 1
                        for task_id, uid, seconds in rows:
                            self.stuck[task_id] = (task_id, uid, float(seconds))
                    pinned = self._sample_pinned(cursor)
                    if time.monotonic() - last_report >= 5:
                        last_report = time.monotonic()
                        cursor.execute("SELECT status, count(*) FROM jobs GROUP BY status")
                        counts = dict(cursor.fetchall())
                        done = sum(counts.get(s, 0) for s in TERMINAL)
                        self.out(
                            f"  t={time.monotonic() - self.started:5.0f}s jobs {done}/{self.jobs_target()} "
                            f"terminal; "
                            + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if k not in TERMINAL)
                            + (f"; {len(rows)} stuck" if rows else "")
                            + (f"; {pinned} left pinned" if pinned else "")
                        )
            except psycopg.Error:
                conn = None
            self.stop_event.wait(1.0)
        if conn is not None:
            conn.close()

    def stop(self) -> None:
        self.stop_event.set()
        self.join(10)


def _worker_env(config: SoakConfig, database_url: str, workdir: Path) -> dict[str, str]:
    env = dict(os.environ)
    for key in ("JETENCODE_TEST_DATABASE_NAME",):
        env.pop(key, None)
    # A worker given a DATABASE_URL with DEBUG off refuses to start without a secret key
    # (docs/security.md): the soak's workers share the soak's own.
    env.setdefault("JETENCODE_SECRET_KEY", settings.SECRET_KEY)
    env.update(
        {
            "DATABASE_URL": database_url,
            "JETENCODE_LEASE_SECONDS": str(config.lease),
            "JETENCODE_HEARTBEAT_SECONDS": str(config.heartbeat),
            "JETENCODE_RECOVERY_INTERVAL_SECONDS": str(config.recovery_interval),
            "JETENCODE_POLL_SECONDS": str(config.poll),
            "JETENCODE_STALE_WORKER_SECONDS": str(config.stale_worker),
            "JETENCODE_REASSIGN_AFTER_SECONDS": str(config.reassign_after),
            "JETENCODE_SHUTDOWN_GRACE_SECONDS": str(config.shutdown_grace),
            "JETENCODE_OUTPUT_ROOT": str(workdir / "outputs"),
            "JETENCODE_WORKSPACE_ROOT": str(workdir / "workspace"),
            "JETENCODE_MEDIA_ROOT": str(workdir / "media"),
            "JETENCODE_SCRATCH_ROOT": str(workdir / "scratch"),
            "JETENCODE_SCRATCH_SWEEP_SECONDS": "2",
            "JETENCODE_SCRATCH_GRACE_SECONDS": "0",
            "JETENCODE_LOG_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


SPLIT_CLIP = "soak/split.mp4"
SPLIT_PARAMS = {
    "input": SPLIT_CLIP,
    "split": "chunks",
    "chunk_seconds": 2,
    "ladder": [{"height": 144}],
    "quality_metrics": [],
    "preset": "ultrafast",
}


def make_split_clip(workdir: Path) -> None:
    """The split jobs' source: 8 s of 320x180 at 25 fps with audio, under the workers' media root."""
    import subprocess

    from media import commands

    dest = workdir / "media" / SPLIT_CLIP
    dest.parent.mkdir(parents=True, exist_ok=True)
    argv = commands.synthetic_clip(dest, width=320, height=180, seconds=8.0, fps=25, audio=True)
    subprocess.run(argv, check=True, capture_output=True, timeout=120)


def _split_job(rng: random.Random, config: SoakConfig) -> repository.NewJob:
    """A split transcode (all its stages `cluster`: any worker, chunks lost with their worker)."""
    return repository.NewJob(
        "transcode", dict(SPLIT_PARAMS), priority=rng.choice([0, 1]), max_attempts=5, timeout_seconds=300
    )


def _new_job(rng: random.Random, config: SoakConfig) -> repository.NewJob:
    fail_weights = [0.5, 0.3, 0.2] + [0.1] * max(0, config.max_fail_attempts - 2)
    params = {
        "seconds": round(rng.uniform(0, config.max_seconds), 2),
        "fail_attempts": rng.choices(
            range(config.max_fail_attempts + 1), weights=fail_weights[: config.max_fail_attempts + 1]
        )[0],
        "children": rng.randint(0, config.max_children),
    }
    return repository.NewJob(
        "noop",
        params,
        priority=rng.choice([0, 0, 0, rng.randint(-3, 3)]),
        max_attempts=rng.randint(*config.max_attempts),
        timeout_seconds=120,
    )


# ---- the run ------------------------------------------------------------------------------------


def run_soak(
    config: SoakConfig,
    *,
    database_url: str,
    private_pg=None,
    database_label: str | None = None,
    out: Callable[[str], None] = print,
) -> SoakReport:
    run = SoakRun(config, database_url, private_pg=private_pg, database_label=database_label, out=out)
    try:
        with RetryDelayScale(config.retry_delay_scale):
            run.start_workers()
            run.start_actors()
            run.load()
            run.heal_and_drain()
            results = run.stop_and_check()
    finally:
        run.clean_up()
    return run.finish(results)


class SoakRun:
    """One run's processes and actors, and the report they fill, phase by phase (the module
    docstring); `run_soak` calls the phases in order."""

    def __init__(self, config: SoakConfig, database_url: str, *, private_pg, database_label, out):
        self.config = config
        self.database_url = database_url
        self.private_pg = private_pg
        self.out = out
        seed = config.seed if config.seed is not None else random.SystemRandom().randrange(1, 10**9)
        self.rng = random.Random(seed)
        self.workdir = Path(config.workdir or tempfile.mkdtemp(prefix="jetencode-soak-"))
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        self.report = SoakReport(
            config=asdict(config),
            seed=seed,
            database=database_label
            or (
                f"private PostgreSQL on port {private_pg.port} (restarted under load)"
                if private_pg
                else "the configured server"
            ),
        )
        env = _worker_env(config, database_url, self.workdir)
        if config.split_jobs:
            make_split_clip(self.workdir)
        self.workers = [
            WorkerProcess(
                f"soak-{i + 1}",
                concurrency=config.concurrency,
                env=env,
                logdir=self.workdir / "logs",
                workspace=self.workdir / "workspace",
            )
            for i in range(config.workers)
        ]
        self.dbname = _fetch("SELECT current_database()")[0][0]
        self.enqueued: list[Any] = []
        self.monitor = Monitor(
            database_url,
            config.recovery_interval + config.slack,
            out,
            lambda: len(self.enqueued),
            lease=config.lease,
            reassign_after=config.reassign_after,
        )
        self.injector: FaultInjector | None = None
        self.chaos: OperatorChaos | None = None
        self.prober: StaleWriteProber | None = None

    # -- the phases ----------------------------------------------------------------------------

    def start_workers(self) -> None:
        for worker in self.workers:
            worker.start()
        _wait_registered(self.workers, seconds=90)
        self.out(f"soak: {self.config.workers} workers registered; logs in {self.workdir / 'logs'}")
        self.monitor.start()

    def start_actors(self) -> None:
        """The fault injector, the operators and the stale-write prober, each with its own random
        generator drawn from the run's (in this order, so a seed replays the run)."""
        config = self.config
        if config.faults:
            self.injector = FaultInjector(
                self.workers,
                admin_url=self.database_url,
                dbname=self.dbname,
                interval=config.fault_interval,
                lease=config.lease,
                recovery_interval=config.recovery_interval,
                reassign_after=config.reassign_after,
                rng=random.Random(self.rng.random()),
                private_pg=self.private_pg,
                restart_every=config.restart_every,
                on_event=lambda text: self.out(f"  fault: {text}"),
                window=config.duration,
            )
            self.injector.start()
        if config.operators:
            self.chaos = OperatorChaos(
                config.operator_interval, random.Random(self.rng.random()), cancel_weight=config.cancel_weight
            )
            self.chaos.start()
        if config.probes:
            self.prober = StaleWriteProber(
                config.probe_interval, random.Random(self.rng.random()), config.lease
            )
            self.prober.start()

    def load(self) -> None:
        started = time.monotonic()
        _load(self.config, self.rng, self.enqueued, started)
        self.report.load_seconds = time.monotonic() - started

    def heal_and_drain(self) -> None:
        """Stop the faults and the operators, resume every paused job, wait until every job is
        terminal; then stop the prober and the monitor."""
        if self.injector is not None:
            self.injector.stop()
        if self.chaos is not None:
            self.chaos.stop()
            resumed = OperatorChaos(1.0, self.rng).resume_everything(time.monotonic() + 60)
            self.out(
                f"soak: load over after {self.report.load_seconds:.0f}s ({len(self.enqueued)} jobs); "
                f"{resumed} paused jobs resumed; draining"
            )
        drain_started = time.monotonic()
        self.report.drained = _drain(self.config.drain_timeout)
        self.report.drain_seconds = time.monotonic() - drain_started
        if self.prober is not None:
            self.prober.stop()
        self.monitor.stop()

    def stop_and_check(self) -> list[invariants.InvariantResult]:
        for worker in self.workers:
            worker.shutdown()
        return _retry(lambda: _check(self.config, self.enqueued, self.prober))

    def clean_up(self) -> None:
        try:
            for thread in (self.injector, self.chaos, self.prober, self.monitor):
                if thread is not None and thread.is_alive():
                    thread.stop()
        finally:  # whatever went wrong above, never leave worker processes behind
            for worker in self.workers:
                if worker.alive():
                    worker.shutdown(timeout=5)
            reset_django_connection()

    # -- the report ----------------------------------------------------------------------------

    def finish(self, results: list[invariants.InvariantResult]) -> SoakReport:
        report, config = self.report, self.config
        report.jobs_enqueued = len(self.enqueued)
        report.invariants = [dict(asdict(r), passed=r.passed) for r in results] + self.sampled_invariants()
        report.stuck_samples = self.monitor.violating_samples
        report.stuck_tasks = list(self.monitor.stuck.values())[:20]
        report.pinned_samples = self.monitor.pinned_samples
        report.pinned_jobs = list(self.monitor.pinned.values())[:20]
        _figures(report)
        self.record_faults()
        self.record_operators_and_probes()
        report.worker_starts = sum(w.starts for w in self.workers)
        report.unexpected_worker_exits = sum(len(w.unexpected_exits) for w in self.workers)
        if report.passed and not config.keep_logs and config.workdir is None:
            shutil.rmtree(self.workdir, ignore_errors=True)
        else:
            report.logs = str(self.workdir / "logs")
        return report

    def sampled_invariants(self) -> list[dict[str, Any]]:
        """The monitor's two invariants, in the shape of the SQL checks' results."""
        c, monitor = self.config, self.monitor
        return [
            dict(
                name="nothing_running_past_lease_sampled",
                description=f"sampled every second during the run: no task ran past lease + "
                f"{c.recovery_interval:g}s + {c.slack:g}s",
                violations=len(monitor.stuck),
                examples=list(monitor.stuck.values())[:5],
                checked=None,
                skipped=None,
                passed=not monitor.violating_samples,
            ),
            dict(
                name="pinned_jobs_move_sampled",
                description=f"sampled every second during the run: no idle job stayed pinned to a draining worker "
                f"past {c.recovery_interval:g}s + {c.slack:g}s, nor to a silent one past its failover delay "
                f"({c.lease:g}s, {c.reassign_after:g}s with local work) + {c.recovery_interval:g}s + "
                f"{c.slack:g}s",
                violations=len(monitor.pinned),
                examples=list(monitor.pinned.values())[:5],
                checked=None,
                skipped=None,
                passed=not monitor.pinned,
            ),
        ]

    def record_faults(self) -> None:
        injector, report = self.injector, self.report
        if injector is None:
            return
        report.faults = dict(injector.counts)
        report.fault_details = dict(injector.details)
        report.fault_outcomes = {k: dict(v) for k, v in injector.outcomes.items()}
        report.evacuated_jobs = injector.evacuated_jobs
        if injector.failures:
            report.harness_notes.append(f"drain/evacuate database errors: {dict(injector.failures)}")
        report.postgres_restart_seconds = [round(s, 2) for s in injector.restart_seconds]
        report.harness_notes += [f"fault not injected: {e}" for e in injector.errors[:5]]

    def record_operators_and_probes(self) -> None:
        chaos, prober, report = self.chaos, self.prober, self.report
        if chaos is not None:
            report.operators = {k: dict(v) for k, v in chaos.outcomes.items()}
            report.operator_failures = dict(chaos.failures)
        if prober is not None:
            report.probes_sent = dict(prober.sent)
            report.probes_rejected = sum(prober.rejected.values())
            report.probes_replayed = prober.replayed
            report.probes_accepted = list(prober.accepted)
            if prober.failures:
                report.harness_notes.append(f"prober database errors: {dict(prober.failures)}")


def _wait_registered(workers: list[WorkerProcess], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    uids = [w.uid for w in workers]
    while True:
        rows = _retry(
            lambda: _fetch(
                "SELECT count(*) FROM queue_workers WHERE uid = ANY(%s) AND lifecycle = 'active' "
                "AND last_heartbeat_at > now() - interval '5 seconds'",
                [uids],
            )
        )
        if rows[0][0] == len(uids):
            return
        dead = [w.uid for w in workers if not w.alive()]
        if dead or time.monotonic() > deadline:
            logs = "\n".join((w.logdir / f"{w.uid}.log").read_text()[-3000:] for w in workers)
            raise RuntimeError(f"workers did not register (dead: {dead}):\n{logs}")
        time.sleep(0.2)


def _load(config: SoakConfig, rng: random.Random, enqueued: list[Any], started: float) -> None:
    burst = min(config.jobs, config.workers * config.concurrency * 2)
    while True:
        elapsed = time.monotonic() - started
        due = max(burst, math.ceil(config.jobs * min(1.0, elapsed / max(config.duration, 0.001))))
        while len(enqueued) < min(due, config.jobs):
            every = config.jobs // config.split_jobs if config.split_jobs else 0
            job = _split_job(rng, config) if every and len(enqueued) % every == 0 else _new_job(rng, config)
            try:
                enqueued.append(repository.enqueue_job(job, stale_seconds=60))
            except _connection_errors():
                reset_django_connection()  # unconfirmed: it may or may not exist; only confirmed ones count
                time.sleep(0.2)
        if elapsed >= config.duration and len(enqueued) >= config.jobs:
            return
        time.sleep(0.05)


def _drain(timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = _retry(
            lambda: _fetch(
                "SELECT count(*) FROM jobs WHERE status NOT IN ('completed', 'failed', 'cancelled')"
            )
        )[0][0]
        if left == 0:
            return True
        time.sleep(0.5)
    return False


def _check(
    config: SoakConfig, enqueued: list[Any], prober: StaleWriteProber | None
) -> list[invariants.InvariantResult]:
    drained = (
        _fetch("SELECT count(*) FROM jobs WHERE status NOT IN ('completed', 'failed', 'cancelled')")[0][0]
        == 0
    )
    with connection.cursor() as cursor:
        return invariants.check_all(
            cursor,
            expected_job_ids=enqueued,
            drained=drained,
            recovery_interval=config.recovery_interval,
            slack=config.slack,
            probe_violations=len(prober.accepted) if prober else 0,
            probe_examples=prober.accepted if prober else (),
        )


def _figures(report: SoakReport) -> None:
    def figures():
        report.job_status = dict(_fetch("SELECT status, count(*) FROM jobs GROUP BY status"))
        report.task_states = dict(_fetch("SELECT state, count(*) FROM queue_tasks GROUP BY state"))
        report.tasks, report.children, report.attempts = _fetch(
            "SELECT count(*), count(*) FILTER (WHERE parent_task_id IS NOT NULL), coalesce(sum(attempt), 0) "
            "FROM queue_tasks"
        )[0]
        report.reexecuted_jobs = _fetch("SELECT count(*) FROM job_schedule WHERE execution_id > 1")[0][0]
        audit: dict[str, dict[str, int]] = {}
        for operation, accepted, n in _fetch(
            "SELECT operation, accepted, count(*) FROM queue_fence_audit GROUP BY 1, 2"
        ):
            audit.setdefault(operation, {})["accepted" if accepted else "rejected"] = n
        report.audit = audit
        report.reassignments = queries.reassignments()
        report.rejection_reasons = dict(
            Counter(
                dict(
                    _fetch(
                        "SELECT reason, count(*) FROM queue_fence_audit WHERE NOT accepted GROUP BY reason"
                    )
                )
            )
        )

    _retry(figures)
    report.attempts = int(report.attempts)
