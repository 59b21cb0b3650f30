"""GET /v2/queue (shape, order, filters, waiting reasons) and the operator controls with their
409 rules (DECISIONS 15, 16)."""

import uuid

import pytest
from django.db import connection

from scheduler import repository
from tests.kit.db import claim, lease_of, silence_worker, sql

pytestmark = pytest.mark.django_db

ENTRY_KEYS = {
    "job_id",
    "type",
    "group",
    "stage",
    "state",
    "task_state",
    "priority",
    "position",
    "required_worker_uid",
    "assigned_worker_uid",
    "paused",
    "attempt",
    "max_attempts",
    "available_at",
    "can_retry",
    "waiting_reason",
    "progress",
    "created_at",
    "cancel_requested",
    "resource_category",
    "vram_mb",
    "reservation",
}


def queue(api, **params):
    response = api.get("/v2/queue", params)
    assert response.status_code == 200, response.content
    return response.json()


def entries(api, **params):
    return {e["job_id"]: e for e in queue(api, **params)["data"]}


# ---- the list ----------------------------------------------------------------------------------


def test_a_pending_entry_has_waiting_seconds_and_every_field(viewer_api, enqueue, worker):
    job_id = str(enqueue())
    # Runnable for 90 s (the test's transaction has one now(): a fresh job would have waited 0 s).
    sql("UPDATE queue_tasks SET available_at = now() - interval '90 seconds' WHERE job_id = %s", [job_id])
    [entry] = queue(viewer_api)["data"]
    assert set(entry) == ENTRY_KEYS | {"waiting_seconds"}
    assert entry["job_id"] == job_id
    assert (entry["state"], entry["task_state"], entry["stage"], entry["group"]) == (
        "pending",
        "pending",
        "noop",
        None,
    )
    assert entry["waiting_seconds"] == 90.0
    assert entry["can_retry"] is False
    assert entry["waiting_reason"] == "waiting for a free cpu slot"


def test_waiting_seconds_is_absent_unless_pending(viewer_api, enqueue, worker, failed_job):
    paused = str(enqueue())
    repository.pause(paused)
    running = str(enqueue())
    # claims the oldest runnable job: `running` (failed_job failed, `paused` is paused)
    assert claim(worker).job_id == uuid.UUID(running)
    found = entries(viewer_api)
    assert found[running]["state"] == "running"
    assert found[paused]["state"] == "paused"
    assert found[str(failed_job)]["state"] == "failed"
    for job_id in (running, paused, str(failed_job)):
        assert "waiting_seconds" not in found[job_id], found[job_id]
        assert set(found[job_id]) == ENTRY_KEYS


def test_failed_jobs_stay_in_the_queue_and_can_be_retried(viewer_api, failed_job):
    entry = entries(viewer_api)[str(failed_job)]
    assert (entry["can_retry"], entry["task_state"], entry["waiting_reason"]) == (True, "failed", None)


def test_cancelled_and_completed_jobs_leave_the_queue(viewer_api, enqueue, completed_job):
    cancelled = enqueue()
    repository.cancel(cancelled)
    assert entries(viewer_api) == {}


def test_it_orders_by_group_then_priority_then_position(viewer_api, enqueue, make_worker_row):
    b, _ = make_worker_row("w-b")
    a, _ = make_worker_row("w-a")
    first = str(enqueue())
    second = str(enqueue())
    urgent = str(enqueue(priority=5))
    on_b = str(enqueue(required_worker_uid=b))
    on_a_low = str(enqueue(required_worker_uid=a, priority=-1))
    on_a = str(enqueue(required_worker_uid=a))
    data = queue(viewer_api)["data"]
    assert [e["job_id"] for e in data] == [urgent, first, second, on_a, on_a_low, on_b]
    assert [e["group"] for e in data] == [None, None, None, a, a, b]


def test_it_filters_by_worker_group_and_state(viewer_api, enqueue, worker):
    pending = str(enqueue())
    targeted = str(enqueue(required_worker_uid=worker[0]))
    paused = str(enqueue())
    repository.pause(paused)
    assert set(entries(viewer_api, worker=worker[0])) == {targeted}
    assert set(entries(viewer_api, worker="")) == {pending, paused}  # the pending group
    assert set(entries(viewer_api, state="paused")) == {paused}
    assert entries(viewer_api, worker="w-nobody") == {}


