"""The web process as deployed: gunicorn with deploy/gunicorn.conf.py against the test database.

pg_stat_activity must say who each connection is (`jetencode-web`, `jetencode-<command>`, and the
worker's per-thread names, checked in test_multihost.py), and JSON logging must cover gunicorn's
own lines too.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client, override_settings

from tests.kit import ROOT
from tests.kit.waiting import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def application_names() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT application_name FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid()"
        )
        return {row[0] for row in cursor.fetchall()}


def app_env(database_url, tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JETENCODE_", "DJANGO_"))}
    env.update(
        {
            "DATABASE_URL": database_url,
            "JETENCODE_VAR_DIR": str(tmp_path / "var"),
            "JETENCODE_SIMPLE_STATIC": "true",
            "JETENCODE_SECRET_KEY": settings.SECRET_KEY,  # a deployment refuses to start without one
            **extra,
        }
    )
    return env


def test_gunicorn_serves_health_and_metrics_as_jetencode_web_with_json_logs(database_url, tmp_path):
    port = free_port()
    log_path = tmp_path / "gunicorn.log"
    with log_path.open("wb") as log:
        gunicorn = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "-c",
                str(ROOT / "deploy" / "gunicorn.conf.py"),
                "--bind",
                f"127.0.0.1:{port}",
                "--workers",
                "1",
                "jetencode.wsgi:application",
            ],
            cwd=ROOT,
            env=app_env(database_url, tmp_path, JETENCODE_LOG_JSON="true"),
            stdout=log,
            stderr=log,
        )
    try:

        def get(path):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
                    return response.status, response.read().decode()
            except OSError:
                return None

        status, body = wait_for(lambda: get("/healthz"), 60, "gunicorn to answer", interval=0.3)
        assert (status, json.loads(body)) == (200, {"status": "ok", "database": "ok"})
        status, body = get("/metrics")
        assert status == 200 and "jetencode_recovery_last_run_timestamp_seconds" in body
        assert "jetencode-web" in application_names()  # connections persist for CONN_MAX_AGE
    finally:
        gunicorn.send_signal(signal.SIGTERM)
        gunicorn.wait(30)

    records = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
    access = [r for r in records if r["logger"] == "gunicorn.access"]
    assert any("GET /healthz" in r["message"] for r in access), records
    assert any(r["logger"] == "gunicorn.error" and "Booting worker" in r["message"] for r in records)


def test_a_management_command_names_its_connection_after_itself(database_url, tmp_path):
    code = (
        "from django.db import connection\n"
        "with connection.cursor() as c:\n"
        "    c.execute('SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()')\n"
        "    print(c.fetchone()[0])"
    )
    env = app_env(database_url, tmp_path)
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "jetencode-shell"

    env["JETENCODE_APPLICATION_NAME"] = "jetencode-migrate-release-42"
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.stdout.strip().splitlines()[-1] == "jetencode-migrate-release-42"


def test_health_and_metrics_answer_plain_http_behind_tls():
    """With JETENCODE_HTTPS every page redirects to https://, except what load balancers and
    Prometheus call inside the network."""
    with override_settings(SECURE_SSL_REDIRECT=True):
        client = Client()
        assert client.get("/healthz").status_code == 200
        assert client.get("/metrics").status_code == 200
        redirected = client.get("/v2/jobs")
        assert redirected.status_code == 301 and redirected["Location"].startswith("https://")


def test_gunicorn_config_keeps_an_operator_chosen_application_name(monkeypatch):
    monkeypatch.setenv("JETENCODE_APPLICATION_NAME", "jetencode-web-eu1")
    namespace: dict = {}
    exec(compile((ROOT / "deploy" / "gunicorn.conf.py").read_text(), "gunicorn.conf.py", "exec"), namespace)
    assert os.environ["JETENCODE_APPLICATION_NAME"] == "jetencode-web-eu1"
    assert namespace["worker_class"] == "gthread"
