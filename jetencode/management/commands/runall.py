"""Run the whole system from one terminal: web (gunicorn, no autoreloader) and one worker.

Each child runs in a process group of its own, so a Ctrl-C in the terminal (SIGINT to this
command's process group) reaches this process only, once, and this process tells each child once:
SIGTERM, on which the worker drains (it hands back whatever it cannot finish in its grace period)
and gunicorn shuts down gracefully. A second Ctrl-C (or SIGTERM) is passed on as a second signal:
the worker aborts (its stages killed and handed back); a third kills what is left. The children die
with this process (PR_SET_PDEATHSIG) if it is killed outright.
"""

import ctypes
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
                **_OWN_GROUP,
            )
        ]
        if not no_worker:
            children.append(
                subprocess.Popen([*manage, "runworker", *worker_args.split()], env=worker_env, **_OWN_GROUP)
            )
        call_command("ensure_admin")
        self.stdout.write(
            f"JetEncode is up: http://{bind}/dashboard/  (admin: http://{bind}/admin/). Ctrl-C stops."
        )

        signals_seen = 0

        def stop(signum, frame):  # noqa: ARG001
            # Only this process hears the terminal (the children have groups of their own): pass
            # each Ctrl-C on exactly once. First: drain. Second: abort. Third: kill.
            nonlocal signals_seen
            signals_seen += 1
            for child in children:
                if child.poll() is None:
                    child.send_signal(signal.SIGTERM if signals_seen <= 2 else signal.SIGKILL)

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        while any(child.poll() is None for child in children):
            if not signals_seen and any(child.poll() is not None for child in children):
                self.stderr.write("A process exited; stopping the others.")
                stop(signal.SIGTERM, None)
            time.sleep(0.2)
        return None


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when runall dies (Linux; elsewhere a no-op)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


# A group of its own, so the terminal's SIGINT reaches the child only through runall, once; no
# stdin, so a child outside the foreground group never stops on a terminal read.
_OWN_GROUP = {"process_group": 0, "stdin": subprocess.DEVNULL, "preexec_fn": _die_with_parent}
