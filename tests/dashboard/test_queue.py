"""/dashboard/queue: grouping, per-state timing, waiting reasons, controls and every action."""

import re
import uuid

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse, set_script_prefix

from dashboard.templatetags.dashboard import job_url
from scheduler import repository
from scheduler.models import Job
from tests.kit.db import claim, lease_of

pytestmark = pytest.mark.django_db

QUEUE = "/dashboard/queue"


def rows(html: str) -> list[str]:
    """Job ids in the order the page shows them."""
    return re.findall(r'<tr data-job-id="([0-9a-f-]+)"', html)


def section(html: str, group: str) -> str:
    start = html.index(f'data-group="{group}"')
    end = html.find("<section", start + 1)
    return html[start:] if end == -1 else html[start:end]


def post(client, job_id, action, **data):
    return client.post(
        reverse("dashboard:job_action", args=[job_id, action]), data, HTTP_ACCEPT="application/json"
    )


def test_pending_jobs_wait_in_the_pending_section_with_their_reason(viewer_client, enqueue):
    job = enqueue("noop")
    html = viewer_client.get(QUEUE).content.decode()
    pending = section(html, "pending")
    assert str(job) in pending
    assert "no active worker" in pending
    assert "waited" in pending


def test_a_targeted_job_appears_under_its_worker_before_anyone_claims_it(
    viewer_client, enqueue, make_worker_row
):
    uid, _ = make_worker_row("w-target")
    job = enqueue("noop", required_worker_uid=uid)
    html = viewer_client.get(QUEUE).content.decode()
    assert str(job) in section(html, uid)
    assert str(job) not in section(html, "pending")
    assert f"→ {uid}" in section(html, uid)


def test_a_running_job_is_under_its_worker_and_shows_no_waiting_time(viewer_client, enqueue, make_worker_row):
    worker = make_worker_row("w-run")
    uid = worker[0]
    job = enqueue("noop")
    assert claim(worker) is not None
    html = viewer_client.get(QUEUE).content.decode()
    block = section(html, uid)
    assert str(job) in block
    row = block[block.index(str(job)) :]
    row = row[: row.index("</tr>")]
    assert "running" in row
    assert "waited" not in row and "retry in" not in row


def test_retry_wait_shows_a_countdown(viewer_client, enqueue, make_worker_row):
    worker = make_worker_row("w-retry")
    job = enqueue("noop")
    lease = lease_of(claim(worker), worker)
    assert repository.fail(lease, "boom", retryable=True).outcome == "retry_wait"
    html = viewer_client.get(QUEUE).content.decode()
    row = html[html.index(f'data-job-id="{job}"') :]
    row = row[: row.index("</tr>")]
    assert "retry in" in row
    assert "data-count-down" in row
    assert "retry backoff after attempt 1" in row


def test_a_failed_job_offers_retry_only(operator_client, enqueue, make_worker_row):
    worker = make_worker_row("w-fail")
    job = enqueue("noop")
    lease = lease_of(claim(worker), worker)
    assert repository.fail(lease, "bad input", retryable=False).outcome == "failed"
    html = operator_client.get(QUEUE).content.decode()
    row = html[html.index(f'data-job-id="{job}"') :]
    row = row[: row.index("</tr>")]
    assert reverse("dashboard:job_action", args=[job, "retry"]) in row
    assert reverse("dashboard:job_action", args=[job, "pause"]) not in row

    response = post(operator_client, job, "retry")
    assert response.status_code == 200
    assert Job.objects.get(pk=job).status == "pending"


def test_sections_exist_for_idle_workers_and_show_capacity(viewer_client, make_worker_row):
    uid, _ = make_worker_row("w-idle", concurrency=3)
    html = viewer_client.get(QUEUE).content.decode()
    block = section(html, uid)
    assert "media 0/3" in block
    assert "No jobs." in block


def test_move_down_and_up_reorder_the_pending_section(operator_client, enqueue):
    first, second, third = enqueue("noop"), enqueue("noop"), enqueue("noop")
    assert rows(operator_client.get(QUEUE).content.decode()) == [str(first), str(second), str(third)]

    assert post(operator_client, first, "move", direction="down").status_code == 200
    assert rows(operator_client.get(QUEUE).content.decode()) == [str(second), str(first), str(third)]

    assert post(operator_client, third, "run-next").status_code == 200
    assert rows(operator_client.get(QUEUE).content.decode()) == [str(third), str(second), str(first)]

    assert post(operator_client, third, "move", direction="bottom").status_code == 200
    assert rows(operator_client.get(QUEUE).content.decode()) == [str(second), str(first), str(third)]

    assert post(operator_client, third, "move", direction="up").status_code == 200
    assert rows(operator_client.get(QUEUE).content.decode()) == [str(second), str(third), str(first)]


