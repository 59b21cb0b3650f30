"""A drained worker's jobs wait for it when no other worker is active (issue 35): moving them
started a new execution from the dispatch, so a single-worker install (./scripts/run) stopped with
Ctrl-C and started again redid a transcode's completed stages. They stay pinned until another
worker is active (the release pass moves them then) or the uid comes back and resumes them.
Installs scheduler/sql/migrations/0019_drained_jobs_wait.sql (a delta: other_worker_active_v2,
release_jobs_v2, set_session_lifecycle_v2; signatures unchanged)."""

from django.db import migrations

from scheduler.migrations import run_sql_file


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0018_dedicated_execution")]

    operations = [
        migrations.RunPython(run_sql_file("0019_drained_jobs_wait.sql"), migrations.RunPython.noop),
    ]
