"""Alert rules and the Grafana dashboard against the series GET /metrics really exposes.

With `promtool` on PATH (Debian: `apt-get install prometheus`) the rules are also checked and
unit-tested (deploy/prometheus/alerts.test.yml) and every dashboard query is parsed; without it
those tests skip and say so.
"""

import json
import re
import shutil
import subprocess

import pytest
import yaml
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from scheduler import repository
from tests.kit import ROOT

PROMETHEUS = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "deploy" / "grafana" / "jetencode.json"
SERIES = re.compile(r"\bjetencode_[a-z_]+")

# The contract with the API (api/metrics.py): the names the rules and panels are written against.
CONTRACT = {
    "jetencode_queue_tasks",
    "jetencode_jobs",
    "jetencode_running_tasks",
    "jetencode_vram_used_bytes",
    "jetencode_vram_total_bytes",
    "jetencode_workers",
    "jetencode_stale_writes_rejected_total",
    "jetencode_recoveries_total",
    "jetencode_retries_total",
    "jetencode_oldest_pending_seconds",
    "jetencode_stuck_running_tasks",
    "jetencode_recovery_last_run_timestamp_seconds",
    "jetencode_claim_latency_seconds_bucket",
    "jetencode_stage_duration_seconds_bucket",
}


def alert_rules() -> list[dict]:
    groups = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def dashboard_queries() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [target["expr"] for panel in panels for target in panel.get("targets", [])]


@pytest.fixture
def exposition(make_worker_row, enqueue) -> str:
    """GET /metrics once one stage has run (per-type series need one) and one job is paused."""
    uid, session = make_worker_row()
    enqueue("noop")
    task = repository.claim(uid, session, "media", 30)
    assert repository.finish(repository.Lease.of(task, uid, session)).outcome == "completed"
    repository.pause(enqueue("noop"))
    response = Client().get("/metrics")
    assert response.status_code == 200
    return response.content.decode()


@pytest.fixture
def exposed(exposition) -> set[str]:
    """The sample names of GET /metrics."""
    return {sample.name for family in text_string_to_metric_families(exposition) for sample in family.samples}


@pytest.mark.django_db
def test_every_series_the_rules_and_panels_use_is_exposed(exposed):
    assert CONTRACT <= exposed, f"missing from /metrics: {sorted(CONTRACT - exposed)}"
    used = {
        name
        for text in [r["expr"] for r in alert_rules()] + dashboard_queries()
        for name in SERIES.findall(text)
    }
    assert used <= exposed, f"used but not exposed: {sorted(used - exposed)}"
    # Every series of the contract is watched somewhere.
    assert {name.removesuffix("_bucket") for name in CONTRACT} <= {
        name.removesuffix("_bucket").removesuffix("_count") for name in used
    }


def test_alerts_cover_the_symptoms_operators_meet():
    rules = {rule["alert"]: rule for rule in alert_rules()}
    assert set(rules) == {
        "JetEncodeBacklogGrowing",
        "JetEncodeStagesStuckPastLease",
        "JetEncodeNoActiveWorkers",
        "JetEncodeStaleWritesRejected",
        "JetEncodeVramSaturated",
        "JetEncodeRecoveryLoopNotRunning",
        "JetEncodeMetricsDown",
    }
    for name, rule in rules.items():
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], name
        # The audit-row counters shrink when retention trims them: rate()/increase() would misread that.
        assert not re.search(r"(rate|increase)\(jetencode_\w+_total", rule["expr"]), name


def test_the_dashboard_is_well_formed():
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] == "jetencode-overview"
    assert [v["name"] for v in board["templating"]["list"]] == ["datasource"]
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for panel in board["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] + pos["w"] <= 24, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"panel {panel['title']!r} overlaps another"
                cells.add((x, y))
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}"
        refs = [target["refId"] for target in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]


promtool = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    promtool is None, reason="promtool not installed (apt-get install prometheus)"
)


def run_promtool(*args, cwd=PROMETHEUS):
    result = subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


@needs_promtool
@pytest.mark.django_db
def test_promtool_lints_the_exposition_clean(exposition):
    result = subprocess.run(
        [promtool, "check", "metrics"], input=exposition, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.django_db
def test_the_deprecated_mb_names_are_there_on_request_and_say_so(settings, make_worker_row):
    make_worker_row(vram=2048)
    assert "jetencode_vram_total_mb" not in Client().get("/metrics").content.decode()
    settings.METRICS_VRAM_MB = True
    families = {f.name: f for f in text_string_to_metric_families(Client().get("/metrics").content.decode())}
    for old in ("jetencode_vram_total_mb", "jetencode_vram_used_mb"):
        assert families[old].documentation.startswith("DEPRECATED")
    assert families["jetencode_vram_total_mb"].samples[0].value == 2048
    assert families["jetencode_vram_total_bytes"].samples[0].value == 2048 * 1024 * 1024


@pytest.mark.django_db
def test_a_paused_jobs_tasks_have_their_own_state(exposition):
    samples = {
        (s.name, s.labels.get("state"), s.labels.get("pool"), s.labels.get("resource_category")): s.value
        for family in text_string_to_metric_families(exposition)
        for s in family.samples
    }
    assert samples[("jetencode_queue_tasks", "paused", "media", "cpu")] == 1
    assert samples[("jetencode_queue_tasks", "pending", "media", "cpu")] == 0


@needs_promtool
def test_promtool_checks_and_unit_tests_the_rules():
    assert "SUCCESS" in run_promtool("check", "rules", "alerts.yml")
    assert "SUCCESS" in run_promtool("test", "rules", "alerts.test.yml")


@needs_promtool
def test_promtool_parses_every_dashboard_query(tmp_path):
    rules = {
        "groups": [
            {
                "name": "dashboard",
                "rules": [
                    {"record": f"jetencode:dashboard_query_{i}", "expr": expr}
                    for i, expr in enumerate(dashboard_queries())
                ],
            }
        ]
    }
    (tmp_path / "queries.yml").write_text(yaml.safe_dump(rules))
    assert "SUCCESS" in run_promtool("check", "rules", "queries.yml", cwd=tmp_path)
