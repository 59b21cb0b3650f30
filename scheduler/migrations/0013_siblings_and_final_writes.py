"""Three runtime fixes (issue 15). A claim's `more_runnable` counts the claimed job's own other
runnable stages pinned to this worker, whatever their age (runnable_for_v1,
pinned_siblings_runnable_v1): a finish that spawns several children announces them with one
notification, and without this a worker filled its second free slot only at its next idle poll.
The final writes (finish_task_v1, fail_task_v1, release_task_v1) wait at most a second for a row
lock: workers now send them on their heartbeat connection. A targeted notification carries a
per-transaction counter (`<pool>:<uid>#<n>`), so a transaction that enqueues several jobs for one
worker wakes it once per job instead of once (PostgreSQL folds identical notifications).
Signatures unchanged.
Installs scheduler/sql/migrations/0013_siblings_and_final_writes.sql."""

from django.db import migrations

from scheduler.migrations import run_sql_file


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0012_weighted_progress")]

    operations = [
        migrations.RunPython(run_sql_file("0013_siblings_and_final_writes.sql"), migrations.RunPython.noop),
    ]
