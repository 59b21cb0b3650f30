"""The authorization matrix: who may do what, where, and what each allowed action must change.

- `API`: every API operation → how to make its target, its success status, its effect;
- `dashboard_actions(world)`: every dashboard action (dashboard.views.actions, job creation,
  library actions, worker drain, evacuate and undrain) with its target and effect;
- `ADMIN_ACTIONS`: every Django admin action of the project's models, with its target and effect;
- `World`: fresh targets for each request, so every allowed action has something to act on;
- `fingerprint()`: everything an API, dashboard or admin request could change, in a comparable
  form, to prove that a refused request changed nothing.

The roles are the cast's (tests/kit/personas.py); `MATRIX_ROLES` are those the matrix checks.
"""

from __future__ import annotations

import uuid

from django.db import connection
from django.urls import reverse

from api.models import ApiToken, PlaybackGeneration
from dashboard.views.actions import JOB_ACTIONS
from media.models import MediaAsset
from media.storage import LocalStorage
from scheduler import repository
from scheduler.models import Job, JobSchedule, QueueWorker
from tests.kit.db import claim, lease_of
from tests.kit.personas import persona

MATRIX_ROLES = ("anonymous", "viewer", "operator", "admin")


def fingerprint() -> tuple:
    """Everything an API, dashboard or admin request could change, in a comparable form."""
    with connection.cursor() as cursor:
        cursor.execute("""
          SELECT
            (SELECT coalesce(json_agg(x ORDER BY x.id), '[]') FROM (
               SELECT j.id, j.status, j.priority, j.max_attempts, j.webhook_url, j.manual_retry_count,
                      s.priority AS live_priority, s.position, s.paused, s.cancel_requested_at IS NOT NULL AS cancel,
                      s.execution_id, s.assigned_worker_uid, s.execution_mode
                 FROM jobs j LEFT JOIN job_schedule s ON s.job_id = j.id) x)::text,
            (SELECT count(*) FROM queue_tasks),
            (SELECT coalesce(json_agg(x ORDER BY x.uid), '[]') FROM (
               SELECT uid, lifecycle FROM queue_workers) x)::text,
            (SELECT coalesce(json_agg(x ORDER BY x.id), '[]') FROM (
               SELECT id, revoked, scope FROM api_tokens) x)::text,
            (SELECT count(*) FROM media_assets),
            (SELECT count(*) FROM auth_user)
        """)
        return cursor.fetchone()