def test_it_paginates(viewer_api, enqueue):
    ids = [str(enqueue()) for _ in range(5)]
    body = queue(viewer_api, limit=2, page=2)
    assert body["pagination"] == {"page": 2, "limit": 2, "total": 5, "total_pages": 3}
    assert [e["job_id"] for e in body["data"]] == ids[2:4]


@pytest.mark.parametrize(
    "params", [{"limit": 501}, {"page": 0}, {"state": "completed"}, {"worker": "x" * 201}]
)
def test_bad_queue_parameters_are_a_422(viewer_api, params):
    response = viewer_api.get("/v2/queue", params)
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == next(iter(params))


# ---- waiting reasons -----------------------------------------------------------------------------


def test_waiting_reason_without_any_worker(viewer_api, enqueue):
    enqueue()
    [entry] = queue(viewer_api)["data"]
    assert entry["waiting_reason"] == "no active worker"


def test_waiting_reason_when_paused(viewer_api, enqueue, worker):
    job_id = enqueue()
    repository.pause(job_id)
    [entry] = queue(viewer_api)["data"]
    assert (entry["state"], entry["paused"], entry["waiting_reason"]) == (
        "paused",
        True,
        "paused by an operator",
    )


def test_waiting_reason_when_the_target_worker_stops_or_vanishes(viewer_api, enqueue, make_worker_row):
    uid, _ = make_worker_row("w-target")
    job_id = str(enqueue(required_worker_uid=uid))
    silence_worker(uid)
    assert (
        entries(viewer_api)[job_id]["waiting_reason"]
        == "waiting for worker w-target, which is not sending heartbeats"
    )
    with connection.cursor() as cursor:  # the worker row is gone altogether
        cursor.execute("DELETE FROM queue_workers WHERE uid = %s", [uid])
    assert entries(viewer_api)[job_id]["waiting_reason"] == "waiting for worker w-target, which is unknown"


def test_waiting_reason_for_a_gpu_job_on_a_cpu_only_cluster(operator_api, worker):
    job = operator_api.post("/v2/jobs", {"type": "compile_random", "hardware": "gpu"}).json()
    assert entries(operator_api)[job["id"]]["waiting_reason"] == "no active worker has capacity in gpu_encode"


def test_waiting_reason_during_retry_backoff(viewer_api, enqueue, worker):
    job_id = str(enqueue())
    lease = lease_of(claim(worker), worker)
    repository.fail(lease, "transient", retryable=True)
    entry = entries(viewer_api)[job_id]
    assert entry["state"] == "retry_wait" and "waiting_seconds" not in entry
    assert entry["waiting_reason"].startswith("retry backoff after attempt 1")


# ---- controls ------------------------------------------------------------------------------------


def test_pause_and_resume_toggle_the_entry_and_refuse_a_repeat_with_409(operator_api, enqueue, worker):
    job_id = enqueue()
    paused = operator_api.post(f"/v2/queue/{job_id}/pause")
    assert paused.status_code == 200
    assert (paused.json()["state"], paused.json()["paused"]) == ("paused", True)
    again = operator_api.post(f"/v2/queue/{job_id}/pause")
    assert again.status_code == 409 and again.json() == {"detail": "the job is already paused"}
    resumed = operator_api.post(f"/v2/queue/{job_id}/resume").json()
    assert (resumed["state"], resumed["paused"]) == ("pending", False)
    assert "waiting_seconds" in resumed
    assert operator_api.post(f"/v2/queue/{job_id}/resume").status_code == 409


def test_setting_the_priority_changes_the_job(operator_api, enqueue):
    job_id = enqueue()
    response = operator_api.patch(f"/v2/queue/{job_id}/priority", {"priority": 7})
    assert response.status_code == 200 and response.json()["priority"] == 7
    assert operator_api.get(f"/v2/jobs/{job_id}").json()["priority"] == 7


