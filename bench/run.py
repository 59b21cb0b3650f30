"""The benchmark suite's command line: `python -m bench [--quick] [--only NAME ...]`.

Creates its own database (`jetencode_bench` on the server named by DATABASE_URL, default
postgresql://postgres@127.0.0.1:5432/postgres), migrates it with `manage.py migrate`, runs the
measurements in one process against it (workers as real `manage.py runworker` subprocesses), prints
a table with each target's pass/miss, and writes everything to bench/results/latest.json. The
method is written down in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from datetime import UTC, datetime
from pathlib import Path

import psutil

from bench import db

MEASUREMENTS = (
    "throughput",
    "ceiling",
    "claim",
    "serialized",
    "wakeup",
    "web",
    "media",
    "failover",
    "quality",
    "farm",
    "peers",
    "startup",
    "split",
    "gpu",
)
RESULTS = Path(__file__).resolve().parent / "results" / "latest.json"

PROFILES = {
    "full": {
        "throughput_jobs": 5000,
        "throughput_workers": [2, 1, 4],
        "ceiling_seconds": 10.0,
        "stale_statistics_run": True,
        "drain_pairs": 3,
        "claim_sizes": [1000, 100_000, 1_000_000],
        "claim_samples": 2000,
        "serialized_samples": 1000,
        "serialized_rounds": 3,
        "wakeup_samples": 50,
        "wakeup_poll_samples": 30,
        "web_jobs": 100_000,
        "web_samples": 100,
        "media_clip_seconds": 20,
        "media_pairs": 5,
        "failover_repetitions": 3,
        "failover_cases": ["sigkill_dispatch", "sigkill_later", "sigterm_dispatch", "sigterm_later"],
        "quality_clip_seconds": 20,
        "quality_size": "1280x720",
        "quality_pairs": 3,
        "farm_sizes": [25, 50, 100],
        "peers_jobs": 5000,
        "peers_shapes": [2, 1],
        "peers_rounds": 2,
        "split_shape": "full",
    },
    "quick": {
        "throughput_jobs": 500,
        "throughput_workers": [2, 1, 4],
        "ceiling_seconds": 4.0,
        "stale_statistics_run": True,
        "drain_pairs": 3,
        "claim_sizes": [1000, 100_000],
        "claim_samples": 300,
        "serialized_samples": 500,
        "serialized_rounds": 3,
        "wakeup_samples": 20,
        "wakeup_poll_samples": 10,
        "web_jobs": 100_000,
        "web_samples": 30,
        "media_clip_seconds": 8,
        "media_pairs": 2,
        "failover_repetitions": 1,
        "failover_cases": ["sigkill_dispatch", "sigkill_later", "sigterm_dispatch", "sigterm_later"],
        "quality_clip_seconds": 8,
        "quality_size": "1280x720",
        "quality_pairs": 1,
        "farm_sizes": [10, 25],
        "peers_jobs": 1000,
        "peers_shapes": [2],
        "peers_rounds": 2,
        "split_shape": "quick",
    },
    # The test suite's smoke run: every code path, tiny sizes, no meaningful figures.
    "smoke": {
        "throughput_jobs": 40,
        "throughput_workers": [1],
        "ceiling_seconds": 1.0,
        "stale_statistics_run": False,
        "drain_pairs": 1,
        "claim_sizes": [1000],
        "claim_samples": 30,
        "serialized_samples": 20,
        "serialized_rounds": 1,
        "wakeup_samples": 2,
        "wakeup_poll_samples": 0,
        "web_jobs": 500,
        "web_samples": 1,
        "media_clip_seconds": 2,
        "media_pairs": 1,
        "failover_repetitions": 1,
        "failover_cases": ["sigterm_dispatch"],
        "quality_clip_seconds": 2,
        "quality_size": "320x180",
        "quality_pairs": 1,
        "farm_sizes": [2],
        "peers_jobs": 50,
        "peers_shapes": [1],
        "peers_rounds": 1,
        "split_shape": "smoke",
    },
}
# Not in the smoke set: media, quality, split and gpu (FFmpeg; gpu also NVENC), farm (its own server),
# startup (its own embedded server and a whole run command), peers (procrastinate and pgqueuer, from
# the `dev` extra).
SMOKE_DEFAULT = ("throughput", "ceiling", "claim", "serialized", "wakeup", "web", "failover")
CONCURRENCY = 4
THROUGHPUT_POLL_SECONDS = 0.1


def log(message: str) -> None:
    print(message, flush=True)


def machine_info(url: str) -> dict:
    info = {
        "cpus": psutil.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }
    try:
        with db.connect(url) as conn:
            info["postgresql"] = db.scalar(conn, "SHOW server_version")
            info["postgresql_settings"] = dict(
                conn.execute(
                    """SELECT name, setting || coalesce(unit, '') FROM pg_settings
                    WHERE name IN ('shared_buffers', 'synchronous_commit', 'fsync', 'wal_sync_method', 'jit',
                                   'max_connections', 'commit_delay', 'work_mem', 'shared_preload_libraries')
                    ORDER BY name"""
                ).fetchall()
            )
    except Exception as exc:  # reported, not fatal
        info["postgresql_error"] = str(exc)
    return info


class Runner:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.profile = dict(PROFILES[args.profile])
        if args.jobs:
            self.profile["throughput_jobs"] = args.jobs
            self.profile["peers_jobs"] = args.jobs
        if args.failover_repetitions:
            self.profile["failover_repetitions"] = args.failover_repetitions
        self.results: dict = {}
        self.noise: dict = {}
        self.workdir = Path(tempfile.mkdtemp(prefix="jetencode-bench-"))
        self.media_root = self.workdir / "media"
        self.url = ""

    # -- one measurement, isolated: an error is recorded and the suite carries on ---------------

    def step(self, name: str, func) -> None:
        log(f"[{name}]")
        cpu_before = psutil.cpu_times()
        load_before = os.getloadavg()[0]
        started = time.monotonic()
        try:
            self.results[name] = func()
        except Exception as exc:
            self.results[name] = {
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc()[-4000:],
            }
            log(f"  ERROR: {type(exc).__name__}: {exc}")
        elapsed = time.monotonic() - started
        cpu_after = psutil.cpu_times()
        busy = sum(
            getattr(cpu_after, f) - getattr(cpu_before, f)
            for f in ("user", "nice", "system", "irq", "softirq", "steal")
        )
        self.noise[name] = {
            "seconds": round(elapsed, 1),
            "machine_cpu_busy_percent": round(100 * busy / max(elapsed * psutil.cpu_count(), 1e-9), 1),
            "load_average_before": round(load_before, 2),
            "load_average_after": round(os.getloadavg()[0], 2),
        }

    # -- measurements -------------------------------------------------------------------------

    def throughput_and_ceiling(self, do_throughput: bool, do_ceiling: bool) -> None:
        from bench import throughput

        p = self.profile

        def measure(processes: int, **options) -> dict:
            return throughput.measure(
                self.url,
                self.args.database,
                self.workdir,
                processes=processes,
                count=p["throughput_jobs"],
                concurrency=CONCURRENCY,
                poll_seconds=THROUGHPUT_POLL_SECONDS,
                log=log,
                **options,
            )

        runs, ceilings, drain, stale = [], [], None, None
        for processes in p["throughput_workers"]:
            slots = processes * CONCURRENCY
            if do_ceiling:  # right before the matching throughput run: the same machine conditions
                ceilings.append(self._ceiling(slots))
            if do_throughput:
                r = measure(processes)
                if do_ceiling:
                    _share(r, ceilings[-1])
                runs.append(r)
                if processes == p["throughput_workers"][0] and p.get("drain_pairs"):
                    drain = self._drains(measure, processes, p["drain_pairs"], with_ceiling=do_ceiling)
        if do_throughput and p.get("stale_statistics_run"):
            # The same headline run after ANALYZE recorded statistics of the empty queue (what
            # autovacuum leaves when it runs on a drained queue): plans cached from then on.
            stale = measure(2, stale_statistics=True)
        if do_ceiling:
            self.results["ceiling"] = {"runs": ceilings}
        if do_throughput:
            self.results["throughput"] = {
                "runs": runs,
                "jobs": p["throughput_jobs"],
                "concurrency": CONCURRENCY,
                "poll_seconds": THROUGHPUT_POLL_SECONDS,
                "stale_statistics_run": stale,
                "drain_run": drain,
            }

    def _ceiling(self, slots: int) -> dict:
        from bench import ceiling

        c = ceiling.measure(self.url, self.args.database, slots, self.profile["ceiling_seconds"])
        log(f"  ceiling with {slots} connections: {c['per_second']} claim+finish/s")
        return c

    def _drains(self, measure, processes: int, pairs: int, *, with_ceiling: bool) -> dict:
        """The headline shape in the ceiling's own shape (a filled queue, drained), `pairs` times,
        each right after a ceiling of its own. On a shared VM both figures move by a quarter
        within minutes, so a single pair says little: the run returned is the one with the
        median share, and its `pairs` lists them all. Without the ceiling, one drain and no share."""
        if not with_ceiling:
            return measure(processes, drain=True)
        runs, summaries = [], []
        for _ in range(pairs):
            c = self._ceiling(processes * CONCURRENCY)
            run = measure(processes, drain=True)
            _share(run, c)
            runs.append(run)
            summaries.append(
                {
                    "ceiling_per_second": c["per_second"],
                    "stages_per_second": run["stages_per_second"],
                    "share_of_ceiling": run["share_of_ceiling"],
                    "cpu_ms_per_stage": (run.get("cpu_ms_per_stage") or {}).get("total"),
                    "ceiling_cpu_ms_per_cycle": c["cpu_ms_per_cycle"]["total"],
                }
            )
        median = sorted(runs, key=lambda r: r["share_of_ceiling"])[(len(runs) - 1) // 2]
        median["pairs"] = summaries
        if pairs > 1:
            log(
                f"  -> {100 * median['share_of_ceiling']:.0f} % of the ceiling, {_pair_shares(median).rstrip('; ')}"
            )
        return median

    def run(self) -> int:
        selected = self.selected()
        started_at = datetime.now(UTC)
        t0 = time.monotonic()
        machine = self.prepare(selected)
        try:
            self.run_measurements(selected)
        finally:
            from django.db import connections

            connections.close_all()
            if not self.args.keep_database:
                db.drop_database(self.args.database)
        machine["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
        report = self.report(selected, started_at, time.monotonic() - t0, machine)
        output = Path(self.args.output) if self.args.output else RESULTS
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(report, indent=2, default=str) + "\n")
        print_table(report)
        log(f"\nwrote {output}")
        failed = [name for name in selected if "error" in (self.results.get(name) or {"error": "missing"})]
        if failed:
            log(f"measurements that failed: {', '.join(failed)}; worker logs kept in {self.workdir / 'logs'}")
            return 1
        if not self.args.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return 0

    def selected(self) -> list[str]:
        args = self.args
        selected = list(args.only or (SMOKE_DEFAULT if args.profile == "smoke" else MEASUREMENTS))
        for name in selected:
            if name not in MEASUREMENTS:
                raise SystemExit(f"unknown measurement {name!r}; choose from {', '.join(MEASUREMENTS)}")
        return selected

    def prepare(self, selected: list[str]) -> dict:
        """Create and migrate the bench database, point this process's Django at it; the machine's
        description."""
        args = self.args
        log(
            f"JetEncode benchmark ({args.profile}): {', '.join(selected)}; database {args.database} on "
            f"{db.server_url().rsplit('@', 1)[-1]}; work dir {self.workdir}"
        )
        self.url = db.create_database(args.database, log=lambda m: log("  " + m))
        # Django in this process (job validation, the API/dashboard test Client) uses the bench
        # database and the same media root as the workers.
        os.environ["JETENCODE_MEDIA_ROOT"] = str(self.media_root)
        os.environ["JETENCODE_OUTPUT_ROOT"] = str(self.workdir / "outputs")
        os.environ["JETENCODE_WORKSPACE_ROOT"] = str(self.workdir / "workspace")
        from bench import jobs

        warnings.filterwarnings("ignore", message="No directory at")
        jobs.setup_django(self.url)
        return machine_info(self.url)

    def run_measurements(self, selected: list[str]) -> None:
        """Each selected measurement in MEASUREMENTS' order, each isolated by step()."""
        if "throughput" in selected or "ceiling" in selected:
            self.step(
                "throughput+ceiling",
                lambda: self.throughput_and_ceiling("throughput" in selected, "ceiling" in selected),
            )
            failure = self.results.pop("throughput+ceiling", None)  # None unless it raised
            for name in ("throughput", "ceiling"):
                if name in selected and name not in self.results:
                    self.results[name] = failure or {"error": "no result"}
        for name, measure in (
            ("claim", self.measure_claim),
            ("serialized", self.measure_serialized),
            ("wakeup", self.measure_wakeup),
            ("web", self.measure_web),
            ("media", self.measure_media),
            ("failover", self.measure_failover),
            ("quality", self.measure_quality),
            ("farm", self.measure_farm),
            ("peers", self.measure_peers),
            ("startup", self.measure_startup),
            ("split", self.measure_split),
            ("gpu", self.measure_gpu),
        ):
            if name in selected:
                self.step(name, measure)

    def measure_claim(self) -> dict:
        from bench import claim_latency

        p = self.profile
        return claim_latency.measure(self.url, p["claim_sizes"], p["claim_samples"], log=log)

    def measure_serialized(self) -> dict:
        from bench import serialized

        p = self.profile
        return serialized.measure(self.url, p["serialized_samples"], p["serialized_rounds"], log=log)

    def measure_wakeup(self) -> dict:
        from bench import wakeup

        p = self.profile
        out = {
            "notify": wakeup.measure(
                self.url, self.workdir, samples=p["wakeup_samples"], notify=True, poll_seconds=1.0, log=log
            )
        }
        if p["wakeup_poll_samples"]:
            out["polling"] = wakeup.measure(
                self.url,
                self.workdir,
                samples=p["wakeup_poll_samples"],
                notify=False,
                poll_seconds=1.0,
                log=log,
            )
        return out

    def measure_web(self) -> dict:
        from bench import web

        return web.measure(self.url, self.profile["web_jobs"], self.profile["web_samples"], log=log)

    def measure_media(self) -> dict:
        from bench import media

        p = self.profile
        return media.measure(
            self.url,
            self.workdir,
            self.media_root,
            clip_seconds=p["media_clip_seconds"],
            pairs=p["media_pairs"],
            log=log,
        )

    def measure_quality(self) -> dict:
        from bench import quality

        p = self.profile
        return quality.measure(
            self.url,
            self.workdir,
            self.media_root,
            clip_seconds=p["quality_clip_seconds"],
            size=p["quality_size"],
            pairs=p["quality_pairs"],
            parts=tuple(self.args.quality_parts or quality.PARTS),
            log=log,
        )

    def measure_failover(self) -> dict:
        from bench import failover

        p = self.profile
        return failover.measure(
            self.url, self.workdir, repetitions=p["failover_repetitions"], cases=p["failover_cases"], log=log
        )

    def measure_farm(self) -> dict:
        from bench import farm

        sizes = self.args.farm_sizes or self.profile["farm_sizes"]
        return farm.measure(self.workdir, sizes, log=log)

    def measure_peers(self) -> dict:
        from bench import peers

        p = self.profile
        return peers.measure(
            self.url,
            self.args.database,
            self.workdir,
            count=p["peers_jobs"],
            shapes=p["peers_shapes"],
            rounds=p["peers_rounds"],
            keep_databases=self.args.keep_database,
            log=log,
        )

    def measure_startup(self) -> dict:
        from bench import startup

        return startup.measure(self.workdir, log=log)

    def measure_split(self) -> dict:
        from bench import split

        return split.measure(
            self.url,
            self.workdir,
            self.media_root,
            shape=self.args.split_shape or self.profile["split_shape"],
            measure_quality=self.args.split_metrics != "none",
            counts=self.args.split_workers,
            log=log,
        )

    def measure_gpu(self) -> dict:
        from bench import gpu

        keep = Path(self.args.gpu_keep) if self.args.gpu_keep else None
        return gpu.measure(self.url, self.workdir, self.media_root, keep=keep, log=log)

    def report(self, selected: list[str], started_at: datetime, seconds: float, machine: dict) -> dict:
        p = self.profile
        return {
            "suite": "jetencode-bench",
            "format": 1,
            "profile": self.args.profile,
            "measurements": selected,
            "started_at": started_at.isoformat(timespec="seconds"),
            "duration_seconds": round(seconds, 1),
            "command": "python -m bench " + " ".join(sys.argv[1:]),
            "machine": machine,
            "noise": self.noise,
            "parameters": {
                **p,
                "worker_concurrency": CONCURRENCY,
                "throughput_poll_seconds": THROUGHPUT_POLL_SECONDS,
            },
            "targets": evaluate(self.results, p),
            "results": self.results,
        }


