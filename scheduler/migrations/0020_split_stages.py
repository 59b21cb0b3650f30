"""Split-and-stitch transcodes (issue 33): `cluster` stages of a split job count for their job (only
webhook deliveries don't), the job leaves its dispatching worker's group once every stage is
`cluster`, the finish wakes a worker per stage, and a split job's progress may go down.
Installs scheduler/sql/migrations/0020_split_stages.sql (a delta: the functions it replaces)."""

from django.db import migrations

from scheduler.migrations import run_sql_file


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0019_drained_jobs_wait")]

    operations = [
        migrations.RunPython(run_sql_file("0020_split_stages.sql"), migrations.RunPython.noop),
    ]