def test_priority_reorders_and_is_bounded(operator_client, enqueue):
    low, high = enqueue("noop"), enqueue("noop")
    response = post(operator_client, high, "priority", priority="10")
    assert response.status_code == 200
    assert response.json()["job"]["priority"] == 10
    assert rows(operator_client.get(QUEUE).content.decode()) == [str(high), str(low)]

    for bad in ("1001", "abc", ""):
        response = post(operator_client, low, "priority", priority=bad)
        assert response.status_code == 422
        assert response.json()["errors"][0]["field"] == "priority"


def test_a_bad_direction_is_422(operator_client, enqueue):
    job = enqueue("noop")
    response = post(operator_client, job, "move", direction="sideways")
    assert response.status_code == 422


def test_pause_resume_and_the_409_reason(operator_client, enqueue):
    job = enqueue("noop")
    assert post(operator_client, job, "pause").status_code == 200
    html = operator_client.get(QUEUE).content.decode()
    assert "paused by an operator" in html
    assert reverse("dashboard:job_action", args=[job, "resume"]) in html

    again = post(operator_client, job, "pause")
    assert again.status_code == 409
    assert again.json()["detail"] == "the job is already paused"

    assert post(operator_client, job, "resume").status_code == 200
    assert Job.objects.get(pk=job).status == "pending"


def test_a_409_without_javascript_is_a_flash_message(operator_client, enqueue):
    job = enqueue("noop")
    operator_client.post(reverse("dashboard:job_action", args=[job, "cancel"]))
    response = operator_client.post(
        reverse("dashboard:job_action", args=[job, "pause"]), {"next": QUEUE}, follow=True
    )
    assert response.redirect_chain[-1][0] == QUEUE
    assert "cannot pause: the job is cancelled" in response.content.decode()


def test_next_must_stay_on_this_site(operator_client, enqueue):
    job = enqueue("noop")
    response = operator_client.post(
        reverse("dashboard:job_action", args=[job, "pause"]), {"next": "https://evil.example/"}
    )
    assert response["Location"] == QUEUE


def test_cancel_a_running_job_marks_it_cancelling(operator_client, enqueue, make_worker_row):
    worker = make_worker_row("w-cancel")
    job = enqueue("noop", {"seconds": 60})
    assert claim(worker) is not None
    response = post(operator_client, job, "cancel")
    assert response.status_code == 200
    assert "next heartbeat" in response.json()["detail"]
    html = operator_client.get(QUEUE).content.decode()
    row = html[html.index(f'data-job-id="{job}"') :]
    assert "cancelling" in row[: row.index("</tr>")]


def test_filters_by_state_and_worker(viewer_client, enqueue, make_worker_row):
    worker = make_worker_row("w-filter")
    uid = worker[0]
    running = enqueue("noop")
    assert claim(worker) is not None
    waiting = enqueue("noop")
    html = viewer_client.get(QUEUE + "?state=pending").content.decode()
    assert rows(html) == [str(waiting)]
    html = viewer_client.get(QUEUE + f"?worker={uid}").content.decode()
    assert rows(html) == [str(running)]
    html = viewer_client.get(QUEUE + "?worker=-").content.decode()
    assert rows(html) == [str(waiting)]


def test_the_partial_is_only_the_live_sections(viewer_client, enqueue):
    enqueue("noop")
    html = viewer_client.get(QUEUE + "?partial=1").content.decode()
    assert html.lstrip().startswith('<div data-live="queue"')
    assert "<html" not in html


# ---- links and controls: each URL is built from one reversal per page, not one per row ----------

FORM = re.compile(r'<form method="post" action="([^"]*)"[^>]*>(.*?)</form>', re.S)
CSRF_FIELD = re.compile(r'<input type="hidden" name="csrfmiddlewaretoken" value="([^"]+)">')


def row_of(html: str, job) -> str:
    row = html[html.index(f'<tr data-job-id="{job}"') :]
    return row[: row.index("</tr>")]


def controls(html: str) -> dict[str, str]:
    """{each control button's data-act: the URL its form posts to}; every form carries a CSRF field."""
    found = {}
    for action, body in FORM.findall(html):
        assert CSRF_FIELD.search(body), body
        for act in re.findall(r'data-act="([^"]+)"', body):
            assert act not in found, act
            found[act] = action
    return found


