"""The shell examples of docs/api.md and README.md run as written, against a live server and worker.

Every ```bash block of a file is extracted in order and run in one bash process (so `TOKEN`, `JOB`
and the helper functions one block defines are there for the next), with `set -euo pipefail`: a
command that fails, an HTTP error (`curl --fail-with-body`) or an unset variable stops the run and
the test names the block. A block whose fence is preceded by `<!-- no-run: reason -->` is skipped
(long-running servers, the test suite itself); the reason is required.

The commands find what the docs promise: `./scripts/run`'s state (an `admin` superuser, the demo
clips under the media root), the current directory a checkout (a copy of this one, its `.venv` the
virtualenv running the tests), `JET` (the live server's URL; the docs default to 127.0.0.1:8000),
`HOOK_PORT` (a free port for the walk's own webhook receiver, `tools/webhook_receiver.py`),
`SOURCE_URL` (an https:// origin for input_url, whose certificate the worker trusts) and private
webhook and fetch targets allowed, as docs/api.md tells its reader to start the server.

Running is not enough: each block's stdout is kept, and for docs/api.md the test checks what the
comments promise (the job completes, the webhook arrives, the steered job moves in the queue, the
retried job is queued again, the progress table is the database's plan) and that the files the
examples write land in their temporary directory (`$WORK`, under TMPDIR), not in the checkout.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import connection

from media.demo import seed_demo_clips
from tests.kit import ROOT
from tests.kit.origin import Origin, TlsFiles

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
        parts.append(f"echo '@@@ {example.document}:{example.line}' | tee /dev/stderr")
        parts.append(example.code)
    parts.append("echo '@@@ done' | tee /dev/stderr")
    return "\n".join(parts) + "\n"


def outputs_by_block(stdout: str) -> dict[str, list[str]]:
    """{"docs/api.md:123": the stdout lines of the block whose fence is on line 123}."""
    found: dict[str, list[str]] = {}
    current = None
    for line in stdout.splitlines():
        marker = re.match(r"^@@@ (.+)$", line)
        if marker:
            current = found.setdefault(marker[1], [])
        elif current is not None:
            current.append(line)
    return found


def output_of(document: str, stdout: str, needle: str) -> list[str]:
    """The stdout lines of the one block of `document` whose code contains `needle`."""
    matching = [e for e in examples(document) if needle in e.code and e.skip_reason is None]
    assert len(matching) == 1, f"{len(matching)} blocks of {document} contain {needle!r}"
    return outputs_by_block(stdout)[f"{document}:{matching[0].line}"]


def test_the_extractor_finds_blocks_and_reasons():
    for document in DOCUMENTS:
        found = examples(document)
        assert found, document
        assert all(e.skip_reason is None or e.skip_reason.strip() for e in found)
        assert [e for e in found if e.skip_reason is None], f"{document} has no runnable example"
    walk = examples("docs/api.md")
    assert any("create_api_token ci-bot" in e.code and e.skip_reason is None for e in walk)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


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
    settings.CORS_ALLOWED_ORIGINS = ["https://player.example"]  # JETENCODE_CORS_ORIGINS in the docs
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
    temp = tmp_path / "tmp"  # where `mktemp -d` puts the examples' $WORK
    temp.mkdir()
    with origin:
        env = {
            **worker_env,
            "JET": live_server.url,
            "HOOK_PORT": str(free_port()),
            "SOURCE_URL": origin.url("/clips/holiday.mp4"),
            "TMPDIR": str(temp),
            "JETENCODE_WEBHOOK_ALLOW_PRIVATE": "true",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        yield scratch, env, temp


@pytest.mark.parametrize("document", DOCUMENTS)
def test_the_shell_examples_run_as_written(document, live_environment):
    scratch, env, temp = live_environment
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

    if document == "docs/api.md":
        check_the_walk_does_what_its_comments_say(result.stdout, scratch, temp, env["HOOK_PORT"])


def check_the_walk_does_what_its_comments_say(
    stdout: str, checkout: Path, temp: Path, hook_port: str
) -> None:
    def out(needle: str) -> list[str]:
        return output_of("docs/api.md", stdout, needle)

    assert out('wait_job "$JOB"')[-1] == "completed"
    assert out("webhook_receiver") == [f"http://127.0.0.1:{hook_port}/jetencode"]
    assert out('wait_job "$HOOKED"') == ["completed", "job.completed"]
    collected = out('"$WORK/master.m3u8"')
    assert collected[-4] == "#EXTM3U" and collected[-1].strip() == "1024", collected

    # The steered job waits (every slot is busy) and moves in the pending group as each comment says.
    steer = out("run-next")
    waiting = json.loads("\n".join(steer[:4]))
    assert waiting["state"] == "pending" and waiting["waiting_reason"].startswith("waiting for a free"), steer
    assert steer[4:] == [
        "AHEAD is next",
        '"pending"',
        "STEER is next",
        '"pending"',
        "AHEAD is next again",
        "50",
        "STEER is next: priority 50 comes before 0",
        "true",
        "false",
        '{"state":"cancelled","cancel_requested":true}',
    ], steer

    retry = out("/retry")
    assert retry[0] == "failed" and retry[-1] == "failed", retry
    assert retry[1] == "noop failed: noop: attempt 1 fails on purpose (fail_attempts=1)", retry
    assert retry[2] in ("pending", "running") and retry[3] == "1", retry

    # The files the examples write are in $WORK, under TMPDIR; none in the checkout.
    for name in ("job.json", "master.m3u8", "head.jpg", "hooks.jsonl"):
        assert not (checkout / name).exists(), f"{name} was written into the checkout"
        assert len(list(temp.glob(f"*/{name}"))) == 1, f"{name} is not in $WORK"


PROGRESS_ROW = re.compile(
    r"^\| (?:`(?P<type>\w+)`)? *\| (?P<group>.+?) \| (?P<on>\d+) % \| (?P<off>\d+) % \|$"
)


def documented_shares() -> dict[str, dict[str, tuple[int, int]]]:
    """docs/api.md's progress table: {type: {stage group: (share measuring, share not measuring)}}."""
    shares: dict[str, dict[str, tuple[int, int]]] = {}
    job_type = None
    for line in (ROOT / "docs/api.md").read_text().splitlines():
        row = PROGRESS_ROW.match(line)
        if row:
            job_type = row["type"] or job_type
            group = re.match(r"`?([\w.]+)`?", row["group"])[1]
            shares.setdefault(job_type, {})[group] = (int(row["on"]), int(row["off"]))
    return shares


@pytest.mark.django_db
def test_the_documented_progress_shares_are_the_plan_the_database_uses():
    documented = documented_shares()
    assert set(documented) == {"transcode", "reencode_streaming"}, documented
    for job_type, groups in documented.items():
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT progress_plan_v1(%s, '{}'), progress_plan_v1(%s, '{\"quality_metrics\": []}')",
                [job_type, job_type],
            )
            measuring, not_measuring = cursor.fetchone()
        for column, plan in ((0, measuring), (1, not_measuring)):
            plan = json.loads(plan) if isinstance(plan, str) else plan
            total = sum(plan.values())
            as_percent = {group: round(100 * share / total) for group, share in plan.items()}
            assert {group: shares[column] for group, shares in groups.items()} == as_percent, job_type
