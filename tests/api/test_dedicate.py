"""POST/DELETE /v2/queue/{id}/dedicate: dedicated execution as an integrator asks for it, and the
reservation and waiting reason the queue entry and the job detail show."""

import uuid

import pytest

from scheduler import repository
from tests.kit.db import claim, sql

pytestmark = pytest.mark.django_db

RESERVATION_KEYS = {
    "id",
    "job_id",
    "state",
    "worker_uid",
    "generation",
    "last_error",
    "provision_attempts",
    "created_at",
    "requested_at",
    "bound_at",
    "ended_at",
    "updated_at",
}


def test_dedicating_answers_the_reservation_and_twice_the_same_one(operator_api, enqueue, worker):
    job = str(enqueue())
    first = operator_api.post(f"/v2/queue/{job}/dedicate")
    assert first.status_code == 200, first.content
    body = first.json()
    assert set(body) == RESERVATION_KEYS
    assert (body["job_id"], body["state"], body["worker_uid"], body["generation"]) == (
        job,
        "requested",
        None,
        0,
    )
    again = operator_api.post(f"/v2/queue/{job}/dedicate")
    assert again.status_code == 200 and again.json()["id"] == body["id"]
    assert claim(worker) is None  # no shared worker takes it


def test_the_queue_and_the_job_show_the_reservation_and_why_it_waits(
    operator_api, viewer_api, enqueue, worker
):
    job = str(enqueue())
    rid = operator_api.post(f"/v2/queue/{job}/dedicate").json()["id"]
    sql("UPDATE queue_reservations SET requested_at = now() - interval '40 seconds' WHERE id = %s", [rid])
    [entry] = viewer_api.get("/v2/queue").json()["data"]
    assert entry["reservation"]["id"] == rid and entry["reservation"]["state"] == "requested"
    assert (
        entry["waiting_reason"]
        == f"waiting for a dedicated worker (reservation {rid[:8]}…, requested 40s ago)"
    )
    detail = viewer_api.get(f"/v2/jobs/{job}").json()
    assert detail["reservation"]["id"] == rid
    assert detail["queue"]["waiting_reason"].startswith("waiting for a dedicated worker")
    # A provisioner's failure shows in the reason too.
    sql("UPDATE queue_reservations SET last_error = 'provisioner exited 3: no capacity' WHERE id = %s", [rid])
    [entry] = viewer_api.get("/v2/queue").json()["data"]
    assert entry["waiting_reason"].endswith("requested 40s ago; provisioner exited 3: no capacity)")


def test_delete_returns_the_job_to_shared_execution_while_unbound(
    operator_api, viewer_api, enqueue, make_worker_row
):
    job = str(enqueue())
    rid = operator_api.post(f"/v2/queue/{job}/dedicate").json()["id"]
    gone = operator_api.delete(f"/v2/queue/{job}/dedicate")
    assert gone.status_code == 200, gone.content
    assert (gone.json()["id"], gone.json()["state"]) == (rid, "released")
    assert viewer_api.get("/v2/queue").json()["data"][0]["reservation"] is None
    assert viewer_api.get(f"/v2/jobs/{job}").json()["reservation"]["state"] == "released"
    again = operator_api.delete(f"/v2/queue/{job}/dedicate")
    assert again.status_code == 409 and "not dedicated" in again.json()["detail"]

    bound_job = str(enqueue())
    bound = operator_api.post(f"/v2/queue/{bound_job}/dedicate").json()["id"]
    uid, session = make_worker_row("reserved")
    repository.bind_reservation(bound, uid, session, stale_seconds=60)
    refused = operator_api.delete(f"/v2/queue/{bound_job}/dedicate")
    assert refused.status_code == 409 and "bound to worker reserved" in refused.json()["detail"]


def test_unknown_jobs_are_404_and_jobs_that_cannot_be_dedicated_are_409(operator_api, enqueue, worker):
    unknown = uuid.uuid4()
    for method in (operator_api.post, operator_api.delete):
        response = method(f"/v2/queue/{unknown}/dedicate")
        assert response.status_code == 404, response.content
    assert operator_api.post("/v2/queue/not-a-uuid/dedicate").status_code == 422

    running = str(enqueue(priority=5))
    assert str(claim(worker).job_id) == running
    targeted = str(enqueue(required_worker_uid=worker[0]))
    split = str(enqueue(params={"split": "chunks"}))
    finished = str(enqueue())
    repository.cancel(finished)
    for job, why in (
        (running, "the job is running"),
        (targeted, f"targeted at worker {worker[0]}"),
        (split, "split across the farm"),
        (finished, "the job is cancelled"),
    ):
        response = operator_api.post(f"/v2/queue/{job}/dedicate")
        assert response.status_code == 409, (job, response.content)
        assert why in response.json()["detail"]


def test_dedicating_needs_the_operate_scope(viewer_api, enqueue):
    job = enqueue()
    assert viewer_api.post(f"/v2/queue/{job}/dedicate").status_code == 403
    assert viewer_api.delete(f"/v2/queue/{job}/dedicate").status_code == 403