# ---- targets and the table --------------------------------------------------------------------


def _get(results: dict, *path):
    node = results
    for key in path:
        if isinstance(node, dict):
            node = node.get(key)
        elif isinstance(node, list) and isinstance(key, int) and -len(node) <= key < len(node):
            node = node[key]
        else:
            return None
    return node


class Targets:
    """The targets of one report, in the order they are added."""

    def __init__(self):
        self.rows: list[dict] = []

    def add(self, tid, what, value, target, met, unit=""):
        self.rows.append(
            {
                "id": tid,
                "what": what,
                "value": value,
                "target": target,
                "unit": unit,
                "met": None if value is None or met is None else bool(met),
            }
        )


def _throughput_targets(results: dict, t: Targets) -> None:
    runs = _get(results, "throughput", "runs") or []
    headline = next((r for r in runs if r.get("worker_processes") == 2), runs[0] if runs else None)
    if headline:
        label = f"{headline['worker_processes']} workers x {CONCURRENCY} slots"
        value = headline.get("stages_per_second")
        t.add("1a", f"throughput, {label}", value, ">= 400", value is not None and value >= 400, "stages/s")
        share = headline.get("share_of_ceiling")
        t.add(
            "1b",
            f"throughput as share of the ceiling, {label}",
            share,
            ">= 0.60",
            share is not None and share >= 0.60,
        )
    # 1c and 1d measured the retired "80 % of the raw ceiling" clause (DECISIONS 20): still printed
    # as figures, no longer judged.
    drain = _get(results, "throughput", "drain_run")
    if drain and drain.get("share_of_ceiling") is not None:
        pairs = len(drain.get("pairs") or [])
        what = (
            "a filled queue drained (the ceiling's shape) as share of the ceiling, "
            f"{drain['worker_processes']} workers x {CONCURRENCY} slots"
            + (f", median of {pairs} pairs" if pairs > 1 else "")
        )
        t.add("1c", what, drain["share_of_ceiling"], "figure (DECISIONS 20)", None)
    projected = _get(results, "serialized", "projected_share")
    if projected is not None:
        what = (
            "the scheduler's serialized section against the ceiling's (raw / scheduler claim, one connection)"
        )
        t.add("1d", what, projected, "figure (DECISIONS 20)", None)


