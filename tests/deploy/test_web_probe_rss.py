"""A real gunicorn worker does not grow when a job names 64 huge pictures (issue 37, item 4).

An 8000x8000 PNG is ~200 KB on disk and ~190 MiB decoded; PyAV used to open each input at
submission inside the web process. Now every input of a request is checked in one probe process
(media.probe), so the gunicorn worker's RSS, sampled every few milliseconds during the request,
stays within a few MiB of what it was.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import psutil
import pytest

from api.models import ApiToken
from media import ffmpeg as ff
from tests.deploy.test_web_process import app_env, free_port
from tests.kit import ROOT
from tests.kit.personas import persona
from tests.kit.waiting import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]
MIB = 1024 * 1024


def _post(port: int, token: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v2/jobs",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def _peak_rss(pid: int, stop: threading.Event, out: list[int]) -> None:
    process = psutil.Process(pid)
    while not stop.is_set():
        out.append(process.memory_info().rss)
        time.sleep(0.003)


def test_64_huge_pngs_do_not_grow_a_gunicorn_worker(database_url, tmp_path):
    media = tmp_path / "media" / "pics"
    media.mkdir(parents=True)
    huge = tmp_path / "huge.png"
    subprocess.run(
        [
            ff.ffmpeg_path(),
            "-nostdin",
            "-v",
            "error",
            "-y",
            "-f",
            "lavfi",
            "-i",
            "color=c=blue:size=8000x8000",
        ]
        + ["-frames:v", "1", str(huge)],
        check=True,
        timeout=120,
    )
    for index in range(16):
        os.link(huge, media / f"huge{index}.png")
    token = ApiToken.issue(persona("bob"), scope="operate", name="rss")[1]
    port = free_port()
    env = app_env(database_url, tmp_path, JETENCODE_MEDIA_ROOT=str(tmp_path / "media"))
    gunicorn = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", str(ROOT / "deploy" / "gunicorn.conf.py")]
        + ["--bind", f"127.0.0.1:{port}", "--workers", "1", "jetencode.wsgi:application"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: _healthy(port), 60, "gunicorn to answer", interval=0.3)
        [worker] = psutil.Process(gunicorn.pid).children()
        warm = {"type": "compile_mega", "params": {"inputs": ["pics/huge0.png", "pics/huge1.png"]}}
        assert _post(port, token, warm)[0] == 201  # imports and first-request caches
        inputs = [f"pics/huge{index % 16}.png" for index in range(64)]
        before = worker.memory_info().rss
        samples: list[int] = []
        stop = threading.Event()
        sampler = threading.Thread(target=_peak_rss, args=(worker.pid, stop, samples))
        sampler.start()
        try:
            status, body = _post(port, token, {"type": "compile_mega", "params": {"inputs": inputs}})
        finally:
            stop.set()
            sampler.join()
        assert status == 201, body
        growth = (max(samples) - before) / MIB
        print(f"gunicorn worker: {before / MIB:.1f} MiB before, peak growth {growth:.2f} MiB over 64 inputs")
        assert growth < 8, f"the web process grew by {growth:.1f} MiB"
    finally:
        gunicorn.send_signal(signal.SIGTERM)
        gunicorn.wait(30)


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False
