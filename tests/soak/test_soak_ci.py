"""The soak, CI-sized, inside the suite: three real worker processes over a few hundred noop jobs
for about twenty seconds of load while every fault is injected — SIGKILL (also inside a finish),
SIGSTOP past the lease, SIGTERM, an operator's drain and evacuation of a live worker (each followed
by a SIGTERM and a restart), pg_terminate_backend (the LISTEN connection included), PostgreSQL
restarts — and operators steer the queue; then the queue drains and every invariant is checked in SQL.
The injector makes sure a drain and an evacuation come up in every run (after a tenth of the window
at the latest), so the counts below are asserted, not hoped for.

The PostgreSQL restarts need a server of our own (restarting the shared one would break everybody
else's connections), so the test points Django's connection at a private instance for the run and
puts it back afterwards. Retry delays are scaled down (x0.1) in that database so failed attempts
come back within the run.
"""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection

from tests.kit.db import one
from tools.soak.harness import SoakConfig, run_soak
from tools.soak.postgres import PrivatePostgres


@pytest.fixture
def private_database():
    """Django's default connection on a fresh, migrated database of a private PostgreSQL instance."""
    saved = dict(connection.settings_dict)
    with PrivatePostgres() as pg:
        connection.close()
        try:
            connection.settings_dict.update(pg.settings("postgres"))
            with connection.cursor() as cursor:
                cursor.execute("CREATE DATABASE jetencode_soak")
            connection.close()
            connection.settings_dict["NAME"] = "jetencode_soak"
            call_command("migrate", verbosity=0, interactive=False)
            yield pg
        finally:
            connection.close()
            connection.settings_dict.clear()
            connection.settings_dict.update(saved)


@pytest.mark.slow
@pytest.mark.timeout(200)
@pytest.mark.django_db(transaction=True)
def test_soak_with_every_fault(private_database):
    config = SoakConfig(
        workers=3,
        concurrency=4,
        jobs=180,
        duration=20,
        drain_timeout=90,
        seed=20261130,
        fault_interval=0.8,
        retry_delay_scale=0.1,
        max_attempts=(1, 4),
        restart_every=7,
    )
    report = run_soak(
        config,
        database_url=private_database.url("jetencode_soak"),
        private_pg=private_database,
        out=lambda text: None,
    )
    summary = "\n".join(report.render())
    print(summary)
    assert report.passed, summary
    assert report.drained and report.jobs_enqueued == 180
    assert report.faults.get("postgres_restart", 0) >= 1, summary
    assert report.faults.get("pg_terminate_backend", 0) >= 1, summary
    assert sum(report.faults.values()) >= 8, summary
    # Failover: a drain and an evacuation of a live worker went through, and jobs moved.
    assert report.fault_outcomes.get("drain", {}).get("ok", 0) >= 1, summary
    assert report.fault_outcomes.get("evacuate", {}).get("ok", 0) >= 1, summary
    assert set(report.reassignments) >= {"drained", "evacuated", "lost_in_dispatch", "lost_after_delay"}, (
        summary
    )
    assert report.reassignments["drained"] + report.reassignments["evacuated"] >= 1, summary
    assert sum(report.probes_sent.values()) > 0 and report.probes_accepted == []
    assert sum(sum(v.values()) for v in report.operators.values()) > 0
    assert report.job_status.get("completed", 0) > 50
    assert one("SELECT extract(epoch FROM retry_delay_v1(1))") == 15  # the suite's database is untouched
