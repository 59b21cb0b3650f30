"""Who may do what, everywhere: anonymous, viewer, operator and admin against every API endpoint
(bearer token and session cookie), every dashboard action and every admin action.

The tables are checked against what the code exposes (the OpenAPI schema, the dashboard's action
table, the admin's registered actions), so a new endpoint or action fails here until someone decides
who may use it. Every refused request must also leave the database exactly as it was; every allowed
one must have its effect.
"""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.urls import reverse

from api.api import api
from api.models import ApiToken
from tests.kit.matrix import (
    ADMIN_ACTIONS,
    API,
    MATRIX_ROLES,
    PUBLIC,
    SAFE,
    SIGNED,
    TUS,
    VIEWER_MAY,
    dashboard_actions,
    fingerprint,
    make_target,
)

pytestmark = pytest.mark.django_db


# ---- the API ----------------------------------------------------------------------------------------


def _schema_operations() -> set[tuple[str, str]]:
    schema = api.get_openapi_schema()
    return {(method.upper(), path) for path, ops in schema["paths"].items() for method in ops}


def test_the_matrix_covers_every_api_operation():
    operations = _schema_operations()
    assert operations - set(API) - PUBLIC - SIGNED - TUS == set(), "add the new endpoint to the matrix"
    assert set(API) - operations == set(), "the matrix names an endpoint that no longer exists"


def _expected(role: str, method: str, success: int, template: str = "") -> int:
    if role == "anonymous":
        return 401
    if role == "viewer" and method not in SAFE and (method, template) not in VIEWER_MAY:
        return 403
    return success


@pytest.mark.parametrize("transport", ["token", "session"])
@pytest.mark.parametrize("role", MATRIX_ROLES)
def test_api_matrix(caller, world, role, transport):
    who = caller(role, transport)
    wrong = []
    for (method, template), (make, success, effect) in API.items():
        params, body = make(world)
        path = template.format(**params)
        before = fingerprint()
        response = who.request(method, path, body)
        expected = _expected(role, method, success, template)
        if response.status_code != expected:
            wrong.append((method, path, response.status_code, expected, response.content[:200]))
            continue
        assert response["Content-Type"].startswith("application/json"), (method, path)
        if expected >= 400:
            assert response.json()["detail"], (method, path)
            if expected == 401:
                assert response["WWW-Authenticate"].startswith("Bearer"), (method, path)
            assert fingerprint() == before, f"{who} {method} {path} was refused but changed the database"
        elif effect is not None:
            assert effect(params), f"{who} {method} {path} answered {expected} without its effect"
    assert wrong == []


@pytest.mark.parametrize("role", MATRIX_ROLES)
def test_public_endpoints_need_no_credentials(caller, role):
    who = caller(role, "token")
    for method, path in sorted(PUBLIC):
        assert who.request(method, path).status_code == 200, path


def test_a_read_scope_token_of_an_operator_may_only_read(caller, world):
    operator = caller("operator", "token")
    ApiToken.objects.filter(user=operator.user).update(scope="read")
    for (method, template), (make, success, _effect) in API.items():
        params, body = make(world)
        before = fingerprint()
        response = operator.request(method, template.format(**params), body)
        reads = method in SAFE or (method, template) in VIEWER_MAY
        assert response.status_code == (success if reads else 403), (method, template)
        if not reads:
            assert "scope" in response.json()["detail"]
            assert fingerprint() == before


# ---- the dashboard ---------------------------------------------------------------------------------


@pytest.mark.parametrize("role", MATRIX_ROLES)
def test_dashboard_actions_matrix(caller, world, role):
    who = caller(role, "session")
    wrong = []
    for name, build, effect in dashboard_actions(world):
        url, data, target = build()
        before = fingerprint()
        response = who.client.post(url, {**data, "csrfmiddlewaretoken": who.csrf_token()})
        if role == "anonymous":
            ok = response.status_code == 302 and response["Location"].startswith("/accounts/login/")
        elif role == "viewer":
            ok = response.status_code == 403
        else:
            ok = response.status_code == 302 and effect(target)
        if not ok:
            wrong.append((name, response.status_code, response.get("Location")))
        if role in ("anonymous", "viewer"):
            assert fingerprint() == before, f"{who} {name} was refused but changed the database"
    assert wrong == []


def test_dashboard_actions_refuse_get_for_everyone(caller, world):
    # POST only comes first (before the login check), so even anonymous gets 405, not the login page.
    for role in MATRIX_ROLES:
        who = caller(role, "session")
        url = reverse("dashboard:job_action", args=[world.job(), "cancel"])
        before = fingerprint()
        assert who.client.get(url).status_code == 405, role
        assert fingerprint() == before, f"{who} GET {url} changed the database"


# ---- the admin -------------------------------------------------------------------------------------------


def _admin_actions_of_the_project(superuser) -> set[tuple[str, str]]:
    from django.test import RequestFactory

    request = RequestFactory().get("/admin/")
    request.user = superuser
    found = set()
    for model, model_admin in admin.site._registry.items():
        if model._meta.app_label not in ("scheduler", "media", "api"):
            continue
        for name in model_admin.get_actions(request):
            found.add((model._meta.label, name))
    return found


def test_the_matrix_covers_every_admin_action(caller):
    assert _admin_actions_of_the_project(caller("admin", "session").user) == set(ADMIN_ACTIONS)


@pytest.mark.parametrize("role", [*MATRIX_ROLES, "staff viewer"])
def test_admin_actions_matrix(caller, world, role):
    who = caller("viewer" if role == "staff viewer" else role, "session")
    if role == "staff viewer":
        who.user.is_staff = True
        who.user.save()
    wrong = []
    for (label, action), (kind, effect) in ADMIN_ACTIONS.items():
        pk = make_target(world, kind)
        app, model = label.lower().split(".")
        url = reverse(f"admin:{app}_{model}_changelist")
        data = {"action": action, "_selected_action": [str(pk)], "csrfmiddlewaretoken": who.csrf_token()}
        before = fingerprint()
        response = who.client.post(url, data)
        if role == "admin" and action == "delete_selected":
            # Django asks for a confirmation first; nothing is deleted until it is given.
            ok_first = response.status_code == 200 and fingerprint() == before
            response = who.client.post(url, {**data, "post": "yes"})
            ok = ok_first and response.status_code == 302 and effect(pk)
        elif role == "admin":
            ok = response.status_code == 302 and effect(pk)
        elif role == "staff viewer":
            ok = response.status_code in (200, 302, 403) and not effect(pk)
        else:
            ok = response.status_code == 302 and response["Location"].startswith("/admin/login/")
        if not ok:
            wrong.append((label, action, response.status_code, response.get("Location")))
        if role != "admin":
            assert fingerprint() == before, f"{role}: {label}.{action} was refused but changed the database"
    assert wrong == []
