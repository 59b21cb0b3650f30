"""The two peer queues' noop workers for the side-by-side throughput (bench/peers.py).

Started by bench/peers.py as real worker processes with each library's own command line:

    python -m procrastinate --app=bench.peer_apps.procrastinate_app worker --concurrency 4 ...
    python -m pgqueuer run bench.peer_apps:make_pgqueuer --batch-size 1 ...

Both read the database from JETENCODE_BENCH_PEER_DSN and name their connections
`jetencode-worker-<system>` (so bench/workers.py's CpuMeter counts their backends as the workers').
Neither package is a dependency of the product (they are in the `dev` extra): this module imports
them only when used.
"""

from __future__ import annotations

import contextlib
import os

DSN_ENV = "JETENCODE_BENCH_PEER_DSN"
NOOP = "noop"


def make_procrastinate_app(dsn: str, application_name: str, **pool_args):
    """A procrastinate App on psycopg 3 (its PsycopgConnector: a psycopg_pool pool, default size
    4 unless `pool_args` say otherwise) with one task, `noop`, that does nothing."""
    import procrastinate

    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(
            conninfo=dsn, kwargs={"application_name": application_name}, **pool_args
        )
    )

    @app.task(name=NOOP)
    async def noop() -> None:
        return None

    return app


def _lazy_procrastinate_app():
    try:
        return make_procrastinate_app(os.environ.get(DSN_ENV, ""), "jetencode-worker-procrastinate")
    except ImportError:  # the bench reports the missing package itself
        return None


# `procrastinate --app=bench.peer_apps.procrastinate_app worker ...`
procrastinate_app = _lazy_procrastinate_app()


@contextlib.asynccontextmanager
async def make_pgqueuer():
    """`pgq run bench.peer_apps:make_pgqueuer`: pgqueuer's QueueManager (the queue worker, without
    the cron SchedulerManager that PgQueuer adds) on one psycopg AsyncConnection, as its docs set it
    up, with one entrypoint, `noop`, that does nothing."""
    import psycopg
    from pgqueuer import PsycopgDriver, Queries, QueueManager
    from pgqueuer.models import Job

    conn = await psycopg.AsyncConnection.connect(
        os.environ[DSN_ENV], autocommit=True, application_name="jetencode-worker-pgqueuer"
    )
    try:
        qm = QueueManager(Queries(PsycopgDriver(conn)))

        @qm.entrypoint(NOOP)
        async def noop(job: Job) -> None:
            return None

        yield qm
    finally:
        await conn.close()
