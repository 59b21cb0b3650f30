"""/v2/stats, /v1/sysinfo, /healthz, /metrics, the OpenAPI document and docs, and the error shapes
for failures that are not the client's (500, 503) and for unknown URLs."""

import uuid

import pytest
from django.db import OperationalError, connection
from prometheus_client.parser import text_string_to_metric_families

from api import system
from scheduler import queries, repository
from tests.kit.db import claim, lease_of

pytestmark = pytest.mark.django_db

METRIC_NAMES = {
    "jetencode_queue_tasks",
    "jetencode_jobs",
    "jetencode_running_tasks",
    "jetencode_vram_used_bytes",
    "jetencode_vram_total_bytes",
    "jetencode_workers",
    "jetencode_stale_writes_rejected",
    "jetencode_recoveries",
    "jetencode_retries",
    "jetencode_oldest_pending_seconds",
    "jetencode_stuck_running_tasks",
    "jetencode_recovery_last_run_timestamp_seconds",
    "jetencode_claim_latency_seconds",
    "jetencode_stage_duration_seconds",
}


def scrape(client):
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    samples = {}
    families = {}
    for family in text_string_to_metric_families(response.content.decode()):
        families[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return families, samples


def value(samples, name, **labels):
    return samples[(name, tuple(sorted(labels.items())))]


# ---- stats -------------------------------------------------------------------------------------


def test_stats_count_jobs_by_status_category_and_type(
    viewer_api, enqueue, failed_job, completed_job, make_worker_row
):
    gpu_worker = make_worker_row("w-gpu", limits={"cpu": 2, "gpu_ai": 1}, vram=12000)
    enqueue()
    assert claim(gpu_worker) is not None  # one running cpu stage
    enqueue()
    stats = viewer_api.get("/v2/stats").json()
    assert stats["by_status"] == {
        "pending": 1,
        "running": 1,
        "retry_wait": 0,
        "paused": 0,
        "completed": 1,
        "failed": 1,
        "cancelled": 0,
    }
    assert stats["running_by_category"] == {"cpu": 1, "gpu_encode": 0, "gpu_ai": 0}
    assert (stats["vram_used_mb"], stats["vram_total_mb"], stats["vram_available_mb"]) == (0, 12000, 12000)
    assert stats["jobs_by_type"] == {"noop": 4}
    assert (stats["completed_last_hour"], stats["failed_last_hour"]) == (1, 1)
    assert set(stats["avg_processing_seconds_by_type"]) <= {"noop"}
    assert stats["queue_length"] == 3  # pending, running, failed (retryable)


# ---- sysinfo -----------------------------------------------------------------------------------


def test_sysinfo_reports_this_process_host(viewer_api):
    info = viewer_api.get("/v1/sysinfo").json()
    assert info["cpu_count"] >= 1 and 0 <= info["cpu_percent"] <= 100 * info["cpu_count"]
    assert info["memory"]["total_bytes"] > 0 and info["disk"]["total_bytes"] > 0
    assert info["process"]["rss_bytes"] > 0
    again = viewer_api.get("/v1/sysinfo").json()
    assert again["sampled_at"] == info["sampled_at"]  # kept in memory between requests


# ---- healthz -----------------------------------------------------------------------------------


def test_healthz_answers_ok_with_the_database(anonymous_api):
    response = anonymous_api.get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok", "database": "ok"}


class _BrokenConnection:
    def cursor(self):
        raise OperationalError("connection refused")


def test_healthz_is_503_when_the_database_does_not_answer(anonymous_api, monkeypatch):
    monkeypatch.setattr(system, "connection", _BrokenConnection())
    response = anonymous_api.get("/healthz")
    assert response.status_code == 503 and response.json()["status"] == "unavailable"


# ---- metrics -----------------------------------------------------------------------------------


def test_metrics_exposes_every_agreed_name(anonymous_api, enqueue):
    enqueue()
    families, samples = scrape(anonymous_api)
    assert METRIC_NAMES <= set(families)
    for name in ("jetencode_stale_writes_rejected", "jetencode_recoveries", "jetencode_retries"):
        assert families[name] == "counter"
        assert (name + "_total", ()) in samples
    assert families["jetencode_claim_latency_seconds"] == "histogram"
    assert value(samples, "jetencode_jobs", status="pending") == 1
    assert (
        value(samples, "jetencode_queue_tasks", state="pending", pool="media", resource_category="cpu") == 1
    )
    assert value(samples, "jetencode_recovery_last_run_timestamp_seconds") == 0


def test_metrics_follow_the_queue(anonymous_api, enqueue, make_worker_row, settings):
    gpu_worker = make_worker_row("w-m", limits={"cpu": 4, "gpu_ai": 1}, vram=16000)
    uid, session = gpu_worker
    enqueue(max_attempts=3)
    task = claim(gpu_worker)
    lease = lease_of(task, gpu_worker)

    # A stale write: a finish carrying a lease token that is not the task's.
    stale = repository.Lease(task.id, uuid.uuid4(), uid, session)
    assert repository.finish(stale).outcome == "rejected"
    # A retry: the attempt fails and the task waits to run again.
    assert repository.fail(lease, "flaky", retryable=True).outcome == "retry_wait"
    # A recovery: another job's lease runs out and the recovery loop hands it back.
    enqueue()
    assert claim(gpu_worker) is not None
    with connection.cursor() as cursor:  # test setup: the lease ran out a second ago
        cursor.execute(
            "UPDATE queue_tasks SET lease_expires_at = now() - interval '1 second' WHERE state = 'running'"
        )
    assert [outcome for _, outcome in repository.recover_expired()] == ["retry_wait"]
    repository.note_recovery_ran()
    # A stuck task: a third job's lease expired long ago and nobody recovered it.
    enqueue()
    assert claim(gpu_worker) is not None
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE queue_tasks SET lease_expires_at = now() - interval '1 hour' WHERE state = 'running'"
        )
    # A completed stage for the duration histogram.
    enqueue()
    done = lease_of(claim(gpu_worker), gpu_worker)
    repository.finish(done)

    families, samples = scrape(anonymous_api)
    assert value(samples, "jetencode_stale_writes_rejected_total") == 1
    assert value(samples, "jetencode_retries_total") == 2  # the failure and the recovery
    assert value(samples, "jetencode_recoveries_total") == 1
    assert value(samples, "jetencode_stuck_running_tasks") == 1
    assert value(samples, "jetencode_recovery_last_run_timestamp_seconds") > 1_600_000_000
    assert value(samples, "jetencode_running_tasks", resource_category="cpu") == 1
    assert value(samples, "jetencode_workers", lifecycle="active") == 1
    assert value(samples, "jetencode_vram_total_bytes") == 16000 * 1024 * 1024
    assert (
        value(samples, "jetencode_queue_tasks", state="retry_wait", pool="media", resource_category="cpu")
        == 2
    )
    # Claims of the last 5 minutes that are running or finished (the two waiting to retry are not counted).
    assert value(samples, "jetencode_claim_latency_seconds_count") == 2
    assert value(samples, "jetencode_claim_latency_seconds_bucket", le="+Inf") == 2
    assert value(samples, "jetencode_claim_latency_seconds_bucket", le="3600.0") == 2
    assert value(samples, "jetencode_stage_duration_seconds_count", task_type="noop") >= 1
    assert value(samples, "jetencode_stage_duration_seconds_bucket", task_type="noop", le="+Inf") >= 1