def _claim_wakeup_web_targets(results: dict, t: Targets) -> None:
    sizes = _get(results, "claim", "sizes") or {}
    if "1000" in sizes and len(sizes) > 1:
        largest = max(sizes, key=int)
        small = _get(sizes, "1000", "claim", "p99_ms")
        big = _get(sizes, largest, "claim", "p99_ms")
        ratio = round(big / small, 3) if small and big else None
        t.add(
            "3",
            f"claim p99 at {int(largest):,} / p99 at 1,000",
            ratio,
            "<= 2.0",
            ratio is not None and ratio <= 2.0,
        )
    wake = _get(results, "wakeup", "notify", "enqueue_to_handler_start", "p50_ms")
    if wake is not None:
        t.add("4", "idle wake-up p50 with notifications", wake, "< 50", wake < 50, "ms")
    for name, e in (_get(results, "web", "endpoints") or {}).items():
        p50 = e.get("p50_ms")
        jobs = _get(results, "web", "jobs")
        t.add("5", f"{name} p50 ({jobs:,} jobs)", p50, "< 100", p50 is not None and p50 < 100, "ms")


def _farm_targets(results: dict, t: Targets) -> None:
    for size in _get(results, "farm", "sizes") or []:
        n = size["workers"]
        conns = size["connections_per_worker"]["max"]
        t.add("farm-1", f"connections per worker, {n} workers", conns, "<= 3", conns <= 3)
        cpu = size["idle"]["postgres_cpu_percent_of_one_core"]
        if n >= 100:
            t.add(
                "farm-2", f"idle PostgreSQL CPU (steady), {n} workers", cpu, "<= 5", cpu <= 5, "% of a core"
            )
        for rate in size["rates"]:
            per = rate["claims_per_job"]
            t.add(
                "farm-3", f"claims per job, {n} workers, {rate['jobs_per_second']}/s", per, "<= 2", per <= 2
            )
            if rate["jobs_per_second"] == 20:
                p99 = rate["enqueue_to_start_ms"]["p99"]
                t.add("farm-4", f"enqueue->start p99, {n} workers, 20/s", p99, "<= 250", p99 <= 250, "ms")


