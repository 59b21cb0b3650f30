"""POST/GET /v2/jobs, /v2/jobs/{id}, /v2/jobs/{id}/tasks and /v2/job-types."""

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduler import repository
from scheduler.models import Job, JobSchedule
from tests.kit.db import claim, lease_of, silence_worker

pytestmark = pytest.mark.django_db


def fields_of(response):
    assert response.status_code == 422, response.content
    body = response.json()
    assert set(body) == {"detail", "errors"}
    for error in body["errors"]:
        assert set(error) == {"field", "message"} and error["message"]
    names = [e["field"] for e in body["errors"]]
    for name in names:
        assert name in body["detail"]  # the summary names every field
    return names


# ---- create ------------------------------------------------------------------------------------


def test_it_creates_a_noop_job_with_the_defaults(operator_api):
    response = operator_api.post("/v2/jobs", {"type": "noop", "params": {"seconds": 1}})
    assert response.status_code == 201
    job = response.json()
    assert response["Location"] == f"/v2/jobs/{job['id']}"
    assert job["type"] == "noop" and job["status"] == "pending"
    assert (job["priority"], job["max_attempts"], job["hardware"]) == (0, 4, "auto")
    assert job["params"] == {"seconds": 1.0, "fail_attempts": 0, "children": 0}  # normalised, defaults filled
    assert job["created_by"] == "bob"
    assert [s["placement"] for s in job["stages"]] == ["dispatch"]
    assert job["queue"]["state"] == "pending" and "waiting_seconds" in job["queue"]
    assert job["log_tail"][-1].endswith("created noop")
    assert operator_api.get(f"/v2/jobs/{job['id']}").json()["id"] == job["id"]


def test_it_takes_every_optional_field(operator_api, worker, settings):
    settings.JETENCODE = {**settings.JETENCODE, "WEBHOOK_ALLOW_PRIVATE": True}
    response = operator_api.post(
        "/v2/jobs",
        {
            "type": "noop",
            "params": {},
            "priority": -1000,
            "max_attempts": 20,
            "required_worker_uid": worker[0],
            "webhook_url": "http://127.0.0.1:9/hook",
            "hardware": "cpu",
        },
    )
    assert response.status_code == 201, response.content
    job = response.json()
    assert (job["priority"], job["max_attempts"], job["required_worker_uid"]) == (-1000, 20, worker[0])
    assert job["webhook_url"] == "http://127.0.0.1:9/hook"
    assert job["queue"]["group"] == worker[0]


def test_a_gpu_job_is_claimable_only_by_a_gpu_worker(operator_api, worker):
    response = operator_api.post("/v2/jobs", {"type": "compile_random", "hardware": "gpu"})
    assert response.status_code == 201, response.content
    job = response.json()
    schedule = JobSchedule.objects.get(job_id=job["id"])
    assert (schedule.required_category, schedule.required_vram_mb) == ("gpu_encode", 2000)
    assert job["queue"]["waiting_reason"] == "no active worker has capacity in gpu_encode"


def test_resource_overrides_are_stored_and_required(operator_api):
    response = operator_api.post("/v2/jobs", {"type": "noop", "resource_category": "gpu_ai", "vram_mb": 1500})
    job = response.json()
    assert (job["resource_category"], job["vram_mb"]) == ("gpu_ai", 1500)
    schedule = JobSchedule.objects.get(job_id=job["id"])
    assert (schedule.required_category, schedule.required_vram_mb) == ("gpu_ai", 1500)


def test_auto_and_cpu_jobs_carry_no_gpu_requirement(operator_api):
    for hardware in ("auto", "cpu"):
        job = operator_api.post("/v2/jobs", {"type": "compile_random", "hardware": hardware}).json()
        schedule = JobSchedule.objects.get(job_id=job["id"])
        assert (schedule.required_category, schedule.required_vram_mb) == (None, 0)


