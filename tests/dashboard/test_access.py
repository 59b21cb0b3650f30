"""Who may see and do what: the permission matrix over every dashboard page and action."""

import re
import uuid

import pytest
from django.test import Client
from django.urls import reverse

from scheduler import repository
from tests.kit.personas import PASSWORD

pytestmark = pytest.mark.django_db

PAGES = [
    ("dashboard:overview", []),
    ("dashboard:queue", []),
    ("dashboard:jobs", []),
    ("dashboard:job_new", []),
    ("dashboard:library", []),
    ("dashboard:workers", []),
]


@pytest.fixture
def job(enqueue):
    return enqueue("noop", {"seconds": 1})


def all_pages(job, worker):
    return [reverse(name, args=args) for name, args in PAGES] + [
        reverse("dashboard:job", args=[job]),
        reverse("dashboard:worker", args=[worker[0]]),
    ]


def test_root_redirects_to_the_dashboard(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"] == reverse("dashboard:overview")


def test_anonymous_is_sent_to_the_login_page_everywhere(client, job, worker):
    for url in all_pages(job, worker):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/accounts/login/?next="), url


def test_anonymous_posts_are_sent_to_login_and_change_nothing(client, job):
    response = client.post(reverse("dashboard:job_action", args=[job, "pause"]))
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")
    assert repository_state(job) == ("pending", False)


def test_the_login_page_is_ours_and_logs_in(client, bob):
    page = client.get(reverse("login"))
    assert page.status_code == 200
    assert b"Log in to JetEncode" in page.content
    response = client.post(reverse("login"), {"username": "bob", "password": PASSWORD})
    assert response.status_code == 302
    assert response["Location"] == reverse("dashboard:overview")


def test_a_wrong_password_is_refused_with_a_message(client, bob):
    response = client.post(reverse("login"), {"username": "bob", "password": "nope"})
    assert response.status_code == 200
    assert b"didn't match" in response.content


def test_logout_is_a_post_back_to_login(operator_client):
    response = operator_client.post(reverse("logout"))
    assert response.status_code == 302
    assert response["Location"] == reverse("login")
    assert operator_client.get(reverse("dashboard:queue")).status_code == 302


def test_a_user_without_a_group_may_see_nothing(nogroup_client, job, worker):
    for url in all_pages(job, worker):
        assert nogroup_client.get(url).status_code == 403, url


@pytest.mark.parametrize("who", ["viewer_client", "operator_client", "admin_client"])
def test_every_page_renders_for_every_role(request, who, job, worker):
    client = request.getfixturevalue(who)
    for url in all_pages(job, worker):
        response = client.get(url)
        assert response.status_code == 200, url
        partial = client.get(url + ("&" if "?" in url else "?") + "partial=1")
        assert partial.status_code == 200, url


def test_the_viewer_sees_no_controls(viewer_client, job, worker):
    for url in all_pages(job, worker):
        body = viewer_client.get(url).content.decode()
        assert "data-action" not in body, url
        assert 'method="post" action="/dashboard/' not in body, url
    assert 'data-role="viewer"' in viewer_client.get(reverse("dashboard:queue")).content.decode()


def test_the_operator_sees_controls(operator_client, job):
    body = operator_client.get(reverse("dashboard:queue")).content.decode()
    assert reverse("dashboard:job_action", args=[job, "run-next"]) in body
    assert reverse("dashboard:job_action", args=[job, "cancel"]) in body
    assert 'data-role="operator"' in body


def repository_state(job_id):
    from scheduler.models import Job

    job = Job.objects.select_related("schedule").get(pk=job_id)
    return job.status, job.schedule.paused


ACTIONS = [
    ("pause", {}),
    ("resume", {}),
    ("cancel", {}),
    ("retry", {}),
    ("run-next", {}),
    ("move", {"direction": "up"}),
    ("priority", {"priority": "5"}),
    ("redispatch", {}),
    ("dedicate", {}),
    ("share", {}),
]


@pytest.mark.parametrize("action,data", ACTIONS)
def test_the_viewer_gets_403_for_every_action(viewer_client, job, action, data):
    url = reverse("dashboard:job_action", args=[job, action])
    assert viewer_client.post(url, data).status_code == 403
    response = viewer_client.post(url, data, HTTP_ACCEPT="application/json")
    assert response.status_code == 403
    assert "read-only" in response.json()["detail"]
    assert repository_state(job) == ("pending", False)


def test_the_viewer_gets_403_for_drain_create_and_library_actions(viewer_client, worker, job):
    assert viewer_client.post(reverse("dashboard:worker_drain", args=[worker[0]])).status_code == 403
    assert viewer_client.post(reverse("dashboard:job_new"), {"type": "noop"}).status_code == 403
    assert viewer_client.post(reverse("dashboard:library_action"), {"action": "validate"}).status_code == 403


def test_actions_refuse_get(operator_client, job):
    assert operator_client.get(reverse("dashboard:job_action", args=[job, "pause"])).status_code == 405


def test_the_operator_may_act(operator_client, job):
    response = operator_client.post(
        reverse("dashboard:job_action", args=[job, "pause"]), HTTP_ACCEPT="application/json"
    )
    assert response.status_code == 200
    assert response.json()["job"]["paused"] is True
    assert repository_state(job) == ("paused", True)


def test_the_admin_may_act(admin_client, job):
    response = admin_client.post(reverse("dashboard:job_action", args=[job, "cancel"]))
    assert response.status_code == 302
    assert repository_state(job)[0] == "cancelled"


def test_actions_need_a_csrf_token(bob, job):
    client = Client(enforce_csrf_checks=True)
    client.force_login(bob)
    url = reverse("dashboard:job_action", args=[job, "pause"])
    assert client.post(url).status_code == 403
    assert repository_state(job) == ("pending", False)

    page = client.get(reverse("dashboard:queue")).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    assert client.post(url, {"csrfmiddlewaretoken": token}).status_code == 302
    assert repository_state(job) == ("paused", True)


def test_unknown_jobs_and_actions_are_404(operator_client, job):
    missing = uuid.uuid4()
    assert operator_client.post(reverse("dashboard:job_action", args=[missing, "pause"])).status_code == 302
    response = operator_client.post(
        reverse("dashboard:job_action", args=[missing, "pause"]), HTTP_ACCEPT="application/json"
    )
    assert response.status_code == 404
    response = operator_client.post(
        reverse("dashboard:job_action", args=[job, "explode"]), HTTP_ACCEPT="application/json"
    )
    assert response.status_code == 404
    assert operator_client.get(reverse("dashboard:job", args=[missing])).status_code == 404
    assert operator_client.get(reverse("dashboard:worker", args=["nobody-here"])).status_code == 404


def test_the_action_view_writes_through_the_repository_only(operator_client, job, monkeypatch):
    """The action view calls the repository; nothing else writes the queue."""
    calls = []
    monkeypatch.setattr(repository, "pause", lambda job_id: calls.append(job_id) or "paused")
    operator_client.post(reverse("dashboard:job_action", args=[job, "pause"]))
    assert calls == [job]
    assert repository_state(job) == ("pending", False)
