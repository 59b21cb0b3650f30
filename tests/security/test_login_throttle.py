"""The login throttle counts the name the form authenticates and cannot be turned against the admin
(issue 37, item 3): variants of one name count together; an attacker over either limit locks out
only his own client; behind JETENCODE_TRUSTED_PROXIES the client is the forwarded address."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from jetencode.models import LoginFailure

pytestmark = pytest.mark.django_db

ATTACKER, ADMIN_DESK, PROXY = "203.0.113.7", "198.51.100.20", "10.0.0.5"


@pytest.fixture
def limits(settings):
    settings.JETENCODE = {
        **settings.JETENCODE,
        "LOGIN_FAILURES_PER_USER": 10,
        "LOGIN_FAILURES_PER_ADDRESS": 50,
        "LOGIN_WINDOW_SECONDS": 900,
    }


@pytest.fixture
def admin_user(django_user_model):
    return django_user_model.objects.create_superuser("admin", "a@example.com", "the-right-password")


def _post(client: Client, username: str, password: str, address: str, **extra):
    return client.post(
        reverse("login"), {"username": username, "password": password}, REMOTE_ADDR=address, **extra
    )


@pytest.mark.parametrize("login_url", ["login", "admin:login"])
def test_variants_of_the_name_count_together(limits, admin_user, login_url):
    client = Client()
    variants = [
        " admin",
        "admin ",
        "\tadmin",
        "ａｄｍｉｎ",
        "admin\u00a0",
    ]  # the last: NFKC of NBSP is a space
    for index in range(10):
        name = variants[index % len(variants)]
        response = client.post(
            reverse(login_url), {"username": name, "password": "wrong"}, REMOTE_ADDR=ATTACKER
        )
        assert response.status_code == 200, (name, response.status_code)
    assert set(LoginFailure.objects.values_list("username", flat=True)) == {"admin"}
    # Whatever the spelling, even with the right password: refused from this client.
    for name in ("admin", "admin ", "ａｄｍｉｎ"):
        refused = client.post(
            reverse(login_url), {"username": name, "password": "the-right-password"}, REMOTE_ADDR=ATTACKER
        )
        assert refused.status_code == 429, name
        assert "_auth_user_id" not in client.session


def test_uppercase_is_another_name_because_django_compares_names_exactly(limits, admin_user):
    client = Client()
    assert _post(client, "ADMIN", "the-right-password", ATTACKER).status_code == 200  # no such user
    assert LoginFailure.objects.get().username == "ADMIN"


def test_an_attacker_over_every_limit_cannot_lock_the_admin_out(limits, admin_user):
    attacker = Client()
    for index in range(60):  # past the per-user limit for admin and the per-client limit
        name = "admin" if index < 12 else f"guess{index}"
        _post(attacker, name, "wrong", ATTACKER)
    assert _post(attacker, "admin", "the-right-password", ATTACKER).status_code == 429
    assert _post(attacker, "nobody-tried-this", "x", ATTACKER).status_code == 429  # the per-client limit
    admin = Client()
    assert _post(admin, "admin", "the-right-password", ADMIN_DESK).status_code == 302
    assert "_auth_user_id" in admin.session


def test_the_per_client_limit_is_above_the_per_user_one(limits):
    client = Client()
    for index in range(49):
        assert _post(client, f"user{index % 5}", "x", ATTACKER).status_code == 200
    assert _post(client, "user9", "x", ATTACKER).status_code == 200  # the 50th failure is counted
    assert _post(client, "user10", "x", ATTACKER).status_code == 429


def test_behind_a_trusted_proxy_the_forwarded_client_counts(limits, admin_user, settings):
    settings.TRUSTED_PROXIES = [PROXY]
    attacker = Client()
    for _ in range(10):
        _post(attacker, "admin", "wrong", PROXY, HTTP_X_FORWARDED_FOR=f"{ATTACKER}")
    assert (
        _post(attacker, "admin", "the-right-password", PROXY, HTTP_X_FORWARDED_FOR=ATTACKER).status_code
        == 429
    )
    # The admin comes through the same proxy from another address: not locked.
    admin = Client()
    assert (
        _post(admin, "admin", "the-right-password", PROXY, HTTP_X_FORWARDED_FOR=ADMIN_DESK).status_code == 302
    )
    # A forged first hop does not help: the proxy appended the real address last.
    forged = Client()
    response = _post(
        forged, "admin", "the-right-password", PROXY, HTTP_X_FORWARDED_FOR=f"{ADMIN_DESK}, {ATTACKER}"
    )
    assert response.status_code == 429


def test_an_untrusted_peer_cannot_choose_its_address(limits, admin_user, settings):
    settings.TRUSTED_PROXIES = [PROXY]
    client = Client()
    for index in range(10):
        _post(client, "admin", "wrong", ATTACKER, HTTP_X_FORWARDED_FOR=f"192.0.2.{index}")
    assert set(LoginFailure.objects.values_list("address", flat=True)) == {ATTACKER}
    assert (
        _post(client, "admin", "the-right-password", ATTACKER, HTTP_X_FORWARDED_FOR="192.0.2.99").status_code
        == 429
    )