@pytest.mark.parametrize(
    "body, fields",
    [
        ({"type": "transcoder"}, ["type"]),
        ({}, ["type"]),
        ({"type": "noop", "params": {"seconds": -1}}, ["params.seconds"]),
        ({"type": "noop", "params": {"children": 101, "bogus": 1}}, ["params.children", "params.bogus"]),
        ({"type": "noop", "params": [1, 2]}, ["params"]),
        ({"type": "noop", "priority": 1001}, ["priority"]),
        ({"type": "noop", "priority": -1001}, ["priority"]),
        ({"type": "noop", "priority": "5"}, ["priority"]),
        ({"type": "noop", "priority": True}, ["priority"]),
        ({"type": "noop", "priority": 2**63}, ["priority"]),
        ({"type": "noop", "max_attempts": 0}, ["max_attempts"]),
        ({"type": "noop", "max_attempts": 21}, ["max_attempts"]),
        ({"type": "noop", "hardware": "tpu"}, ["hardware"]),
        ({"type": "noop", "resource_category": "gpu"}, ["resource_category"]),
        ({"type": "noop", "vram_mb": 10**12}, ["vram_mb"]),
        ({"type": "noop", "resource_category": "cpu", "vram_mb": 100}, ["vram_mb"]),
        ({"type": "noop", "priorty": 5}, ["priorty"]),
        ({"type": "noop", "required_worker_uid": ""}, ["required_worker_uid"]),
        ({"type": "noop", "webhook_url": "ftp://example.com/x"}, ["webhook_url"]),
        ({"type": "no\x00op"}, ["type"]),
        ({"type": "noop", "params": {"seconds": "\x00"}}, ["params"]),
        ({"type": "noop", "params": {"\x00": 1}}, ["params"]),
        ({"type": "noop", "required_worker_uid": "w\x00"}, ["required_worker_uid"]),
        ({"type": "noop", "priority": 5000, "max_attempts": 99}, ["priority", "max_attempts"]),
    ],
)
def test_invalid_input_is_a_422_naming_each_field(operator_api, body, fields):
    assert sorted(fields_of(operator_api.post("/v2/jobs", body))) == sorted(fields)


def test_a_lone_surrogate_or_nan_in_params_is_refused_not_a_500(operator_api):
    assert fields_of(operator_api.post("/v2/jobs", raw='{"type": "noop", "params": {"x": "\\ud800"}}')) == [
        "params"
    ]
    assert fields_of(operator_api.post("/v2/jobs", raw='{"type": "noop", "params": {"seconds": NaN}}')) == [
        "params"
    ]


@pytest.mark.parametrize("raw", ["{not json", "", "[]", "null", '"noop"', "\xff\xfe", "[" * 5000])
def test_malformed_bodies_are_a_422_in_the_same_shape(operator_api, raw):
    assert fields_of(operator_api.post("/v2/jobs", raw=raw)) == ["body"]


def test_an_oversized_body_is_a_413_with_json(operator_api, settings):
    response = operator_api.post(
        "/v2/jobs", {"type": "noop", "params": {"pad": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)}}
    )
    assert response.status_code == 413
    assert "larger than" in response.json()["detail"]


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/hook",
        "http://localhost:8000/x",
        "http://10.1.2.3/",
        "http://192.168.0.1/",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
    ],
)
def test_webhooks_to_private_addresses_are_refused(operator_api, url):
    response = operator_api.post("/v2/jobs", {"type": "noop", "webhook_url": url})
    assert fields_of(response) == ["webhook_url"]
    assert "JETENCODE_WEBHOOK_ALLOW_PRIVATE" in response.json()["errors"][0]["message"]


def test_webhooks_to_public_addresses_are_accepted(operator_api):
    response = operator_api.post("/v2/jobs", {"type": "noop", "webhook_url": "https://93.184.215.14/hook"})
    assert response.status_code == 201


def test_private_webhooks_are_accepted_when_allowed(operator_api, settings):
    settings.JETENCODE = {**settings.JETENCODE, "WEBHOOK_ALLOW_PRIVATE": True}
    assert (
        operator_api.post("/v2/jobs", {"type": "noop", "webhook_url": "http://127.0.0.1/hook"}).status_code
        == 201
    )


