"""Security fixtures: the cast's roles on both transports, a hostile media root, and fresh targets
for every request (tests/kit/matrix.py's World).

Roles (tests/kit/personas.py): anonymous; viewer (charlie, Viewers); operator (bob, Operators);
admin (alice, superuser). Transports (tests/kit/web.py's Caller): a bearer token (the viewer's
token has *operate* scope, so only the permission stops him) and the session cookie with CSRF
enforced (`Client(enforce_csrf_checks=True)`), sending the csrftoken cookie's value in
`X-CSRFToken` on unsafe methods like the dashboard's scripts do.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.kit.matrix import World
from tests.kit.web import Caller


@pytest.fixture(autouse=True)
def _no_private_webhooks(settings):
    settings.JETENCODE = {**settings.JETENCODE, "WEBHOOK_ALLOW_PRIVATE": False}


@pytest.fixture
def caller(db):
    """caller(role, transport="token") -> the Caller for that role and transport (one per test)."""
    made: dict[tuple[str, str], Caller] = {}

    def get(role: str, transport: str = "token") -> Caller:
        key = (role, transport)
        if key not in made:
            made[key] = Caller(role, transport)
        return made[key]

    return get


@pytest.fixture
def operator_api(caller):
    return caller("operator", "token")


@pytest.fixture
def hostile_media(settings, tmp_path) -> Path:
    """A media root with one real file, plus symlinks that escape it (file and directory)."""
    root = tmp_path / "media"
    outside = tmp_path / "outside"
    (root / "videos").mkdir(parents=True)
    (root / "inbox").mkdir()
    outside.mkdir()
    (outside / "secret.mp4").write_bytes(b"\x00" * 64)
    (root / "videos" / "clip.mp4").write_bytes(b"\x00" * 64)
    os.symlink(outside / "secret.mp4", root / "videos" / "escape.mp4")
    os.symlink(outside, root / "escape_dir")
    os.symlink("/etc", root / "etc_link")
    settings.MEDIA_ROOT_DIR = root
    settings.OUTPUT_ROOT_DIR = tmp_path / "outputs"
    settings.WORKSPACE_ROOT_DIR = tmp_path / "workspace"
    return root


@pytest.fixture
def world(make_worker_row, hostile_media):
    return World(make_worker_row, hostile_media)