def expected_controls(job, *, paused=False, dedicate=False) -> dict[str, str]:
    acts = {
        "run-next": "run-next",
        "up": "move",
        "down": "move",
        "bottom": "move",
        "priority": "priority",
        "resume" if paused else "pause": "resume" if paused else "pause",
        "cancel": "cancel",
    }
    if dedicate:  # a pending job no worker holds may run on a dedicated worker
        acts["dedicate"] = "dedicate"
    return {act: reverse("dashboard:job_action", args=[job, action]) for act, action in acts.items()}


def test_every_rows_link_and_controls_point_at_that_rows_job(operator_client, enqueue, make_worker_row):
    worker = make_worker_row("w-links")
    uid = worker[0]
    failed = enqueue("noop", max_attempts=1)
    lease = lease_of(claim(worker), worker)
    assert repository.fail(lease, "bad input", retryable=False).outcome == "failed"
    running = enqueue("noop", {"seconds": 60})
    assert claim(worker) is not None
    cancelling = enqueue("noop", {"seconds": 60})
    assert claim(worker) is not None
    repository.cancel(cancelling)
    waiting = [enqueue("noop") for _ in range(3)]
    paused = enqueue("noop")
    repository.pause(paused)
    targeted = enqueue("noop", required_worker_uid=uid)

    html = operator_client.get(QUEUE).content.decode()
    assert set(rows(html)) == {str(j) for j in (failed, running, cancelling, *waiting, paused, targeted)}
    for job in rows(html):
        assert f'<a href="{reverse("dashboard:job", args=[job])}">' in row_of(html, job)
    for job in (running, targeted):
        assert controls(row_of(html, job)) == expected_controls(job), job
    for job in waiting:
        assert controls(row_of(html, job)) == expected_controls(job, dedicate=True), job
    assert controls(row_of(html, paused)) == expected_controls(paused, paused=True, dedicate=True)
    assert controls(row_of(html, failed)) == {
        "retry": reverse("dashboard:job_action", args=[failed, "retry"])
    }
    assert controls(row_of(html, cancelling)) == {}
    assert "cancelling…" in row_of(html, cancelling)
    assert 'value="0" min="-1000"' in row_of(html, waiting[0])  # the priority field holds the priority

    # The job page shows the same controls, for its own job (plus redispatch).
    page = operator_client.get(reverse("dashboard:job", args=[paused])).content.decode()
    redispatch = reverse("dashboard:job_action", args=[paused, "redispatch"])
    found = {action for action, _ in FORM.findall(page)}
    assert found >= set(expected_controls(paused, paused=True).values()) | {redispatch}
    assert all(str(paused) in action for action in found if "/actions/" in action)


def test_a_posted_control_form_passes_the_csrf_check(bob, enqueue):
    client = Client(enforce_csrf_checks=True)
    client.force_login(bob)
    job = enqueue("noop")
    html = client.get(QUEUE).content.decode()
    pause = next(body for action, body in FORM.findall(row_of(html, job)) if 'data-act="pause"' in body)
    token = CSRF_FIELD.search(pause).group(1)
    url = reverse("dashboard:job_action", args=[job, "pause"])

    assert client.post(url, {"next": QUEUE}).status_code == 403  # without the form's token
    response = client.post(url, {"csrfmiddlewaretoken": token, "next": QUEUE})
    assert (response.status_code, response["Location"]) == (302, QUEUE)
    assert Job.objects.get(pk=job).status == "paused"


def test_job_links_follow_the_script_prefix():
    job = uuid.uuid4()
    set_script_prefix("/farm/")
    try:
        assert job_url(job) == reverse("dashboard:job", args=[job]) == f"/farm/dashboard/jobs/{job}"
    finally:
        set_script_prefix("/")
    assert job_url(str(job)) == reverse("dashboard:job", args=[job]) == f"/dashboard/jobs/{job}"
    with pytest.raises(ValueError):
        job_url("not-a-job-id")


def test_the_page_runs_the_same_queries_whatever_its_length(operator_client, enqueue, make_worker_row):
    uid, _ = make_worker_row("w-count")
    enqueue("noop")

    def queries_for_one_page() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert operator_client.get(QUEUE).status_code == 200
        return len(captured)

    few = queries_for_one_page()
    for i in range(40):
        enqueue("noop", required_worker_uid=uid if i % 2 else None, priority=i % 5)
    assert queries_for_one_page() == few
