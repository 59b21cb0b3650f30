"""Small helpers for scheduler tests: raw SQL reads and task claiming shortcuts."""

from django.db import connection

from scheduler import repository


def sql(query, params=()):
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def one(query, params=()):
    rows = sql(query, params)
    return rows[0][0] if rows else None


def task_state(task_id):
    return one("SELECT state FROM queue_tasks WHERE id = %s", [task_id])


def job_status(job_id):
    return one("SELECT status FROM jobs WHERE id = %s", [job_id])


def expire_lease(task_id):
    """Make a running task's lease expire now (tests cannot wait for the clock)."""
    sql("UPDATE queue_tasks SET lease_expires_at = now() - interval '1 second' WHERE id = %s", [task_id])


def make_available(task_id):
    """Skip a retry backoff."""
    sql("UPDATE queue_tasks SET available_at = now() WHERE id = %s", [task_id])
    sql("SELECT refresh_job_v1(job_id) FROM queue_tasks WHERE id = %s", [task_id])


def claim(worker, pool="media", lease=30):
    uid, session = worker
    return repository.claim(uid, session, pool, lease)


def lease_of(task, worker):
    return repository.Lease.of(task, worker[0], worker[1])