@pytest.mark.parametrize(
    "body, field",
    [
        ({"priority": 1001}, "priority"),
        ({"priority": "high"}, "priority"),
        ({}, "priority"),
        ({"priority": 1.5}, "priority"),
        ({"priority": 1, "extra": 1}, "extra"),
    ],
)
def test_a_bad_priority_is_a_422_naming_the_field(operator_api, enqueue, body, field):
    response = operator_api.patch(f"/v2/queue/{enqueue()}/priority", body)
    assert response.status_code == 422
    assert [e["field"] for e in response.json()["errors"]] == [field]


def test_move_and_run_next_reorder_the_pending_group(operator_api, enqueue):
    a, b, c = (str(enqueue()) for _ in range(3))

    def order():
        return [e["job_id"] for e in queue(operator_api)["data"]]

    assert order() == [a, b, c]
    assert operator_api.post(f"/v2/queue/{c}/move", {"direction": "up"}).status_code == 200
    assert order() == [a, c, b]
    operator_api.post(f"/v2/queue/{a}/move", {"direction": "bottom"})
    assert order() == [c, b, a]
    operator_api.post(f"/v2/queue/{c}/move", {"direction": "down"})
    assert order() == [b, c, a]
    moved = operator_api.post(f"/v2/queue/{a}/run-next")
    assert moved.status_code == 200 and moved.json()["job_id"] == a
    assert order() == [a, b, c]
    operator_api.post(f"/v2/queue/{a}/move", {"direction": "top"})  # already first: a no-op
    assert order() == [a, b, c]


@pytest.mark.parametrize("body", [{"direction": "sideways"}, {}, {"direction": None}])
def test_a_bad_move_direction_is_a_422(operator_api, enqueue, body):
    response = operator_api.post(f"/v2/queue/{enqueue()}/move", body)
    assert response.status_code == 422 and response.json()["errors"][0]["field"] == "direction"


def test_cancel_answers_with_the_entry_of_a_job_that_left_the_queue(operator_api, enqueue):
    job_id = str(enqueue())
    response = operator_api.post(f"/v2/queue/{job_id}/cancel")
    assert response.status_code == 200
    entry = response.json()
    assert (entry["job_id"], entry["state"], entry["task_state"]) == (job_id, "cancelled", "cancelled")
    assert "waiting_seconds" not in entry and entry["can_retry"] is False
    assert operator_api.post(f"/v2/queue/{job_id}/cancel").status_code == 409


def test_cancelling_a_running_job_asks_it_to_stop(operator_api, enqueue, worker):
    job_id = enqueue()
    assert claim(worker) is not None
    entry = operator_api.post(f"/v2/queue/{job_id}/cancel").json()
    assert (entry["state"], entry["cancel_requested"]) == ("running", True)
    response = operator_api.post(f"/v2/queue/{job_id}/pause")
    assert response.status_code == 409 and "being cancelled" in response.json()["detail"]


@pytest.mark.parametrize(
    "action, body",
    [
        ("pause", None),
        ("resume", None),
        ("run-next", None),
        ("move", {"direction": "up"}),
        ("cancel", None),
    ],
)
def test_controls_on_terminal_jobs_are_a_409(operator_api, completed_job, failed_job, action, body):
    for job_id in (completed_job, failed_job):
        response = operator_api.post(f"/v2/queue/{job_id}/{action}", body)
        assert response.status_code == 409, (action, response.content)
        assert "cannot" in response.json()["detail"]
    response = operator_api.patch(f"/v2/queue/{completed_job}/priority", {"priority": 1})
    assert (
        response.status_code == 409
        and response.json()["detail"] == "cannot change priority: the job is completed"
    )


def test_retry_applies_only_to_failed_jobs(operator_api, enqueue, failed_job, completed_job):
    pending = enqueue()
    cancelled = enqueue()
    repository.cancel(cancelled)
    for job_id in (pending, completed_job, cancelled):
        response = operator_api.post(f"/v2/queue/{job_id}/retry")
        assert response.status_code == 409
        assert "only failed jobs can be retried" in response.json()["detail"]
    before = entries(operator_api)[str(failed_job)]
    retried = operator_api.post(f"/v2/queue/{failed_job}/retry")
    assert retried.status_code == 200
    entry = retried.json()
    assert (entry["state"], entry["task_state"], entry["attempt"], entry["can_retry"]) == (
        "pending",
        "pending",
        0,
        False,
    )
    assert (entry["priority"], entry["position"]) == (before["priority"], before["position"])
    assert operator_api.get(f"/v2/jobs/{failed_job}").json()["manual_retry_count"] == 1


