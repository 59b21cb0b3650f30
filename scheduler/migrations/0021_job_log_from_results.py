"""A stage's result may carry `job_log`, a line for the job's own log (issue 33: a split transcode
that falls back to the unsplit path says why there). Installs
scheduler/sql/migrations/0021_job_log_from_results.sql (a delta: finish_task_v1)."""

from django.db import migrations

from scheduler.migrations import run_sql_file


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0020_split_stages")]

    operations = [
        migrations.RunPython(run_sql_file("0021_job_log_from_results.sql"), migrations.RunPython.noop),
    ]