def test_oldest_pending_counts_runnable_unpaused_work(anonymous_api, enqueue):
    job_id = enqueue()
    with connection.cursor() as cursor:  # test setup: it became runnable ten minutes ago
        cursor.execute(
            "UPDATE job_schedule SET media_runnable_at = now() - interval '10 minutes' WHERE job_id = %s",
            [job_id],
        )
    _, samples = scrape(anonymous_api)
    assert 590 <= value(samples, "jetencode_oldest_pending_seconds") <= 700
    repository.pause(job_id)  # a paused job is not waiting for a slot
    _, samples = scrape(anonymous_api)
    assert value(samples, "jetencode_oldest_pending_seconds") == 0


# ---- OpenAPI, docs, unknown URLs, server-side failures --------------------------------------------


def test_the_openapi_document_lists_every_path_and_the_docs_render(anonymous_api):
    schema = anonymous_api.get("/v2/openapi.json").json()
    assert schema["info"]["title"] == "JetEncode API"
    for path in (
        "/v2/jobs",
        "/v2/jobs/{job_id}",
        "/v2/jobs/{job_id}/tasks",
        "/v2/queue",
        "/v2/queue/{job_id}/run-next",
        "/v2/queue/{job_id}/priority",
        "/v2/queue/{job_id}/move",
        "/v2/queue/{job_id}/redispatch",
        "/v2/workers",
        "/v2/workers/{uid}/drain",
        "/v2/stats",
        "/v1/sysinfo",
        "/healthz",
        "/metrics",
    ):
        assert path in schema["paths"], path
    assert set(schema["components"]["securitySchemes"]) == {"TokenAuth", "SessionAuth"}
    assert "security" not in schema["paths"]["/healthz"]["get"]
    docs = anonymous_api.get("/v2/docs")
    assert docs.status_code == 200 and b"openapi.json" in docs.content


def test_unknown_api_urls_are_json_404s(operator_api):
    for path in ("/v2/nothing", "/v2/jobs/a/b/c", "/v1/", "/v2/"):
        response = operator_api.get(path)
        assert response.status_code == 404 and response.json() == {"detail": "not found"}, path


def test_an_unexpected_error_is_a_json_500(viewer_api, monkeypatch):
    def explode():
        raise RuntimeError("bug")

    monkeypatch.setattr(queries, "stats", explode)
    response = viewer_api.get("/v2/stats")
    assert response.status_code == 500 and response.json() == {"detail": "internal server error"}


def test_a_database_outage_is_a_json_503(viewer_api, monkeypatch):
    def down(**kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(queries, "workers_overview", down)
    response = viewer_api.get("/v2/workers")
    assert response.status_code == 503 and response.json() == {"detail": "the database is unavailable"}
