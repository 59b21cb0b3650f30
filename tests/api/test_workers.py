"""GET /v2/workers, GET /v2/workers/{uid}, POST /v2/workers/{uid}/drain and /evacuate."""

import pytest

from scheduler import repository
from tests.kit.db import claim, silence_worker

pytestmark = pytest.mark.django_db


def test_it_lists_workers_with_capacity_and_utilization(viewer_api, make_worker_row, enqueue):
    gpu_worker = make_worker_row("w-gpu", concurrency=3, limits={"cpu": 2, "gpu_encode": 1}, vram=8000)
    session = gpu_worker[1]
    make_worker_row("w-cpu")
    job_id = enqueue()
    task = claim(gpu_worker)
    workers = {w["uid"]: w for w in viewer_api.get("/v2/workers").json()["data"]}
    assert set(workers) == {"w-gpu", "w-cpu"}
    w = workers["w-gpu"]
    assert (w["lifecycle"], w["session_id"], w["hostname"]) == ("active", str(session), "test")
    assert w["media"] == {"capacity": 3, "running": 1}
    assert w["background"] == {"capacity": 1, "running": 0}
    assert w["categories"] == {
        "cpu": {"capacity": 2, "running": 1},
        "gpu_encode": {"capacity": 1, "running": 0},
    }
    assert (w["vram_total_mb"], w["vram_used_mb"]) == (8000, 0)
    [active] = w["active_tasks"]
    assert (active["id"], active["job_id"], active["task_type"], active["job_type"]) == (
        task.id,
        str(job_id),
        "noop",
        "noop",
    )
    assert w["last_heartbeat_at"] and w["registered_at"]
    assert isinstance(w["system_sample"], dict) and isinstance(w["capabilities"], dict)


def test_worker_detail_includes_its_latest_system_sample(viewer_api, make_worker_row):
    uid, session = make_worker_row("w-1")
    repository.worker_heartbeat(uid, session, {"cpu_percent": 12.5, "memory_percent": 40})
    worker = viewer_api.get("/v2/workers/w-1").json()
    assert worker["system_sample"]["cpu_percent"] == 12.5


def test_a_silent_worker_is_reported_offline(viewer_api, make_worker_row):
    uid, _ = make_worker_row("w-quiet")
    silence_worker(uid)  # its heartbeat stopped an hour ago
    assert viewer_api.get(f"/v2/workers/{uid}").json()["lifecycle"] == "offline"


def test_unknown_workers_are_a_404_in_json(viewer_api, operator_api):
    for response in (
        viewer_api.get("/v2/workers/w-ghost"),
        operator_api.post("/v2/workers/w-ghost/drain"),
        viewer_api.get("/v2/workers/a%2Fb"),
        operator_api.post("/v2/workers/a%2Fb/drain"),
        operator_api.post("/v2/workers/w-ghost/evacuate"),
    ):
        assert response.status_code == 404
        assert response.json() == {"detail": "worker not found"} or response.json() == {"detail": "not found"}


def test_drain_stops_new_claims_and_targets(operator_api, worker, enqueue):
    uid, session = worker
    response = operator_api.post(f"/v2/workers/{uid}/drain")
    assert response.status_code == 200 and response.json()["lifecycle"] == "draining"
    assert operator_api.post(f"/v2/workers/{uid}/drain").status_code == 200  # idempotent
    enqueue()
    assert repository.claim(uid, session, "media", 30) is None
    refused = operator_api.post("/v2/jobs", {"type": "noop", "required_worker_uid": uid})
    assert refused.status_code == 422


def test_an_offline_worker_cannot_be_drained(operator_api, make_worker_row):
    uid, _ = make_worker_row("w-gone")
    silence_worker(uid)  # its heartbeat stopped an hour ago
    repository.mark_stale_workers(60)
    response = operator_api.post(f"/v2/workers/{uid}/drain")
    assert response.status_code == 409 and response.json() == {"detail": "worker w-gone is offline"}


def test_viewers_may_look_but_not_drain(viewer_api, worker):
    assert viewer_api.get(f"/v2/workers/{worker[0]}").status_code == 200
    assert viewer_api.post(f"/v2/workers/{worker[0]}/drain").status_code == 403


def test_evacuate_moves_every_pinned_job_now(operator_api, viewer_api, worker, enqueue):
    uid, session = worker
    running = enqueue()
    task = repository.claim(uid, session, "media", 30)
    assert task.job_id == running
    assert viewer_api.post(f"/v2/workers/{uid}/evacuate").status_code == 403
    response = operator_api.post(f"/v2/workers/{uid}/evacuate")
    assert response.status_code == 200
    body = response.json()
    assert body["jobs_moved"] == 1 and body["worker"]["lifecycle"] == "draining"
    entry = operator_api.get(f"/v2/queue/{running}").json()
    assert entry["group"] is None and entry["state"] == "pending"
    assert repository.finish(repository.Lease.of(task, uid, session)).outcome == "rejected"


def test_evacuating_an_offline_worker_with_nothing_to_move_is_a_409(operator_api, make_worker_row):
    uid, session = make_worker_row("w-left")
    repository.set_session_lifecycle(uid, session, "offline")
    response = operator_api.post(f"/v2/workers/{uid}/evacuate")
    assert response.status_code == 409
    assert response.json() == {"detail": "worker w-left is offline and holds no jobs to move"}
