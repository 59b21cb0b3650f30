"""The token admin: revocation is final, scope is fixed at creation, only superusers mint tokens for
others, and the raw token is shown once on a page, never in the messages cookie or the session.

eve is staff with every permission on tokens but not a superuser: what the admin lets her do is
what any delegated token manager could do.
"""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Permission, User
from django.contrib.sessions.models import Session
from django.test import Client
from django.urls import reverse

from api.models import ApiToken, TokenChangeRefused

pytestmark = pytest.mark.django_db


@pytest.fixture
def eve(db):
    user = User.objects.create_user("eve", password="x", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="api"))
    return user


@pytest.fixture
def eve_client(eve):
    client = Client()
    client.force_login(eve)
    return client


def _change(client, token, **fields):
    data = {"name": token.name, "scope": token.scope, **fields}
    if not fields.get("revoked", token.revoked):
        data.pop("revoked", None)
    return client.post(reverse("admin:api_apitoken_change", args=[token.pk]), data)


def test_a_revoked_token_cannot_be_restored_in_the_admin(admin_client, bob):
    token, _raw = ApiToken.issue(bob, scope="read")
    ApiToken.objects.filter(pk=token.pk).update(revoked=True)
    token.refresh_from_db()
    _change(admin_client, token, revoked=False)  # the checkbox left unticked
    assert ApiToken.objects.get(pk=token.pk).revoked


def test_the_scope_cannot_be_raised_in_the_admin(admin_client, bob):
    token, _raw = ApiToken.issue(bob, scope="read")
    _change(admin_client, token, scope="operate")
    assert ApiToken.objects.get(pk=token.pk).scope == "read"


def test_the_model_refuses_to_restore_or_rescope_a_token(bob):
    token, _raw = ApiToken.issue(bob, scope="read")
    token.scope = "operate"
    with pytest.raises(TokenChangeRefused):
        token.save()
    token.refresh_from_db()
    token.revoked = True
    token.save()
    token.revoked = False
    with pytest.raises(TokenChangeRefused, match="revoked"):
        token.save()
    assert ApiToken.objects.get(pk=token.pk).revoked


@pytest.mark.parametrize("target", ["bob", "alice"])
def test_a_staff_user_cannot_mint_tokens_for_others(eve_client, request, target):
    other = request.getfixturevalue(target)
    response = eve_client.post(
        reverse("admin:api_apitoken_add"), {"user": other.pk, "name": "x", "scope": "operate"}
    )
    assert response.status_code in (200, 403)
    assert not ApiToken.objects.filter(user=other).exists()


def test_a_staff_user_mints_her_own_token_and_sees_only_hers(eve_client, eve, bob):
    ApiToken.issue(bob, scope="operate", name="bobs")
    response = eve_client.post(
        reverse("admin:api_apitoken_add"), {"user": eve.pk, "name": "mine", "scope": "read"}
    )
    assert response.status_code == 200
    assert ApiToken.objects.filter(user=eve).count() == 1
    listing = eve_client.get(reverse("admin:api_apitoken_changelist")).content.decode()
    assert "mine" in listing and "bobs" not in listing


def test_the_raw_token_is_shown_once_on_a_page_and_never_in_a_cookie_or_session(admin_client, bob):
    response = admin_client.post(
        reverse("admin:api_apitoken_add"), {"user": bob.pk, "name": "ci", "scope": "operate"}
    )
    assert response.status_code == 200  # a page, not a redirect carrying a flash message
    assert "no-store" in response["Cache-Control"]
    raw = re.search(r"jet_[A-Za-z0-9_-]+", response.content.decode()).group(0)
    token = ApiToken.objects.get(user=bob)
    assert token.prefix == raw[:12]
    cookies = " ".join(morsel.value for morsel in admin_client.cookies.values())
    assert raw not in cookies and raw[4:] not in cookies
    assert all(raw not in str(s.get_decoded()) for s in Session.objects.all())
    # Nothing carries it to the next page either.
    follow = admin_client.get(reverse("admin:api_apitoken_changelist")).content.decode()
    assert raw not in follow
