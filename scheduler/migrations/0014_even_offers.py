"""Fewer writes per stage and no half-claimed bursts (issue 15). notify_pool_v1 reads the farm's
free slots once per transaction and hands them out one notification each, announcing the rest to
every worker; a claim counts its worker's capacity before taking the scheduler lock (a full worker
no longer queues on it); and queue_tasks loses task_job_state, whose leading columns
task_dedupe_once already has: one index entry fewer on each of a stage's three task writes.
Signatures unchanged.
Installs scheduler/sql/migrations/0014_even_offers.sql."""

from django.db import migrations

from scheduler.migrations import run_sql_file


class Migration(migrations.Migration):
    dependencies = [("scheduler", "0013_siblings_and_final_writes")]

    operations = [
        migrations.RemoveIndex(model_name="queuetask", name="task_job_state"),
        migrations.RunPython(run_sql_file("0014_even_offers.sql"), migrations.RunPython.noop),
    ]
