"""`manage.py runall` from a fresh var directory on an embedded PostgreSQL of its own (never the one
under var/): one line per start-up phase with its time, in order; "JetEncode is up" only once the
dashboard answers and the worker is registered; the web's requests in var/log/web.log, the worker's
lines prefixed in the terminal; Ctrl-C ends with a line saying the embedded database still runs
and how to stop it. Real processes, a real PostgreSQL, a real SIGINT."""

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.kit import ROOT
from tests.kit.waiting import wait_for
from tests.kit.workers import worker_environment

pytestmark = [pytest.mark.slow, pytest.mark.embedded, pytest.mark.timeout(240)]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def fresh(tmp_path):
    """A fresh var directory and a data directory for an embedded server of this test's own (under
    /tmp with a short path: the server's socket lives in it, and the pgserver user must reach it)."""
    pgdata = Path(tempfile.mkdtemp(prefix="je-pg-", dir="/tmp"))
    pgdata.chmod(0o755)
    env = worker_environment("", tmp_path)
    del env["DATABASE_URL"]
    env.update(
        {"JETENCODE_VAR_DIR": str(tmp_path / "var"), "JETENCODE_EMBEDDED_PGDATA": str(pgdata / "data")}
    )
    yield env
    subprocess.run([sys.executable, "manage.py", "embedded_db", "stop"], cwd=ROOT, env=env, timeout=60)
    subprocess.run(["rm", "-rf", str(pgdata)], timeout=60)


def get_status(url: str) -> int | None:
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    try:
        with urllib.request.build_opener(NoRedirect).open(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


def test_a_fresh_start_narrates_each_phase_and_ctrl_c_says_what_still_runs(fresh, tmp_path):
    port = free_port()
    log_path = tmp_path / "runall.log"
    with log_path.open("wb") as log:
        runall = subprocess.Popen(
            [sys.executable, "manage.py", "runall", "--no-demo", "--bind", f"127.0.0.1:{port}",
             "--worker-args", "--uid fresh-start --concurrency 1"],
            cwd=ROOT, env=fresh, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
    try:
        wait_for(lambda: "JetEncode is up" in log_path.read_text(), 180, "JetEncode to be up")
        # Up means up: the dashboard answers now, without a retry.
        assert get_status(f"http://127.0.0.1:{port}/dashboard/") == 302
        output = log_path.read_text()
        phases = [line[4:] for line in output.splitlines() if line.startswith("==> ")]
        expected = [
            r"embedded PostgreSQL created in .+ and started \(\d+\.\d s\)",
            r"database migrated: (\d+) migration\(s\) applied \(\d+\.\d s\)",
            r"static files collected \(\d+\.\d s\)",
            r"Admin login: username 'admin', password '.+' \(kept in .+\)",
        ]
        for pattern, line in zip(expected, phases, strict=False):
            assert re.fullmatch(pattern, line), (pattern, phases)
        assert int(re.search(r"migrated: (\d+) migration", output).group(1)) > 30
        # The web and the worker come up side by side, in either order; "up" comes after both.
        ready = sorted(phases[4:6])
        assert re.fullmatch(r"web server answering at http://127\.0\.0\.1:\d+/ \(\d+\.\d s\)", ready[0]), (
            phases
        )
        assert re.fullmatch(r"worker fresh-start registered and claiming \(\d+\.\d s\)", ready[1]), phases
        assert re.fullmatch(
            rf"JetEncode is up \(\d+\.\d s since the start\): http://127\.0\.0\.1:{port}/dashboard/",
            phases[6],
        )
        # The two logs: requests in var/log/web.log (the readiness probe's GET is the first), the
        # worker's lines prefixed in the terminal, no access-log line there.
        web_log = (tmp_path / "var" / "log" / "web.log").read_text()
        assert re.search(r'"GET /dashboard/ HTTP/1\.1" 302 .*Python-urllib', web_log), web_log
        assert "worker | JetEncode worker fresh-start" in output
        assert "GET /dashboard/" not in output
        assert "Editable installation" not in output and "Traceback" not in output
        os.killpg(runall.pid, signal.SIGINT)
        assert runall.wait(60) == 0, log_path.read_text()[-3000:]
    finally:
        if runall.poll() is None:
            os.killpg(runall.pid, signal.SIGKILL)
    last = log_path.read_text().splitlines()[-1]
    assert last.startswith("JetEncode stopped. Still running: the embedded PostgreSQL"), last
    assert last.endswith("manage.py embedded_db stop"), last
    status = subprocess.run(
        [sys.executable, "manage.py", "embedded_db", "status"],
        cwd=ROOT,
        env=fresh,
        capture_output=True,
        text=True,
    )
    assert status.stdout.startswith("running"), status.stdout  # as the line says
