"""`python -m tools.soak`: the fault-injection soak (see docs/reliability.md).

    python -m tools.soak --workers 4 --jobs 3000 --duration 180 --restart-postgres

Runs N real worker processes over noop jobs while killing, freezing and disconnecting them (and,
with --restart-postgres, restarting PostgreSQL under load), with operators steering the queue all
along; then drains and checks every invariant in SQL. Prints the figures; exits 1 if any invariant
fails or the queue did not drain, 2 on bad arguments.

It never touches the configured database's data: it creates a scratch database
(`jetencode_soak_<pid>`) on the configured server (DATABASE_URL, else the embedded PostgreSQL), or
with --restart-postgres a private PostgreSQL instance of its own (restarting a shared server would
break everybody else's connections), and drops it afterwards (--keep-database keeps the scratch
database for inspection).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from tools import setup_django


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tools.soak",
        description="Fault-injection soak: real workers, random faults, operator chaos; then every invariant in SQL.",
    )
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
    parser.add_argument(
        "--split-jobs",
        type=int,
        default=0,
        help="of the jobs, this many are split transcodes of a small generated clip (default 0)",
    )
    parser.add_argument("--keep-database", action="store_true", help="do not drop the scratch database")
    parser.add_argument("--keep-logs", action="store_true", help="keep the worker logs even when all passed")
    parser.add_argument("--json", dest="json_path", help="also write the report as JSON to this file")
    args = parser.parse_args(argv)
    for name in ("workers", "concurrency", "jobs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    if args.duration <= 0 or args.retry_delay_scale <= 0:
        parser.error("--duration and --retry-delay-scale must be positive")
    return args


def soak_config(args: argparse.Namespace):
    from tools.soak.harness import SoakConfig

    return SoakConfig(
        workers=args.workers,
        concurrency=args.concurrency,
        jobs=args.jobs,
        duration=args.duration,
        drain_timeout=args.drain_timeout,
        seed=args.seed,
        fault_interval=args.fault_interval,
        faults=not args.no_faults,
        operators=not args.no_operators,
        retry_delay_scale=args.retry_delay_scale,
        max_seconds=args.max_seconds,
        keep_logs=args.keep_logs,
        split_jobs=args.split_jobs,
    )


def start_private_postgres(config):
    """A private PostgreSQL instance (for the restart fault), with Django's connection moved to it."""
    from django.db import connection

    from tools.soak.postgres import PrivatePostgres

    private = PrivatePostgres(max_connections=max(100, config.workers * (config.concurrency + 6) * 2 + 20))
    try:
        private.start()
    except BaseException:
        private.cleanup()
        raise
    connection.close()
    connection.settings_dict.update(private.settings("postgres"))
    return private


def run(args: argparse.Namespace, out) -> object:
    """Create the scratch database, run the soak in it, drop it; return the report."""
    from django.db import connection

    from tools.soak.harness import run_soak
    from tools.soak.postgres import url_for

    config = soak_config(args)
    private = start_private_postgres(config) if args.restart_postgres else None
    creation = connection.creation
    old_name = connection.settings_dict["NAME"]
    connection.settings_dict.setdefault("TEST", {})["NAME"] = f"jetencode_soak_{os.getpid()}"
    try:
        creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
        name = connection.settings_dict["NAME"]
        label = (
            f"private PostgreSQL 127.0.0.1:{private.port}, database {name} (restarted under load)"
            if private
            else f"scratch database {name} on {connection.settings_dict.get('HOST') or 'local socket'}"
        )
        out(f"soak database: {label}")
        return run_soak(
            config,
            database_url=url_for(connection.settings_dict),
            private_pg=private,
            database_label=label,
            out=out,
        )
    finally:
        connection.close()
        if not args.keep_database:
            try:
                creation.destroy_test_db(old_name, verbosity=0)
            except Exception as exc:  # the report matters more than the cleanup
                print(f"could not drop the soak database: {exc}", file=sys.stderr)
        else:
            out(f"kept database {connection.settings_dict['NAME']}")
        if private is not None:
            private.cleanup()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_django("jetencode-soak")

    def out(text: str) -> None:  # one line, as Django's command output wrote it
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()

    report = run(args, out)
    out("")
    out("$ python -m tools.soak " + " ".join(sys.argv[1:] if argv is None else argv))
    for line in report.render():
        out(line)
    if args.json_path:
        Path(args.json_path).write_text(report.to_json())
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
