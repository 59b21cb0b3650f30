"""Helpers for the end-to-end media tests (imported as tests.e2e.e2ekit; fixtures are in conftest.py):
real `manage.py runworker` processes running real FFmpeg against the test database.

Worker processes are started with the worker tests' kit (`tests.worker.workerkit`: short timings,
`WorkerProcess.wait_ready`, `wait_for`); what is added here is the media environment: a private media
root, output root and workspace root per test (or per module), set both in the worker's environment
(JETENCODE_MEDIA_ROOT, JETENCODE_OUTPUT_ROOT, JETENCODE_WORKSPACE_ROOT) and in this process's Django
settings, which `create_job` reads to check input paths at submission.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil
from django.conf import settings as django_settings
from django.db import connection
from django.test import override_settings

from tests.worker.workerkit import ROOT, TIMING, WorkerProcess

WEBHOOK_SECRET = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"  # base64 of 24 bytes; test-only

CLIPS = {
    # name: synthetic_clip kwargs (2-3 s at 320x180 keeps every job type under a second or two of FFmpeg)
    "landscape.mp4": {"width": 320, "height": 180, "seconds": 3.0, "audio": True},
    "portrait.mp4": {"width": 180, "height": 320, "seconds": 2.0, "audio": True},
    "silent.mp4": {"width": 320, "height": 180, "seconds": 2.0, "audio": False},
    "scenes.mp4": {"width": 320, "height": 180, "seconds": 3.0, "audio": True, "scenes": True},
}
# For the fault tests: long and large enough that a rendition is still running when the test acts.
LONG_CLIP = {"width": 640, "height": 360, "seconds": 20.0, "audio": True}


@dataclass(frozen=True)
class Clips:
    dir: Path

    def __getattr__(self, name: str) -> Path:
        path = self.dir / f"{name}.mp4"
        if not path.exists():
            raise AttributeError(name)
        return path


@dataclass(frozen=True)
class Roots:
    media: Path
    outputs: Path
    workspace: Path

    @classmethod
    def under(cls, base: Path) -> Roots:
        roots = cls((base / "media").resolve(), (base / "outputs").resolve(), (base / "workspace").resolve())
        for path in (roots.media, roots.outputs, roots.workspace):
            path.mkdir(parents=True, exist_ok=True)
        return roots

    def add(self, clip: Path, rel: str) -> str:
        """Put a clip into the media root at `rel` (a hard link: instant, independent names)."""
        dest = self.media / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(clip, dest)
        except OSError:
            dest.write_bytes(clip.read_bytes())
        return rel

    def job_outputs(self, job_id) -> Path:
        return self.outputs / str(job_id)

    def job_workspace(self, job_id) -> Path:
        return self.workspace / str(job_id)

    def published_files(self, job_id) -> list[str]:
        """Every file under OUTPUT_ROOT/<job id>/, temporary names included, relative and sorted."""
        root = self.job_outputs(job_id)
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())

    def settings(self):
        """The Django settings override the test process needs (create_job checks inputs against it)."""
        return override_settings(
            MEDIA_ROOT_DIR=self.media,
            OUTPUT_ROOT_DIR=self.outputs,
            WORKSPACE_ROOT_DIR=self.workspace,
            S3_BUCKET="",
            JETENCODE={
                **django_settings.JETENCODE,
                "WEBHOOK_ALLOW_PRIVATE": True,
                "WEBHOOK_SECRET": WEBHOOK_SECRET,
            },
        )


def current_database_url() -> str:
    """A DATABASE_URL for worker subprocesses pointing at this run's test database (as the
    `database_url` fixture does, usable from module-scoped fixtures too)."""
    conf = connection.settings_dict
    host = conf["HOST"] or ""
    user = conf["USER"] or "postgres"
    if host.startswith("/"):
        return f"postgresql://{user}@/{conf['NAME']}?host={host}"
    password = f":{conf['PASSWORD']}" if conf.get("PASSWORD") else ""
    return f"postgresql://{user}{password}@{host}:{conf['PORT'] or 5432}/{conf['NAME']}"


def worker_environment(roots: Roots, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("JETENCODE_")}
    env.update(TIMING)
    env.update(
        {
            "DATABASE_URL": current_database_url(),
            "JETENCODE_MEDIA_ROOT": str(roots.media),
            "JETENCODE_OUTPUT_ROOT": str(roots.outputs),
            "JETENCODE_WORKSPACE_ROOT": str(roots.workspace),
            "JETENCODE_VAR_DIR": str(ROOT / "var"),
            "JETENCODE_WEBHOOK_ALLOW_PRIVATE": "true",
            "JETENCODE_WEBHOOK_SECRET": WEBHOOK_SECRET,
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.update(extra)
    return env


def ffmpeg_processes(*needles: Path | str) -> list[psutil.Process]:
    """Live processes whose command line mentions any of `needles` (a job's workspace or output dir)."""
    texts = [str(n) for n in needles]
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            cmdline = " ".join(proc.info["cmdline"] or [])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if proc.pid != os.getpid() and any(text in cmdline for text in texts):
            found.append(proc)
    return found


class Launcher:
    """Starts `runworker` processes like tests/worker's `start_worker` fixture, with a media
    environment, and kills whatever is left (workers, then stray FFmpeg) in `stop_all`."""

    def __init__(self, roots: Roots, log_dir: Path, **env: str):
        self.roots = roots
        self.log_dir = log_dir
        self.env = worker_environment(roots, **env)
        self.started: list[WorkerProcess] = []
        log_dir.mkdir(parents=True, exist_ok=True)

    def start(self, uid: str, *args: str, env: dict | None = None, ready: bool = True) -> WorkerProcess:
        log_path = self.log_dir / f"worker-{uid}-{len(self.started)}.log"
        with open(log_path, "wb") as handle:
            popen = subprocess.Popen(
                [sys.executable, "manage.py", "runworker", "--uid", uid, *args],
                cwd=ROOT,
                env={**self.env, **(env or {})},
                stdout=handle,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        worker = WorkerProcess(uid, popen, log_path)
        self.started.append(worker)
        if ready:
            worker.wait_ready(timeout=60)
        return worker

    def drain(self, worker: WorkerProcess, timeout: float = 20) -> int:
        if worker.popen.poll() is None:
            worker.signal(signal.SIGTERM)
        return worker.wait(timeout)

    def stop_all(self) -> None:
        for worker in self.started:
            if worker.popen.poll() is None:
                worker.popen.send_signal(signal.SIGCONT)
                worker.popen.kill()
                worker.popen.wait(10)
        # Stage subprocesses die with their worker (PR_SET_PDEATHSIG); this is only a safety net so
        # a failed test cannot leave FFmpeg running on a shared machine.
        for proc in ffmpeg_processes(self.roots.workspace, self.roots.outputs, self.roots.media):
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass

    def logs(self) -> str:
        return "\n".join(
            f"--- worker {w.uid} (rc={w.popen.poll()}) ---\n{w.output()[-6000:]}" for w in self.started
        )
