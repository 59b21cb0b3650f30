"""The Django admin: every model registered, queue tables read-only, actions through the repository,
and no COUNT(*) over the task table."""

import re

import pytest
from django.apps import apps
from django.contrib import admin
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from api.models import ApiToken, hash_token
from media.models import MediaAsset
from scheduler import repository
from scheduler.models import Job, JobSchedule, QueueTask, QueueWorker
from tests.kit.db import claim, lease_of

pytestmark = pytest.mark.django_db

PROJECT_APPS = ("scheduler", "media", "api")


def project_models():
    return [m for app in PROJECT_APPS for m in apps.get_app_config(app).get_models()]


def test_every_project_model_is_registered():
    missing = [m.__name__ for m in project_models() if not admin.site.is_registered(m)]
    assert missing == []


def test_every_changelist_and_change_page_renders(admin_client, enqueue, make_worker_row):
    worker = make_worker_row("w-admin")
    enqueue("noop")
    task = claim(worker)
    repository.report_progress(lease_of(task, worker), 10, lines=["hello"])
    repository.record_sample()
    MediaAsset.objects.create(path="videos/a.mp4")
    for model in project_models():
        opts = model._meta
        url = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
        response = admin_client.get(url)
        assert response.status_code == 200, url
        first = model.objects.first()
        if first is not None:
            change = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[first.pk])
            assert admin_client.get(change).status_code == 200, change


def test_queue_models_cannot_be_added_changed_or_deleted(admin_client, enqueue):
    job = enqueue("noop")
    for model in (Job, JobSchedule, QueueTask, QueueWorker):
        opts = model._meta
        assert admin_client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_add")).status_code == 403
    change = admin_client.get(reverse("admin:scheduler_jobschedule_change", args=[job])).content.decode()
    assert 'name="priority"' not in change  # shown, not editable
    task = QueueTask.objects.get(job_id=job)
    html = admin_client.get(reverse("admin:scheduler_queuetask_change", args=[task.pk])).content.decode()
    assert "Lease and fencing" in html and 'name="lease_token"' not in html


def run_action(client, model, action, pks):
    opts = model._meta
    return client.post(
        reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist"),
        {"action": action, "_selected_action": [str(pk) for pk in pks]},
        follow=True,
    )


def test_job_actions_call_the_repository_and_report(admin_client, enqueue):
    a, b = enqueue("noop"), enqueue("noop")
    response = run_action(admin_client, Job, "pause_jobs", [a, b])
    assert "Paused 2 jobs." in response.content.decode()
    assert set(Job.objects.values_list("status", flat=True)) == {"paused"}

    response = run_action(admin_client, Job, "pause_jobs", [a])
    assert "Refused: " in response.content.decode() and "already paused" in response.content.decode()

    run_action(admin_client, Job, "resume_jobs", [a, b])
    run_action(admin_client, Job, "cancel_jobs", [a])
    assert Job.objects.get(pk=a).status == "cancelled"
    response = run_action(admin_client, Job, "retry_jobs", [a])
    assert "only failed jobs can be retried" in response.content.decode()


def test_retry_and_redispatch_from_the_admin(admin_client, enqueue, make_worker_row):
    worker = make_worker_row("w-adm")
    failed = enqueue("noop")
    task = claim(worker)
    repository.fail(lease_of(task, worker), "broken", retryable=False)
    response = run_action(admin_client, Job, "retry_jobs", [failed])
    assert "Retrying 1 job." in response.content.decode()
    assert Job.objects.get(pk=failed).status == "pending"

    stuck = enqueue("noop", {"seconds": 60})
    assert claim(worker) is not None
    run_action(admin_client, JobSchedule, "redispatch_jobs", [stuck])
    assert JobSchedule.objects.get(pk=stuck).execution_id == 2


def test_drain_workers_from_the_admin(admin_client, make_worker_row):
    uid, _ = make_worker_row("w-drain")
    response = run_action(admin_client, QueueWorker, "drain_workers", [uid])
    assert f"Draining: {uid}" in response.content.decode()
    assert QueueWorker.objects.get(pk=uid).lifecycle == "draining"


def test_evacuate_workers_from_the_admin(admin_client, make_worker_row, enqueue):
    worker = make_worker_row("w-evacuate")
    uid = worker[0]
    job = enqueue("noop", {"seconds": 60})
    assert claim(worker) is not None
    response = run_action(admin_client, QueueWorker, "evacuate_workers", [uid])
    assert f"Evacuated: {uid} (1 job(s) moved)" in response.content.decode()
    assert QueueWorker.objects.get(pk=uid).lifecycle == "draining"
    assert JobSchedule.objects.get(pk=job).execution_id == 2


def test_a_staff_viewer_has_no_actions(client, charlie):
    charlie.is_staff = True
    charlie.save()
    client.force_login(charlie)
    response = client.get(reverse("admin:scheduler_job_changelist"))
    assert response.status_code == 200
    assert "cancel_jobs" not in response.content.decode()


def test_the_task_changelist_never_counts_the_table(admin_client, enqueue):
    for _ in range(3):
        enqueue("noop", {"children": 0})
    with CaptureQueriesContext(connection) as queries:
        for query in ("", "?state=pending", "?q=1", "?p=2"):
            assert admin_client.get(reverse("admin:scheduler_queuetask_changelist") + query).status_code in (
                200,
                302,
            )
    counting = [
        q["sql"]
        for q in queries.captured_queries
        if "COUNT(" in q["sql"].upper() and "queue_tasks" in q["sql"]
    ]
    assert counting == []
    distinct = [
        q["sql"]
        for q in queries.captured_queries
        if "DISTINCT" in q["sql"].upper() and "queue_tasks" in q["sql"]
    ]
    assert distinct == []


def test_task_search_by_ids(admin_client, enqueue):
    job = enqueue("noop")
    task = QueueTask.objects.get(job_id=job)
    url = reverse("admin:scheduler_queuetask_changelist")
    assert f">{task.pk}<" in admin_client.get(url + f"?q={task.pk}").content.decode()
    assert str(job)[:8] in admin_client.get(url + f"?q={job}").content.decode()
    assert admin_client.get(url + "?q=not-a-number").status_code == 200
    assert admin_client.get(reverse("admin:scheduler_job_changelist") + f"?q={job}").status_code == 200


def test_adding_an_api_token_shows_it_once_and_stores_its_hash(admin_client, bob):
    response = admin_client.post(
        reverse("admin:api_apitoken_add"),
        {"user": bob.pk, "name": "ci", "scope": "operate"},
        follow=True,
    )
    token = ApiToken.objects.get()
    body = response.content.decode()
    raw = re.search(r"jet_[A-Za-z0-9_-]+", body).group(0)
    assert token.token_hash == hash_token(raw)
    assert token.prefix == raw[:12]
    assert raw not in admin_client.get(reverse("admin:api_apitoken_change", args=[token.pk])).content.decode()
    run_action(admin_client, ApiToken, "revoke_tokens", [token.pk])
    assert ApiToken.objects.get().revoked
