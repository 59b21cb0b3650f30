"""deploy/compose.yaml ships no default password and publishes nothing beyond localhost by default.

No container engine runs here, so the file is parsed and interpolated as Compose does it:
`${VAR:-default}`, `${VAR:?message}` (an error when VAR is unset or empty) and `${VAR}`.
"""

from __future__ import annotations

import re

import pytest
import yaml

from tests.kit import ROOT

DEPLOY = ROOT / "deploy"
_VARIABLE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:-|:\?|-|\?)(?P<arg>[^}]*))?\}")


class MissingVariable(Exception):
    pass


def interpolate(text: str, env: dict[str, str]) -> str:
    def value(match: re.Match) -> str:
        name, op, arg = match.group("name"), match.group("op"), match.group("arg")
        current = env.get(name)
        if op == ":?" and not current:
            raise MissingVariable(f"{name}: {arg}")
        if op == ":-" and not current:
            return arg
        return current or ""

    return _VARIABLE.sub(value, text)


def env_file(path) -> dict[str, str]:
    pairs = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            name, _, value = line.partition("=")
            pairs[name.strip()] = value.strip()
    return pairs


@pytest.fixture(scope="module")
def raw() -> str:
    return (DEPLOY / "compose.yaml").read_text()


def test_no_password_has_a_default(raw):
    assert "change-me" not in raw
    for match in _VARIABLE.finditer(raw):
        name, op = match.group("name"), match.group("op")
        if re.search(r"PASSWORD|SECRET_ACCESS_KEY", name) and op == ":-":
            assert match.group("arg") == "", f"{name} defaults to {match.group('arg')!r}"


@pytest.mark.parametrize("missing", ["MINIO_ROOT_PASSWORD", "GRAFANA_ADMIN_PASSWORD", "MINIO_ROOT_USER"])
def test_compose_refuses_to_start_without_the_consoles_passwords(raw, missing):
    env = {"MINIO_ROOT_USER": "u", "MINIO_ROOT_PASSWORD": "p" * 24, "GRAFANA_ADMIN_PASSWORD": "g" * 24}
    env.pop(missing)
    with pytest.raises(MissingVariable, match=missing):
        interpolate(raw, env)


def test_the_env_file_example_lists_every_required_variable_empty(raw):
    example = env_file(DEPLOY / "compose.env.example")
    required = {m.group("name") for m in _VARIABLE.finditer(raw) if m.group("op") == ":?"}
    assert required <= set(example), required - set(example)
    assert all(not example[name] for name in required if "PASSWORD" in name)  # no password to copy
    with pytest.raises(MissingVariable):
        interpolate(raw, example)  # copied unchanged, compose still refuses
    assert ".env" in (DEPLOY / ".gitignore").read_text().split()


def test_every_published_port_listens_on_localhost_by_default(raw):
    env = {"MINIO_ROOT_USER": "u", "MINIO_ROOT_PASSWORD": "p" * 24, "GRAFANA_ADMIN_PASSWORD": "g" * 24}
    compose = yaml.safe_load(interpolate(raw, env))
    published = {
        name: [str(port) for port in service.get("ports", [])]
        for name, service in compose["services"].items()
    }
    assert {name for name, ports in published.items() if ports} >= {"web", "minio", "prometheus", "grafana"}
    for name, ports in published.items():
        for port in ports:
            assert port.startswith("127.0.0.1:"), (name, port)
    grafana = compose["services"]["grafana"]["environment"]
    assert grafana["GF_SECURITY_ADMIN_PASSWORD"] == "g" * 24
    # Exposing them is a choice the operator writes down.
    exposed = yaml.safe_load(interpolate(raw, {**env, "JETENCODE_PUBLISH_ADDRESS": "0.0.0.0"}))
    assert exposed["services"]["web"]["ports"] == ["0.0.0.0:8000:8000"]