def _peer_and_media_targets(results: dict, t: Targets) -> None:
    peer_summary = _get(results, "peers", "summary") or {}
    shape = f"2x{CONCURRENCY}" if f"2x{CONCURRENCY}" in peer_summary else next(iter(peer_summary), None)
    ratios = _get(peer_summary, shape, "ratios") or {}
    if len(ratios) == 2:
        lowest = min(ratios.values())
        medians = ", ".join(f"{k} {v:.2f}" for k, v in ratios.items())
        what = f"(1) throughput ahead of procrastinate 3.10 and pgqueuer 1.6, {shape}, medians {medians}"
        t.add("10", what, lowest, "> 1.0", lowest > 1.0, "x")
    ratio = _get(results, "media", "ratio_median")
    if ratio is not None:
        t.add("6", "media: system / direct FFmpeg", ratio, "<= 1.05", ratio <= 1.05)
    overhead = _get(results, "quality", "cost", "overhead_median")
    if overhead is not None:
        t.add("8", "quality: VMAF measuring overhead on job wall time", overhead, "<= 0.30", overhead <= 0.30)


def _split_targets(results: dict, t: Targets) -> None:
    widest = (_get(results, "split", "split") or [None])[-1]
    if widest:
        n, value = widest["workers"], widest.get("speedup")
        met = value is not None and value >= 0.8 * n
        t.add("12a", f"split: speed-up on {n} worker(s)", value, f">= {0.8 * n:g}", met, "x")
        mismatches = _get(results, "split", "mismatches")
        t.add("12b", "split: frame-count mismatches", mismatches, "0", mismatches == 0)


