"""`manage.py provision`: run JETENCODE_PROVISIONER for every requested dedicated-execution
reservation (workers/provisioner.py). A loop until SIGTERM or Ctrl-C; `--once` makes one round
(for tests and cron). Exit status 2 when no provisioner is configured."""

from __future__ import annotations

import shlex
import signal
import threading

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from workers.provisioner import Provisioner


class Command(BaseCommand):
    help = "Run the provisioner (JETENCODE_PROVISIONER) for requested dedicated-execution reservations."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="one round, then exit")
        parser.add_argument("--interval", type=float, default=1.0, help="seconds between idle rounds")
        parser.add_argument(
            "--backoff", type=float, default=5.0, help="seconds before retrying a failed run (doubles)"
        )
        parser.add_argument(
            "--recheck", type=float, default=60.0, help="seconds after a success before running it again"
        )

    def handle(self, *args, **options):
        command = settings.JETENCODE["PROVISIONER"]
        if not command.strip():
            raise CommandError("JETENCODE_PROVISIONER is not set: nothing to provision with", returncode=2)
        provisioner = Provisioner(
            shlex.split(command),
            settings.JETENCODE["PROVISIONER_TIMEOUT_SECONDS"],
            backoff_seconds=options["backoff"],
            recheck_seconds=options["recheck"],
        )
        if options["once"]:
            provisioner.step()
            return
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        self.stdout.write(f"provisioning with {command!r} (Ctrl-C stops)")
        provisioner.run(stop, options["interval"])
