"""No herd: a notification names the worker it is for. notify_pool_v1 wakes the one worker that
should claim a new task (the job's assigned worker, a targeted job's worker, else one active worker
with a free slot of the pool); enqueue_job_v1, finish_task_v1 and enqueue_webhook_v1 call it
instead of waking every worker. Payloads are '<pool>' or '<pool>:<uid>' (same signatures;
workers before this version read '<pool>:<uid>' as no notification and poll). Installs
scheduler/sql/migrations/0011_farm_notify.sql."""

from django.db import migrations

from scheduler.migrations import run_sql_file


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0010_worker_left_at")]

    operations = [
        migrations.RunPython(run_sql_file("0011_farm_notify.sql"), migrations.RunPython.noop),
    ]
