"""The benchmark suite works: a tiny run (`python -m bench --smoke`) creates its database, migrates
it, runs real workers, measures each part and writes its JSON. Timings are never asserted here —
the figures live in docs/benchmarks.md and bench/results/latest.json."""

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        not os.environ.get("DATABASE_URL"), reason="the benchmark needs DATABASE_URL (a server)"
    ),
]


def test_smoke_run_writes_its_json(tmp_path):
    database = f"jetencode_bench_smoke_{os.getpid()}"
    output = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--database", database, "--output", str(output)],
        cwd=ROOT,
        env={**os.environ},
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
    report = json.loads(output.read_text())

    assert report["suite"] == "jetencode-bench" and report["profile"] == "smoke"
    for name in ("throughput", "ceiling", "claim", "serialized", "wakeup", "web", "failover"):
        assert name in report["results"], name
        assert "error" not in report["results"][name], report["results"][name]
    run = report["results"]["throughput"]["runs"][0]
    assert run["stages_completed"] == run["jobs"] and run["stages_not_completed"] == 0
    assert run["share_of_ceiling"] > 0
    # The same shape once more, draining a queue filled in one statement (the ceiling's shape).
    drain = report["results"]["throughput"]["drain_run"]
    assert drain["drain"] and drain["stages_completed"] == drain["jobs"] and drain["share_of_ceiling"] > 0
    # ... right after a ceiling of its own (the smoke profile runs one such pair).
    assert [pair["share_of_ceiling"] for pair in drain["pairs"]] == [drain["share_of_ceiling"]]
    assert report["results"]["claim"]["sizes"]["1000"]["claim"]["n"] > 0
    # The serialized section of each claim variant was timed, and each hold is positive (it lasts
    # at least the walk and the commit).
    serial = report["results"]["serialized"]
    for variant in ("scheduler", "scheduler_claim_only", "raw", "raw_no_flush"):
        assert serial["hold"][variant]["n"] == 20 and serial["hold"][variant]["min_ms"] > 0, serial
    assert serial["projected_share"] == serial["rounds"][0]["projected_share"] > 0
    assert report["results"]["wakeup"]["notify"]["enqueue_to_handler_start"]["n"] > 0
    assert set(report["results"]["web"]["endpoints"]) == {
        "GET /v2/queue",
        "GET /v2/jobs",
        "GET /dashboard/queue",
    }
    # Failover (one SIGTERM of a worker in a job's dispatch): the survivor retried that dispatch.
    (sample,) = report["results"]["failover"]["cases"]["sigterm_dispatch"]["samples"]
    assert sample["claimed_task"]["placement"] == "dispatch" and sample["claimed_task"]["execution"] == 1
    assert sample["to_next_stage_s"] > 0 and "drained" in sample["reassignments"], sample
    assert {t["id"] for t in report["targets"]} >= {"1a", "1b", "1c", "1d", "4", "5"}
    assert "Targets" in proc.stdout  # the printed table

    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        left = conn.execute("SELECT count(*) FROM pg_database WHERE datname = %s", [database]).fetchone()[0]
    assert left == 0, "the bench database is dropped at the end"


def test_the_failover_bench_predicts_and_analyses_its_timings():
    """bench/failover.py's arithmetic, on made-up samples (no workers)."""
    from bench import failover

    timing = failover.Timing()  # lease 4, heartbeat 1, recovery 1, poll 1, grace 3, reassign 10
    predicted = {case: failover.predict(case, timing, backoff=15.0) for case in failover.CASES}
    assert (predicted["sigkill_dispatch"]["low_s"], predicted["sigkill_dispatch"]["high_s"]) == (18.0, 21.1)
    assert (predicted["sigkill_later"]["low_s"], predicted["sigkill_later"]["high_s"]) == (9.0, 11.6)
    assert predicted["sigterm_dispatch"] == predicted["sigterm_later"]
    assert (predicted["sigterm_later"]["low_s"], predicted["sigterm_later"]["high_s"]) == (3.0, 5.1)
    assert failover.later_stage_seconds(timing) > timing.shutdown_grace

    samples = {
        "sigkill_later": [
            {"to_next_stage_s": s, "to_released_s": s - 0.01, "within_prediction": True, "reassignments": r}
            for s, r in ((10.2, {"lost_after_delay": 1}), (10.6, {"lost_after_delay": 1}), (9.8, {}))
        ]
    }
    out = failover.analyse(samples, timing, predicted, repetitions=3, backoff=15.0)
    case = out["cases"]["sigkill_later"]
    assert case["to_next_stage"]["n"] == 3 and case["to_next_stage"]["p50_ms"] == 10200.0
    assert case["parts"]["to_released"]["n"] == 3
    assert case["reassignments"] == {"lost_after_delay": 2} and case["all_within_prediction"]
    assert out["timing"]["reassign_after"] == 10.0 and out["repetitions"] == 3
    rows = failover.table_rows(out)
    assert rows[0][0] == "(7) failover timings" and "reassignment after 10 s" in rows[0][2]
    assert rows[1][1] == "p50 10.20 / p99 10.59 s (n=3)" and "predicted 9-11.6 s, all within" in rows[1][2]


@pytest.mark.timeout(400)
def test_the_split_bench_compares_split_runs_with_unsplit_and_skips_gpu_without_nvenc(tmp_path):
    """`python -m bench --smoke --only split gpu --split-workers 2 1`: a tiny source, unsplit on one
    worker then split on the chosen counts of pinned workers, every run compared with the unsplit
    one (no timing asserted); `gpu` says why it is skipped where FFmpeg confirms no NVENC encoder
    (every CI machine), and runs its jobs where one is confirmed. One bench run for both: each
    costs a database and an unsplit encode."""
    database = f"jetencode_bench_split_{os.getpid()}"
    output = tmp_path / "split.json"
    argv = [sys.executable, "-m", "bench", "--smoke", "--only", "split", "gpu", "--split-workers", "2", "1"]
    proc = subprocess.run(
        [*argv, "--database", database, "--output", str(output)],
        cwd=ROOT,
        env={**os.environ},
        capture_output=True,
        text=True,
        timeout=390,
        check=False,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
    results = json.loads(output.read_text())["results"]
    result = results["split"]
    assert result["shape"] == "smoke" and result["mismatches"] == 0
    assert result["unsplit"]["wall_seconds"] > 0 and set(result["unsplit"]["renditions"]) == {"180p", "144p"}
    assert [run["workers"] for run in result["split"]] == [1, 2]
    for run in result["split"]:
        assert run["speedup"] > 0 and run["busy_seconds"]["encoding"] > 0 and run["scratch_bytes"] > 0
        assert abs(run["180p_vmaf_delta"]) < 5 and 0.8 < run["180p_bitrate_ratio"] < 1.2
        assert 0 < run["overhead_share"] < 1 and run["tail_seconds"] is not None
    assert "(12) split on" in proc.stdout
    gpu = results["gpu"]
    if "jobs" in gpu:
        assert all(run["status"] == "completed" for run in gpu["jobs"]), gpu
    else:
        assert "NVENC" in gpu["skipped"], gpu
