"""User media is never decoded in a process that holds secrets (issue 37, item 4).

PyAV runs in a probe process of its own (media.probe → media/probe_child.py) with the stages' box:
scrubbed environment, the memory limit, a time limit. Measured: an 8000x8000 PNG (~200 KB on disk,
~190 MiB decoded) submitted 64 times in one request does not grow the web process.
"""

from __future__ import annotations

import os
import resource
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest

from media import ffmpeg as ff
from media.probe import ProbeError, probe

pytestmark = pytest.mark.django_db

MIB = 1024 * 1024


def _png(path: Path, size: str) -> Path:
    subprocess.run(
        [ff.ffmpeg_path(), "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i"]
        + [f"color=c=blue:size={size}", "-frames:v", "1", str(path)],
        check=True,
        timeout=120,
    )
    return path


@pytest.fixture(scope="module")
def huge_png(tmp_path_factory) -> Path:
    return _png(tmp_path_factory.mktemp("png") / "huge.png", "8000x8000")


class PeakRss:
    """The highest RSS of this process seen while the block runs (sampled every 2 ms)."""

    def __init__(self):
        self.peak = 0
        self._stop = threading.Event()
        self._me = psutil.Process()

    def _sample(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self._me.memory_info().rss)
            time.sleep(0.002)

    def __enter__(self):
        self.before = self._me.memory_info().rss
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def test_64_huge_pngs_in_one_request_do_not_grow_the_web_process(caller, hostile_media, huge_png):
    for index in range(16):
        os.link(huge_png, hostile_media / "videos" / f"huge{index}.png")
    inputs = [f"videos/huge{index % 16}.png" for index in range(64)]  # each at most 4 times
    body = {"type": "compile_mega", "params": {"inputs": inputs, "layout": "grid"}}
    operator = caller("operator")
    operator.request(
        "post", "/v2/jobs", {"type": "compile_mega", "params": {"inputs": inputs[:2]}}
    )  # warm up
    with PeakRss() as rss:
        response = operator.request("post", "/v2/jobs", body)
    assert response.status_code == 201, response.content[:300]
    growth = (rss.peak - rss.before) / MIB
    print(f"peak RSS growth over 64 probes of an 8000x8000 PNG: {growth:.1f} MiB")
    assert growth < 8, f"the web process grew by {growth:.1f} MiB"


def test_the_probe_process_has_no_secrets_and_the_stages_limits(monkeypatch, settings, huge_png):
    """Caught while it decodes the huge picture: its environment and address-space limit."""
    monkeypatch.setenv("DATABASE_URL", "postgresql://user:pw@db/jetencode")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret")
    seen: list[tuple[dict, tuple]] = []
    done = threading.Event()

    def watch():
        me = psutil.Process()
        while not done.is_set() and not seen:
            for child in me.children():
                try:
                    limit = child.rlimit(psutil.RLIMIT_AS)
                    # The child caps itself first thing (before PyAV is imported): catch it capped.
                    if "probe_child.py" in " ".join(child.cmdline()) and limit[0] != resource.RLIM_INFINITY:
                        seen.append((child.environ(), limit))
                except psutil.Error:
                    pass
            time.sleep(0.001)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for _ in range(20):
            probe(huge_png)
            if seen:
                break
    finally:
        done.set()
        watcher.join()
    assert seen, "no probe process was caught running"
    environment, limit = seen[0]
    assert {"DATABASE_URL", "AWS_SECRET_ACCESS_KEY"}.isdisjoint(environment), sorted(environment)
    assert limit[0] == settings.JETENCODE["FFMPEG_MEMORY_MB"] * MIB


def test_a_probe_past_its_time_limit_is_a_clean_error(settings, huge_png):
    settings.JETENCODE = {**settings.JETENCODE, "PROBE_TIMEOUT_SECONDS": 0.01}
    started = time.monotonic()
    with pytest.raises(ProbeError, match="longer than"):
        probe(huge_png)
    assert time.monotonic() - started < 5
    assert not [p for p in psutil.Process().children() if "probe_child.py" in " ".join(p.cmdline())]


def test_a_probe_past_the_memory_limit_is_a_clean_error(settings, huge_png):
    settings.JETENCODE = {**settings.JETENCODE, "FFMPEG_MEMORY_MB": 48}
    with pytest.raises(ProbeError, match="within the limits|memory"):
        probe(huge_png)
    settings.JETENCODE = {**settings.JETENCODE, "FFMPEG_MEMORY_MB": 16384}
    assert probe(huge_png).width == 8000


def test_this_process_keeps_its_own_limits():
    assert resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY


def test_the_measure_sees_a_decode_in_this_process(huge_png):
    """The control: the same picture decoded here (what submission used to do) shows in the peak."""
    import av

    with PeakRss() as rss:
        with av.open(str(huge_png)) as container:
            frame = next(container.decode(video=0))
            del frame
    assert (rss.peak - rss.before) / MIB > 100


def test_a_probe_failure_names_no_path(tmp_path):
    garbage = tmp_path / "secret-dir" / "bad.mp4"
    garbage.parent.mkdir()
    garbage.write_bytes(b"not a video" * 100)
    with pytest.raises(ProbeError) as info:
        probe(garbage)
    assert "not a readable media file" in info.value.reason
    assert "secret-dir" not in info.value.reason and "/" not in info.value.reason