def counts() -> tuple[int, int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT (SELECT count(*) FROM jobs), (SELECT count(*) FROM queue_tasks)")
        return cursor.fetchone()


# ---- targets and the tables of what may be done where ----------------------------------------


class World:
    """Fresh targets for each request, so every allowed action has something to act on."""

    def __init__(self, make_worker_row, media_root):
        self.make_worker_row = make_worker_row
        self.media_root = media_root
        self.n = 0

    def _uid(self) -> str:
        self.n += 1
        return f"w-matrix-{self.n}"

    def job(self, **kwargs) -> uuid.UUID:
        return repository.enqueue_job(repository.NewJob("noop", {}, **kwargs), stale_seconds=60)

    def paused_job(self) -> uuid.UUID:
        job = self.job()
        repository.pause(job)
        return job

    def dedicated_job(self) -> uuid.UUID:
        job = self.job()
        repository.reserve_job(job)
        return job

    def failed_job(self) -> uuid.UUID:
        worker = self.make_worker_row(self._uid())
        job = self.job(required_worker_uid=worker[0], max_attempts=1, priority=1000)
        task = claim(worker)
        assert task is not None and task.job_id == job
        assert repository.fail(lease_of(task, worker), "broken", retryable=False).outcome == "failed"
        return job

    def worker(self) -> str:
        return self.make_worker_row(self._uid())[0]

    def job_with_output(self, name: str = "report.json") -> uuid.UUID:
        """A completed job that published one small file."""
        worker = self.make_worker_row(self._uid())
        job = self.job(required_worker_uid=worker[0], priority=1000)
        path = LocalStorage().path(str(job), name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
        output = repository.Output(name, size_bytes=2, storage_url=path.as_uri())
        assert repository.finish(lease_of(claim(worker), worker), outputs=[output]).outcome == "completed"
        return job

    def asset(self) -> MediaAsset:
        name = f"videos/clip-{uuid.uuid4().hex[:8]}.mp4"
        (self.media_root / name).write_bytes(b"\x00" * 64)
        return MediaAsset.objects.create(path=name, directory="videos")

    def token(self) -> ApiToken:
        return ApiToken.issue(persona("dave"), scope="read", name="target")[0]


def _status(job_id):
    return Job.objects.get(pk=job_id).status


def _schedule(job_id):
    return JobSchedule.objects.get(pk=job_id)


# ---- the API -------------------------------------------------------------------------------------------

# (method, path) -> (make the target: world -> (path params, body), success status, effect: world, params -> bool)
API = {
    ("GET", "/v2/jobs"): (lambda w: ({}, None), 200, None),
    ("POST", "/v2/jobs"): (lambda w: ({}, {"type": "noop", "params": {"seconds": 1}}), 201, None),
    ("GET", "/v2/jobs/{job_id}"): (lambda w: ({"job_id": w.job()}, None), 200, None),
    ("GET", "/v2/jobs/{job_id}/tasks"): (lambda w: ({"job_id": w.job()}, None), 200, None),
    ("GET", "/v2/jobs/{job_id}/outputs/{name}"): (
        lambda w: ({"job_id": w.job_with_output(), "name": "report.json"}, None),
        200,
        None,
    ),
    ("POST", "/v2/jobs/{job_id}/playback"): (lambda w: ({"job_id": w.job()}, {"ttl_seconds": 60}), 200, None),
    ("DELETE", "/v2/jobs/{job_id}/playback"): (
        lambda w: ({"job_id": w.job()}, None),
        200,
        lambda p: PlaybackGeneration.objects.filter(job_id=p["job_id"], generation=1).exists(),
    ),
    ("GET", "/v2/job-types"): (lambda w: ({}, None), 200, None),
    ("GET", "/v2/queue"): (lambda w: ({}, None), 200, None),
    ("GET", "/v2/queue/{job_id}"): (lambda w: ({"job_id": w.job()}, None), 200, None),
    ("POST", "/v2/queue/{job_id}/run-next"): (lambda w: ({"job_id": w.job()}, None), 200, None),
    ("PATCH", "/v2/queue/{job_id}/priority"): (
        lambda w: ({"job_id": w.job()}, {"priority": 7}),
        200,
        lambda p: _schedule(p["job_id"]).priority == 7,
    ),
    ("POST", "/v2/queue/{job_id}/move"): (lambda w: ({"job_id": w.job()}, {"direction": "top"}), 200, None),
    ("POST", "/v2/queue/{job_id}/pause"): (
        lambda w: ({"job_id": w.job()}, None),
        200,
        lambda p: _schedule(p["job_id"]).paused,
    ),
    ("POST", "/v2/queue/{job_id}/resume"): (
        lambda w: ({"job_id": w.paused_job()}, None),
        200,
        lambda p: not _schedule(p["job_id"]).paused,
    ),
    ("POST", "/v2/queue/{job_id}/cancel"): (
        lambda w: ({"job_id": w.job()}, None),
        200,
        lambda p: _status(p["job_id"]) == "cancelled",
    ),
    ("POST", "/v2/queue/{job_id}/retry"): (
        lambda w: ({"job_id": w.failed_job()}, None),
        200,
        lambda p: _status(p["job_id"]) == "pending",
    ),
    ("POST", "/v2/queue/{job_id}/redispatch"): (
        lambda w: ({"job_id": w.job()}, None),
        200,
        lambda p: _schedule(p["job_id"]).execution_id == 2,
    ),
    ("POST", "/v2/queue/{job_id}/dedicate"): (
        lambda w: ({"job_id": w.job()}, None),
        200,
        lambda p: _schedule(p["job_id"]).execution_mode == "dedicated",
    ),
    ("DELETE", "/v2/queue/{job_id}/dedicate"): (
        lambda w: ({"job_id": w.dedicated_job()}, None),
        200,
        lambda p: _schedule(p["job_id"]).execution_mode == "shared",
    ),
    ("GET", "/v2/workers"): (lambda w: ({}, None), 200, None),
    ("GET", "/v2/workers/{uid}"): (lambda w: ({"uid": w.worker()}, None), 200, None),
    ("POST", "/v2/workers/{uid}/drain"): (
        lambda w: ({"uid": w.worker()}, None),
        200,
        lambda p: QueueWorker.objects.get(pk=p["uid"]).lifecycle == "draining",
    ),
    ("POST", "/v2/workers/{uid}/evacuate"): (
        lambda w: ({"uid": w.worker()}, None),
        200,
        lambda p: QueueWorker.objects.get(pk=p["uid"]).lifecycle == "draining",
    ),
    ("POST", "/v2/workers/{uid}/undrain"): (
        lambda w: ({"uid": _drained(w.worker())}, None),
        200,
        lambda p: QueueWorker.objects.get(pk=p["uid"]).lifecycle == "active",
    ),
    ("GET", "/v2/stats"): (lambda w: ({}, None), 200, None),
    ("GET", "/v1/sysinfo"): (lambda w: ({}, None), 200, None),
}
PUBLIC = {("GET", "/healthz"), ("GET", "/metrics"), ("GET", "/v2/openapi.json"), ("GET", "/v2/docs")}
SAFE = ("GET", "HEAD", "OPTIONS")
# Not safe methods, but they change nothing a viewer could not already read: a viewer (and a read
# token) may make a signed playback URL of what they may play anyway.
VIEWER_MAY = {("POST", "/v2/jobs/{job_id}/playback")}
# Credentials in the path, none in headers: the signed playback URLs (tests/api/test_playing.py).
SIGNED = {("GET", "/v2/jobs/{job_id}/playback/{token}/{name}")}
# tus uploads: operate tokens only (no session, no viewer, an upload only for its owner), discovery
# (OPTIONS) without credentials; their own matrix is tests/api/test_uploads.py
# (test_options_advertises_the_protocol_without_credentials,
# test_only_operate_tokens_of_the_owner_may_use_an_upload).
TUS = {
    ("OPTIONS", "/v2/uploads/"),
    ("POST", "/v2/uploads/"),
    *((method, "/v2/uploads/{upload_id}") for method in ("OPTIONS", "HEAD", "PATCH", "DELETE", "GET")),
}


# ---- the dashboard -------------------------------------------------------------------------------------


def dashboard_actions(world):
    """(name, make the target -> (url, data), effect -> bool). Every action of dashboard.views.actions
    plus job creation, library actions and worker drain."""
    targets = {
        "cancel": (world.job, {}, lambda j: _status(j) == "cancelled"),
        "pause": (world.job, {}, lambda j: _schedule(j).paused),
        "resume": (world.paused_job, {}, lambda j: not _schedule(j).paused),
        "retry": (world.failed_job, {}, lambda j: _status(j) == "pending"),
        "run-next": (world.job, {}, lambda j: True),
        "move": (world.job, {"direction": "top"}, lambda j: True),
        "priority": (world.job, {"priority": "9"}, lambda j: _schedule(j).priority == 9),
        "redispatch": (world.job, {}, lambda j: _schedule(j).execution_id == 2),
        "dedicate": (world.job, {}, lambda j: _schedule(j).execution_mode == "dedicated"),
        "share": (world.dedicated_job, {}, lambda j: _schedule(j).execution_mode == "shared"),
    }
    assert set(targets) == set(JOB_ACTIONS), "add the new dashboard action to the matrix"
    actions = []
    for name, (make, data, effect) in targets.items():

        def build(make=make, data=data, name=name):
            job = make()
            return reverse("dashboard:job_action", args=[job, name]), data, job

        actions.append((f"job:{name}", build, effect))
    jobs_before = {}

    def create():
        jobs_before["n"] = Job.objects.count()
        return reverse("dashboard:job_new") + "?type=noop", {"type": "noop", "seconds": "1"}, None

    actions.append(("job_new", create, lambda _: Job.objects.count() == jobs_before["n"] + 1))

    def library():
        asset = world.asset()
        jobs_before["n"] = Job.objects.count()
        return reverse("dashboard:library_action"), {"one": f"validate:{asset.pk}"}, None

    actions.append(("library_action", library, lambda _: Job.objects.count() == jobs_before["n"] + 1))

    def drain():
        uid = world.worker()
        return reverse("dashboard:worker_drain", args=[uid]), {}, uid

    actions.append(
        ("worker_drain", drain, lambda uid: QueueWorker.objects.get(pk=uid).lifecycle == "draining")
    )

    def evacuate():
        uid = world.worker()
        return reverse("dashboard:worker_evacuate", args=[uid]), {}, uid

    actions.append(
        ("worker_evacuate", evacuate, lambda uid: QueueWorker.objects.get(pk=uid).lifecycle == "draining")
    )

    def undrain():
        uid = _drained(world.worker())
        return reverse("dashboard:worker_undrain", args=[uid]), {}, uid

    actions.append(
        ("worker_undrain", undrain, lambda uid: QueueWorker.objects.get(pk=uid).lifecycle == "active")
    )
    return actions


def _drained(uid: str) -> str:
    """A worker drained (the target of undrain)."""
    repository.drain_worker(uid)
    return uid


# ---- the admin -----------------------------------------------------------------------------------------

ADMIN_ACTIONS = {
    # (model label, action): (make the target, effect)
    ("scheduler.Job", "cancel_jobs"): ("job", lambda pk: _status(pk) == "cancelled"),
    ("scheduler.Job", "retry_jobs"): ("failed_job", lambda pk: _status(pk) == "pending"),
    ("scheduler.Job", "pause_jobs"): ("job", lambda pk: _schedule(pk).paused),
    ("scheduler.Job", "resume_jobs"): ("paused_job", lambda pk: not _schedule(pk).paused),
    ("scheduler.Job", "redispatch_jobs"): ("job", lambda pk: _schedule(pk).execution_id == 2),
    ("scheduler.Job", "dedicate_jobs"): ("job", lambda pk: _schedule(pk).execution_mode == "dedicated"),
    ("scheduler.JobSchedule", "cancel_jobs"): ("job", lambda pk: _status(pk) == "cancelled"),
    ("scheduler.JobSchedule", "retry_jobs"): ("failed_job", lambda pk: _status(pk) == "pending"),
    ("scheduler.JobSchedule", "pause_jobs"): ("job", lambda pk: _schedule(pk).paused),
    ("scheduler.JobSchedule", "resume_jobs"): ("paused_job", lambda pk: not _schedule(pk).paused),
    ("scheduler.JobSchedule", "redispatch_jobs"): ("job", lambda pk: _schedule(pk).execution_id == 2),
    ("scheduler.JobSchedule", "dedicate_jobs"): (
        "job",
        lambda pk: _schedule(pk).execution_mode == "dedicated",
    ),
    ("media.MediaAsset", "validate_assets"): (
        "asset",
        lambda pk: Job.objects.filter(type="validate", params__video_id=str(pk)).exists(),
    ),
    ("media.MediaAsset", "delete_selected"): (
        "asset",
        lambda pk: not MediaAsset.objects.filter(pk=pk).exists(),
    ),
    ("api.ApiToken", "revoke_tokens"): ("token", lambda pk: ApiToken.objects.get(pk=pk).revoked),
    ("api.ApiToken", "delete_selected"): (
        "token",
        lambda pk: not ApiToken.objects.filter(pk=pk).exists(),
    ),
    ("scheduler.QueueWorker", "drain_workers"): (
        "worker",
        lambda pk: QueueWorker.objects.get(pk=pk).lifecycle == "draining",
    ),
    ("scheduler.QueueWorker", "evacuate_workers"): (
        "worker",
        lambda pk: QueueWorker.objects.get(pk=pk).lifecycle == "draining",
    ),
}


def make_target(world, kind):
    made = getattr(world, kind)()
    return made.pk if hasattr(made, "pk") else made
