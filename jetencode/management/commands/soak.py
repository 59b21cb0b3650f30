"""`manage.py soak`: the fault-injection soak (see docs/reliability.md).

    python manage.py soak --workers 4 --jobs 3000 --duration 180 --restart-postgres

Runs N real worker processes over noop jobs while killing, freezing and disconnecting them (and,
with --restart-postgres, restarting PostgreSQL under load), with operators steering the queue all
along; then drains and checks every invariant in SQL. Prints the figures; exits 1 if any invariant
fails or the queue did not drain.

It never touches the configured database's data: it creates a scratch database
(`jetencode_soak_<pid>`) on the configured server, or with --restart-postgres a private PostgreSQL
instance of its own (restarting a shared server would break everybody else's connections), and drops
it afterwards (--keep-database keeps the scratch database for inspection).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from jetencode.soak.harness import SoakConfig, run_soak
from jetencode.soak.postgres import PrivatePostgres, url_for


class Command(BaseCommand):
    help = "Fault-injection soak: real workers, random faults, operator chaos; then every invariant in SQL."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser):
        parser.add_argument("--workers", type=int, default=4, help="worker processes (default 4)")
        parser.add_argument("--concurrency", type=int, default=4, help="media slots per worker (default 4)")
        parser.add_argument("--jobs", type=int, default=2000, help="noop jobs to enqueue (default 2000)")
        parser.add_argument("--duration", type=float, default=120.0, help="seconds of load (default 120)")
        parser.add_argument(
            "--drain-timeout",
            type=float,
            default=300.0,
            help="seconds to wait for every job to end after the load (default 300)",
        )
        parser.add_argument(
            "--restart-postgres",
            action="store_true",
            help="run on a private PostgreSQL instance and restart it under load",
        )
        parser.add_argument("--seed", type=int, help="random seed (default: random, printed)")
        parser.add_argument(
            "--fault-interval", type=float, default=1.5, help="mean seconds between two faults (default 1.5)"
        )
        parser.add_argument("--no-faults", action="store_true", help="no fault injection (a baseline)")
        parser.add_argument("--no-operators", action="store_true", help="no operator chaos")
        parser.add_argument(
            "--retry-delay-scale",
            type=float,
            default=1.0,
            help="scale the retry backoff in the soak database (0.1 = 1.5 s instead of 15 s)",
        )
        parser.add_argument("--max-seconds", type=float, default=1.5, help="longest noop sleep (default 1.5)")
        parser.add_argument("--keep-database", action="store_true", help="do not drop the scratch database")
        parser.add_argument(
            "--keep-logs", action="store_true", help="keep the worker logs even when all passed"
        )
        parser.add_argument("--json", dest="json_path", help="also write the report as JSON to this file")

    def handle(self, *args, **options):
        for name in ("workers", "concurrency", "jobs"):
            if options[name] < 1:
                raise CommandError(f"--{name} must be at least 1", returncode=2)
        if options["duration"] <= 0 or options["retry_delay_scale"] <= 0:
            raise CommandError("--duration and --retry-delay-scale must be positive", returncode=2)
        config = SoakConfig(
            workers=options["workers"],
            concurrency=options["concurrency"],
            jobs=options["jobs"],
            duration=options["duration"],
            drain_timeout=options["drain_timeout"],
            seed=options["seed"],
            fault_interval=options["fault_interval"],
            faults=not options["no_faults"],
            operators=not options["no_operators"],
            retry_delay_scale=options["retry_delay_scale"],
            max_seconds=options["max_seconds"],
            keep_logs=options["keep_logs"],
        )
        private = None
        if options["restart_postgres"]:
            private = PrivatePostgres(
                max_connections=max(100, config.workers * (config.concurrency + 6) * 2 + 20)
            )
            try:
                private.start()
            except BaseException:
                private.cleanup()
                raise
            connection.close()
            connection.settings_dict.update(private.settings("postgres"))
        creation = connection.creation
        old_name = connection.settings_dict["NAME"]
        connection.settings_dict.setdefault("TEST", {})["NAME"] = f"jetencode_soak_{os.getpid()}"
        try:
            creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
            url = url_for(connection.settings_dict)
            label = (
                f"private PostgreSQL 127.0.0.1:{private.port}, database {connection.settings_dict['NAME']} "
                f"(restarted under load)"
                if private
                else f"scratch database {connection.settings_dict['NAME']} on "
                f"{connection.settings_dict.get('HOST') or 'local socket'}"
            )
            self.stdout.write(f"soak database: {label}")
            self.stdout.flush()
            report = run_soak(
                config,
                database_url=url,
                private_pg=private,
                database_label=label,
                out=lambda text: (self.stdout.write(text), self.stdout.flush()),
            )
        finally:
            connection.close()
            if not options["keep_database"]:
                try:
                    creation.destroy_test_db(old_name, verbosity=0)
                except Exception as exc:  # the report matters more than the cleanup
                    self.stderr.write(f"could not drop the soak database: {exc}")
            else:
                self.stdout.write(f"kept database {connection.settings_dict['NAME']}")
            if private is not None:
                private.cleanup()
        command = "python manage.py soak " + " ".join(sys.argv[2:])
        self.stdout.write("")
        self.stdout.write(f"$ {command}")
        for line in report.render():
            self.stdout.write(line)
        if options["json_path"]:
            Path(options["json_path"]).write_text(report.to_json())
        if not report.passed:
            sys.exit(1)
