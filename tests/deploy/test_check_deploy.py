"""Production configuration: `check --deploy`, secrets from *_FILE variables, JSON logs.

Each test starts a fresh Python process, because settings are read from the environment once, at
import. No database is needed (`check` does not connect); DATABASE_URL comes from the environment
when it names a server, else a placeholder that is never dialled.
"""

import hashlib
import json
import os
import secrets
import subprocess
import sys

import pytest

from tests.kit import ROOT

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def production_env(tmp_path):
    """The environment of a production web process behind TLS."""
    # Nothing of the test run leaks in (tests/conftest.py sets DJANGO_ALLOW_ASYNC_UNSAFE for Playwright).
    env = {key: value for key, value in os.environ.items() if not key.startswith(("JETENCODE_", "DJANGO_"))}
    env.update(
        {
            "DATABASE_URL": os.environ.get("DATABASE_URL") or "postgresql://jetencode@127.0.0.1:1/jetencode",
            "JETENCODE_HTTPS": "true",
            "JETENCODE_DEBUG": "false",
            "JETENCODE_SECRET_KEY": secrets.token_urlsafe(50),
            "JETENCODE_ALLOWED_HOSTS": "jetencode.example.com",
            "JETENCODE_CSRF_TRUSTED_ORIGINS": "https://jetencode.example.com",
            "JETENCODE_BEHIND_PROXY": "true",
            "JETENCODE_VAR_DIR": str(tmp_path / "var"),
        }
    )
    return env


def manage(env, *args):
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )


def python(env, code):
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "jetencode.settings"},
        capture_output=True,
        text=True,
        timeout=90,
    )


def test_production_settings_pass_check_deploy(production_env):
    result = manage(production_env, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_check_deploy_catches_plain_http(production_env):
    """The control for the test above: without JETENCODE_HTTPS the same check fails."""
    result = manage(
        {**production_env, "JETENCODE_HTTPS": "false"}, "check", "--deploy", "--fail-level", "WARNING"
    )
    assert result.returncode != 0
    assert "security.W008" in result.stderr and "security.W012" in result.stderr


def test_the_secret_key_can_come_from_a_file(production_env, tmp_path):
    key = secrets.token_urlsafe(50)
    path = tmp_path / "secret_key"
    path.write_text(key + "\n")  # a trailing newline, as `echo` and editors write it
    env = {k: v for k, v in production_env.items() if k != "JETENCODE_SECRET_KEY"}
    env["JETENCODE_SECRET_KEY_FILE"] = str(path)

    shown = python(
        env,
        "import hashlib, django; django.setup(); from django.conf import settings; "
        "print(hashlib.sha256(settings.SECRET_KEY.encode()).hexdigest())",
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == hashlib.sha256(key.encode()).hexdigest()
    assert not (tmp_path / "var" / "secret_key").exists()  # the development fallback stayed unused

    result = manage(env, "check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_unreadable_secret_file_stops_the_process(production_env, tmp_path):
    env = {k: v for k, v in production_env.items() if k != "JETENCODE_SECRET_KEY"}
    env["JETENCODE_SECRET_KEY_FILE"] = str(tmp_path / "missing")
    result = manage(env, "check", "--deploy")
    assert result.returncode != 0
    assert "JETENCODE_SECRET_KEY_FILE" in result.stderr and "cannot be read" in result.stderr


LOG_CODE = """
import logging, django
django.setup()
log = logging.getLogger("jetencode.worker")
log.info("task 7 started", extra={"job_id": "3f1c9a52-5d1e-4a53-9f2b-3f0a1c2b4d5e", "task_id": 7,
                                  "worker_uid": "gpu-01", "session_id": "0d6a8c1e-1111-4222-8333-944455556666",
                                  "slot": "media-1"})
try:
    raise ValueError("ffmpeg exited 1")
except ValueError:
    log.exception("task 7 failed", extra={"task_id": 7})
"""


def test_json_logs_carry_job_task_and_worker_ids(production_env):
    result = python({**production_env, "JETENCODE_LOG_JSON": "true"}, LOG_CODE)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stderr.splitlines() if line.strip()]
    started, failed = lines
    assert started["message"] == "task 7 started" and started["level"] == "INFO"
    assert started["logger"] == "jetencode.worker" and started["ts"].endswith("+00:00")
    assert {k: started[k] for k in ("job_id", "task_id", "worker_uid", "session_id", "slot")} == {
        "job_id": "3f1c9a52-5d1e-4a53-9f2b-3f0a1c2b4d5e",
        "task_id": "7",
        "worker_uid": "gpu-01",
        "session_id": "0d6a8c1e-1111-4222-8333-944455556666",
        "slot": "media-1",
    }
    assert failed["level"] == "ERROR" and failed["task_id"] == "7" and "job_id" not in failed
    assert "ValueError: ffmpeg exited 1" in failed["exc"]


def test_logs_are_plain_text_by_default(production_env):
    result = python(production_env, LOG_CODE)
    assert result.returncode == 0, result.stderr
    first = result.stderr.splitlines()[0]
    assert "INFO jetencode.worker task 7 started" in first and not first.startswith("{")