def test_a_target_worker_must_be_known_fresh_and_not_draining(operator_api, make_worker_row):
    response = operator_api.post("/v2/jobs", {"type": "noop", "required_worker_uid": "w-ghost"})
    assert fields_of(response) == ["required_worker_uid"]
    assert "unknown worker" in response.json()["errors"][0]["message"]

    stale, _ = make_worker_row("w-stale")
    silence_worker(stale)  # its heartbeat stopped an hour ago
    response = operator_api.post("/v2/jobs", {"type": "noop", "required_worker_uid": stale})
    assert "offline" in response.json()["errors"][0]["message"]

    draining, _ = make_worker_row("w-draining")
    repository.drain_worker(draining)
    response = operator_api.post("/v2/jobs", {"type": "noop", "required_worker_uid": draining})
    assert "draining" in response.json()["errors"][0]["message"]


def test_a_refusal_raised_by_the_enqueue_itself_is_a_422(operator_api, worker, monkeypatch):
    # The worker starts draining between the check and the insert: enqueue_job_v1 refuses it.
    monkeypatch.setattr(repository, "target_refusal", lambda uid, stale_seconds: None)
    repository.drain_worker(worker[0])
    response = operator_api.post("/v2/jobs", {"type": "noop", "required_worker_uid": worker[0]})
    assert fields_of(response) == ["required_worker_uid"]


# ---- list --------------------------------------------------------------------------------------


def test_it_lists_jobs_newest_first_with_pagination(operator_api, enqueue):
    ids = [str(enqueue()) for _ in range(5)]
    # One test is one transaction, so now() is the same for every job: spread them out.
    start = timezone.now()
    for n, job_id in enumerate(ids):
        Job.objects.filter(pk=job_id).update(created_at=start + timedelta(seconds=n))
    page1 = operator_api.get("/v2/jobs", {"limit": 2}).json()
    assert {k: v for k, v in page1["pagination"].items() if k != "next_cursor"} == {
        "page": 1,
        "limit": 2,
        "total": 5,
        "total_pages": 3,
    }
    assert page1["pagination"]["next_cursor"]  # a full page: the cursor continues after it
    assert [j["id"] for j in page1["data"]] == ids[::-1][:2]
    page3 = operator_api.get("/v2/jobs", {"limit": 2, "page": 3}).json()
    assert [j["id"] for j in page3["data"]] == [ids[0]]
    assert operator_api.get("/v2/jobs", {"limit": 2, "page": 9}).json()["data"] == []


def test_an_empty_list_has_zero_pages(operator_api):
    assert operator_api.get("/v2/jobs").json() == {
        "data": [],
        "pagination": {"page": 1, "limit": 20, "total": 0, "total_pages": 0, "next_cursor": None},
    }


def test_it_filters_jobs(operator_api, enqueue, failed_job, worker):
    gpu = operator_api.post("/v2/jobs", {"type": "compile_random", "hardware": "gpu"}).json()["id"]
    targeted = str(enqueue(required_worker_uid=worker[0]))

    def ids(**params):
        return {j["id"] for j in operator_api.get("/v2/jobs", params).json()["data"]}

    assert ids(status="failed") == {str(failed_job)}
    assert ids(type="compile_random") == {gpu}
    assert ids(resource_category="gpu_encode") == {gpu}
    assert ids(worker=worker[0]) == {targeted, str(failed_job)}  # assigned by its dispatch, or targeted
    assert ids(status="failed", type="compile_random") == set()


@pytest.mark.parametrize(
    "params, field",
    [
        ({"limit": 501}, "limit"),
        ({"limit": 0}, "limit"),
        ({"page": 0}, "page"),
        ({"page": 10**30}, "page"),
        ({"status": "done"}, "status"),
        ({"resource_category": "tpu"}, "resource_category"),
        ({"type": "x" * 65}, "type"),
        ({"worker": "a\x00b"}, "worker"),
    ],
)
def test_bad_list_parameters_are_a_422(operator_api, params, field):
    assert fields_of(operator_api.get("/v2/jobs", params)) == [field]


