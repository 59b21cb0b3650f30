"""An evacuation hands back the split-job stages it had to skip (their rows locked by the worker's
own heartbeat at that instant): scheduler.repository.evacuate_worker asks how many the worker still
runs and hands them back in transactions of their own. Installs
scheduler/sql/migrations/0022_evacuation_hands_back_skipped_chunks.sql (a delta:
cluster_tasks_running_v1)."""

from django.db import migrations

from scheduler.migrations import run_sql_file


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0021_job_log_from_results")]

    operations = [
        migrations.RunPython(
            run_sql_file("0022_evacuation_hands_back_skipped_chunks.sql"), migrations.RunPython.noop
        ),
    ]
