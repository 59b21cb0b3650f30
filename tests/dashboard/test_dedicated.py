"""Dedicated execution in the dashboard (the queue and job pages' "Run on a dedicated worker" and
"Share again" controls, the reservation on the job page) and in the admin (the jobs' action, the
read-only reservations list)."""

import pytest
from django.urls import reverse

from scheduler import repository
from scheduler.models import Job, JobSchedule, QueueReservation
from tests.dashboard.test_admin import run_action
from tests.kit.db import claim

pytestmark = pytest.mark.django_db


def act(client, job, action):
    return client.post(reverse("dashboard:job_action", args=[job, action]), HTTP_ACCEPT="application/json")


def test_the_queue_and_job_pages_offer_it_for_a_pending_job_and_then_show_why_it_waits(
    operator_client, enqueue, worker
):
    job = enqueue("noop")
    dedicate = reverse("dashboard:job_action", args=[job, "dedicate"])
    share = reverse("dashboard:job_action", args=[job, "share"])
    for page in (reverse("dashboard:queue"), reverse("dashboard:job", args=[job])):
        html = operator_client.get(page).content.decode()
        assert dedicate in html and "Run on a dedicated worker" in html and share not in html

    response = act(operator_client, job, "dedicate")
    assert response.status_code == 200 and "waits for a dedicated worker" in response.json()["detail"]
    rid = QueueReservation.objects.get(job_id=job).id
    queue_html = operator_client.get(reverse("dashboard:queue")).content.decode()
    assert f"waiting for a dedicated worker (reservation {str(rid)[:8]}…, requested" in queue_html
    assert share in queue_html and dedicate not in queue_html
    job_html = operator_client.get(reverse("dashboard:job", args=[job])).content.decode()
    assert 'data-reservation="requested"' in job_html and str(rid)[:8] in job_html
    assert claim(worker) is None

    assert act(operator_client, job, "share").status_code == 200
    assert JobSchedule.objects.get(pk=job).execution_mode == "shared"
    assert QueueReservation.objects.get(pk=rid).state == "released"
    assert (
        'data-reservation="released"'
        in operator_client.get(reverse("dashboard:job", args=[job])).content.decode()
    )


def test_a_running_or_targeted_job_gets_no_control_and_a_forced_post_is_a_409(
    operator_client, enqueue, worker
):
    running = enqueue("noop", {"seconds": 30})
    assert claim(worker).job_id == running
    targeted = enqueue("noop", required_worker_uid=worker[0])
    html = operator_client.get(reverse("dashboard:queue")).content.decode()
    for job in (running, targeted):
        assert reverse("dashboard:job_action", args=[job, "dedicate"]) not in html
    response = act(operator_client, running, "dedicate")
    assert response.status_code == 409 and "running" in response.json()["detail"]
    response = act(operator_client, targeted, "dedicate")
    assert response.status_code == 409 and "targeted at worker" in response.json()["detail"]


def test_the_admin_dedicates_jobs_and_lists_reservations_read_only(admin_client, enqueue, worker):
    pending, running = enqueue("noop"), enqueue("noop", priority=5)
    assert claim(worker).job_id == running
    html = run_action(admin_client, Job, "dedicate_jobs", [pending, running]).content.decode()
    assert "Waiting for a dedicated worker: 1 job." in html
    assert "the job is running" in html
    reservation = QueueReservation.objects.get(job_id=pending)
    listing = admin_client.get(reverse("admin:scheduler_queuereservation_changelist")).content.decode()
    assert str(reservation.id) in listing and "requested" in listing
    assert admin_client.get(reverse("admin:scheduler_queuereservation_add")).status_code == 403
    change = admin_client.get(reverse("admin:scheduler_queuereservation_change", args=[reservation.id]))
    assert change.status_code == 200 and 'name="state"' not in change.content.decode()
    # The same action from the schedule list is idempotent: the same reservation.
    run_action(admin_client, JobSchedule, "dedicate_jobs", [pending])
    assert QueueReservation.objects.filter(job_id=pending).count() == 1
    assert repository.reserve_job(pending) == reservation.id