TARGET_GROUPS = (
    _throughput_targets,
    _claim_wakeup_web_targets,
    _farm_targets,
    _peer_and_media_targets,
    _split_targets,
)


def evaluate(results: dict, profile: dict) -> list[dict]:
    """Every target the results hold a figure for: id, what, value, target, unit and met (None
    where there is no figure, or where the row is a figure without a target)."""
    targets = Targets()
    for group in TARGET_GROUPS:
        group(results, targets)
    return targets.rows


def _share(run: dict, ceiling: dict) -> None:
    """Record a throughput run's share of the ceiling measured right before it."""
    run["ceiling_per_second"] = ceiling["per_second"]
    run["share_of_ceiling"] = round(run["stages_per_second"] / ceiling["per_second"], 3)
    log(f"  -> {100 * run['share_of_ceiling']:.0f} % of the ceiling")


def _pair_shares(drain: dict) -> str:
    """ "median of 3 pairs (61, 72, 75 %); " when the drain was repeated beside its ceilings."""
    pairs = drain.get("pairs") or []
    if len(pairs) < 2:
        return ""
    shares = ", ".join(f"{100 * pair['share_of_ceiling']:.0f}" for pair in pairs)
    return f"median of {len(pairs)} pairs ({shares} %); "


def _fmt(value, digits=1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _throughput_rows(results: dict) -> list[tuple[str, str, str]]:
    """(1) and (2): each throughput run beside the ceiling measured with as many connections."""
    rows = []
    for run, ceiling in _pairs(results):
        if run:
            cpu = run.get("cpu_ms_per_stage") or {}
            rows.append(
                (
                    f"(1) throughput {run['worker_processes']}x{CONCURRENCY}",
                    f"{_fmt(run.get('stages_per_second'))} stages/s",
                    f"{run.get('stages_completed')} stages in {_fmt(run.get('span_seconds'), 2)} s; "
                    f"CPU {_fmt(cpu.get('total'), 2)} ms/stage (workers {_fmt(cpu.get('workers'), 2)}, "
                    f"PostgreSQL {_fmt(cpu.get('postgres_backends'), 2)}: for workers "
                    f"{_fmt(cpu.get('postgres_workers'), 2)}, producer {_fmt(cpu.get('postgres_producer'), 2)})",
                )
            )
        if ceiling:
            share = (
                f"scheduler = {100 * run['share_of_ceiling']:.0f} %; "
                if run and run.get("share_of_ceiling")
                else ""
            )
            per = (ceiling.get("cpu_ms_per_cycle") or {}).get("total")
            rows.append(
                (
                    f"(2) ceiling, {ceiling['connections']} connections",
                    f"{_fmt(ceiling['per_second'])} /s",
                    f"{share}raw loop CPU {_fmt(per, 2)} ms/cycle",
                )
            )
    drain = _get(results, "throughput", "drain_run")
    if drain:
        cpu = drain.get("cpu_ms_per_stage") or {}
        share = drain.get("share_of_ceiling")
        rows.append(
            (
                f"(1) throughput {drain['worker_processes']}x{CONCURRENCY}, a filled queue drained",
                f"{_fmt(drain.get('stages_per_second'))} stages/s",
                (f"{100 * share:.0f} % of the ceiling; " if share else "")
                + _pair_shares(drain)
                + f"first claim to last finish; CPU {_fmt(cpu.get('total'), 2)} ms/stage "
                f"(workers {_fmt(cpu.get('workers'), 2)}, PostgreSQL {_fmt(cpu.get('postgres_backends'), 2)})",
            )
        )
    stale = _get(results, "throughput", "stale_statistics_run")
    if stale:
        seq = sum(v.get("seq_scans_per_stage", 0) for v in (stale.get("sequential_scans") or {}).values())
        rows.append(
            (
                f"(1) throughput {stale['worker_processes']}x{CONCURRENCY}, empty-queue statistics",
                f"{_fmt(stale.get('stages_per_second'))} stages/s",
                f"{seq:.1f} sequential scans/stage; CPU {_fmt((stale.get('cpu_ms_per_stage') or {}).get('total'), 2)} ms/stage",
            )
        )
    return rows


def _claim_rows(results: dict) -> list[tuple[str, str, str]]:
    rows = []
    for size, data in (_get(results, "claim", "sizes") or {}).items():
        c, f = data.get("claim", {}), data.get("finish", {})
        rows.append(
            (
                f"(3) claim, {int(size):,} pending",
                f"p50 {_fmt(c.get('p50_ms'), 2)} / p99 {_fmt(c.get('p99_ms'), 2)} ms",
                f"finish p50 {_fmt(f.get('p50_ms'), 2)} / p99 {_fmt(f.get('p99_ms'), 2)} ms",
            )
        )
    costs = _get(results, "claim", "op_costs", "synchronous_commit=on")
    if costs and "stage_total" in costs:
        parts = ", ".join(
            f"{k.replace('_v1', '')} {v['cpu_ms']:.1f}" for k, v in costs.items() if k != "stage_total"
        )
        rows.append(("(3) PostgreSQL CPU per noop stage", f"{costs['stage_total']['cpu_ms']:.1f} ms", parts))
    return rows


def _wakeup_rows(results: dict) -> list[tuple[str, str, str]]:
    rows = []
    for key, label in (("notify", "notifications"), ("polling", "polling only, 1 s")):
        w = _get(results, "wakeup", key)
        if w:
            h, d = w["enqueue_to_handler_start"], w["created_to_claim_started_db"]
            rows.append(
                (
                    f"(4) wake-up, {label}",
                    f"p50 {_fmt(h.get('p50_ms'))} / p99 {_fmt(h.get('p99_ms'))} ms",
                    f"claim began p50 {_fmt(d.get('p50_ms'))} / p99 {_fmt(d.get('p99_ms'))} ms",
                )
            )
    return rows


def _web_and_media_rows(results: dict) -> list[tuple[str, str, str]]:
    rows = []
    for name, e in (_get(results, "web", "endpoints") or {}).items():
        rows.append(
            (
                f"(5) {name}",
                f"p50 {_fmt(e.get('p50_ms'))} / p99 {_fmt(e.get('p99_ms'))} ms",
                f"{_fmt(e.get('response_bytes'))} bytes, {_fmt(_get(results, 'web', 'jobs'))} jobs",
            )
        )
    m = results.get("media") or {}
    if m.get("ratio_median") is not None:
        rows.append(
            (
                "(6) media reencode_streaming",
                f"{m['ratio_median']:.3f} x direct",
                f"system {_fmt(m.get('system_median_seconds'), 2)} s, direct {_fmt(m.get('direct_median_seconds'), 2)} s; "
                f"CPU {_fmt(m.get('cpu_ratio_median'), 3)} x; outside encode {_fmt(m.get('outside_encode_stage_median_seconds'), 2)} s",
            )
        )
    return rows


def print_table(report: dict) -> None:
    from bench import failover, gpu, peers, quality, serialized, split, startup

    results = report["results"]
    rows = (
        _throughput_rows(results)
        + serialized.table_rows(results.get("serialized"))
        + _claim_rows(results)
        + _wakeup_rows(results)
        + _web_and_media_rows(results)
        + failover.table_rows(results.get("failover"))
        + quality.table_rows(results.get("quality"))
        + _farm_rows(results)
        + peers.table_rows(results.get("peers"))
        + startup.table_rows(results.get("startup"))
        + split.table_rows(results.get("split"))
        + gpu.table_rows(results.get("gpu"))
        + [
            (name, "ERROR", data["error"][:70])
            for name, data in results.items()
            if isinstance(data, dict) and "error" in data
        ]
    )
    width = [max(len(r[i]) for r in rows) if rows else 10 for i in range(3)]
    print()
    for r in rows:
        print(f"  {r[0]:<{width[0]}}  {r[1]:<{width[1]}}  {r[2]}")
    print("\nTargets (2-core machine; figures measured on a shared machine are noisy):")
    for t in report["targets"]:
        mark = {True: "pass", False: "MISS", None: "n/a"}[t["met"]]
        value = _fmt(t["value"], 3 if isinstance(t["value"], float) and t["value"] < 10 else 1)
        print(
            f"  [{mark}] ({t['id']}) {t['what']}: {value} {t['unit']} (target {t['target']} {t['unit']})".rstrip()
        )


def _farm_rows(results: dict) -> list[tuple[str, str, str]]:
    rows = []
    for size in _get(results, "farm", "sizes") or []:
        idle = size["idle"]
        rows.append(
            (
                f"(farm) {size['workers']} workers x {size['slots_per_worker']}",
                f"{size['connections_per_worker']['max']} conn/worker",
                f"idle {idle['transactions_per_second']} xact/s, PostgreSQL CPU "
                f"{idle['postgres_cpu_percent_of_one_core']} % of a core (just after start-up: "
                f"{idle['after_startup']['postgres_cpu_percent_of_one_core']} %)",
            )
        )
        for rate in size["rates"]:
            latency = rate["enqueue_to_start_ms"]
            rows.append(
                (
                    f"(farm) {size['workers']} workers, {rate['jobs_per_second']} jobs/s",
                    f"{rate['claims_per_job']} claims/job",
                    f"enqueue->start p50 {latency['p50']} ms, p99 {latency['p99']} ms",
                )
            )
    return rows


def _pairs(results: dict):
    runs = _get(results, "throughput", "runs") or []
    ceilings = _get(results, "ceiling", "runs") or []
    by_slots = {c["connections"]: c for c in ceilings}
    seen = set()
    for run in runs:
        c = by_slots.get(run["slots"])
        seen.add(run["slots"])
        yield run, c
    for slots, c in by_slots.items():
        if slots not in seen:
            yield None, c


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--quick",
        dest="profile",
        action="store_const",
        const="quick",
        help="smaller sizes (500 jobs, no 1M claim queue, fewer samples): about 5 minutes",
    )
    mode.add_argument(
        "--smoke",
        dest="profile",
        action="store_const",
        const="smoke",
        help="tiny sizes, to check that the suite works (the test suite uses it)",
    )
    parser.set_defaults(profile="full")
    parser.add_argument(
        "--only", nargs="+", metavar="NAME", help=f"run only these: {', '.join(MEASUREMENTS)}"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        help="noop jobs per throughput and peers run (default 5000; --quick 500, peers 1000)",
    )
    parser.add_argument(
        "--failover-repetitions",
        type=int,
        metavar="N",
        help="repetitions of each failover case (default 3; --quick 1)",
    )
    parser.add_argument(
        "--farm-sizes",
        type=int,
        nargs="+",
        metavar="N",
        help="worker processes per farm run (default 25 50 100; --quick 10 25)",
    )
    parser.add_argument(
        "--quality-parts",
        nargs="+",
        choices=("cost", "savings"),
        metavar="PART",
        help="parts of the quality measurement: cost (VMAF's cost on job wall time), savings "
        "(target_vmaf's bits saved: the long part); default both",
    )
    parser.add_argument(
        "--split-metrics",
        choices=("vmaf", "none"),
        default="vmaf",
        help="split: score every frame of every run (default), or none: the encoding pipeline's "
        "speed-up alone, without the measuring stages (their cost grows with the pixels scored)",
    )
    parser.add_argument(
        "--split-shape",
        choices=("full", "quick", "farm"),
        help="split: the source and ladder (default full: 1080p 150 s; --quick: 360p 24 s; farm: 540p "
        "120 s in 30 chunks, for many workers)",
    )
    parser.add_argument(
        "--split-workers",
        type=int,
        nargs="+",
        metavar="N",
        help="split: worker counts of the split runs (default 1, 2 and the number of cores)",
    )
    parser.add_argument(
        "--gpu-keep",
        metavar="DIR",
        help="gpu: copy the source and each codec's unsplit top rung here (to score them elsewhere)",
    )
    parser.add_argument(
        "--database",
        default=db.DEFAULT_DATABASE,
        help="name of the database to create (dropped first if it exists; default jetencode_bench)",
    )
    parser.add_argument(
        "--output",
        help=f"where to write the JSON (default {RESULTS.relative_to(db.ROOT)})",
    )
    parser.add_argument("--keep-database", action="store_true", help="do not drop the database at the end")
    parser.add_argument("--keep-workdir", action="store_true", help="keep worker logs and media files")
    args = parser.parse_args(argv)
    return Runner(args).run()
