"""The soak, CI-sized: real worker processes, random faults and operator chaos for about half a
minute each, then every invariant in SQL.

- `test_soak_on_the_test_database`: three workers on this run's test database. Every fault except
  the PostgreSQL restart (the server is shared: restarting it would break everybody's connections).
- `test_soak_with_postgres_restarts`: `manage.py soak --restart-postgres` as a subprocess, which runs
  on a private PostgreSQL instance of its own and restarts it under load.

Retry delays are scaled down (x0.1) in the soak's database so failed attempts come back within the
run; the real curve is restored afterwards (and tested in tests/scheduler).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlhelpers import one

from jetencode.soak.harness import SoakConfig, run_soak

ROOT = Path(__file__).resolve().parents[2]


def _summary(report) -> str:
    return "\n".join(report.render())


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.django_db(transaction=True)
def test_soak_on_the_test_database(database_url):
    curve = one("SELECT extract(epoch FROM retry_delay_v1(1))")
    config = SoakConfig(
        workers=3, concurrency=4, jobs=300, duration=25, drain_timeout=120, seed=20261130,
        fault_interval=1.0, retry_delay_scale=0.1, max_attempts=(1, 4),
    )
    report = run_soak(config, database_url=database_url, out=lambda text: None)
    print(_summary(report))
    assert report.passed, _summary(report)
    assert report.drained
    assert report.jobs_enqueued == 300
    assert sum(report.faults.values()) >= 5, report.faults
    assert sum(report.probes_sent.values()) > 0 and report.probes_accepted == []
    assert sum(sum(v.values()) for v in report.operators.values()) > 0
    assert report.job_status.get("completed", 0) > 100
    # the real retry curve is back
    assert one("SELECT extract(epoch FROM retry_delay_v1(1))") == curve == 15


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_soak_with_postgres_restarts(tmp_path):
    report = tmp_path / "soak.json"
    env = {**os.environ, "JETENCODE_APPLICATION_NAME": "jetencode-soak-test"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "soak", "--restart-postgres", "--workers", "3", "--jobs", "200",
         "--duration", "22", "--fault-interval", "1.0", "--retry-delay-scale", "0.1", "--seed", "7",
         "--drain-timeout", "120", "--json", str(report)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=230, check=False,
    )
    output = proc.stdout[-6000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, output
    assert "RESULT: PASS" in proc.stdout, output
    import json

    data = json.loads(report.read_text())
    assert data["faults"].get("postgres_restart", 0) >= 1, data["faults"]
    assert data["drained"] and data["jobs_enqueued"] == 200
    assert all(r["violations"] == 0 for r in data["invariants"])
