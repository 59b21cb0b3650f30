"""The deployment files agree with the code and with each other.

No container engine or systemd runs here, so these read the files: compose.yaml's layout (one
database, web, workers with their own workspaces and unique uids, shared outputs), the Dockerfile,
and the systemd units (exit codes, stop timeout, secrets as credentials).
"""

import re

import pytest
import yaml
from django.conf import settings

from tests.kit import ROOT

DEPLOY = ROOT / "deploy"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def seconds(text: str) -> float:
    match = re.fullmatch(r"(\d+)(s|m)?", str(text))
    assert match, text
    return int(match.group(1)) * (60 if match.group(2) == "m" else 1)


def workers_of(compose: dict) -> dict:
    return {name: svc for name, svc in compose["services"].items() if "runworker" in svc.get("command", [])}


def test_compose_describes_one_database_web_and_workers(compose):
    services = compose["services"]
    assert {"postgres", "migrate", "web", "worker-1", "worker-2"} <= set(services)
    assert "jit=off" in services["postgres"]["command"]
    assert services["migrate"]["command"][-2:] == ["migrate", "--noinput"]
    for name in ("web", "worker-1", "worker-2"):
        assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert services["web"]["healthcheck"]["test"][-1].count("/healthz") == 1
    assert {services[n]["profiles"][0] for n in ("minio", "prometheus", "grafana")} == {"s3", "monitoring"}


def test_every_worker_has_its_own_uid_and_workspace_and_shares_outputs(compose):
    workers = workers_of(compose)
    assert len(workers) >= 2
    uids, workspaces = [], []
    for name, svc in workers.items():
        command = svc["command"]
        uids.append(command[command.index("--uid") + 1])
        mounts = dict(reversed(volume.split(":")[:2]) for volume in svc["volumes"])
        workspaces.append(mounts["/data/workspace"])
        assert mounts["/data/outputs"] == "outputs" and mounts["/data/media"] == "media"
        grace = settings.JETENCODE["SHUTDOWN_GRACE_SECONDS"]
        assert seconds(svc["stop_grace_period"]) >= grace + 30, name
    assert len(set(uids)) == len(uids) and len(set(workspaces)) == len(workspaces)
    assert set(workspaces) <= set(compose["volumes"])


def test_secrets_come_from_files_and_stay_out_of_git(compose):
    for name, svc in compose["services"].items():
        if svc.get("image", "").startswith("jetencode"):
            assert svc["environment"]["DATABASE_URL_FILE"] == "/run/secrets/database_url", name
            assert svc["environment"]["JETENCODE_SECRET_KEY_FILE"] == "/run/secrets/secret_key", name
            assert set(svc["secrets"]) == {"database_url", "secret_key"}, name
    for secret in compose["secrets"].values():
        assert secret["file"].startswith("./secrets/")
    assert (DEPLOY / "secrets" / ".gitignore").read_text().splitlines() == ["*", "!.gitignore"]


def test_files_compose_mounts_exist_and_match_prometheus(compose):
    for svc in compose["services"].values():
        for volume in svc.get("volumes", []):
            source, target = volume.split(":")[:2]
            if source.startswith("./"):
                assert (DEPLOY / source).exists(), source
    prometheus = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    mounted = [v.split(":")[1] for v in compose["services"]["prometheus"]["volumes"]]
    assert set(prometheus["rule_files"]) <= set(mounted)
    assert prometheus["scrape_configs"][0]["job_name"] == "jetencode"  # alerts.yml's up{job="jetencode"}


def test_the_dockerfile_runs_the_project_as_a_plain_user():
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim\b", text, re.M)
    assert re.search(r"^USER jetencode$", text, re.M)
    assert 'ENTRYPOINT ["tini", "--"]' in text
    cmd = re.search(r"^CMD (.+)$", text, re.M).group(1)
    assert "deploy/gunicorn.conf.py" in cmd and (DEPLOY / "gunicorn.conf.py").exists()
    assert "collectstatic" in text and "pip install --no-deps -e ." in text
    ignored = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    assert {".git", ".venv", "var", "deploy/secrets"} <= set(ignored)


def unit(name: str) -> dict[str, list[str]]:
    """A systemd unit as key -> values (keys repeat: Environment, LoadCredential...)."""
    values: dict[str, list[str]] = {}
    for line in (DEPLOY / "systemd" / name).read_text().splitlines():
        if line and not line.startswith(("#", "[")) and "=" in line:
            key, _, value = line.partition("=")
            values.setdefault(key.strip(), []).append(value.strip())
    return values


def test_the_worker_unit_matches_runworker():
    from workers.runtime import EXIT_TAKEN_OVER

    worker = unit("jetencode-worker@.service")
    exec_start = worker["ExecStart"][0].split()
    assert exec_start[1:4] == ["/opt/jetencode/manage.py", "runworker", "--uid"] and exec_start[4] == "%i"
    assert exec_start[exec_start.index("--workspace") + 1] == "/var/lib/jetencode/workspace/%i"
    assert worker["KillSignal"] == ["SIGTERM"] and worker["KillMode"] == ["mixed"]
    assert seconds(worker["TimeoutStopSec"][0]) >= settings.JETENCODE["SHUTDOWN_GRACE_SECONDS"] + 30
    assert set(worker["RestartPreventExitStatus"][0].split()) == {"2", str(EXIT_TAKEN_OVER)}
    assert "DATABASE_URL_FILE=%d/database_url" in worker["Environment"]


def test_the_web_unit_runs_gunicorn_with_the_repository_config():
    web = unit("jetencode-web.service")
    assert web["ExecStart"][0].endswith(
        "gunicorn -c /opt/jetencode/deploy/gunicorn.conf.py jetencode.wsgi:application"
    )
    assert web["Type"] == ["notify"]  # gunicorn reports READY=1 to systemd
    assert {"JETENCODE_SECRET_KEY_FILE=%d/secret_key", "DATABASE_URL_FILE=%d/database_url"} <= set(
        web["Environment"]
    )
    credentials = {value.split(":")[0] for value in web["LoadCredential"]}
    assert credentials == {"secret_key", "database_url"}
