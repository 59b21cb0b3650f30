"""Raw SQL for tests: reads, test-setup writes, and the claim shortcuts.

Tests read queue state with plain SQL (`sql`, `one`) rather than the ORM so a check says exactly what
it looks at. Writes here are test setup only (moving a clock, skipping a backoff): the code under
test writes through `scheduler.repository`.
"""

from __future__ import annotations

from django.db import connection

from scheduler import repository


def sql(query, params=()):
    """Run one statement; its rows (a list of tuples), or [] when it returns none."""
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def one(query, params=()):
    """The first column of the first row, or None when there is no row."""
    rows = sql(query, params)
    return rows[0][0] if rows else None


def task_state(task_id):
    return one("SELECT state FROM queue_tasks WHERE id = %s", [task_id])


def job_status(job_id):
    return one("SELECT status FROM jobs WHERE id = %s", [job_id])


def claim(worker, pool="media", lease=30):
    """Claim the next task of `pool` for `worker` = (uid, session): the ClaimedTask, or None."""
    uid, session = worker
    return repository.claim(uid, session, pool, lease)


def lease_of(task, worker):
    """The lease to finish, fail or release `task` with, as `worker` = (uid, session) holds it."""
    return repository.Lease.of(task, worker[0], worker[1])


def expire_lease(task_id):
    """Make a running task's lease expire now (tests cannot wait for the clock)."""
    sql("UPDATE queue_tasks SET lease_expires_at = now() - interval '1 second' WHERE id = %s", [task_id])


def make_available(task_id):
    """Skip a retry backoff."""
    sql("UPDATE queue_tasks SET available_at = now() WHERE id = %s", [task_id])
    sql("SELECT refresh_job_v1(job_id) FROM queue_tasks WHERE id = %s", [task_id])


def silence_worker(uid, seconds=3600):
    """Make a worker's last heartbeat `seconds` old, as if it had gone silent then."""
    sql(
        "UPDATE queue_workers SET last_heartbeat_at = now() - make_interval(secs => %s) WHERE uid = %s",
        [seconds, uid],
    )


def database_url() -> str:
    """A DATABASE_URL for subprocesses (workers, web servers) that points at this test run's database."""
    conf = connection.settings_dict
    host = conf["HOST"] or ""
    user = conf["USER"] or "postgres"
    if host.startswith("/"):
        return f"postgresql://{user}@/{conf['NAME']}?host={host}"
    password = f":{conf['PASSWORD']}" if conf.get("PASSWORD") else ""
    return f"postgresql://{user}{password}@{host}:{conf['PORT'] or 5432}/{conf['NAME']}"
