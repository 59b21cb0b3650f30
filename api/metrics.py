"""Prometheus metrics, read from PostgreSQL at scrape time.

The web runs as several processes, so in-process counters would each see a slice of the truth;
the database sees all of it. `JetEncodeCollector` runs a handful of aggregate queries per scrape
and reports them as gauges, counters and histograms. Names are a contract (alert rules use them).

Two kinds of value deserve a note:
- Most `*_total` counters count rows of the append-only fence audit. Retention purges old rows, which
  Prometheus sees as a counter reset; `rate()` and `increase()` handle that. Reassignments are
  counted in the scheduler row by the failover functions, so they never reset.
- The two histograms describe a sliding window (claims of the last five minutes, stages finished
  in the last hour), not an ever-growing count: query them directly, e.g.
  `histogram_quantile(0.95, sum by (le) (jetencode_claim_latency_seconds_bucket))`, without `rate()`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

from django.conf import settings
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from media import quality
from scheduler import queries
from scheduler.constants import JOB_STATUSES, LIFECYCLES, POOLS, QUEUED_TASK_STATES, RESOURCE_CATEGORIES

MIB = 1024 * 1024
# jetencode_queue_tasks{state}: the task states, with a paused job's unclaimed tasks on their own.
QUEUE_DEPTH_STATES = (*QUEUED_TASK_STATES, "paused")
CLAIM_LATENCY_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600]
STAGE_DURATION_BUCKETS = [1, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400]


def _histogram(
    name: str,
    doc: str,
    bounds: list[float],
    cumulative: list[int],
    count: int,
    total: float,
    labels: dict[str, str] | None = None,
    family: HistogramMetricFamily | None = None,
) -> HistogramMetricFamily:
    buckets = [(_le(b), float(c)) for b, c in zip(bounds, cumulative, strict=True)] + [("+Inf", float(count))]
    if family is None:
        family = HistogramMetricFamily(name, doc, labels=list(labels or {}))
    family.add_metric(list((labels or {}).values()), buckets, float(total))
    return family


def _le(bound: float) -> str:
    return str(float(bound))


class JetEncodeCollector:
    """One method per metric family; `collect` yields them in the exposition's order."""

    def describe(self) -> list[Metric]:
        return []  # collect() needs the database; don't run it at registration

    def collect(self) -> Iterator[Metric]:
        yield self.queue_depth()
        stats = queries.stats()
        yield self.jobs_by_status(stats)
        yield self.running_by_category(stats)
        yield from self.vram(stats)
        yield self.workers_by_lifecycle()
        scalars = queries.metrics_scalars(
            stuck_after_seconds=2 * settings.JETENCODE["RECOVERY_INTERVAL_SECONDS"]
        )
        yield from self.fence_counters(scalars)
        yield self.reassignments()
        yield from self.recovery_health(scalars)
        yield self.claim_latency()
        yield self.stage_duration()
        yield self.rendition_vmaf()
        yield from self.split_transcodes()

    def queue_depth(self) -> Metric:
        depth = GaugeMetricFamily(
            "jetencode_queue_tasks",
            "Unfinished stage tasks by state (paused: a paused job's tasks that are not running), "
            "pool and resource category",
            labels=["state", "pool", "resource_category"],
        )
        seen = {(r["state"], r["pool"], r["resource_category"]): r["n"] for r in queries.queue_depth()}
        # Zero-fill the common series so alerts see 0 rather than an absent series.
        for state in QUEUE_DEPTH_STATES:
            for pool in POOLS:
                seen.setdefault((state, pool, "cpu"), 0)
        for (state, pool, category), n in sorted(seen.items()):
            depth.add_metric([state, pool, category], n)
        return depth

    def jobs_by_status(self, stats: dict) -> Metric:
        jobs = GaugeMetricFamily("jetencode_jobs", "Jobs by status", labels=["status"])
        for status in JOB_STATUSES:
            jobs.add_metric([status], int(stats["by_status"].get(status, 0)))
        return jobs

    def running_by_category(self, stats: dict) -> Metric:
        running = GaugeMetricFamily(
            "jetencode_running_tasks",
            "Running media-pool stages by resource category",
            labels=["resource_category"],
        )
        for category in RESOURCE_CATEGORIES:
            running.add_metric([category], int(stats["running_by_category"].get(category, 0)))
        return running

    def vram(self, stats: dict) -> Iterator[Metric]:
        used, total = int(stats["vram_used_mb"]), int(stats["vram_total_mb"])
        yield GaugeMetricFamily(
            "jetencode_vram_used_bytes", "VRAM reserved by running stages", value=used * MIB
        )
        yield GaugeMetricFamily(
            "jetencode_vram_total_bytes", "VRAM of active, fresh workers", value=total * MIB
        )
        # The MB names are deprecated: promtool's lint refuses abbreviated units. For one release
        # JETENCODE_METRICS_VRAM_MB=true still exposes them, so boards and rules can move at their pace.
        if not getattr(settings, "METRICS_VRAM_MB", False):
            return
        yield GaugeMetricFamily(
            "jetencode_vram_used_mb",
            "DEPRECATED (removed in the next release): use jetencode_vram_used_bytes. "
            "VRAM reserved by running stages (MB)",
            value=used,
        )
        yield GaugeMetricFamily(
            "jetencode_vram_total_mb",
            "DEPRECATED (removed in the next release): use jetencode_vram_total_bytes. "
            "VRAM of active, fresh workers (MB)",
            value=total,
        )

    def workers_by_lifecycle(self) -> Metric:
        workers = GaugeMetricFamily(
            "jetencode_workers", "Workers by effective lifecycle", labels=["lifecycle"]
        )
        by_lifecycle = queries.workers_by_lifecycle()
        for lifecycle in LIFECYCLES:
            workers.add_metric([lifecycle], by_lifecycle.get(lifecycle, 0))
        return workers

    def fence_counters(self, scalars: dict) -> Iterator[Metric]:
        yield CounterMetricFamily(
            "jetencode_stale_writes_rejected",
            "Fenced writes rejected (stale lease, session or execution)",
            value=scalars["stale_writes_rejected"],
        )
        yield CounterMetricFamily(
            "jetencode_recoveries",
            "Running tasks recovered after their lease expired",
            value=scalars["recoveries"],
        )
        yield CounterMetricFamily(
            "jetencode_retries",
            "Stage attempts that failed and were scheduled to retry",
            value=scalars["retries"],
        )

    def reassignments(self) -> Metric:
        moved = CounterMetricFamily(
            "jetencode_reassignments",
            "Jobs moved off a worker, by cause: drained, evacuated, lost_in_dispatch (lost, no local "
            "work), lost_after_delay (lost longer than the reassignment delay), lost_reserved (a dedicated "
            "worker lost its reservation), manual (redispatch)",
            labels=["cause"],
        )
        for cause, n in queries.reassignments().items():
            moved.add_metric([cause], n)
        return moved

    def recovery_health(self, scalars: dict) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "jetencode_oldest_pending_seconds",
            "How long the longest-waiting runnable job has waited for a slot",
            value=float(scalars["oldest_pending_seconds"]),
        )
        yield GaugeMetricFamily(
            "jetencode_stuck_running_tasks",
            "Running tasks whose lease expired more than two recovery intervals ago",
            value=scalars["stuck_running"],
        )
        last = scalars["last_recovery_at"]
        yield GaugeMetricFamily(
            "jetencode_recovery_last_run_timestamp_seconds",
            "Unix time the recovery loop last ran (0: never)",
            value=float(last) if last is not None else 0.0,
        )

    def claim_latency(self) -> Metric:
        claim = queries.claim_latency_histogram(CLAIM_LATENCY_BUCKETS)
        return _histogram(
            "jetencode_claim_latency_seconds",
            "Claim time minus the time the task became runnable, tasks claimed in the last 5 minutes",
            CLAIM_LATENCY_BUCKETS,
            claim["buckets"],
            claim["n"],
            claim["total"],
        )

    def stage_duration(self) -> Metric:
        stage = HistogramMetricFamily(
            "jetencode_stage_duration_seconds",
            "Finish minus start of stage tasks finished in the last hour",
            labels=["task_type"],
        )
        for row in queries.stage_duration_histogram(STAGE_DURATION_BUCKETS):
            _histogram(
                "",
                "",
                STAGE_DURATION_BUCKETS,
                row["buckets"],
                row["n"],
                row["total"],
                labels={"task_type": row["task_type"]},
                family=stage,
            )
        return stage

    def split_transcodes(self) -> Iterator[Metric]:
        counts = queries.split_counts()
        chunks = GaugeMetricFamily(
            "jetencode_split_chunks", "Unfinished chunks of split transcodes, by state", labels=["state"]
        )
        for state in ("pending", "running", "retry_wait", "blocked"):
            chunks.add_metric([state], counts["chunks"].get(state, 0))
        yield chunks
        ended = GaugeMetricFamily(
            "jetencode_split_chunks_ended_24h",
            "Chunks of split transcodes that ended in the last 24 hours, by state",
            labels=["state"],
        )
        for state in ("completed", "failed", "cancelled"):
            ended.add_metric([state], counts["chunks_ended_24h"].get(state, 0))
        yield ended
        failures = GaugeMetricFamily(
            "jetencode_split_stitch_failures_24h",
            "Stitch failures in the last 24 hours: chunk_mismatch (chunks sent back for a wrong frame "
            "count), stitch_failed (stitch stages that failed)",
            labels=["reason"],
        )
        for reason in ("chunk_mismatch", "stitch_failed"):
            failures.add_metric([reason], counts["stitch_failures_24h"].get(reason, 0))
        yield failures

    def rendition_vmaf(self) -> Metric:
        """Issue 16: measured VMAF of transcode renditions scored in the last 24 hours, by rung."""
        family = HistogramMetricFamily(
            "jetencode_rendition_vmaf",
            "Mean VMAF of transcode renditions measured in the last 24 hours, by rung name",
            labels=["rendition"],
        )
        for rung, values in sorted(quality.vmaf_by_rung().items()):
            cumulative = [sum(1 for v in values if v <= bound) for bound in quality.VMAF_BUCKETS]
            _histogram(
                "",
                "",
                quality.VMAF_BUCKETS,
                cumulative,
                len(values),
                sum(values),
                {"rendition": rung},
                family,
            )
        return family


registry = CollectorRegistry(auto_describe=False)
registry.register(JetEncodeCollector())


# /metrics needs no credentials, so its cost must not depend on how often anyone calls it: each
# web process computes the exposition at most once per JETENCODE_METRICS_CACHE_SECONDS (one
# caller computes, concurrent ones wait for it and share the result). Prometheus scrapes every
# 15-60 s; the figures are at most that many seconds old.
_cache_lock = threading.Lock()
_cached: tuple[float, bytes] | None = None


def cache_seconds() -> float:
    return float(getattr(settings, "JETENCODE", {}).get("METRICS_CACHE_SECONDS", 10.0))


def render() -> tuple[bytes, str]:
    """The exposition text and its content type (the classic 0.0.4 text format every Prometheus reads)."""
    global _cached
    with _cache_lock:
        now = time.monotonic()
        if _cached is None or now - _cached[0] >= cache_seconds():
            _cached = (now, generate_latest(registry))
        return _cached[1], CONTENT_TYPE_PLAIN_0_0_4
