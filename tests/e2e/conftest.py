"""Fixtures for the end-to-end media tests: clips generated once per session, private
media/output/workspace roots per test, and real worker processes (the `start_worker` fixture of
tests/conftest.py) that run real FFmpeg on them, sign their webhooks with the test secret and may
send them to a local receiver."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kit.media import (
    CLIPS,
    LONG_CLIP,
    SIGNED_LOCAL_WEBHOOKS,
    WEBHOOK_SECRET,
    Clips,
    MediaRoots,
    generate_clips,
)
from tests.kit.workers import worker_environment


@pytest.fixture(scope="session")
def clips(tmp_path_factory) -> Clips:
    out = tmp_path_factory.mktemp("e2e-clips")
    generate_clips(out, CLIPS)
    return Clips(out)


@pytest.fixture(scope="session")
def long_clip(tmp_path_factory) -> Path:
    """20 s at 640x360: a rendition of it runs for seconds (longer with a slow preset)."""
    out = tmp_path_factory.mktemp("e2e-long")
    generate_clips(out, {"long.mp4": LONG_CLIP})
    return out / "long.mp4"


@pytest.fixture
def roots(tmp_path) -> MediaRoots:
    """Private media/output/workspace roots for one test, also set in this process's settings
    (create_job checks inputs against them)."""
    roots = MediaRoots.under(tmp_path)
    with roots.settings(WEBHOOK_ALLOW_PRIVATE=True, WEBHOOK_SECRET=WEBHOOK_SECRET):
        yield roots


@pytest.fixture
def worker_env(database_url, roots, tmp_path):
    """Workers on this test's roots, signing their webhooks with the test secret."""
    return worker_environment(database_url, tmp_path, **roots.environment(), **SIGNED_LOCAL_WEBHOOKS)
