"""Undrain (issue 37): undrain_worker_v1 returns a drained or evacuated worker to service (the
fleet scope's third action). A delta: installs scheduler/sql/migrations/0017_undrain.sql only."""

from django.db import migrations

from scheduler.migrations import run_sql_file


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0016_sample_once_a_minute")]

    operations = [
        migrations.RunPython(run_sql_file("0017_undrain.sql"), migrations.RunPython.noop),
    ]
