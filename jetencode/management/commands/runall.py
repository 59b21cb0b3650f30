"""Run the whole system from one terminal: web (gunicorn, no autoreloader) and one worker.

It says what each start-up phase did and how long it took (jetencode/startup.py), prints
"JetEncode is up" only once the dashboard answers an HTTP GET and the worker's row is active, and
supervises the two children (jetencode/children.py: the worker drains first on Ctrl-C while the web
keeps answering). The web's access log goes to var/log/web.log; the terminal shows the worker's
log and the web's errors, each line prefixed `worker | ` or `web    | `.
"""

from __future__ import annotations

import io
import os
import sys
import threading
import time
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor

from jetencode import embedded_db, startup
from jetencode.children import Child, Supervisor
from jetencode.env import envstr
from scheduler.constants import TERMINAL_STATUSES
from scheduler.models import Job

UP_TIMEOUT_SECONDS = 120.0


class Command(BaseCommand):
    help = "Migrate, ensure the admin account and demo media, then supervise the web server and a worker."

    def add_arguments(self, parser):
        parser.add_argument("--bind", default="127.0.0.1:8000")
        parser.add_argument("--no-worker", action="store_true", help="Start only the web server")
        parser.add_argument("--no-demo", action="store_true", help="Do not seed demo clips and jobs")
        parser.add_argument("--worker-args", default="", help="Extra arguments for runworker")

    def handle(self, *args, bind, no_worker, no_demo, worker_args, **options):
        self._lock = threading.Lock()
        narrator = startup.Narrator(self._write)
        try:
            self._prepare(narrator, no_demo)
        except KeyboardInterrupt:  # before anything was started: no traceback, nothing to stop
            self._write("Ctrl-C during start-up: stopped before the web server and the worker started.")
            self._write(_stopped_line())
            raise SystemExit(130) from None
        children_started = time.monotonic()
        web = Child("web", self._gunicorn_argv(bind), _child_env("jetencode-web"), self._write)
        worker = None
        if not no_worker:
            argv = [sys.executable, str(settings.BASE_DIR / "manage.py"), "runworker", *worker_args.split()]
            worker = Child("worker", argv, _child_env("jetencode-runworker"), self._write)
        supervisor = Supervisor(web, worker, self._write, settings.JETENCODE["SHUTDOWN_GRACE_SECONDS"])
        supervisor.install()
        admin = io.StringIO()
        call_command("ensure_admin", stdout=admin)
        narrator.say(admin.getvalue().strip())
        up = self._wait_until_up(narrator, supervisor, bind, children_started)
        if up:
            self._say_up(narrator, bind)
        supervisor.run()
        waiting = _unfinished_jobs()
        if waiting:
            self._write(f"{waiting} unfinished job(s) wait in the queue; the next start resumes them.")
        self._write(_stopped_line())
        if supervisor.failed:
            raise CommandError("JetEncode did not run as it should: see the lines above.")

    def _write(self, line: str) -> None:
        # The children's copier threads write too: whole lines, one at a time.
        with self._lock:
            self.stdout.write(line)
            self.stdout.flush()

    def _prepare(self, narrator: startup.Narrator, no_demo: bool) -> None:
        narrator.done(*_database_phase())
        narrator.begin()
        executor = MigrationExecutor(connection)
        pending = len(executor.migration_plan(executor.loader.graph.leaf_nodes()))
        call_command("migrate", interactive=False, verbosity=0)
        narrator.done(
            f"database migrated: {pending} migration(s) applied" if pending else "database up to date"
        )
        call_command("collectstatic", interactive=False, verbosity=0)
        narrator.done("static files collected")
        if not no_demo:
            seeded = io.StringIO()
            try:
                call_command("seed_demo", stdout=seeded)
            except Exception as exc:  # demo media is a convenience; never block start-up on it
                narrator.done(f"demo media skipped: {exc}")
            else:
                line = seeded.getvalue().strip().rstrip(".")
                narrator.done(line[:1].lower() + line[1:] if line else "demo media already seeded")

    def _gunicorn_argv(self, bind: str) -> list[str]:
        log_dir = settings.VAR_DIR / "log"
        log_dir.mkdir(parents=True, exist_ok=True)
        return [
            sys.executable,
            "-m",
            "gunicorn",
            "-c",
            str(settings.BASE_DIR / "deploy" / "gunicorn.conf.py"),
            "--bind",
            bind,
            # The terminal is the worker's: requests go to a file, the web's warnings and errors
            # (a port in use, a traceback) stay in the terminal.
            "--access-logfile",
            str(log_dir / "web.log"),
            "--error-logfile",
            "-",
            "--log-level",
            "warning",
            # One person's dashboard: 2 processes × 4 threads are plenty, and each further process
            # imports Django at start, on the cores the worker is starting on.
            *([] if os.environ.get("GUNICORN_WORKERS") else ["--workers", "2"]),
            "jetencode.wsgi:application",
        ]

    def _wait_until_up(
        self, narrator: startup.Narrator, supervisor: Supervisor, bind: str, began: float
    ) -> bool:
        """Poll until the dashboard answers and the worker's row is active; False if a child
        exits, a Ctrl-C comes or UP_TIMEOUT_SECONDS pass first. Times count from `began`, when the
        children were started."""
        url = startup.local_url(bind, "/dashboard/")
        web_up = False
        worker_uid = None if supervisor.worker else "-"
        while time.monotonic() - began < UP_TIMEOUT_SECONDS:
            if supervisor.stop_requested() or not all(c.running() for c in supervisor.children()):
                return False
            if not web_up and startup.answers(url):
                web_up = True
                narrator.done(
                    f"web server answering at {startup.local_url(bind, '/')}", time.monotonic() - began
                )
            if worker_uid is None:
                worker_uid = startup.registered_worker(supervisor.worker.pid)
                if worker_uid:
                    narrator.done(f"worker {worker_uid} registered and claiming", time.monotonic() - began)
            if web_up and worker_uid:
                return True
            time.sleep(0.1)
        supervisor.give_up(
            f"Not up after {UP_TIMEOUT_SECONDS:g} s (web answering: {web_up}, worker registered: "
            f"{bool(worker_uid)}): stopping."
        )
        return False

    def _say_up(self, narrator: startup.Narrator, bind: str) -> None:
        web_log = _shown_path(settings.VAR_DIR / "log" / "web.log")
        narrator.say(
            f"JetEncode is up ({narrator.total():.1f} s since the start): {startup.local_url(bind, '/dashboard/')}"
        )
        self._write(
            f"    admin {startup.local_url(bind, '/admin/')} · API docs {startup.local_url(bind, '/v2/docs')}"
            f" · web access log {web_log} · Ctrl-C stops (the worker drains first)"
        )


