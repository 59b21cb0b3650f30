"""Fleet control apart from queue control (issue 37, item 6): a `fleet` token may drain, evacuate and
undrain workers and read everything, but not steer the queue; `operate` tokens keep every method as
docs/api.md promises; undrain returns a drained worker to service (it claims again)."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from api.models import ApiToken
from scheduler import repository
from tests.kit.db import claim

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet_api(bob, token_for, bearer):
    return bearer(token_for(bob, "fleet"))


def test_a_fleet_token_drains_evacuates_and_undrains(fleet_api, make_worker_row, enqueue):
    uid, session = make_worker_row()
    drained = fleet_api.post(f"/v2/workers/{uid}/drain")
    assert drained.status_code == 200 and drained.json()["lifecycle"] == "draining"
    enqueue("noop")
    assert claim((uid, session)) is None  # a draining worker claims nothing
    undrained = fleet_api.post(f"/v2/workers/{uid}/undrain")
    assert undrained.status_code == 200 and undrained.json()["lifecycle"] == "active"
    assert claim((uid, session)) is not None  # back in service
    evacuated = fleet_api.post(f"/v2/workers/{uid}/evacuate")
    assert evacuated.status_code == 200 and evacuated.json()["worker"]["lifecycle"] == "draining"
    assert fleet_api.post(f"/v2/workers/{uid}/undrain").json()["lifecycle"] == "active"
    assert fleet_api.get("/v2/queue").status_code == 200 and fleet_api.get("/v2/workers").status_code == 200


def test_a_fleet_token_cannot_steer_the_queue(fleet_api, enqueue):
    job_id = enqueue("noop")
    for method, path, body in [
        ("post", "/v2/jobs", {"type": "noop"}),
        ("post", f"/v2/queue/{job_id}/pause", None),
        ("post", f"/v2/queue/{job_id}/cancel", None),
    ]:
        response = getattr(fleet_api, method)(path, body)
        assert response.status_code == 403, (path, response.status_code)
        assert "fleet scope" in response.json()["detail"]


def test_operate_tokens_keep_every_method_and_read_tokens_none(
    operator_api, viewer_api, bob, token_for, bearer, make_worker_row
):
    uid, _session = make_worker_row()
    assert operator_api.post(f"/v2/workers/{uid}/drain").status_code == 200
    assert operator_api.post(f"/v2/workers/{uid}/undrain").json()["lifecycle"] == "active"
    operators_read_token = bearer(token_for(bob, "read"))
    for api in (operators_read_token, viewer_api):
        assert api.post(f"/v2/workers/{uid}/undrain").status_code == 403


def test_a_viewer_with_a_fleet_token_is_refused_by_permission(charlie, token_for, bearer, make_worker_row):
    uid, _session = make_worker_row()
    response = bearer(token_for(charlie, "fleet")).post(f"/v2/workers/{uid}/drain")
    assert response.status_code == 403 and "Operators" in response.json()["detail"]


def test_undrain_errors(operator_api, make_worker_row):
    assert operator_api.post("/v2/workers/nobody/undrain").status_code == 404
    uid, session = make_worker_row()
    assert operator_api.post(f"/v2/workers/{uid}/undrain").json()["lifecycle"] == "active"  # idempotent
    repository.set_session_lifecycle(uid, session, "offline")
    gone = operator_api.post(f"/v2/workers/{uid}/undrain")
    assert gone.status_code == 409 and "offline" in gone.json()["detail"]


def test_create_api_token_issues_fleet_tokens(bob):
    out = io.StringIO()
    call_command("create_api_token", bob.username, "--scope", "fleet", stdout=out)
    assert "Created fleet token" in out.getvalue()
    assert ApiToken.objects.get(user=bob, scope="fleet")


def test_the_dashboard_undrains_for_operators_only(client, bob, charlie, make_worker_row):
    uid, _session = make_worker_row()
    repository.drain_worker(uid)
    client.force_login(charlie)
    assert client.post(f"/dashboard/workers/{uid}/undrain").status_code == 403
    client.force_login(bob)
    page = client.get(f"/dashboard/workers/{uid}").content.decode()
    assert f"/dashboard/workers/{uid}/undrain" in page  # the button, while it drains
    response = client.post(f"/dashboard/workers/{uid}/undrain", headers={"Accept": "application/json"})
    assert response.status_code == 200 and response.json()["lifecycle"] == "active"
    assert f"/dashboard/workers/{uid}/undrain" not in client.get(f"/dashboard/workers/{uid}").content.decode()