def test_redispatch_starts_a_new_execution(operator_api, enqueue, worker, completed_job):
    job_id = enqueue()
    assert claim(worker) is not None
    entry = operator_api.post(f"/v2/queue/{job_id}/redispatch").json()
    assert (entry["state"], entry["task_state"], entry["assigned_worker_uid"]) == ("pending", "pending", None)
    detail = operator_api.get(f"/v2/jobs/{job_id}").json()
    assert detail["execution_id"] == 2
    assert "redispatched by bob via the API" in detail["log_tail"][-1]
    assert operator_api.post(f"/v2/queue/{completed_job}/redispatch").status_code == 409


@pytest.mark.parametrize(
    "method, action, body",
    [
        ("post", "pause", None),
        ("post", "resume", None),
        ("post", "cancel", None),
        ("post", "retry", None),
        ("post", "run-next", None),
        ("post", "redispatch", None),
        ("post", "move", {"direction": "up"}),
        ("patch", "priority", {"priority": 1}),
    ],
)
def test_controls_on_unknown_jobs_are_a_404_and_on_malformed_ids_a_422(operator_api, method, action, body):
    response = getattr(operator_api, method)(f"/v2/queue/{uuid.uuid4()}/{action}", body)
    assert response.status_code == 404 and response.json() == {"detail": "job not found"}
    response = getattr(operator_api, method)(f"/v2/queue/123/{action}", body)
    assert response.status_code == 422 and response.json()["errors"][0]["field"] == "job_id"


def test_it_answers_one_entry_by_job_id(viewer_api, enqueue):
    job_id = str(enqueue())
    assert viewer_api.get(f"/v2/queue/{job_id}").json()["job_id"] == job_id
    assert viewer_api.get(f"/v2/queue/{uuid.uuid4()}").status_code == 404


def test_the_total_counts_what_the_list_holds_under_every_filter(
    viewer_api, enqueue, worker, failed_job, completed_job, make_worker_row
):
    # queue_count counts from the jobs' status index (and only failed jobs' schedules); it must agree
    # with queue_list for every group and state.
    uid, _session = worker
    other, _ = make_worker_row("w-other")
    running = enqueue()
    assert claim(worker) is not None
    cancelling = enqueue(max_attempts=1)
    lease = lease_of(claim(worker), worker)
    assert repository.fail(lease, "boom", retryable=False).outcome == "failed"
    with connection.cursor() as cursor:  # a failed job with a cancel request is not in the queue
        cursor.execute("UPDATE job_schedule SET cancel_requested_at = now() WHERE job_id = %s", [cancelling])
    pending = [enqueue(), enqueue(priority=3)]
    paused = enqueue()
    repository.pause(paused)
    targeted = enqueue(required_worker_uid=other)
    cancelled = enqueue()
    repository.cancel(cancelled)

    expected = {str(j) for j in (running, failed_job, *pending, paused, targeted)}
    body = queue(viewer_api, limit=500)
    assert {e["job_id"] for e in body["data"]} == expected
    assert body["pagination"]["total"] == len(expected)
    assert viewer_api.get("/v2/stats").json()["queue_length"] == len(expected)
    filters = [{"state": s} for s in ("pending", "running", "retry_wait", "paused", "failed")]
    filters += [{"worker": w} for w in (uid, other, "", "w-nobody")]
    filters += [{"worker": uid, "state": "failed"}, {"worker": "", "state": "paused"}]
    for params in filters:
        body = queue(viewer_api, limit=500, **params)
        assert body["pagination"]["total"] == len(body["data"]), params
    assert queue(viewer_api, state="failed")["pagination"]["total"] == 1
    assert queue(viewer_api, limit=2)["pagination"] == {
        "page": 1,
        "limit": 2,
        "total": len(expected),
        "total_pages": 3,
    }
