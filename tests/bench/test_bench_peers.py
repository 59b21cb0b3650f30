"""The side-by-side bench (`python -m bench --only peers`, bench/peers.py) works: a tiny run starts
real JetEncode, procrastinate and pgqueuer workers, measures each and drops the peers' databases.
Timings are never asserted here (docs/benchmarks.md has the figures)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_summary_medians_and_ratios_and_the_target():
    """bench/peers.py's arithmetic and the target row, on made-up runs (no workers)."""
    from bench import peers, run

    def fake(system, value, cpu):
        return {
            "system": system,
            "shape": "2x4",
            "jobs_per_second": value,
            "cpu_ms_per_job": {"total": cpu, "workers": cpu / 2, "postgres_backends": cpu / 2},
        }

    runs = [
        fake("jetencode", 600.0, 2.0),
        fake("procrastinate", 400.0, 4.0),
        fake("pgqueuer", 500.0, 3.0),
        fake("pgqueuer", 700.0, 3.0),
        fake("procrastinate", 300.0, 4.0),
        fake("jetencode", 400.0, 2.4),
    ]
    summary = peers.summarize(runs)["2x4"]
    assert summary["systems"]["jetencode"]["median_jobs_per_second"] == 500.0
    assert summary["systems"]["procrastinate"]["median_jobs_per_second"] == 350.0
    assert summary["systems"]["pgqueuer"]["median_jobs_per_second"] == 600.0
    assert summary["systems"]["jetencode"]["median_cpu_ms_per_job"] == 2.2
    assert summary["ratios"] == {"jetencode/procrastinate": 1.429, "jetencode/pgqueuer": 0.833}

    (target,) = [t for t in run.evaluate({"peers": {"summary": {"2x4": summary}}}, {}) if t["id"] == "10"]
    assert target["value"] == 0.833 and target["met"] is False
    rows = peers.table_rows({"summary": {"2x4": summary}})
    assert rows[1][0] == "(10) peers 2x4 procrastinate" and "JetEncode / procrastinate = 1.43" in rows[1][2]
    assert peers.table_rows({"error": "missing"}) == []


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.skipif(not os.environ.get("DATABASE_URL"), reason="the benchmark needs DATABASE_URL (a server)")
def test_smoke_run_of_the_peers():
    from bench import peers

    if peers.missing_packages():
        pytest.skip(f"procrastinate and pgqueuer are not installed ({peers.PIP_COMMAND})")
    database = f"jetencode_bench_peers_{os.getpid()}"
    output = Path(os.environ.get("TMPDIR", "/tmp")) / f"{database}.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--smoke",
            "--only",
            "peers",
            "--database",
            database,
            "--output",
            str(output),
        ],
        cwd=ROOT,
        env={**os.environ},
        capture_output=True,
        text=True,
        timeout=230,
        check=False,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
    result = json.loads(output.read_text())["results"]["peers"]
    output.unlink()
    assert [r["system"] for r in result["runs"]] == ["jetencode", "procrastinate", "pgqueuer"]
    for r in result["runs"]:
        assert r["jobs_completed"] == r["jobs"] and r["jobs_per_second"] > 0, r
        assert r["cpu_ms_per_job"]["workers"] > 0, r
    assert set(result["summary"]["1x4"]["ratios"]) == {"jetencode/procrastinate", "jetencode/pgqueuer"}
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        left = conn.execute(
            "SELECT count(*) FROM pg_database WHERE datname LIKE %s", [database + "%"]
        ).fetchone()[0]
    assert left == 0, "the bench and peer databases are dropped at the end"