def _child_env(application_name: str) -> dict[str, str]:
    # Named like the processes they would be started as; unbuffered so lines reach the terminal
    # as they are written.
    return {**os.environ, "JETENCODE_APPLICATION_NAME": application_name, "PYTHONUNBUFFERED": "1"}


def _shown_path(path: Path) -> str:
    """A path relative to the working directory when it lies below it (var/log/web.log)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _database_phase() -> tuple[str, float]:
    """What the database start did and how long it took (manage.py started the embedded server)."""
    if envstr("DATABASE_URL"):
        began = time.monotonic()
        connection.ensure_connection()
        db = settings.DATABASES["default"]
        return f"PostgreSQL at {db['HOST']}:{db['PORT']}/{db['NAME']} answers", time.monotonic() - began
    start = embedded_db.last_start or {"action": "running", "seconds": 0.0, "pgdata": Path("var/pgdata")}
    where = _shown_path(start["pgdata"])
    words = {
        "created": f"embedded PostgreSQL created in {where} and started",
        "started": f"embedded PostgreSQL started ({where})",
        "running": f"embedded PostgreSQL already running ({where})",
    }
    return words[start["action"]], start["seconds"]


def _unfinished_jobs() -> int:
    try:
        return Job.objects.exclude(status__in=TERMINAL_STATUSES).count()
    except DatabaseError:  # the server went away meanwhile: nothing to add
        return 0


def _stopped_line() -> str:
    if envstr("DATABASE_URL"):
        return "JetEncode stopped."
    python = _shown_path(Path(sys.executable))
    return (
        f"JetEncode stopped. Still running: the embedded PostgreSQL ({_shown_path(embedded_db.data_dir())}), "
        f"kept for the next start; to stop it: {python} manage.py embedded_db stop"
    )
