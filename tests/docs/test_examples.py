"""The shell examples of docs/api.md and README.md run as written, against a live server and worker.

Every ```bash block of a file is extracted in order and run in one bash process (so `TOKEN`, `JOB`
and the helper functions one block defines are there for the next), with `set -euo pipefail`: a
command that fails, an HTTP error (`curl --fail-with-body`) or an unset variable stops the run and
the test names the block. A block whose fence is preceded by `<!-- no-run: reason -->` is skipped
(long-running servers, the test suite itself); the reason is required.

The commands find what the docs promise: `./scripts/run`'s state (an `admin` superuser, the demo
clips under the media root), the current directory a checkout (a copy of this one, its `.venv` the
virtualenv running the tests), `JET` (the live server's URL; the docs default to 127.0.0.1:8000), `HOOK_URL` (a local
webhook receiver, with private webhook targets allowed as in a lab) and `SOURCE_URL` (an https:// origin
for input_url, whose certificate the worker trusts).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from media.demo import seed_demo_clips
from tests.kit import ROOT
from tests.kit.origin import Origin, TlsFiles
from tests.kit.web import Receiver

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(600)]

DOCUMENTS = ["docs/api.md", "README.md"]
FENCE = re.compile(r"^```(bash|sh|shell|console)\s*$")
CHECKOUT_IGNORES = (
    ".git",
    ".venv",
    "var",
    "__pycache__",
    "*.pyc",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
)
NO_RUN = re.compile(r"^<!--\s*no-run:\s*(?P<reason>\S.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Example:
    document: str
    line: int  # of the opening fence, 1-based
    code: str
    skip_reason: str | None


def examples(document: str) -> list[Example]:
    """The shell blocks of `document` (relative to the checkout), in order."""
    lines = (ROOT / document).read_text().splitlines()
    found, index = [], 0
    while index < len(lines):
        if FENCE.match(lines[index]):
            start = index
            index += 1
            body = []
            while index < len(lines) and lines[index].strip() != "```":
                body.append(lines[index])
                index += 1
            previous = next((lines[i] for i in range(start - 1, -1, -1) if lines[i].strip()), "")
            marker = NO_RUN.match(previous.strip())
            if previous.strip().startswith("<!--") and "no-run" in previous and marker is None:
                raise AssertionError(f"{document}:{start}: a no-run marker needs a reason: {previous!r}")
            found.append(Example(document, start + 1, "\n".join(body), marker["reason"] if marker else None))
        index += 1
    return found


def script(runnable: list[Example]) -> str:
    parts = ["set -euo pipefail"]
    for example in runnable:
        parts.append(f"echo '@@@ {example.document}:{example.line}' >&2")
        parts.append(example.code)
    parts.append("echo '@@@ done' >&2")
    return "\n".join(parts) + "\n"


def test_the_extractor_finds_blocks_and_reasons():
    for document in DOCUMENTS:
        found = examples(document)
        assert found, document
        assert all(e.skip_reason is None or e.skip_reason.strip() for e in found)
        assert [e for e in found if e.skip_reason is None], f"{document} has no runnable example"
    walk = examples("docs/api.md")
    assert any("create_api_token ci-bot" in e.code and e.skip_reason is None for e in walk)


@pytest.fixture
def live_environment(live_server, start_worker, worker_env, settings, tmp_path):
    """The state ./scripts/run leaves, served by a live server with one worker: the env for bash."""
    roots = {
        name: Path(worker_env[f"JETENCODE_{name}"])
        for name in ("MEDIA_ROOT", "OUTPUT_ROOT", "WORKSPACE_ROOT")
    }
    settings.MEDIA_ROOT_DIR = roots["MEDIA_ROOT"]
    settings.OUTPUT_ROOT_DIR = roots["OUTPUT_ROOT"]
    settings.WORKSPACE_ROOT_DIR = roots["WORKSPACE_ROOT"]
    settings.JETENCODE = {**settings.JETENCODE, "WEBHOOK_ALLOW_PRIVATE": True}
    seed_demo_clips(roots["MEDIA_ROOT"])
    User.objects.create_superuser("admin", "admin@example.com", "not-used")
    # "Sending a source" fetches SOURCE_URL: a local TLS origin whose self-signed certificate the
    # worker trusts, on loopback, so private targets are allowed here (tests/media/test_fetch.py
    # proves the guard with them refused).
    tls = TlsFiles.make(tmp_path / "tls")
    origin = Origin(
        {"/clips/holiday.mp4": (roots["MEDIA_ROOT"] / "videos/demo-silent.mp4").read_bytes()}, tls=tls
    )
    settings.SOURCES = {**settings.SOURCES, "FETCH_ALLOW_PRIVATE": True}
    fetching = {"SSL_CERT_FILE": str(tls.cert), "JETENCODE_FETCH_ALLOW_PRIVATE": "true"}
    start_worker(
        "docs-worker", "--concurrency", "3", env={"JETENCODE_WEBHOOK_ALLOW_PRIVATE": "true", **fetching}
    )

    # A copy of the checkout (what `git clone` gives, without .git), so the examples' files (job.json,
    # master.m3u8) and ruff's cache land there, with .venv the virtualenv running the tests.
    scratch = tmp_path / "checkout"
    shutil.copytree(ROOT, scratch, ignore=shutil.ignore_patterns(*CHECKOUT_IGNORES), symlinks=True)
    (scratch / ".venv").symlink_to(Path(sys.prefix))
    with Receiver() as receiver, origin:
        env = {
            **worker_env,
            "JET": live_server.url,
            "HOOK_URL": f"{receiver.url}/jetencode",
            "SOURCE_URL": origin.url("/clips/holiday.mp4"),
            "JETENCODE_WEBHOOK_ALLOW_PRIVATE": "true",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        yield scratch, env, receiver


@pytest.mark.parametrize("document", DOCUMENTS)
def test_the_shell_examples_run_as_written(document, live_environment):
    scratch, env, receiver = live_environment
    runnable = [e for e in examples(document) if e.skip_reason is None]
    result = subprocess.run(
        ["bash", "-c", script(runnable)],
        cwd=scratch,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    reached = re.findall(r"^@@@ (.+)$", result.stderr, re.MULTILINE)
    assert result.returncode == 0 and reached[-1:] == ["done"], (
        f"the example at {reached[-1] if reached else document} failed (exit {result.returncode})\n"
        f"--- stdout ---\n{result.stdout[-6000:]}\n--- stderr ---\n{result.stderr[-6000:]}"
    )