# ---- detail and tasks ----------------------------------------------------------------------------


def test_job_detail_has_stages_outputs_and_log(operator_api, enqueue, worker):
    job_id = enqueue()
    lease = lease_of(claim(worker), worker)
    repository.report_progress(lease, 50.0, {"fps": 30}, ["frame 1", "frame 2"])
    repository.finish(
        lease, outputs=[repository.Output("out.mp4", size_bytes=123, metadata={"codec": "h264"})]
    )
    job = operator_api.get(f"/v2/jobs/{job_id}").json()
    assert job["status"] == "completed" and job["progress"] == 100
    assert job["started_at"] and job["finished_at"]
    assert job["assigned_worker_uid"] == worker[0]  # the worker that ran it stays on record
    [stage] = job["stages"]
    assert (stage["state"], stage["attempt"], stage["worker_uid"]) == ("completed", 1, worker[0])
    [output] = job["outputs"]
    assert (output["name"], output["size_bytes"], output["metadata"]) == ("out.mp4", 123, {"codec": "h264"})
    assert job["queue"] is None  # it has left the queue
    assert any("created noop" in line for line in job["log_tail"])


def test_job_tasks_have_last_failure_and_the_stage_log_tail(operator_api, enqueue, worker):
    job_id = enqueue(max_attempts=2)
    task = claim(worker)
    lease = lease_of(task, worker)
    repository.report_progress(lease, 10.0, None, [f"line {n}" for n in range(30)])
    repository.fail(lease, "ffmpeg exited 1", retryable=True)
    body = operator_api.get(f"/v2/jobs/{job_id}/tasks").json()
    assert body["job_id"] == str(job_id)
    [t] = body["data"]
    assert (t["id"], t["state"], t["attempt"], t["max_attempts"]) == (task.id, "retry_wait", 1, 2)
    assert "ffmpeg exited 1" in t["last_failure"]
    assert [line["message"] for line in t["log_tail"]] == [f"line {n}" for n in range(10, 30)]
    short = operator_api.get(f"/v2/jobs/{job_id}/tasks", {"log_lines": 3}).json()["data"][0]["log_tail"]
    assert [line["message"] for line in short] == ["line 27", "line 28", "line 29"]
    assert operator_api.get(f"/v2/jobs/{job_id}/tasks", {"log_lines": 0}).json()["data"][0]["log_tail"] == []


def test_job_tasks_include_earlier_executions(operator_api, enqueue, worker):
    job_id = enqueue()
    assert claim(worker) is not None
    repository.redispatch(job_id)
    tasks = operator_api.get(f"/v2/jobs/{job_id}/tasks").json()["data"]
    assert [(t["execution_id"], t["state"]) for t in tasks] == [(1, "cancelled"), (2, "pending")]
    detail = operator_api.get(f"/v2/jobs/{job_id}").json()
    assert detail["execution_id"] == 2 and [s["state"] for s in detail["stages"]] == ["pending"]


@pytest.mark.parametrize("path", ["/v2/jobs/{}", "/v2/jobs/{}/tasks"])
def test_unknown_job_ids_are_a_404_and_malformed_ones_a_422(operator_api, path):
    missing = operator_api.get(path.format(uuid.uuid4()))
    assert missing.status_code == 404 and missing.json() == {"detail": "job not found"}
    assert fields_of(operator_api.get(path.format("not-a-uuid"))) == ["job_id"]


def test_job_types_are_listed_with_their_params_schema(viewer_api):
    types = {t["name"]: t for t in viewer_api.get("/v2/job-types").json()["data"]}
    assert "noop" in types and "transcode" in types
    assert types["noop"]["params_schema"]["properties"]["children"]["maximum"] == 100
    assert types["transcode"]["gpu_path"] is True
