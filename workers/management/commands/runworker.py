"""`manage.py runworker`: run a JetEncode worker in the foreground (see docs/worker.md).

Exit status: 0 after a clean drain (SIGTERM or Ctrl-C), 2 for invalid options or timing
settings, 3 when a newer process took over the uid ("uid taken over"), 4 when `--reservation` cannot
be bound (unknown, bound to another live worker, no longer requested), 128+signal after an abort
(a second SIGTERM or SIGINT during the drain). A `--reservation` worker exits 0 once its job ended.
"""

from __future__ import annotations

import os
import sys
import uuid

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from scheduler.constants import MAX_WORKER_VRAM_MB
from workers.config import (
    MAX_CONCURRENCY,
    ConfigError,
    Timing,
    WorkerOptions,
    check_uid,
    default_uid,
    parse_categories,
    parse_positive_int,
    prepare_workspace,
)


def parse_reservation(text: str | None) -> uuid.UUID | None:
    if text is None:
        return None
    try:
        return uuid.UUID(text.strip())
    except ValueError:
        raise ConfigError(f"--reservation {text!r} is not a reservation id (a UUID)") from None


class Command(BaseCommand):
    help = "Run a worker: claim queued stages and run them (SIGTERM/Ctrl-C drains, a second one aborts)."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser):
        parser.add_argument("--uid", help="stable worker id (default: the host name)")
        parser.add_argument("--concurrency", help="media slots (default: the CPU count)")
        parser.add_argument(
            "--categories",
            metavar="cpu=N,gpu_encode=N,gpu_ai=N",
            help="slots per resource category (default: cpu=concurrency, GPUs from nvidia-smi)",
        )
        parser.add_argument(
            "--vram-mb", dest="vram_mb", help="GPU memory to offer (default: from nvidia-smi, else 0)"
        )
        parser.add_argument(
            "--workspace", help="directory for job workspaces (default: JETENCODE_WORKSPACE_ROOT)"
        )
        parser.add_argument(
            "--reservation",
            metavar="ID",
            help="run only this dedicated job's reservation, then exit (default uid: <host>-r<id>-<pid>)",
        )
        parser.add_argument(
            "--background-slots",
            dest="background_slots",
            help="background slots: packaging, uploads, stitches, webhooks (default 1; 0 takes none)",
        )

    def handle(self, *args, **options):
        self.configure_connections()
        timing, requested = self.checked_options(options)
        worker, cpus, gpus = self.make_worker(timing, **requested)
        self.announce(worker, cpus, gpus)
        code = worker.run()
        sys.stdout.flush()
        sys.stderr.flush()
        if code:
            sys.exit(code)

    def configure_connections(self) -> None:
        # Django's health check pings the server before each unit of work ("SELECT 1" per claim);
        # the worker already reconnects on any database error, so its connections go without.
        from django.db import connections

        connections.settings["default"]["CONN_HEALTH_CHECKS"] = False
        # The slot loop sends the same few statements thousands of times: bound on the server and
        # prepared after their fifth run, PostgreSQL stops parsing and planning each call and the
        # worker stops quoting parameters into the SQL text. Django leaves preparing off for
        # PgBouncer's transaction mode before 1.21: JETENCODE_PREPARED_STATEMENTS=false does too.
        if settings.JETENCODE["PREPARED_STATEMENTS"]:
            db_options = connections.settings["default"].setdefault("OPTIONS", {})
            db_options["server_side_binding"] = True
            db_options["prepare_threshold"] = 5

    def checked_options(self, options) -> tuple[Timing, dict]:
        """The timing settings and the command line, checked before anything is probed or started
        (exit status 2 for a bad value). Options left out are None: the machine decides them."""
        try:
            timing = Timing.from_settings(settings.JETENCODE)
            timing.validate()
            reservation = parse_reservation(options["reservation"])
            uid = options["uid"]
            if uid is None:
                uid = (
                    f"{default_uid()}-r{str(reservation)[:8]}-{os.getpid()}" if reservation else default_uid()
                )
            requested = {
                "reservation": reservation,
                "uid": check_uid(uid),
                "concurrency": (
                    parse_positive_int(options["concurrency"], "--concurrency", maximum=MAX_CONCURRENCY)
                    if options["concurrency"] is not None
                    else None
                ),
                "categories": (
                    parse_categories(options["categories"]) if options["categories"] is not None else {}
                ),
                "vram": (
                    parse_positive_int(options["vram_mb"], "--vram-mb", minimum=0, maximum=MAX_WORKER_VRAM_MB)
                    if options["vram_mb"] is not None
                    else None
                ),
                "workspace": prepare_workspace(options["workspace"] or settings.WORKSPACE_ROOT_DIR),
                "background": parse_positive_int(
                    options.get("background_slots") or 1, "--background-slots", minimum=0, maximum=16
                ),
            }
        except ConfigError as exc:
            raise CommandError(str(exc), returncode=2) from None
        return timing, requested

    def make_worker(
        self, timing: Timing, *, uid, concurrency, categories, vram, workspace, reservation, background=1
    ):
        """The Worker, with what the machine has filling in what the command line left out: slots
        (the CPU count), category limits and VRAM (the GPUs), and the catalog it registers."""
        from workers import capabilities
        from workers.runtime import Worker, load_stage_modules

        cpus = capabilities.cpu_count()
        gpus = capabilities.detect_gpus()
        catalog = capabilities.ffmpeg_catalog()
        if concurrency is None:
            concurrency = cpus
        limits = {**capabilities.default_category_limits(concurrency, gpus, catalog), **categories}
        if vram is None:
            vram = gpus.vram_total_mb
        catalog = {
            **catalog,
            "cpu_count": cpus,
            "gpus": [{"name": n, "vram_mb": m} for n, m in zip(gpus.names, gpus.vram_mb, strict=True)],
        }
        try:
            catalog["task_types"] = load_stage_modules()
        except Exception as exc:
            raise CommandError(f"cannot load stage modules: {exc}", returncode=2) from None
        worker = Worker(
            WorkerOptions(uid, concurrency, limits, vram, workspace, background),
            timing,
            catalog,
            stderr=lambda text: self.stderr.write(text),
            reservation_id=reservation,
        )
        return worker, cpus, gpus

    def announce(self, worker, cpus: int, gpus) -> None:
        for line in worker.describe():
            self.stdout.write(line)
        self.stdout.write(
            f"  detected     {cpus} CPU(s); "
            + (
                f"{gpus.count} NVIDIA GPU(s): {', '.join(gpus.names)}, {gpus.vram_total_mb} MB"
                if gpus.count
                else f"no NVIDIA GPU ({gpus.note})"
            )
        )
        self.stdout.flush()
        sys.stdout.flush()
