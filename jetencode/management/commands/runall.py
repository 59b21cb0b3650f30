"""Run the whole system from one terminal: web (gunicorn, no autoreloader) and one worker.

Everything runs in one process group, so Ctrl-C (or SIGTERM to this process) stops everything: the
worker drains (it hands back whatever it cannot finish) and gunicorn shuts down.
"""

import os
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Migrate, ensure the admin account and demo media, then supervise the web server and a worker."

    def add_arguments(self, parser):
        parser.add_argument("--bind", default="127.0.0.1:8000")
        parser.add_argument("--no-worker", action="store_true", help="Start only the web server")
        parser.add_argument("--no-demo", action="store_true", help="Do not seed demo clips and jobs")
        parser.add_argument("--worker-args", default="", help="Extra arguments for runworker")

    def handle(self, *args, bind, no_worker, no_demo, worker_args, **options):
        call_command("migrate", interactive=False, verbosity=0)
        self.stdout.write("Database migrated.")
        call_command("collectstatic", interactive=False, verbosity=0)
        if not no_demo:
            try:
                call_command("seed_demo")
            except Exception as exc:  # demo media is a convenience; never block start-up on it
                self.stderr.write(f"Demo media skipped: {exc}")
        # Named like the processes they would be started as (manage.py named this one jetencode-runall).
        env = {**os.environ, "JETENCODE_APPLICATION_NAME": "jetencode-web"}
        worker_env = {**os.environ, "JETENCODE_APPLICATION_NAME": "jetencode-runworker"}
        manage = [sys.executable, str(settings.BASE_DIR / "manage.py")]
        children = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gunicorn",
                    "-c",
                    str(settings.BASE_DIR / "deploy" / "gunicorn.conf.py"),
                    "--bind",
                    bind,
                    "jetencode.wsgi:application",
                ],
                env=env,
            )
        ]
        if not no_worker:
            children.append(subprocess.Popen([*manage, "runworker", *worker_args.split()], env=worker_env))
        call_command("ensure_admin")
        self.stdout.write(
            f"JetEncode is up: http://{bind}/dashboard/  (admin: http://{bind}/admin/). Ctrl-C stops."
        )

        stopping = False

        def stop(signum, frame):
            nonlocal stopping
            # Ctrl-C in the terminal already reached every process of our foreground group; sending
            # another signal would make the worker abort instead of draining.
            if signum == signal.SIGINT and not stopping and _terminal_signalled_group():
                stopping = True
                return
            for child in children:
                if child.poll() is None:
                    child.send_signal(signal.SIGTERM if not stopping else signal.SIGKILL)
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        while any(child.poll() is None for child in children):
            if not stopping and any(child.poll() is not None for child in children):
                self.stderr.write("A process exited; stopping the others.")
                stop(signal.SIGTERM, None)
            time.sleep(0.5)
        return None


def _terminal_signalled_group() -> bool:
    try:
        return os.tcgetpgrp(sys.stdin.fileno()) == os.getpgrp()
    except OSError:
        return False
