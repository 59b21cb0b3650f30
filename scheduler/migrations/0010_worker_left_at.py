"""A worker that left on purpose stays "drained" for the failover rules: queue_workers.left_at,
recorded by set_session_lifecycle_v2 when the session says offline. A job that could not move in
that very transaction (busy finishing a webhook, or a stage whose hand-back failed) then moves at
the release pass's next round as drained, instead of waiting JETENCODE_REASSIGN_AFTER_SECONDS as if
the worker were lost. Installs scheduler/sql/migrations/0010_worker_left_at.sql (same contracts)."""

from django.db import migrations, models

from scheduler.migrations import run_sql_file


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0009_job_models")]

    operations = [
        migrations.AddField(
            model_name="queueworker", name="left_at", field=models.DateTimeField(blank=True, null=True)
        ),
        migrations.RunPython(run_sql_file("0010_worker_left_at.sql"), migrations.RunPython.noop),
    ]
