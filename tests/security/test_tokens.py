"""Credentials: API tokens are stored as SHA-256 digests only and compared in constant time, every
cookie-authenticated change needs the CSRF token, and `check --deploy` is clean in production."""

from __future__ import annotations

import hashlib
import inspect
import os
import secrets
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from api import auth
from api.models import ApiToken, hash_token
from tests.kit.matrix import ADMIN_ACTIONS, API, SAFE, dashboard_actions, fingerprint, make_target

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


# ---- stored hashed ---------------------------------------------------------------------------------


def _stored_row(token_id) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT row_to_json(t)::text FROM api_tokens t WHERE id = %s", [token_id])
        return cursor.fetchone()[0]


def test_tokens_are_stored_as_sha256_digests_only(caller):
    user = caller("operator", "session").user
    token, raw = ApiToken.issue(user, scope="operate", name="ci")
    assert token.token_hash == hashlib.sha256(raw.encode()).hexdigest() == hash_token(raw)
    row = _stored_row(token.pk)
    assert raw not in row
    assert raw[12:] not in row  # only a short prefix is kept, to recognise the token
    assert len(token.prefix) <= 12 and raw.startswith(token.prefix)
    assert len(raw) >= 40  # 32 random bytes


def test_the_management_command_stores_only_the_digest(caller):
    user = caller("operator", "session").user
    out = StringIO()
    call_command("create_api_token", user.username, "--scope", "read", stdout=out)
    raw = out.getvalue().strip().splitlines()[-1].strip()
    token = ApiToken.objects.get(user=user)
    assert token.token_hash == hash_token(raw)
    assert raw not in _stored_row(token.pk)


def test_the_raw_token_never_reaches_the_database(caller):
    """The lookup is by digest: the presented token appears in no SQL statement or parameter."""
    who = caller("viewer", "token")
    with CaptureQueriesContext(connection) as queries:
        assert who.request("GET", "/v2/jobs").status_code == 200
    assert queries.captured_queries
    assert not [q for q in queries.captured_queries if who.token in q["sql"]]
    assert any(hash_token(who.token) in q["sql"] for q in queries.captured_queries)


# ---- constant-time comparison --------------------------------------------------------------------------


def test_the_token_check_uses_a_constant_time_comparison():
    source = inspect.getsource(auth.TokenAuth.authenticate)
    assert "compare_digest" in source
    assert "hash_token(" in source  # compared as digests, never as raw strings
    for forbidden in ("token ==", "== token", "token_hash ==", "== digest", "digest =="):
        assert forbidden not in source, forbidden


def test_compare_digest_is_called_on_every_authentication(caller, monkeypatch):
    who = caller("operator", "token")
    calls = []
    real = auth.hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", spy)
    assert who.request("GET", "/v2/jobs").status_code == 200
    assert len(calls) == 1
    digest = hash_token(who.token).encode()
    assert calls[0] == (digest, digest)
    assert who.token.encode() not in calls[0]


@pytest.mark.parametrize(
    "presented",
    [
        lambda raw: raw[:-1] + ("A" if raw[-1] != "A" else "B"),  # one character off
        lambda raw: raw.upper(),
        lambda raw: raw + " ",
        lambda raw: hash_token(raw),  # the digest itself is not a credential
        lambda raw: raw[:12],  # the stored prefix is not a credential
        lambda raw: "jet_" + "x" * 300,
    ],
)
def test_near_misses_are_refused(caller, presented):
    who = caller("operator", "token")
    response = who.client.get("/v2/jobs", headers={"Authorization": f"Bearer {presented(who.token)}"})
    assert response.status_code == 401
    assert response.json()["detail"] == "invalid API token"


def test_revoked_tokens_are_refused(caller):
    who = caller("operator", "token")
    ApiToken.objects.filter(user=who.user).update(revoked=True)
    assert who.request("GET", "/v2/jobs").status_code == 401


# ---- CSRF on every cookie-authenticated change ----------------------------------------------------------


@pytest.mark.parametrize("role", ["operator", "admin"])
def test_every_api_mutation_by_cookie_needs_the_csrf_token(caller, world, role):
    who = caller(role, "session")
    missing = []
    for (method, template), (make, success, _effect) in API.items():
        if method in SAFE:
            continue
        params, body = make(world)
        path = template.format(**params)
        for headers in ({}, {"X-CSRFToken": "x" * 32}, {"X-CSRFToken": secrets.token_hex(32)}):
            before = fingerprint()
            response = who.request(method, path, body, csrf=False, headers=headers)
            if response.status_code != 403 or "CSRF" not in response.json()["detail"]:
                missing.append((method, path, headers, response.status_code))
            assert fingerprint() == before, (method, path)
        assert who.request(method, path, body).status_code == success, (method, path)
    assert missing == []


def test_every_dashboard_action_needs_the_csrf_token(caller, world):
    who = caller("operator", "session")
    who.csrf_token()
    missing = []
    for name, build, _effect in dashboard_actions(world):
        url, data, _target_id = build()
        for token in (None, "x" * 64):
            before = fingerprint()
            response = who.client.post(url, data if token is None else {**data, "csrfmiddlewaretoken": token})
            if response.status_code != 403:
                missing.append((name, token, response.status_code))
            assert fingerprint() == before, name
    assert missing == []


def test_every_admin_action_needs_the_csrf_token(caller, world):
    who = caller("admin", "session")
    who.csrf_token()
    missing = []
    for (label, action), (kind, _effect) in ADMIN_ACTIONS.items():
        pk = make_target(world, kind)
        app, model = label.lower().split(".")
        before = fingerprint()
        response = who.client.post(
            reverse(f"admin:{app}_{model}_changelist"),
            {"action": action, "_selected_action": [str(pk)], "post": "yes"},
        )
        if response.status_code != 403:
            missing.append((label, action, response.status_code))
        assert fingerprint() == before, (label, action)
    assert missing == []


def test_login_and_logout_need_the_csrf_token(caller):
    anonymous = caller("anonymous", "session")
    anonymous.csrf_token()
    admin = caller("admin", "session")
    response = anonymous.client.post("/accounts/login/", {"username": admin.user.username, "password": "x"})
    assert response.status_code == 403
    response = admin.client.post("/accounts/logout/")
    assert response.status_code == 403
    assert admin.client.get(reverse("dashboard:overview")).status_code == 200  # still logged in


def test_bearer_callers_are_not_subject_to_csrf(caller, world):
    """Browsers never attach a bearer header on their own, so token calls need no CSRF token."""
    who = caller("operator", "token")
    assert who.request("POST", f"/v2/queue/{world.job()}/pause", csrf=False).status_code == 200


# ---- production settings ----------------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_check_deploy_is_clean_under_production_settings():
    env = {
        **{
            k: v
            for k, v in os.environ.items()
            if not k.startswith("JETENCODE_") and k != "DJANGO_ALLOW_ASYNC_UNSAFE"  # set by the test conftest
        },
        "JETENCODE_SECRET_KEY": secrets.token_urlsafe(50),
        "JETENCODE_DEBUG": "false",
        "JETENCODE_HTTPS": "true",
        "JETENCODE_ALLOWED_HOSTS": "jetencode.example.com",
        "JETENCODE_CSRF_TRUSTED_ORIGINS": "https://jetencode.example.com",
        "JETENCODE_APPLICATION_NAME": "jetencode-check",
    }
    proc = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no issues" in proc.stdout
