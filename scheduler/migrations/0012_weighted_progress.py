"""A job's progress is weighted by the work of its stages (scheduler/sql/functions/15_progress.sql):
each job type's plan gives its stage groups fixed shares, tasks within a group weigh media duration
× pixels, and the figure stays below 100 until the job completes and never goes down within an
execution. refresh_job_v1 and report_progress_v1 keep their signatures and contracts. Installs
scheduler/sql/migrations/0012_weighted_progress.sql."""

from django.db import migrations

from scheduler.migrations import run_sql_file


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0011_farm_notify")]

    operations = [
        migrations.RunPython(run_sql_file("0012_weighted_progress.sql"), migrations.RunPython.noop),
    ]
