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
    for name in ("throughput", "ceiling", "claim", "wakeup", "web"):
        assert name in report["results"], name
        assert "error" not in report["results"][name], report["results"][name]
    run = report["results"]["throughput"]["runs"][0]
    assert run["stages_completed"] == run["jobs"] and run["stages_not_completed"] == 0
    assert run["share_of_ceiling"] > 0
    assert report["results"]["claim"]["sizes"]["1000"]["claim"]["n"] > 0
    assert report["results"]["wakeup"]["notify"]["enqueue_to_handler_start"]["n"] > 0
    assert set(report["results"]["web"]["endpoints"]) == {
        "GET /v2/queue",
        "GET /v2/jobs",
        "GET /dashboard/queue",
    }
    assert {t["id"] for t in report["targets"]} >= {"1a", "1b", "4", "5"}
    assert "Targets" in proc.stdout  # the printed table

    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        left = conn.execute("SELECT count(*) FROM pg_database WHERE datname = %s", [database]).fetchone()[0]
    assert left == 0, "the bench database is dropped at the end"
