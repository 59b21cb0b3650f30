"""Secrets and settings: generated secrets are private from their first byte, a deployment refuses to
start without a secret key, `testserver` is not an allowed host by default, and logins are throttled.

Settings are read once, at import, so the settings checks run a fresh Python process each.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from jetencode.env import create_secret_file
from jetencode.models import LoginFailure
from tests.kit import ROOT

pytestmark = pytest.mark.django_db


def _settings_process(tmp_path, code: str, **env) -> subprocess.CompletedProcess:
    base = {
        k: v for k, v in os.environ.items() if not k.startswith(("JETENCODE_", "DJANGO_", "DATABASE_URL"))
    }
    base.update({"JETENCODE_VAR_DIR": str(tmp_path / "var"), "DJANGO_SETTINGS_MODULE": "jetencode.settings"})
    base.update(env)
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=base, capture_output=True, text=True, timeout=60
    )


def test_a_deployment_without_a_secret_key_refuses_to_start(tmp_path):
    result = _settings_process(
        tmp_path,
        "import jetencode.settings",
        DATABASE_URL="postgresql://x@127.0.0.1:1/x",
        JETENCODE_DEBUG="false",
    )
    assert result.returncode != 0
    assert "JETENCODE_SECRET_KEY is not set" in result.stderr, result.stderr[-800:]
    assert not (tmp_path / "var" / "secret_key").exists()


@pytest.mark.parametrize(
    "env",
    [{"JETENCODE_DEBUG": "true", "DATABASE_URL": "postgresql://x@127.0.0.1:1/x"}, {}],
    ids=["debug", "embedded-database"],
)
def test_development_keeps_a_private_generated_key(tmp_path, env):
    result = _settings_process(
        tmp_path, "from jetencode import settings; print(len(settings.SECRET_KEY))", **env
    )
    assert result.returncode == 0, result.stderr[-800:]
    key_file = tmp_path / "var" / "secret_key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert int(result.stdout.strip()) >= 50


def test_testserver_is_not_an_allowed_host_by_default(tmp_path):
    result = _settings_process(
        tmp_path,
        "from jetencode import settings; print(','.join(settings.ALLOWED_HOSTS))",
        JETENCODE_SECRET_KEY="k" * 50,
    )
    assert result.returncode == 0, result.stderr[-800:]
    assert result.stdout.strip().split(",") == ["127.0.0.1", "localhost"]


def test_a_secret_file_is_private_even_if_nothing_chmods_it(tmp_path, monkeypatch):
    """Created 0600 from the first byte: there is no chmod to miss (simulated: chmod does nothing)."""
    monkeypatch.setattr(Path, "chmod", lambda self, mode: None)
    old = os.umask(0o000)
    try:
        value = create_secret_file(tmp_path / "var" / "secret_key", "s3cret")
    finally:
        os.umask(old)
    assert value == "s3cret"
    assert stat.S_IMODE((tmp_path / "var" / "secret_key").stat().st_mode) == 0o600
    # An existing file wins (two processes racing both end up with the first one's value).
    assert create_secret_file(tmp_path / "var" / "secret_key", "other") == "s3cret"
    assert sorted(p.name for p in (tmp_path / "var").iterdir()) == ["secret_key"]  # no temporary left


def test_the_admin_password_file_is_private_from_its_first_byte(settings, tmp_path, monkeypatch):
    settings.VAR_DIR = tmp_path / "var"
    monkeypatch.setattr(Path, "chmod", lambda self, mode: None)
    old = os.umask(0o022)
    try:
        call_command("ensure_admin", stdout=open(os.devnull, "w"))
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "var" / "admin_password").stat().st_mode) == 0o600


# ---- login throttling ---------------------------------------------------------------------------


@pytest.fixture
def few_attempts(settings):
    settings.JETENCODE = {
        **settings.JETENCODE,
        "LOGIN_FAILURES_PER_USER": 3,
        "LOGIN_FAILURES_PER_ADDRESS": 5,
        "LOGIN_WINDOW_SECONDS": 600,
    }


@pytest.mark.parametrize("login_url", ["login", "admin:login"])
def test_repeated_failed_logins_for_one_user_are_throttled(few_attempts, alice, login_url):
    alice.set_password("right-password")
    alice.save()
    client = Client()
    url = reverse(login_url)
    for _ in range(3):
        assert client.post(url, {"username": alice.username, "password": "wrong"}).status_code == 200
    refused = client.post(url, {"username": alice.username, "password": "right-password"})
    assert refused.status_code == 429, refused.status_code
    assert "Too many failed logins" in refused.content.decode()
    assert 0 < int(refused["Retry-After"]) <= 600
    assert "_auth_user_id" not in client.session  # even the right password does not get in


def test_one_address_trying_many_names_is_throttled(few_attempts):
    client = Client()
    for index in range(5):
        client.post(reverse("login"), {"username": f"guess{index}", "password": "x"})
    assert client.post(reverse("login"), {"username": "guess9", "password": "x"}).status_code == 429


def test_a_successful_login_clears_the_users_failures_and_old_failures_expire(few_attempts, settings, bob):
    bob.set_password("pw-of-bob")
    bob.save()
    client = Client()
    for _ in range(2):
        client.post(reverse("login"), {"username": bob.username, "password": "wrong"})
    assert (
        client.post(reverse("login"), {"username": bob.username, "password": "pw-of-bob"}).status_code == 302
    )
    assert not LoginFailure.objects.filter(username=bob.username).exists()
    settings.JETENCODE = {**settings.JETENCODE, "LOGIN_WINDOW_SECONDS": 1}
    LoginFailure.objects.create(username="someone", address="127.0.0.1")
    LoginFailure.objects.filter(username="someone").update(at="2000-01-01T00:00:00Z")
    Client().post(reverse("login"), {"username": "x", "password": "y"})
    assert not LoginFailure.objects.filter(username="someone").exists()
