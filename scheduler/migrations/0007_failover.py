"""Failover in seconds: drained, evacuated and lost workers release their jobs (docs/scheduler.md,
"Failover"). Installs scheduler/sql/migrations/0007_failover.sql, which adds two columns and the
*_v2 functions; the v1 functions stay for workers of the previous release during a rolling deploy."""

from django.db import migrations, models

from scheduler.migrations import run_sql_file


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0006_schedule_cancel_requested")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunPython(run_sql_file("0007_failover.sql"), migrations.RunPython.noop)
            ],
            state_operations=[
                migrations.AddField(
                    model_name="jobschedule", name="lost_workers", field=models.IntegerField(default=0)
                ),
                migrations.AddField(
                    model_name="schedulerstate", name="reassignments", field=models.JSONField(default=dict)
                ),
            ],
        )
    ]
