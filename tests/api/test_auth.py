"""Authentication and authorization: bearer tokens (hashed, scoped), the session cookie with CSRF,
the persona × scope × method matrix, and the create_api_token command."""

import hashlib
import io

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils.crypto import get_random_string

from api.models import ApiToken

pytestmark = pytest.mark.django_db

NEW_JOB = {"type": "noop"}


def test_it_refuses_anonymous_callers_with_401_and_a_bearer_challenge(anonymous_api):
    response = anonymous_api.get("/v2/jobs")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert "Bearer" in response.json()["detail"]


@pytest.mark.parametrize("header", ["Bearer jet_not-a-real-token", "Bearer ", "bearer " + "x" * 300])
def test_it_refuses_unknown_tokens(header):
    response = Client().get("/v2/jobs", headers={"Authorization": header})
    assert response.status_code == 401
    assert set(response.json()) == {"detail"}


def test_it_refuses_revoked_tokens_and_tokens_of_inactive_users(bob, token_for, bearer):
    api = bearer(token_for(bob))
    assert api.get("/v2/jobs").status_code == 200
    ApiToken.objects.filter(user=bob).update(revoked=True)
    assert api.get("/v2/jobs").json()["detail"] == "this API token has been revoked"
    ApiToken.objects.filter(user=bob).update(revoked=False)
    bob.is_active = False
    bob.save()
    assert api.get("/v2/jobs").status_code == 401


def test_it_stores_only_the_tokens_sha256_and_records_use(bob, token_for, bearer):
    raw = token_for(bob)
    token = ApiToken.objects.get(user=bob)
    assert token.token_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert raw not in (token.token_hash, token.prefix, token.name)
    assert token.last_used_at is None
    bearer(raw).get("/v2/stats")
    token.refresh_from_db()
    assert token.last_used_at is not None


def test_a_bad_bearer_token_does_not_fall_back_to_the_session(bob):
    client = Client()
    client.force_login(bob)
    assert client.get("/v2/jobs").status_code == 200
    assert client.get("/v2/jobs", headers={"Authorization": "Bearer jet_wrong"}).status_code == 401


# Persona × token scope → expected status for a read (GET) and a change (POST /v2/jobs).
MATRIX = [
    # persona  scope      GET  POST
    ("alice", "operate", 200, 201),  # admin (superuser)
    ("alice", "read", 200, 403),  # admin, but a read token
    ("bob", "operate", 200, 201),  # operator
    ("bob", "read", 200, 403),  # operator with a read token
    ("charlie", "read", 200, 403),  # viewer
    ("charlie", "operate", 200, 403),  # viewer: the scope is not enough without the permission
    ("dave", "read", 403, 403),  # no group: nothing
    ("dave", "operate", 403, 403),
]


@pytest.mark.parametrize("persona, scope, get_status, post_status", MATRIX)
def test_a_token_needs_both_the_scope_and_the_permission(
    request, token_for, bearer, persona, scope, get_status, post_status
):
    user = request.getfixturevalue(persona)
    api = bearer(token_for(user, scope))
    assert api.get("/v2/jobs").status_code == get_status
    assert api.get("/v2/queue").status_code == get_status
    response = api.post("/v2/jobs", NEW_JOB)
    assert response.status_code == post_status, response.content
    if post_status == 403:
        # The 403 says which was missing: the token's scope (checked first) or the user's permission.
        assert ("read scope" if scope == "read" else "permission") in response.json()["detail"]


def test_read_scope_is_refused_on_every_unsafe_method(bob, token_for, bearer, enqueue):
    job = enqueue()
    api = bearer(token_for(bob, "read"))
    assert api.post(f"/v2/queue/{job}/pause").status_code == 403
    assert api.patch(f"/v2/queue/{job}/priority", {"priority": 3}).status_code == 403
    assert api.post("/v2/workers/w-x/drain").status_code == 403


def test_healthz_metrics_and_the_schema_need_no_credentials(anonymous_api):
    assert anonymous_api.get("/healthz").status_code == 200
    assert anonymous_api.get("/metrics").status_code == 200
    assert anonymous_api.get("/v2/openapi.json").status_code == 200
    assert anonymous_api.get("/v1/sysinfo").status_code == 401


# ---- session cookie (the dashboard's JavaScript) -------------------------------------------------


def csrf_client(user=None):
    client = Client(enforce_csrf_checks=True)
    if user is not None:
        client.force_login(user)
    secret = get_random_string(32)
    client.cookies["csrftoken"] = secret
    return client, secret


def test_session_callers_may_read_without_a_csrf_token(charlie):
    client, _ = csrf_client(charlie)
    assert client.get("/v2/queue").status_code == 200


def test_session_callers_need_the_csrf_token_for_changes(bob):
    client, secret = csrf_client(bob)
    refused = client.post("/v2/jobs", NEW_JOB, content_type="application/json")
    assert refused.status_code == 403
    assert "CSRF" in refused.json()["detail"]
    accepted = client.post(
        "/v2/jobs", NEW_JOB, content_type="application/json", headers={"X-CSRFToken": secret}
    )
    assert accepted.status_code == 201


def test_a_wrong_csrf_token_is_refused(bob):
    client, _ = csrf_client(bob)
    response = client.post(
        "/v2/jobs", NEW_JOB, content_type="application/json", headers={"X-CSRFToken": get_random_string(32)}
    )
    assert response.status_code == 403


def test_session_viewers_may_not_change_anything_even_with_csrf(charlie, enqueue):
    job = enqueue()
    client, secret = csrf_client(charlie)
    response = client.post(f"/v2/queue/{job}/pause", headers={"X-CSRFToken": secret})
    assert response.status_code == 403
    assert "Operators" in response.json()["detail"]


def test_anonymous_unsafe_requests_get_401_not_a_csrf_error():
    client, secret = csrf_client()
    assert client.post("/v2/jobs", NEW_JOB, content_type="application/json").status_code == 401


def test_bearer_callers_need_no_csrf_token(operator_api):
    operator_api.client = Client(enforce_csrf_checks=True)
    assert operator_api.post("/v2/jobs", NEW_JOB).status_code == 201


# ---- create_api_token ---------------------------------------------------------------------------


def run_command(*args):
    out, err = io.StringIO(), io.StringIO()
    call_command("create_api_token", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_create_api_token_prints_the_raw_token_last(bob, bearer):
    out, err = run_command("bob", "--scope", "operate", "--name", "ci")
    raw = out.strip().splitlines()[-1]
    assert raw.startswith("jet_")
    assert err == ""
    token = ApiToken.objects.get(user=bob)
    assert (token.scope, token.name, token.prefix) == ("operate", "ci", raw[:12])
    assert bearer(raw).post("/v2/jobs", NEW_JOB).status_code == 201


def test_create_api_token_defaults_to_read_scope(charlie, bearer):
    out, _ = run_command("charlie")
    raw = out.strip().splitlines()[-1]
    assert ApiToken.objects.get(user=charlie).scope == "read"
    assert bearer(raw).get("/v2/jobs").status_code == 200


def test_create_api_token_warns_when_the_user_cannot_use_the_scope(charlie, dave):
    _, err = run_command("charlie", "--scope", "operate")
    assert "Operators" in err
    _, err = run_command("dave")
    assert "403" in err


def test_create_api_token_refuses_unknown_users_and_scopes(db):
    with pytest.raises(CommandError, match="no user"):
        run_command("nobody")
    with pytest.raises(CommandError):
        run_command("nobody", "--scope", "admin")
